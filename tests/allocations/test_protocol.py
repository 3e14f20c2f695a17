"""The line protocol's codec: every message round-trips; nothing else crashes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.allocations.protocol import (
    MAX_LINE,
    REASONS,
    ProtocolError,
    decode,
    decode_event,
    decode_op,
    encode,
)

ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,40}\Z")
text = st.text(max_size=200)
seconds = st.floats(min_value=0, max_value=1e10, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=2**53)
env = st.dictionaries(
    st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z"),
    st.text(max_size=50).filter(lambda v: "\x00" not in v),
    max_size=5,
)
argv = st.lists(
    st.text(min_size=1, max_size=30).filter(lambda v: "\x00" not in v), min_size=1, max_size=4
)
handoff = st.none() | st.fixed_dictionaries({"argv": argv, "env": env})
capacity = st.fixed_dictionaries({"cpu": seconds, "memory": counts, "gpus": counts})

ops = st.one_of(
    st.fixed_dictionaries({"op": st.just("hello"), "protocol": st.integers()}),
    st.fixed_dictionaries(
        {
            "op": st.just("submit"),
            "id": ids,
            "hash": st.text(max_size=64),
            "script": st.text(max_size=500),
            "shell": argv,
            "env": env,
            "cpu": seconds,
            "memory": counts,
            "gpus": counts,
            "walltime": st.none() | seconds.filter(lambda s: s > 0),
            "pull": handoff,
            "push": handoff,
        }
    ),
    st.fixed_dictionaries({"op": st.sampled_from(["cancel", "ack"]), "id": ids}),
    st.fixed_dictionaries({"op": st.just("logs"), "id": ids, "tail": st.none() | counts}),
)
events = st.one_of(
    st.fixed_dictionaries(
        {
            "ev": st.just("hello"),
            "protocol": st.integers(),
            "pod": text,
            "capacity": capacity,
            "free": capacity,
            "running": st.lists(ids, max_size=5),
            "queued": st.lists(ids, max_size=5),
            "draining": st.booleans(),
        }
    ),
    st.fixed_dictionaries(
        {"ev": st.just("started"), "id": ids, "gpus": st.lists(counts, max_size=4), "t": seconds}
    ),
    st.fixed_dictionaries(
        {
            "ev": st.just("exit"),
            "id": ids,
            "code": st.none() | st.integers(min_value=-(2**31), max_value=2**31),
            "reason": st.sampled_from(REASONS),
            "message": text,
            "usage": st.fixed_dictionaries(
                {"cpu_seconds": seconds, "max_rss": counts, "wall": seconds}
            ),
            "started": st.none() | seconds,
            "finished": seconds,
            "pushed": st.dictionaries(text, text, max_size=3),
            "log": st.text(max_size=2000),
            "log_bytes": counts,
        }
    ),
    st.fixed_dictionaries({"ev": st.just("refused"), "id": ids, "reason": text, "message": text}),
    st.fixed_dictionaries(
        {"ev": st.just("heartbeat"), "t": seconds, "running": counts, "queued": counts}
    ),
    st.fixed_dictionaries({"ev": st.just("error"), "message": text}),
    st.fixed_dictionaries({"ev": st.just("logs"), "id": ids, "data": st.text(max_size=500)}),
)


@given(ops)
def test_every_op_round_trips(op: dict[str, Any]) -> None:
    line = encode(op)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_op(line) == op


@given(events)
def test_every_event_round_trips(event: dict[str, Any]) -> None:
    line = encode(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_event(line) == event


@given(events, st.dictionaries(st.text(max_size=10), st.integers(), max_size=3))
def test_unknown_fields_are_ignored(event: dict[str, Any], extra: dict[str, int]) -> None:
    assert decode_event(encode({**extra, **event})) == event


@given(st.binary(max_size=3000))
def test_arbitrary_bytes_are_a_message_or_a_protocol_error(data: bytes) -> None:
    for read in (decode_op, decode_event):
        try:
            read(data)
        except ProtocolError as exc:
            assert str(exc)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)
known_fields = st.sampled_from(
    ["op", "ev", "id", "hash", "script", "shell", "env", "cpu", "pull", "usage", "capacity"]
)


@given(st.dictionaries(known_fields, json_values), st.sampled_from(["submit", "exit", "hello"]))
def test_arbitrary_json_objects_are_a_message_or_a_protocol_error(
    obj: dict[str, Any], kind: str
) -> None:
    obj.setdefault("op", kind)
    obj.setdefault("ev", kind)
    for read in (decode_op, decode_event):
        try:
            read(json.dumps(obj).encode())
        except ProtocolError as exc:
            assert str(exc)


def test_the_line_bound_is_one_mebibyte_both_ways() -> None:
    assert MAX_LINE == 1 << 20
    with pytest.raises(ProtocolError, match="bound"):
        decode(b" " * MAX_LINE + b"{}")
    assert decode(b" " * (MAX_LINE - 2) + b"{}\n") == {}
    with pytest.raises(ProtocolError, match="bound"):
        encode({"ev": "error", "message": "x" * MAX_LINE})


def test_errors_name_the_field_and_what_it_must_be() -> None:
    with pytest.raises(ProtocolError, match='field "cpu" must be a finite number of cores'):
        decode_op(b'{"op":"submit","id":"a","hash":"","script":"","shell":["sh"],"cpu":1e999}')
    with pytest.raises(ProtocolError, match='lacks the field "shell"'):
        decode_op(b'{"op":"submit","id":"a","hash":"","script":""}')
    with pytest.raises(ProtocolError, match='field "id" must be an id'):
        decode_op(b'{"op":"ack","id":"../etc"}')
    with pytest.raises(ProtocolError, match="not a JSON number"):
        decode_op(b'{"op":"ack","id":NaN}')
    with pytest.raises(ProtocolError, match="unknown op 'dance'"):
        decode_op(b'{"op":"dance"}')


def test_a_submit_gets_defaults_for_what_it_leaves_out() -> None:
    op = decode_op(b'{"op":"submit","id":"a","hash":"h","script":"true","shell":["sh"]}')
    assert op == {
        "op": "submit",
        "id": "a",
        "hash": "h",
        "script": "true",
        "shell": ["sh"],
        "env": {},
        "cpu": 1.0,
        "memory": 0,
        "gpus": 0,
        "walltime": None,
        "pull": None,
        "push": None,
    }


def test_an_env_over_its_bound_is_refused_by_name() -> None:
    op = {"op": "submit", "id": "a", "hash": "", "script": "", "shell": ["sh"]}
    big = {f"V{i}": "x" * 1000 for i in range(300)}
    with pytest.raises(ProtocolError, match='field "env" must be an object of strings'):
        decode_op(encode({**op, "env": big}))
    with pytest.raises(ProtocolError, match='field "env"'):
        decode_op(encode({**op, "env": {"A=B": "x"}}))
