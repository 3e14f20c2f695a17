#!/usr/bin/env python3
"""The agent of an allocation's pod: ``serve`` runs the steps it is sent; ``attach`` relays.

One file, standard library only, Python 3.9 or later: it is shipped to the pod in a ConfigMap
and run by whatever Python the step image has (``python3 agent.py serve ...``), so it never
imports the k8sjobs package. The driver side imports it as ``k8sjobs.allocations.agent`` for the
line protocol's one definition (``k8sjobs.allocations.protocol`` re-exports it).

``serve --dir DIR --cpu C --memory BYTES --gpus G --idle-timeout S --max-lifetime S`` listens
on ``DIR/agent.sock`` (0600, DIR 0700) for one client at a time (a new one replaces the old:
that is re-attach) and runs each submitted step as a child process in a session of its own,
packing steps FIFO into its cores, memory (0: no limit) and GPUs, as the local backend's slot
scheduler does. A step's stdout and stderr go straight to ``DIR/steps/<id>/log`` (no pipe for
the agent to copy), its cwd is ``DIR/steps/<id>/work``. Results are kept until the driver acks
them, so a client that re-attaches gets every one. ``attach --dir DIR`` is what the driver runs
through pods/exec: it relays stdin to the socket and the socket to stdout, byte for byte.

Speed: one selectors loop, ``os.posix_spawn`` (a vfork-style clone in glibc) with the log file
as fds 1 and 2, SIGCHLD through the signal wakeup fd and ``os.wait4``; no thread or asyncio
machinery per step. The line protocol (JSON, one object per ``\\n``-terminated line, at most
``MAX_LINE`` bytes) is defined below: its message shapes (TypedDicts), ``encode``, ``decode``,
``parse_op`` (what the agent accepts) and ``parse_event`` (what the driver accepts).

What ALLOCATIONS-SPEC.md leaves open, decided here:

- a client's first op must be ``hello``; any other before it is answered with ``error``.
  Events (``started``, ``exit``, heartbeats) go only to a client that said hello; ``hello``
  replays the ``started`` of the running steps and every unacked ``exit`` this client was
  not sent yet (each exit once per client; a second hello replays nothing new);
- a step id is 1 to 253 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or a
  digit (it names ``DIR/steps/<id>``); a submit leaving out ``env``, ``cpu`` (1), ``memory``,
  ``gpus``, ``walltime``, ``pull`` or ``push`` gets the default;
- ``refused`` reasons: ``DoesNotFit``, ``MaxLifetime``, ``IdInUse``, ``Invalid`` (a submit
  whose fields are wrong; the message names the field), ``QueueFull`` (the bounds below),
  ``UnknownId`` (a cancel or logs of an id the agent does not hold). An ack of an unknown id
  is a no-op, so a driver may resend acks after a re-attach;
- the walltime runs from the step's start: its pull, script and push together;
- ``code`` is the script's exit code (128+N when signal N ended it, as a container runtime
  reports), null when the script never ran (a queued step cancelled or lost, a failed pull,
  StartError); a failed push keeps the script's 0 with reason HandoffFailed;
- the pull's and push's output goes to ``handoff.log`` beside the step's log (their last
  words are the HandoffFailed message), and the push's stdout to ``push.out``, whose last
  line, a JSON object of strings, is ``pushed``;
- on reaching max_lifetime the queued steps end at once as ``Lost`` (never started, so the
  driver runs them elsewhere); the agent exits once no step runs and every result is acked
  (or no client is attached), and at max_lifetime + 60 s kills what still runs, as ``Lost``;
- when a step's script ends, what it left in its process group is killed, as a container's
  processes end with it; the agent is a child subreaper, so what left the group (setsid) is
  its child and is killed on SIGTERM;
- ``usage.max_rss`` is the peak RSS of the script's process tree as the kernel reports it
  for a child: it counts the agent's own RSS at the spawn (about 18 MB) as a floor, since
  the kernel charges the spawning process' memory to the child until it execs;
- bounds: MAX_LINE per line; MAX_QUEUED queued steps, MAX_QUEUED_BYTES of their scripts and
  envs and MAX_QUEUED_ID_BYTES of their ids (so a ``hello`` fits a line); MAX_RUNNING steps
  at once; MAX_UNACKED kept results (their logs stay on disk, not in memory); MAX_ENV_BYTES
  of env per step; MAX_OUTBOX unsent bytes before a client that reads nothing is dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import math
import os
import queue
import re
import selectors
import shutil
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypedDict, Union, cast

PROTOCOL = 1
MAX_LINE = 1 << 20  # bytes of one protocol line, its "\n" excluded, in both directions
LOG_TAIL = 64 << 10  # bytes of a log an `exit` or a `logs` answer carries
MAX_ID = 253
MAX_QUEUED = 100_000
# Queued steps are held in memory (script and env): their total is bounded, and so is the
# total length of their ids, so that a `hello` listing them all fits in one line.
MAX_QUEUED_BYTES = 64 << 20
MAX_QUEUED_ID_BYTES = 512 << 10
MAX_RUNNING = 1024  # steps asking for no cpu, memory or GPU would otherwise be unbounded
MAX_UNACKED = 10_000
MAX_ENV_BYTES = 256 << 10
MAX_ENV_VALUE = (128 << 10) - 1  # Linux's MAX_ARG_STRLEN, counting "KEY=" and the NUL
MAX_ARGV = 256
MAX_MESSAGE = 4 << 10
MAX_OUTBOX = 64 << 20  # unsent bytes to a client that does not read; then it is dropped
REPLAY_WINDOW = 1 << 20  # replayed exits are added while fewer unsent bytes than this wait
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL, as for a step's walltime
HARD_STOP_GRACE = 60.0  # after max_lifetime, running steps get this long, then are lost
DEFAULT_HEARTBEAT = 5.0
REASONS = (
    "Completed",
    "Error",
    "DeadlineExceeded",
    "Cancelled",
    "HandoffFailed",
    "Lost",
    "StartError",
)
# Ids name a directory (DIR/steps/<id>): nothing that could climb out of it.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_ENV_KEY = re.compile(r"[^=\x00]+\Z")


class ProtocolError(ValueError):
    """A line that is not a message of the protocol; its text says which field and why."""


# --- message shapes -----------------------------------------------------------------------


class Handoff(TypedDict):
    """A pull or push command: its argv and the variables added to its environment."""

    argv: list[str]
    env: dict[str, str]


class HelloOp(TypedDict):
    """The first line of every client: the agent answers `hello` and replays its state."""

    op: Literal["hello"]
    protocol: int


class SubmitOp(TypedDict):
    """Run a step; idempotent by id (the same hash is a no-op, another one is refused)."""

    op: Literal["submit"]
    id: str
    hash: str
    script: str
    shell: list[str]
    env: dict[str, str]
    cpu: float
    memory: int
    gpus: int
    walltime: float | None
    pull: Handoff | None
    push: Handoff | None


class CancelOp(TypedDict):
    """Kill a step (or take it off the queue): its `exit` says "Cancelled"."""

    op: Literal["cancel"]
    id: str


class AckOp(TypedDict):
    """Forget a finished step and remove its scratch dir (the driver has its result)."""

    op: Literal["ack"]
    id: str


class LogsOp(TypedDict):
    """Ask for a step's log as kept now (its last `tail` lines, or all within LOG_TAIL)."""

    op: Literal["logs"]
    id: str
    tail: int | None


class Capacity(TypedDict):
    """Cores, bytes of memory (0: no limit) and GPUs."""

    cpu: float
    memory: int
    gpus: int


class HelloEvent(TypedDict):
    """The agent's answer to `hello`: what it has, what is free, what runs and waits."""

    ev: Literal["hello"]
    protocol: int
    pod: str
    capacity: Capacity
    free: Capacity
    running: list[str]
    queued: list[str]
    draining: bool


class StartedEvent(TypedDict):
    """A step left the queue and runs (its pull first, if any) on these GPUs."""

    ev: Literal["started"]
    id: str
    gpus: list[int]
    t: float


class Usage(TypedDict):
    """What the script used: user+system CPU seconds, peak RSS bytes, wall seconds."""

    cpu_seconds: float
    max_rss: int
    wall: float


class ExitEvent(TypedDict):
    """A step ended, kept and replayed until acked."""

    ev: Literal["exit"]
    id: str
    code: int | None
    reason: str
    message: str
    usage: Usage
    started: float | None
    finished: float
    pushed: dict[str, str]
    log: str
    log_bytes: int


class RefusedEvent(TypedDict):
    """A submit (or cancel, logs) the agent will not do, and why."""

    ev: Literal["refused"]
    id: str
    reason: str
    message: str


class HeartbeatEvent(TypedDict):
    """Sent every --heartbeat seconds so a driver knows the stream and the agent live."""

    ev: Literal["heartbeat"]
    t: float
    running: int
    queued: int


class ErrorEvent(TypedDict):
    """A line the agent could not read; it goes on with the next."""

    ev: Literal["error"]
    message: str


class LogsEvent(TypedDict):
    """The answer to `logs`."""

    ev: Literal["logs"]
    id: str
    data: str


# Union, not "|": these aliases are evaluated at run time, and Python 3.9 runs this file.
Op = Union[HelloOp, SubmitOp, CancelOp, AckOp, LogsOp]  # noqa: UP007
Event = Union[  # noqa: UP007
    HelloEvent, StartedEvent, ExitEvent, RefusedEvent, HeartbeatEvent, ErrorEvent, LogsEvent
]


# --- codec ---------------------------------------------------------------------------------


def encode(message: Mapping[str, Any]) -> bytes:
    """Return ``message`` as one protocol line (compact ASCII JSON and ``\\n``)."""
    try:
        text = json.dumps(message, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode a protocol message: {exc}") from None
    if len(text) > MAX_LINE:
        raise ProtocolError(
            f"a message of {len(text)} bytes is over the {MAX_LINE}-byte line bound"
        )
    return text.encode("ascii") + b"\n"


def _no_constant(name: str) -> object:
    raise ProtocolError(f"{name} is not a JSON number; send a finite number")


def decode(line: bytes) -> dict[str, Any]:
    """Return the JSON object of one line (its ``\\n`` optional); ProtocolError otherwise."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > MAX_LINE:
        raise ProtocolError(
            f"a line of {len(line)} bytes is over the {MAX_LINE}-byte bound; send smaller messages"
        )
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"a line is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ProtocolError("a line nests JSON too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise ProtocolError(f"a line is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"a line must be a JSON object, not {type(value).__name__}")
    return value


# --- validation: each field against its shape, with a message naming it -------------------

_Check = Callable[[object], bool]


def _is_str(limit: int, *, empty: bool = True) -> _Check:
    return lambda v: isinstance(v, str) and len(v) <= limit and (empty or v != "")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_id(v: object) -> bool:
    return isinstance(v, str) and len(v) <= MAX_ID and _ID.match(v) is not None


def _is_str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_argv(v: object) -> bool:
    return (
        isinstance(v, list)
        and 0 < len(v) <= MAX_ARGV
        and all(isinstance(x, str) and "\x00" not in x for x in v)
        and v[0] != ""
    )


def _is_env(v: object) -> bool:
    if not isinstance(v, dict):
        return False
    total = 0
    for key, value in v.items():
        if not (isinstance(value, str) and _ENV_KEY.match(key) and "\x00" not in value):
            return False
        size = len(key) + len(value) + 2
        total += size
        if size > MAX_ENV_VALUE:
            return False
    return total <= MAX_ENV_BYTES


def _is_handoff(v: object) -> bool:
    return isinstance(v, dict) and _is_argv(v.get("argv")) and _is_env(v.get("env", {}))


def _optional(check: _Check) -> _Check:
    return lambda v: v is None or check(v)


def _is_positive_num(v: object) -> bool:
    return _is_num(v) and cast(float, v) > 0


def _is_str_map(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


def _is_capacity(v: object) -> bool:
    return (
        isinstance(v, dict)
        and _is_num(v.get("cpu"))
        and _is_int(v.get("memory"))
        and _is_int(v.get("gpus"))
    )


def _is_usage(v: object) -> bool:
    return (
        isinstance(v, dict)
        and _is_num(v.get("cpu_seconds"))
        and _is_int(v.get("max_rss"))
        and _is_num(v.get("wall"))
    )


def _is_gpu_list(v: object) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def _any_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_ANY_STR = _is_str(1 << 30)
# field -> (what it must be, its check, its default when absent; _REQUIRED: no default)
_REQUIRED = object()
_Schema = Mapping[str, "tuple[str, _Check, object]"]
_IDS = "an id: 1 to 253 letters, digits, '.', '_' or '-', starting with a letter or digit"
_ARGV = f"a list of 1 to {MAX_ARGV} strings without NUL, the first not empty"
_ENV = f"an object of strings (names without '=' or NUL), at most {MAX_ENV_BYTES} bytes"
_HANDOFF = f'null or {{"argv": {_ARGV}, "env": {_ENV}}}'

OPS: dict[str, _Schema] = {
    "hello": {"protocol": ("an integer", _any_int, _REQUIRED)},
    "submit": {
        "id": (_IDS, _is_id, _REQUIRED),
        "hash": ("a string of at most 1024 characters", _is_str(1024), _REQUIRED),
        "script": ("a string", _ANY_STR, _REQUIRED),
        "shell": (_ARGV, _is_argv, _REQUIRED),
        "env": (_ENV, _is_env, {}),
        "cpu": ("a finite number of cores >= 0", _is_num, 1.0),
        "memory": ("a whole number of bytes >= 0", _is_int, 0),
        "gpus": ("a whole number >= 0", _is_int, 0),
        "walltime": ("null or a number of seconds > 0", _optional(_is_positive_num), None),
        "pull": (_HANDOFF, _optional(_is_handoff), None),
        "push": (_HANDOFF, _optional(_is_handoff), None),
    },
    "cancel": {"id": (_IDS, _is_id, _REQUIRED)},
    "ack": {"id": (_IDS, _is_id, _REQUIRED)},
    "logs": {
        "id": (_IDS, _is_id, _REQUIRED),
        "tail": ("null or a whole number of lines >= 0", _optional(_is_int), None),
    },
}
_NUM = ("a finite number >= 0", _is_num, _REQUIRED)
_COUNT = ("a whole number >= 0", _is_int, _REQUIRED)
_TEXT = ("a string", _ANY_STR, _REQUIRED)
_CAPACITY = ('{"cpu": number, "memory": int, "gpus": int}', _is_capacity, _REQUIRED)
EVENTS: dict[str, _Schema] = {
    "hello": {
        "protocol": ("an integer", _any_int, _REQUIRED),
        "pod": _TEXT,
        "capacity": _CAPACITY,
        "free": _CAPACITY,
        "running": ("a list of ids", _is_str_list, _REQUIRED),
        "queued": ("a list of ids", _is_str_list, _REQUIRED),
        "draining": ("a boolean", lambda v: isinstance(v, bool), _REQUIRED),
    },
    "started": {
        "id": _TEXT,
        "gpus": ("a list of GPU indexes", _is_gpu_list, _REQUIRED),
        "t": _NUM,
    },
    "exit": {
        "id": _TEXT,
        "code": ("null or an integer", _optional(_any_int), _REQUIRED),
        "reason": (" or ".join(REASONS), lambda v: v in REASONS, _REQUIRED),
        "message": _TEXT,
        "usage": ('{"cpu_seconds": number, "max_rss": int, "wall": number}', _is_usage, _REQUIRED),
        "started": ("null or a time", _optional(_is_num), _REQUIRED),
        "finished": _NUM,
        "pushed": ("an object of strings", _is_str_map, _REQUIRED),
        "log": _TEXT,
        "log_bytes": _COUNT,
    },
    "refused": {"id": _TEXT, "reason": _TEXT, "message": _TEXT},
    "heartbeat": {"t": _NUM, "running": _COUNT, "queued": _COUNT},
    "error": {"message": _TEXT},
    "logs": {"id": _TEXT, "data": _TEXT},
}
# Numbers a sender may write as 1 and a reader wants as 1.0.
_FLOATS = {"cpu", "walltime", "t", "finished", "started"}


def _parse(obj: Mapping[str, Any], kind: str, schemas: Mapping[str, _Schema]) -> dict[str, Any]:
    name = obj.get(kind)
    if not isinstance(name, str) or name not in schemas:
        known = ", ".join(schemas)
        raise ProtocolError(
            f'unknown {kind} {name!r:.60}: a message needs "{kind}", one of {known}'
        )
    out: dict[str, Any] = {kind: name}
    for field, (shape, check, default) in schemas[name].items():
        if field not in obj:
            if default is _REQUIRED:
                raise ProtocolError(f'{kind} "{name}" lacks the field "{field}": send {shape}')
            value: Any = default
        else:
            value = obj[field]
            if not check(value):
                got = json.dumps(value)[:60] if _jsonable(value) else type(value).__name__
                raise ProtocolError(f'{kind} "{name}": field "{field}" must be {shape}, not {got}')
        if field in _FLOATS and isinstance(value, int):
            value = float(value)
        out[field] = value
    for field in ("pull", "push", "usage"):
        if isinstance(out.get(field), dict):  # copy the nested shapes without unknown fields
            out[field] = _nested(field, out[field])
    return out


def _nested(field: str, value: dict[str, Any]) -> dict[str, Any]:
    if field == "usage":
        return {
            "cpu_seconds": float(value["cpu_seconds"]),
            "max_rss": value["max_rss"],
            "wall": float(value["wall"]),
        }
    return {"argv": list(value["argv"]), "env": dict(value.get("env", {}))}


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def parse_op(obj: Mapping[str, Any]) -> Op:
    """Return the driver's message in ``obj``, checked field by field; unknown fields dropped."""
    return cast(Op, _parse(obj, "op", OPS))


def parse_event(obj: Mapping[str, Any]) -> Event:
    """Return the agent's message in ``obj``, checked field by field; unknown fields dropped."""
    out = _parse(obj, "ev", EVENTS)
    for field in ("capacity", "free"):
        if field in out:
            v = out[field]
            out[field] = {"cpu": float(v["cpu"]), "memory": v["memory"], "gpus": v["gpus"]}
    return cast(Event, out)


def decode_event(line: bytes) -> Event:
    """Return the agent's message on one line (what the driver reads)."""
    return parse_event(decode(line))


def decode_op(line: bytes) -> Op:
    """Return the driver's message on one line (what the agent reads)."""
    return parse_op(decode(line))


# --- the agent -----------------------------------------------------------------------------
#
# The packing below reimplements the small part of k8sjobs/local/slots.py (strict FIFO, never
# oversubscribing) and local/gpus.py (lowest free index first) the agent needs: this file runs
# alone in the pod, without the k8sjobs package (or anyio) installed. Cores are counted in
# millicores so that many fractional steps never drift by float rounding.


def _usage(ru: Any, wall: float) -> Usage:
    return {
        "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 6),
        "max_rss": int(ru.ru_maxrss) * 1024,  # Linux reports kilobytes
        "wall": round(wall, 6),
    }


_NO_USAGE: Usage = {"cpu_seconds": 0.0, "max_rss": 0, "wall": 0.0}


def exit_code(status: int) -> int:
    """Return a wait status as a container runtime reports it: the code, or 128+signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def log_tail(path: str, limit: int = LOG_TAIL, lines: int | None = None) -> tuple[str, int]:
    """Return a log's text (its last ``limit`` bytes, or ``lines`` lines) and its full size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "", 0
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        data = os.pread(fd, limit, start) if size else b""
    finally:
        os.close(fd)
    if start:  # a cut line is no line: start after the first newline in the window
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data = data[cut + 1 :]
    if lines is not None:
        kept = data.split(b"\n")
        if kept and kept[-1] == b"":
            kept.pop()
        data = b"".join(x + b"\n" for x in kept[len(kept) - lines :]) if lines else b""
    hidden = size - len(data)
    text = data.decode("utf-8", "replace")
    if hidden and lines is None:
        text = f"[k8sjobs: {hidden} earlier bytes not shown]\n" + text
    return text, size


def _pushed(path: str) -> dict[str, str] | None:
    """Return the JSON object the push command printed on its last line ({} for none)."""
    text, _ = log_tail(path)
    last = [x for x in text.splitlines() if x.strip()]
    if not last or last[-1].startswith("[k8sjobs:"):
        return {}
    try:
        value = json.loads(last[-1])
    except ValueError:
        return {}
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return value
    return None


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


class _Step:
    """One submitted step, from the queue to its ack."""

    __slots__ = (
        "code",
        "dir",
        "gpus",
        "hash",
        "kill",
        "milli",
        "op",
        "phase",
        "pid",
        "pushed",
        "result",
        "run_started",
        "size",
        "started",
        "usage",
    )

    def __init__(self, op: SubmitOp, milli: int, size: int) -> None:
        self.op = op
        self.hash = op["hash"]
        self.milli = milli
        self.size = size
        self.dir = ""
        self.gpus: list[int] = []
        self.pid: int | None = None
        self.phase = ""  # "pull", "run", "push" while running
        self.kill: tuple[str, str] | None = None  # (reason, message) once it is being killed
        self.started: float | None = None
        self.run_started = 0.0
        self.code: int | None = None
        self.usage: Usage = _NO_USAGE
        self.pushed: dict[str, str] = {}
        self.result: ExitEvent | None = None


class _Client:
    __slots__ = ("discarding", "hello", "inbox", "outbox", "replay", "sent", "sock", "writing")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = b""
        self.outbox = bytearray()
        self.discarding = False  # inside a line over the bound, skipped up to its end
        self.hello = False
        self.sent: set[str] = set()  # ids whose exit this client has been sent
        self.replay: deque[str] = deque()  # ids whose exit it is still to be sent after hello
        self.writing = False


class Agent:
    """The serve loop: one client, a FIFO of steps, their processes and kept results."""

    def __init__(
        self,
        directory: str,
        *,
        cpu: float,
        memory: int,
        gpus: int,
        idle_timeout: float = 0.0,
        max_lifetime: float = 0.0,
        heartbeat: float = DEFAULT_HEARTBEAT,
    ) -> None:
        self.dir = os.path.abspath(directory)
        self.cpu_milli = round(cpu * 1000)
        self.memory = memory
        self.gpu_count = gpus
        self.idle_timeout = idle_timeout
        self.max_lifetime = max_lifetime
        self.heartbeat = heartbeat
        self.free_milli = self.cpu_milli
        self.free_memory = memory
        self.free_gpus = list(range(gpus))
        self.queue: deque[_Step] = deque()
        self.queued_bytes = 0
        self.queued_id_bytes = 0
        self.steps: dict[str, _Step] = {}  # every known id: queued, running, finished unacked
        self.running: dict[str, _Step] = {}
        self.finished: dict[str, _Step] = {}  # in the order they ended
        self.pids: dict[int, _Step] = {}
        self.timers: list[tuple[float, int, str, _Step, int]] = []
        self.seq = 0
        self.client: _Client | None = None
        self.sel = selectors.DefaultSelector()
        self.base_env = dict(os.environ)
        self.which: dict[tuple[str, str], str] = {}
        self.janitor = _Janitor(self.dir)
        self.pod = socket.gethostname()
        self.started = time.monotonic()
        self.idle_since = self.started
        self.next_heartbeat = self.started + heartbeat
        self.draining = False
        self.terminated = False
        self.children = False

    # -- the loop ------------------------------------------------------------------------

    def serve(self) -> int:
        """Run until idle, max_lifetime or SIGTERM; return the exit code (0 or 143)."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        # Steps of an earlier agent in this dir are gone with it: start from an empty one.
        for name in ("steps", "trash", "spare"):
            shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
            os.mkdir(os.path.join(self.dir, name), 0o700)
        _become_subreaper()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, self._on_sigchld)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # The socket is bound by a relative name from DIR: a unix socket path is at most
        # 107 bytes, and DIR may be deep (a test's tmp dir).
        os.chdir(self.dir)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.lexists("agent.sock"):
            os.unlink("agent.sock")
        old = os.umask(0o177)
        try:
            listener.bind("agent.sock")
        finally:
            os.umask(old)
        listener.listen(8)
        listener.setblocking(False)
        self.sel.register(listener, selectors.EVENT_READ, lambda: self._accept(listener))
        self.sel.register(wake_r, selectors.EVENT_READ, lambda: _drain(wake_r))
        _say(
            f"serving {self.dir}/agent.sock: {self.cpu_milli / 1000:g} cores, "
            f"{self.memory or 'unlimited'} bytes of memory, {self.gpu_count} GPUs"
        )
        try:
            code = self._loop()
        finally:
            self._stop_children()
            signal.set_wakeup_fd(-1)
            if self.client is not None:
                self._flush_before_exit(self.client)
            self.sel.close()
            listener.close()
            for fd in (wake_r, wake_w):
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, "agent.sock"))
        return code

    def _loop(self) -> int:
        while True:
            if self.terminated:
                _say("SIGTERM: stopping the running steps")
                return 143
            now = time.monotonic()
            done = self._due(now)
            if done is not None:
                return done
            timeout = self._timeout(now)
            for key, _ in self.sel.select(timeout):
                key.data()
            if self.terminated:  # a pod's end signals its steps too: theirs is not their exit
                continue
            if self.children:
                self.children = False
                self._reap()
            self._schedule()
            if self.client is not None:
                self._flush(self.client)

    def _on_sigchld(self, signum: int, frame: object) -> None:
        self.children = True

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.terminated = True

    def _timeout(self, now: float) -> float:
        due = [self.next_heartbeat]
        if self.timers:
            due.append(self.timers[0][0])
        if self.idle_timeout and not (self.running or self.queue):
            due.append(self.idle_since + self.idle_timeout)
        if self.max_lifetime:  # the drain, then the hard stop; neither once passed (no spin)
            stop = self.started + self.max_lifetime + (HARD_STOP_GRACE if self.draining else 0)
            if stop > now:
                due.append(stop)
        return max(0.0, min(due) - now)

    def _due(self, now: float) -> int | None:
        """Run what is due by ``now``; return an exit code when the agent should end."""
        while self.timers and self.timers[0][0] <= now:
            _, _, kind, step, pid = heapq.heappop(self.timers)
            if kind == "walltime" and step.pid is not None and step.kill is None:
                walltime = step.op["walltime"]
                self._kill(
                    step, "DeadlineExceeded", f"the step ran past its walltime of {walltime:g}s"
                )
            elif kind == "sigkill" and step.pid == pid:
                _killpg(pid, signal.SIGKILL)
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + self.heartbeat
            self._event(
                {
                    "ev": "heartbeat",
                    "t": time.time(),
                    "running": len(self.running),
                    "queued": len(self.queue),
                }
            )
        idle = not (self.running or self.queue)
        if self.idle_timeout and idle and now >= self.idle_since + self.idle_timeout:
            _say(f"idle for {self.idle_timeout:g}s: exiting")
            return 0
        if self.max_lifetime:
            stop = self.started + self.max_lifetime
            if now >= stop and not self.draining:
                self._drain()
            hard = now >= stop + HARD_STOP_GRACE
            if hard:
                for step in list(self.running.values()):
                    if step.kill is None:
                        self._kill(
                            step, "Lost", "the agent reached its max_lifetime; run it elsewhere"
                        )
            if (
                self.draining
                and not self.running
                and (hard or not self.finished or self.client is None)
            ):
                _say("max_lifetime reached and no step runs: exiting")
                return 0
        return None

    def _drain(self) -> None:
        _say(f"max_lifetime of {self.max_lifetime:g}s reached: refusing new steps")
        self.draining = True
        while self.queue:
            step = self.queue.popleft()
            self._dequeued(step)
            self._finish(
                step, None, "Lost", "the agent reached its max_lifetime before the step started"
            )

    # -- the client ----------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        if self.client is not None:
            self._drop(self.client)  # a new client replaces the old: that is re-attach
        client = _Client(sock)
        self.client = client
        self.sel.register(sock, selectors.EVENT_READ, lambda: self._read(client))

    def _drop(self, client: _Client) -> None:
        self.sel.unregister(client.sock)
        client.sock.close()
        if self.client is client:
            self.client = None

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._flush(client)
            self._drop(client)
            return
        lines = (client.inbox + data).split(b"\n")
        client.inbox = lines.pop()
        for line in lines:
            if client.discarding:  # the end of a line over the bound
                client.discarding = False
                continue
            self._line(client, line)
            if self.client is not client:
                return
        if len(client.inbox) > MAX_LINE:
            if not client.discarding:
                self._send(
                    client,
                    {
                        "ev": "error",
                        "message": f"a line is over the {MAX_LINE}-byte bound; it was skipped",
                    },
                )
            client.discarding = True
            client.inbox = b""

    def _line(self, client: _Client, line: bytes) -> None:
        if not line.strip():
            return
        obj: dict[str, Any] | None = None
        try:
            obj = decode(line)
            op = parse_op(obj)
        except ProtocolError as exc:
            if obj is not None and obj.get("op") == "submit" and _is_id(obj.get("id")):
                self._refuse(client, obj["id"], "Invalid", str(exc))
            else:
                self._send(client, {"ev": "error", "message": str(exc)})
            return
        if op["op"] == "hello":
            self._hello(client)
        elif not client.hello:
            self._send(
                client,
                {"ev": "error", "message": 'the first message must be {"op":"hello","protocol":1}'},
            )
        elif op["op"] == "submit":
            self._submit(client, op)
        elif op["op"] == "cancel":
            self._cancel(client, op["id"])
        elif op["op"] == "ack":
            self._ack(op["id"])
        else:
            self._logs(client, op)

    def _send(self, client: _Client, message: Mapping[str, Any]) -> None:
        if self.client is not client:
            return  # dropped already (it read nothing): its events are replayed to the next
        try:
            client.outbox += encode(message)
        except ProtocolError as exc:
            client.outbox += encode(
                {"ev": "error", "message": f"the agent could not send a message: {exc}"}
            )
        if len(client.outbox) > MAX_OUTBOX:
            _say("the client reads nothing: dropping it (it may attach again)")
            self._drop(client)

    def _event(self, message: Mapping[str, Any]) -> None:
        if self.client is not None and self.client.hello:
            self._send(self.client, message)

    def _flush(self, client: _Client) -> None:
        self._pump(client)
        if self.client is not client or not client.outbox:
            return
        try:
            sent = client.sock.send(client.outbox)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(client)
            return
        del client.outbox[:sent]
        self._pump(client)
        writing = bool(client.outbox)
        if writing != client.writing:
            client.writing = writing
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0)
            self.sel.modify(client.sock, events, lambda: self._ready(client))

    def _ready(self, client: _Client) -> None:
        self._read(client)
        self._flush(client)

    def _flush_before_exit(self, client: _Client) -> None:
        client.sock.settimeout(2.0)
        with contextlib.suppress(OSError):
            client.sock.sendall(client.outbox)
        client.sock.close()

    # -- ops -----------------------------------------------------------------------------

    def _hello(self, client: _Client) -> None:
        client.hello = True
        self._send(client, self._hello_event())
        for step in self.running.values():
            self._send(client, self._started_event(step))
        client.replay = deque(i for i in self.finished if i not in client.sent)
        self._pump(client)

    def _pump(self, client: _Client) -> None:
        """Put replayed exits in the outbox as it empties: thousands of kept results (each up
        to LOG_TAIL of log) are read from disk and sent a window at a time, not all at once."""
        while client.replay and len(client.outbox) < REPLAY_WINDOW and self.client is client:
            step = self.finished.get(client.replay.popleft())
            if step is not None and step.op["id"] not in client.sent:  # not acked, not sent live
                self._send_exit(client, step)

    def _hello_event(self) -> HelloEvent:
        return {
            "ev": "hello",
            "protocol": PROTOCOL,
            "pod": self.pod,
            "capacity": {
                "cpu": self.cpu_milli / 1000,
                "memory": self.memory,
                "gpus": self.gpu_count,
            },
            "free": {
                "cpu": self.free_milli / 1000,
                "memory": self.free_memory,
                "gpus": len(self.free_gpus),
            },
            "running": list(self.running),
            "queued": [step.op["id"] for step in self.queue],
            "draining": self.draining,
        }

    def _refuse(self, client: _Client, step_id: str, reason: str, message: str) -> None:
        self._send(client, {"ev": "refused", "id": step_id, "reason": reason, "message": message})

    def _submit(self, client: _Client, op: SubmitOp) -> None:
        step_id = op["id"]
        known = self.steps.get(step_id)
        if known is not None:
            if known.hash != op["hash"]:
                self._refuse(
                    client,
                    step_id,
                    "IdInUse",
                    f'step "{step_id}" is known here with another hash; '
                    "ack it first or use a new id",
                )
            elif known.result is not None:
                self._send_exit(client, known)
            elif known.pid is not None or known.phase:
                self._send(client, self._started_event(known))
            return
        refusal = self._refusal(op)
        if refusal is not None:
            self._refuse(client, step_id, *refusal)
            return
        size = len(op["script"]) + sum(len(k) + len(v) for k, v in op["env"].items())
        step = _Step(op, round(op["cpu"] * 1000), size)
        self.steps[step_id] = step
        self.queue.append(step)
        self.queued_bytes += size
        self.queued_id_bytes += len(step_id) + 3

    def _refusal(self, op: SubmitOp) -> tuple[str, str] | None:
        name = f'step "{op["id"]}"'
        if self.draining:
            return (
                "MaxLifetime",
                f"this agent reached its max_lifetime of {self.max_lifetime:g}s "
                "and takes no new steps",
            )
        lacks = []
        if round(op["cpu"] * 1000) > self.cpu_milli:
            lacks.append(f"cpu {op['cpu']:g} cores (the pod has {self.cpu_milli / 1000:g})")
        if self.memory and op["memory"] > self.memory:
            lacks.append(f"memory {op['memory']} bytes (the pod has {self.memory})")
        if op["gpus"] > self.gpu_count:
            lacks.append(f"gpus {op['gpus']} (the pod has {self.gpu_count})")
        if lacks:
            return (
                "DoesNotFit",
                f"{name} asks for {' and '.join(lacks)}: "
                "lower its resources or use a larger allocation",
            )
        if (
            len(self.queue) >= MAX_QUEUED
            or self.queued_bytes >= MAX_QUEUED_BYTES
            or self.queued_id_bytes >= MAX_QUEUED_ID_BYTES
        ):
            return (
                "QueueFull",
                f"{name}: {len(self.queue)} steps wait here already; submit it after some start",
            )
        if len(self.finished) >= MAX_UNACKED:
            return (
                "QueueFull",
                f"{name}: {len(self.finished)} finished steps are not acked; ack them first",
            )
        return None

    def _cancel(self, client: _Client, step_id: str) -> None:
        step = self.steps.get(step_id)
        if step is None:
            self._refuse(
                client,
                step_id,
                "UnknownId",
                f'no step "{step_id}" here (never submitted, or acked)',
            )
        elif step.result is not None:
            return  # it ended first: its exit says how
        elif step.pid is None and not step.phase:
            self.queue.remove(step)
            self._dequeued(step)
            self._finish(step, None, "Cancelled", "cancelled by the driver before it started")
        elif step.kill is None:
            self._kill(step, "Cancelled", "cancelled by the driver")

    def _ack(self, step_id: str) -> None:
        step = self.finished.pop(step_id, None)
        if step is None:
            return  # acks are idempotent: a driver may resend one after a re-attach
        del self.steps[step_id]
        if self.client is not None:
            self.client.sent.discard(step_id)
        if step.dir:
            self.janitor.discard(step.dir)

    def _logs(self, client: _Client, op: LogsOp) -> None:
        step = self.steps.get(op["id"])
        if step is None:
            self._refuse(
                client,
                op["id"],
                "UnknownId",
                f'no step "{op["id"]}" here (never submitted, or acked)',
            )
            return
        text = log_tail(os.path.join(step.dir, "log"), lines=op["tail"])[0] if step.dir else ""
        self._send(client, {"ev": "logs", "id": op["id"], "data": text})

    # -- steps ---------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Start queued steps in FIFO order while the head fits (never jumping the queue)."""
        while self.queue and len(self.running) < MAX_RUNNING:
            step = self.queue[0]
            op = step.op
            if step.milli > self.free_milli or op["gpus"] > len(self.free_gpus):
                return
            if self.memory and op["memory"] > self.free_memory:
                return
            self.queue.popleft()
            self._dequeued(step)
            self.free_milli -= step.milli
            if self.memory:
                self.free_memory -= op["memory"]
            step.gpus, self.free_gpus = self.free_gpus[: op["gpus"]], self.free_gpus[op["gpus"] :]
            self.running[op["id"]] = step
            self._start(step)

    def _dequeued(self, step: _Step) -> None:
        self.queued_bytes -= step.size
        self.queued_id_bytes -= len(step.op["id"]) + 3

    def _start(self, step: _Step) -> None:
        op = step.op
        step.started = time.time()
        step.dir = os.path.join(self.dir, "steps", op["id"])
        self._event(self._started_event(step))
        try:
            if not self.janitor.take(step.dir):
                _make_step_dir(step.dir)
        except OSError as exc:
            self._finish(step, None, "StartError", _clip(f"cannot make {step.dir}: {exc}"))
            return
        if op["walltime"] is not None:
            self._timer(time.monotonic() + op["walltime"], "walltime", step, 0)
        if op["pull"] is not None:
            self._phase(step, "pull")
        else:
            self._phase(step, "run")

    def _started_event(self, step: _Step) -> StartedEvent:
        return {"ev": "started", "id": step.op["id"], "gpus": step.gpus, "t": step.started or 0.0}

    def _env(self, step: _Step, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(extra)
        env["K8SJOBS_WORKDIR"] = os.path.join(step.dir, "work")
        env["K8SJOBS_INPUTS"] = os.path.join(step.dir, "inputs")
        env["K8SJOBS_OUTPUTS"] = os.path.join(step.dir, "outputs")
        if self.gpu_count:  # pinned: the step sees its own devices only ("" hides them all)
            visible = ",".join(str(i) for i in step.gpus)
            env["CUDA_VISIBLE_DEVICES"] = visible
            env["NVIDIA_VISIBLE_DEVICES"] = visible or "void"
            env["K8SJOBS_GPU_DEVICES"] = ",".join(f"nvidia:{i}" for i in step.gpus)
        return env

    def _phase(self, step: _Step, phase: str) -> None:
        """Start the pull, the script or the push of ``step``; finish it if that cannot start."""
        op = step.op
        if phase == "run":
            handoff: Handoff = {
                "argv": [*op["shell"], os.path.join(step.dir, "script")],
                "env": op["env"],
            }
        else:
            given = op["pull"] if phase == "pull" else op["push"]
            assert given is not None
            handoff = given
        fds: list[int] = []
        try:
            if phase == "run":
                _write_file(handoff["argv"][-1], op["script"].encode("utf-8"))
            log = os.path.join(step.dir, "log" if phase == "run" else "handoff.log")
            fds.append(os.open(log, _APPEND, 0o644))
            if phase == "push":  # its last stdout line says what it pushed: keep stdout apart
                fds.append(os.open(os.path.join(step.dir, "push.out"), _TRUNCATE, 0o644))
            env = self._env(step, handoff["env"])
            pid = self._spawn(handoff["argv"], env, os.path.join(step.dir, "work"), fds[-1], fds[0])
        # ValueError: text the OS cannot take (a lone surrogate in the script, argv or env).
        except (OSError, ValueError) as exc:
            reason = "StartError" if phase == "run" else "HandoffFailed"
            what = f"cannot start the {_what(phase)} {handoff['argv']!r}: {exc}"
            self._finish(step, step.code, reason, _clip(what))
            return
        finally:
            for fd in fds:
                os.close(fd)
        step.pid = pid
        step.phase = phase
        self.pids[pid] = step
        if phase == "run":
            step.run_started = time.monotonic()

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str, out: int, err: int) -> int:
        exe = self._resolve(argv[0], env.get("PATH", os.defpath))
        # posix_spawn has no chdir action: the agent is one thread, so it steps into the
        # step's dir for the spawn (the child inherits it) and back out.
        os.chdir(cwd)
        try:
            return os.posix_spawn(
                exe,
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, err, 2),
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                ],
                setsid=True,  # its own session and process group: killed as one, alone
                setsigdef=_DEFAULT_SIGNALS,
            )
        except OSError:
            self.which.clear()  # a program moved or went away: look it up again next time
            raise
        finally:
            os.chdir(self.dir)

    def _resolve(self, name: str, path: str) -> str:
        if "/" in name:
            return name
        key = (name, path)
        found = self.which.get(key)
        if found is None:
            found = shutil.which(name, path=path)
            if found is None:
                raise FileNotFoundError(2, f"{name!r} is not on the step's PATH ({path})")
            self.which[key] = found
        return found

    def _timer(self, when: float, kind: str, step: _Step, pid: int) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, kind, step, pid))

    def _kill(self, step: _Step, reason: str, message: str) -> None:
        step.kill = (reason, message)
        if step.pid is not None:
            _killpg(step.pid, signal.SIGTERM)
            self._timer(time.monotonic() + KILL_GRACE, "sigkill", step, step.pid)

    def _reap(self) -> None:
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            step = self.pids.pop(pid, None)
            if step is not None:  # else an orphan the agent adopted as subreaper
                self._ended(step, pid, exit_code(status), ru)

    def _ended(self, step: _Step, pid: int, code: int, ru: Any) -> None:
        """Go on with a step whose pull, script or push process ended with ``code``."""
        # What the process left in its group (a background job) ends with it, as in a container.
        _killpg(pid, signal.SIGKILL)
        phase, step.pid, step.phase = step.phase, None, "between"
        if phase == "run":
            step.code = code
            step.usage = _usage(ru, time.monotonic() - step.run_started)
        if step.kill is not None:
            self._finish(step, step.code, *step.kill)
        elif phase == "pull":
            if code == 0:
                self._phase(step, "run")
            else:
                self._finish(step, None, "HandoffFailed", self._handoff_failure(step, "pull", code))
        elif phase == "run":
            if code == 0 and step.op["push"] is not None:
                self._phase(step, "push")
            elif code == 0:
                self._finish(step, 0, "Completed", "")
            else:
                self._finish(step, code, "Error", f"the script exited with code {code}")
        elif code != 0:
            self._finish(
                step, step.code, "HandoffFailed", self._handoff_failure(step, "push", code)
            )
        else:
            pushed = _pushed(os.path.join(step.dir, "push.out"))
            if pushed is None:
                self._finish(
                    step,
                    step.code,
                    "HandoffFailed",
                    "the push command's last line is JSON but not an object of strings "
                    "(output name -> reference)",
                )
            else:
                step.pushed = pushed
                self._finish(step, step.code, "Completed", "")

    def _handoff_failure(self, step: _Step, phase: str, code: int) -> str:
        words = log_tail(os.path.join(step.dir, "handoff.log"), MAX_MESSAGE // 2)[0].strip()
        return _clip(
            f"the {phase} command exited with code {code}: {words or '(it printed nothing)'}"
        )

    def _finish(self, step: _Step, code: int | None, reason: str, message: str) -> None:
        step_id = step.op["id"]
        if self.running.pop(step_id, None) is not None:
            self.free_milli += step.milli
            if self.memory:
                self.free_memory += step.op["memory"]
            self.free_gpus = sorted(self.free_gpus + step.gpus)
        step.phase = ""
        step.result = {
            "ev": "exit",
            "id": step_id,
            "code": code,
            "reason": reason,
            "message": message,
            "usage": step.usage,
            "started": step.started,
            "finished": time.time(),
            "pushed": step.pushed,
            "log": "",
            "log_bytes": 0,
        }
        self.finished[step_id] = step
        if not (self.running or self.queue):
            self.idle_since = time.monotonic()
        if self.client is not None and self.client.hello:
            self._send_exit(self.client, step)

    def _send_exit(self, client: _Client, step: _Step) -> None:
        assert step.result is not None
        result = step.result
        if step.dir:  # read from the file each time: kept results hold no log in memory
            log, size = log_tail(os.path.join(step.dir, "log"))
            result = cast(ExitEvent, {**result, "log": log, "log_bytes": size})
        client.sent.add(step.op["id"])
        self._send(client, result)

    # -- the end -------------------------------------------------------------------------

    def _stop_children(self) -> None:
        """Kill every step (SIGTERM, SIGKILL after the grace) and every other child; reap all."""
        for pid in self.pids:
            _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while self.pids and time.monotonic() < deadline:
            self._reap_quietly(0.05)
        for pid in list(self.pids):
            _killpg(pid, signal.SIGKILL)
        # Then whatever left its step's group (setsid, a daemon): as subreaper the agent is
        # its parent now. Kill and reap until no child is left (bounded: D-state is rare).
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            orphans = _children()
            for pid in orphans:
                _killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if not self._reap_quietly(0.05) and not orphans:
                return

    def _reap_quietly(self, wait: float) -> bool:
        """Reap ended children without going on with their steps; return whether any remain."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                time.sleep(wait)
                return True
            self.pids.pop(pid, None)


_DEFAULT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGPIPE", "SIGXFSZ", "SIGINT", "SIGQUIT", "SIGHUP", "SIGTERM", "SIGCHLD")
    if hasattr(signal, name)
)


def _what(phase: str) -> str:
    return {"run": "script's shell", "pull": "pull command", "push": "push command"}[phase]


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # already gone
        os.killpg(pgid, sig)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_TRUNCATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


def _make_step_dir(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        shutil.rmtree(path, ignore_errors=True)
        os.mkdir(path, 0o700)
    for sub in ("work", "inputs", "outputs"):
        os.mkdir(os.path.join(path, sub))


SPARE_DIRS = 64
_STEP_SUBDIRS = ("work", "inputs", "outputs")
_KEPT_FILES = ("script", "log")


class _Janitor:
    """Empties the dirs of acked steps off the loop, and keeps some for the next steps.

    On a disk mounted with online discard (ext4 ``discard``, as on the machine this was
    measured on) each rmdir or unlink of a file's blocks waits milliseconds for the device,
    longer than a short step runs, and each mkdir costs tens of microseconds of CPU. So an
    acked step's dir is renamed out of the way at once (its id may be used again), and one
    thread, the agent's only other one, empties it and keeps up to SPARE_DIRS of them, their
    work/, inputs/ and outputs/ in place: the next step renames one in instead of four mkdirs.
    """

    def __init__(self, root: str) -> None:
        self.trash = os.path.join(root, "trash")
        self.spares = os.path.join(root, "spare")
        self.todo: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.ready: deque[str] = deque()  # appended by the thread, taken by the loop: atomic
        self.names = 0
        self.started = False

    def discard(self, path: str) -> None:
        """Take a step's dir away now; it is emptied (or removed) in the thread."""
        self.names += 1
        trash = os.path.join(self.trash, str(self.names))
        try:
            os.rename(path, trash)
        except OSError:
            trash = path
        if not self.started:
            self.started = True
            threading.Thread(target=self._run, name="janitor", daemon=True).start()
        self.todo.put(trash)

    def take(self, path: str) -> bool:
        """Move an emptied dir to ``path``; return False when none is ready."""
        try:
            os.rename(self.ready.popleft(), path)
        except (IndexError, OSError):
            return False
        return True

    def _run(self) -> None:
        count = 0
        while True:
            path = self.todo.get()
            if len(self.ready) < SPARE_DIRS and _empty(path):
                count += 1
                spare = os.path.join(self.spares, str(count))
                try:
                    os.rename(path, spare)
                    self.ready.append(spare)
                    continue
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def _empty(path: str) -> bool:
    """Empty a step's dir but for its subdirs, themselves emptied; return whether it worked."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name in _STEP_SUBDIRS and entry.is_dir(follow_symlinks=False):
                    with os.scandir(entry.path) as inside:
                        for item in inside:
                            _remove(item)
                elif entry.name in _KEPT_FILES and entry.is_file(follow_symlinks=False):
                    os.truncate(entry.path, 0)  # a file made anew costs more than one emptied
                else:
                    _remove(entry)
        for sub in _STEP_SUBDIRS:
            if not os.path.isdir(os.path.join(path, sub)):
                os.mkdir(os.path.join(path, sub))
    except OSError:
        return False
    return True


def _remove(entry: os.DirEntry[str]) -> None:
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path)
    else:
        os.unlink(entry.path)


def _children() -> list[int]:
    """Return the pids whose parent is this process (from /proc)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _become_subreaper() -> None:
    """Make orphaned descendants of the steps children of the agent, so it can end them."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # not Linux: orphans go to init, as before
        pass


def _say(text: str) -> None:
    sys.stderr.write(f"k8sjobs agent: {text}\n")
    sys.stderr.flush()


def _ensure_std_fds() -> None:
    # A step's log must never land on fd 0-2 by accident: keep them open.
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)


# --- attach --------------------------------------------------------------------------------


def attach(directory: str, wait: float = 30.0) -> int:
    """Relay stdin to the agent's socket and the socket to stdout; return the exit code."""
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.chdir(directory)  # a relative name: the socket path may be over 107 bytes
            sock.connect("agent.sock")
            break
        except OSError as exc:
            sock.close()
            if time.monotonic() >= deadline:
                sys.stderr.write(
                    f"k8sjobs agent attach: no agent answers at {directory}/agent.sock after "
                    f"{wait:g}s ({exc.strerror or exc}); is the allocation's pod running?\n"
                )
                return 2
            time.sleep(0.05)
    with selectors.DefaultSelector() as sel:
        sel.register(0, selectors.EVENT_READ)
        sel.register(sock, selectors.EVENT_READ)
        try:
            for chunk in _relay(sel, sock):
                _write_all(1, chunk)
        except OSError:  # stdout or the socket closed under us: the stream is over
            pass
    sock.close()
    return 0


def _relay(sel: selectors.BaseSelector, sock: socket.socket) -> Iterator[bytes]:
    stdin_open = True
    while True:
        for key, _ in sel.select():
            if key.fd == 0:
                data = os.read(0, 1 << 16)
                if data:
                    sock.sendall(data)
                elif stdin_open:
                    # The driver closed stdin: tell the agent, and relay what it still sends
                    # until it closes its side.
                    stdin_open = False
                    sel.unregister(0)
                    sock.shutdown(socket.SHUT_WR)
            else:
                data = sock.recv(1 << 16)
                if not data:
                    return
                yield data


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, _TRUNCATE, 0o644)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- the command line ----------------------------------------------------------------------


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run ``serve`` or ``attach`` from the command line; return the exit code."""
    parser = argparse.ArgumentParser(prog="agent.py", description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the steps a client sends")
    serve.add_argument("--dir", required=True, help="the agent's dir: its socket and step dirs")
    serve.add_argument("--cpu", type=_seconds, required=True, help="cores to pack steps into")
    serve.add_argument("--memory", type=_count, default=0, help="bytes; 0: no limit")
    serve.add_argument("--gpus", type=_count, default=0, help="GPUs, handed out as indexes")
    serve.add_argument("--idle-timeout", type=_seconds, default=0.0, help="0: never")
    serve.add_argument("--max-lifetime", type=_seconds, default=0.0, help="0: never")
    serve.add_argument("--heartbeat", type=_seconds, default=DEFAULT_HEARTBEAT)
    relay = commands.add_parser("attach", help="relay stdin/stdout to a serving agent")
    relay.add_argument("--dir", required=True)
    relay.add_argument("--wait", type=_seconds, default=30.0, help="seconds to wait for it")
    args = parser.parse_args(argv)
    if args.command == "attach":
        return attach(args.dir, args.wait)
    if args.heartbeat <= 0:
        parser.error("--heartbeat must be > 0 seconds")
    _ensure_std_fds()
    agent = Agent(
        args.dir,
        cpu=args.cpu,
        memory=args.memory,
        gpus=args.gpus,
        idle_timeout=args.idle_timeout,
        max_lifetime=args.max_lifetime,
        heartbeat=args.heartbeat,
    )
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
