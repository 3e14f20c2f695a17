"""What a stored object and a watch event cost the fake cluster (100,000 steps in one run).

A status write keeps the rest of the object as it is (no copy of a pod spec per phase), a
watch line is kept only until every watcher that queued it has sent it, and stored objects
share their keys and repeated strings; none of this changes what the server answers.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.testing.apiserver.store import Store, copy_obj

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@given(st.dictionaries(st.text(), json_values, max_size=6))
@settings(max_examples=200, deadline=None)
def test_copy_obj_equals_a_json_round_trip_and_shares_nothing_mutable(obj: dict[str, Any]) -> None:
    copied = copy_obj(obj)
    assert copied == json.loads(json.dumps(obj))
    assert json.dumps(copied) == json.dumps(obj)  # same order, same types
    assert not _mutable_ids(copied) & _mutable_ids(obj)
    for key, value in _strings(copied):
        assert key is sys.intern(key) and (value is None or value is sys.intern(value))


def _mutable_ids(value: Any) -> set[int]:
    found: set[int] = set()
    if isinstance(value, dict | list):
        found.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            found |= _mutable_ids(item)
    return found


def _strings(value: Any) -> list[tuple[str, str | None]]:
    if isinstance(value, dict):
        return [
            pair
            for k, v in value.items()
            for pair in [(k, v if isinstance(v, str) else None), *_strings(v)]
        ]
    if isinstance(value, list):
        return [pair for item in value for pair in _strings(item)]
    return []


def pod(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "command": ["sleep", "1"]}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def test_a_status_write_keeps_the_spec_it_does_not_change() -> None:
    store = Store()
    store.create("namespaces", "", {"metadata": {"name": "default"}})
    created = latest = store.create("pods", "default", pod("p"))
    for owned in (False, True):
        phase = "Running" if owned else "Pending"
        written = store.update(
            "pods",
            "default",
            dict(latest, status={"phase": phase}),
            subresource="status",
            validate=False,
            owned=owned,
        )
        assert written["spec"] is created["spec"]
        assert written["status"] == {"phase": phase}
        assert written["metadata"] is not latest["metadata"]
        assert latest["status"] != {"phase": phase}  # the old version is left as it was
        latest = written


def test_an_owned_update_leaves_the_callers_metadata_and_the_old_version_alone() -> None:
    store = Store()
    store.create("namespaces", "", {"metadata": {"name": "default"}})
    old = store.create("pods", "default", pod("p"))
    meta = dict(old["metadata"], labels={"b": "2", "a": "1"})
    sent = dict(old, metadata=meta)
    new = store.update("pods", "default", sent, subresource="*", validate=False, owned=True)
    assert list(new["metadata"]["labels"]) == ["a", "b"]  # sorted, as Go writes them
    assert new["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]
    assert meta["resourceVersion"] == old["metadata"]["resourceVersion"]
    assert "labels" not in old["metadata"]


def test_a_watch_line_is_kept_only_until_every_watcher_sent_it() -> None:
    store = Store()
    store.create("namespaces", "", {"metadata": {"name": "default"}})
    watchers = [store.watch("pods", "default", lambda _obj: True, None) for _ in range(2)]
    for i in range(50):
        store.create("pods", "default", pod(f"p{i}"))
    first, second = (list(w.pending) for w in watchers)
    lines = [event.line() for event in first]
    for event in first:
        event.sent()
    assert all(event._line is not None for event in second)  # the second has not sent it
    assert [event.line() for event in second] == lines
    for event in second:
        event.sent()
    assert all(event._line is None for event in store._history)
    assert [event.line() for event in first] == lines  # made again when asked
