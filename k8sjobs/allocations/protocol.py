"""The line protocol between the driver and an allocation's agent, for the driver side.

One JSON object per ``\\n``-terminated line, at most ``MAX_LINE`` bytes; the driver sends ops
(``HelloOp``, ``SubmitOp``, ``CancelOp``, ``AckOp``, ``LogsOp``), the agent answers events
(``HelloEvent``, ``StartedEvent``, ``ExitEvent``, ``RefusedEvent``, ``HeartbeatEvent``,
``ErrorEvent``, ``LogsEvent``). Pure: no I/O. Every shape and bound is defined once, in
``agent.py``, which must run alone in a pod (no k8sjobs there); this module gives the driver
those definitions under the package's name. ``decode_event`` checks each field of what an
agent sent, so a driver never trusts a malformed line; unknown fields are dropped (forward
compatible) and unknown events raise ``ProtocolError``.
"""

from __future__ import annotations

from .agent import (
    LOG_TAIL,
    MAX_ID,
    MAX_LINE,
    PROTOCOL,
    REASONS,
    AckOp,
    CancelOp,
    Capacity,
    ErrorEvent,
    Event,
    ExitEvent,
    Handoff,
    HeartbeatEvent,
    HelloEvent,
    HelloOp,
    LogsEvent,
    LogsOp,
    Op,
    ProtocolError,
    RefusedEvent,
    StartedEvent,
    SubmitOp,
    Usage,
    decode,
    decode_event,
    decode_op,
    encode,
    parse_event,
    parse_op,
)

__all__ = [
    "LOG_TAIL",
    "MAX_ID",
    "MAX_LINE",
    "PROTOCOL",
    "REASONS",
    "AckOp",
    "CancelOp",
    "Capacity",
    "ErrorEvent",
    "Event",
    "ExitEvent",
    "Handoff",
    "HeartbeatEvent",
    "HelloEvent",
    "HelloOp",
    "LogsEvent",
    "LogsOp",
    "Op",
    "ProtocolError",
    "RefusedEvent",
    "StartedEvent",
    "SubmitOp",
    "Usage",
    "decode",
    "decode_event",
    "decode_op",
    "encode",
    "parse_event",
    "parse_op",
]
