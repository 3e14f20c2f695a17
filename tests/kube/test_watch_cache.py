"""The watch cache's slim copies: small enough for 100,000 steps, and judged the same."""

from __future__ import annotations

import gc
import json
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.kube.watch import Cache, Relist, slim, slim_event
from k8sjobs.status import judge

from ..test_status import REFERENCE, transcript_states

TRANSCRIPTS = sorted(REFERENCE.glob("job-*.json"))


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_slim_copies_get_the_verdict_the_full_objects_get(path: Path) -> None:
    """After every event of a real server's transcript, judge() says the same of the cached
    (slim) Job and pods as of the objects the server sent."""
    for now, job, pods, warnings in transcript_states(path):
        full = judge(job, pods, now=now, pending_grace=20, warnings=warnings)
        kept = judge(
            slim(job),
            [slim(p) for p in pods],
            now=now,
            pending_grace=20,
            warnings=[slim_event(e) for e in warnings],
        )
        assert kept == full


def _keys_and_strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in _keys_and_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _keys_and_strings(v)]
    return [value] if isinstance(value, str) else []


def test_two_decoded_events_share_their_status_strings_once_cached() -> None:
    """Each decoded event has its own copy of every key and repeated value; the cache keeps
    one (interned), no nulls, and none of the fields no verdict reads (pod IPs, images)."""
    transcript = json.loads(TRANSCRIPTS[0].read_text())
    text = json.dumps(transcript["pod_watch_events"][-1]["object"])
    first, second = (slim(json.loads(text)) for _ in range(2))
    for a, b in zip(
        _keys_and_strings(first["status"]), _keys_and_strings(second["status"]), strict=True
    ):
        assert a is b and a is sys.intern(a)
    flat = json.dumps(first["status"])
    assert "null" not in flat and "podIP" not in flat and "imageID" not in flat


def test_equal_conditions_of_two_cached_pods_are_one_map() -> None:
    """Steps that changed in the same second have equal conditions: the cache keeps one copy
    of each (about 1.5 KB a pod at 100,000 steps); maps unique to an object are its own."""
    transcript = json.loads(TRANSCRIPTS[0].read_text())
    obj = transcript["pod_watch_events"][-1]["object"]
    other = json.loads(json.dumps(obj))
    other["metadata"]["name"] += "-other"
    first, second = slim(json.loads(json.dumps(obj))), slim(other)
    assert first["status"]["conditions"], first
    for a, b in zip(first["status"]["conditions"], second["status"]["conditions"], strict=True):
        assert a is b
    assert first["metadata"] is not second["metadata"]
    assert first["metadata"]["name"] != second["metadata"]["name"]
    flagged, counted = (slim({"status": {"x": {"n": v}}}) for v in (True, 1))
    assert flagged["status"]["x"]["n"] is True and counted["status"]["x"]["n"] == 1


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "podIP", "image", "c"]), inner, max_size=4)
    ),
    max_leaves=20,
)


def _expected(value: Any) -> Any:
    """What the cache keeps of a status value: no nulls, none of the dropped fields."""
    if isinstance(value, dict):
        dropped = {"podIP", "image"}
        return {k: _expected(v) for k, v in value.items() if v is not None and k not in dropped}
    if isinstance(value, list):
        return [_expected(v) for v in value]
    return value


def _plain_maps(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [m for v in value for m in _plain_maps(v)]
    if not isinstance(value, dict):
        return []
    inner = [m for v in value.values() for m in _plain_maps(v)]
    plain = all(type(v) in (str, int) for v in value.values())
    return [*inner, value] if plain else inner


@given(st.dictionaries(st.sampled_from(["a", "b", "conditions"]), _JSON, max_size=3))
def test_any_status_is_kept_whole_and_its_plain_maps_shared(status: dict[str, Any]) -> None:
    """For any decoded status: the cached copy equals it without nulls and dropped fields,
    types kept (True stays True, 1 stays 1), and each map of only strings and integers is
    one object across two decodes of the same event, whatever the nesting."""
    text = json.dumps({"status": status})
    first, second = (slim(json.loads(text))["status"] for _ in range(2))
    assert first == _expected(status) and json.dumps(first) == json.dumps(_expected(status))
    for a, b in zip(_plain_maps(first), _plain_maps(second), strict=True):
        assert a is b


class _Body(dict[str, Any]):
    """A decoded object that can be watched for its release (a dict takes no weakref)."""


def test_a_relist_taken_page_by_page_keeps_no_decoded_page() -> None:
    """A relist of 100,000 Jobs decoded at once was ~2 GB: each page is slimmed and let go,
    and the changes equal those of ``Cache.replace`` taking the whole list."""
    cache, whole = Cache(), Cache()

    def obj(name: str, version: int) -> _Body:
        meta = {"name": name, "resourceVersion": str(version)}
        return _Body(metadata=meta, spec={"template": {"x": "y" * 100}}, status={"active": 1})

    for target in (cache, whole):
        for i in range(6):
            target.apply("ADDED", obj(f"o{i}", i))
    pages = [[obj("o0", 0), obj("o1", 11)], [obj("o2", 2), obj("n9", 19)]]  # o3..o5 gone
    relist = Relist(cache)
    released = []
    for page in pages:
        relist.take(page)
        released += [weakref.ref(item) for item in page]
    expected = whole.replace([item for page in pages for item in page], "20")
    del pages, page
    gc.collect()
    assert all(ref() is None for ref in released)
    changes = relist.finish("20")
    assert [(c.name, c.type, c.obj) for c in changes] == [(c.name, c.type, c.obj) for c in expected]
    assert [c.name for c in changes] == ["o3", "o4", "o5", "o1", "n9"]
    assert cache.objects == whole.objects and cache.resource_version == "20"
