"""A watch that cannot go silent: 40 steps across a graceful API server restart and silenced
watches, detected by the idle bound (or the periodic relist) and reported in the stats.

The bound is short here (the fixture's server bookmarks every 0.5 s); each test waits for
the condition it needs, with a generous limit, and asserts on the reason counted.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.handle import StepHandle
from k8sjobs.kube import KubeClient, KubernetesBackend, load_config
from k8sjobs.kube.client import CONFIGMAPS
from k8sjobs.kube.watch import Cache, Change, Informer
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .kubehelpers import count_terminal, session, step

IDLE = 2.0  # 4 bookmark intervals of the fixture's server


# ---- the diff on relist (pure) ------------------------------------------------------

_VERSIONS = st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 4), max_size=8)


def _obj(name: str, version: int) -> dict[str, object]:
    return {"metadata": {"name": name, "resourceVersion": str(version)}, "status": {}}


@given(before=_VERSIONS, after=_VERSIONS)
def test_relist_diff_is_exactly_what_changed(before: dict[str, int], after: dict[str, int]) -> None:
    cache = Cache()
    for name, version in before.items():
        cache.apply("ADDED", _obj(name, version))
    changes = cache.replace([_obj(n, v) for n, v in after.items()], "99")
    events = {c.name: c.type for c in changes}
    assert len(events) == len(changes)  # one event per object at most
    expected = {n: "DELETED" for n in before if n not in after}
    expected |= {n: "ADDED" for n in after if n not in before}
    expected |= {n: "MODIFIED" for n in after if n in before and before[n] != after[n]}
    assert events == expected
    assert all((c.obj is None) == (c.type == "DELETED") for c in changes)
    assert {n: o["metadata"]["resourceVersion"] for n, o in cache.objects.items()} == {
        n: str(v) for n, v in after.items()
    }
    assert cache.resource_version == "99"
    assert cache.replace([_obj(n, v) for n, v in after.items()], "100") == []  # nothing new


def test_watch_events_carry_their_type() -> None:
    cache = Cache()
    first = cache.apply("ADDED", _obj("a", 1))
    assert first is not None and first.type == "ADDED"
    second = cache.apply("MODIFIED", _obj("a", 2))
    assert second is not None and second.type == "MODIFIED"
    gone = cache.apply("DELETED", _obj("a", 3))
    assert gone is not None and (gone.type, gone.obj) == ("DELETED", None)
    assert cache.apply("DELETED", _obj("a", 3)) is None  # already gone


# ---- bad bounds are refused before anything is sent ---------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [({"watch_idle": 0}, "watch_idle"), ({"relist_interval": -1.0}, "relist_interval")],
)
def test_bad_watch_bounds_name_the_field(options: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        KubernetesBackend(**options)  # type: ignore[arg-type]


# ---- the normal end of a watch is not a reason to relist ---------------------------


async def test_a_watch_ending_at_its_timeout_resumes_without_a_relist(
    cluster: FakeCluster,
) -> None:
    client = KubeClient(await load_config(cluster.kubeconfig_path))
    seen: list[Change] = []
    informer = Informer(client, CONFIGMAPS, "default", "", seen.append, watch_timeout=2, idle=30)
    task = asyncio.create_task(informer.run())
    try:
        await wait_until(lambda: informer.stats.reconnects["expired"] >= 3)
        cluster.store.create("configmaps", "default", {"metadata": {"name": "late"}})
        await wait_until(lambda: "late" in [c.name for c in seen])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
    assert informer.stats.relists == {"initial": 1}
    assert set(informer.stats.reconnects) == {"expired"}


# ---- the faults, end to end ---------------------------------------------------------


def started(handles: list[StepHandle]) -> bool:
    """Return whether a step has left PENDING. Not "is RUNNING": on a starved event loop the
    first state this driver sees of a short step may already be its end."""
    return any(h.state is not StepState.PENDING for h in handles)


@pytest.mark.parametrize(
    ("drain", "reason"),
    [(0.5, "ended early"), (IDLE * 3, "silent")],
    ids=["drain-shorter-than-bound", "drain-longer-than-bound"],
)
async def test_graceful_restart_with_compaction_loses_no_step(
    cluster: FakeCluster, tmp_path: Path, drain: float, reason: str
) -> None:
    async with session(cluster, tmp_path, watch_idle=IDLE, backoff=0.05) as s:
        handles = await s.submit_many([step(f"g{i}", duration=1.0) for i in range(40)])
        seen = count_terminal(handles)
        await wait_until(lambda: started(handles), "a step has started")
        await cluster.faults.graceful_shutdown(drain=drain, downtime=0.3)
        # Both informers (Jobs and Pods) noticed, for the reason the drain length implies.
        await wait_until(lambda: s.watch_stats.relists[reason] >= 2)
        results = await s.gather(*handles, timeout=60)
    assert [r.state for r in results] == [StepState.SUCCEEDED] * 40
    assert set(seen.values()) == {1}
    assert s.watch_stats.reconnects[reason] >= 2


async def test_silenced_watches_are_detected_and_relisted(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="k8sjobs.kube")
    async with session(cluster, tmp_path, watch_idle=IDLE) as s:
        handles = await s.submit_many([step(f"q{i}", duration=1.0) for i in range(40)])
        seen = count_terminal(handles)
        await wait_until(lambda: started(handles), "a step has started")
        # Resumed watches stay silent too: only a relist brings the steps' ends out.
        # (Three: the Jobs, the Pods and the namespace's Warning Events.)
        assert cluster.faults.silence_watches(resumed=True) == 3
        await wait_until(lambda: s.watch_stats.relists["silent"] >= 2)
        results = await s.gather(*handles, timeout=60)
    assert [r.state for r in results] == [StepState.SUCCEEDED] * 40
    assert set(seen.values()) == {1}
    assert s.watch_stats.relists["initial"] == 3
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("was silent for 2 s" in m and "with a relist (silent)" in m for m in said)
    assert any("relisted (silent)" in m for m in said)


async def test_periodic_relist_catches_what_no_signal_shows(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # The idle bound is out of reach; only the safety net can bring the steps' ends out.
    async with session(cluster, tmp_path, watch_idle=600, relist_interval=1.0) as s:
        handles = await s.submit_many([step(f"p{i}", duration=0.5) for i in range(20)])
        await wait_until(lambda: started(handles), "a step has started")
        cluster.faults.silence_watches(resumed=True)
        lists = cluster.request_count("list")
        results = await s.gather(*handles, timeout=60)
    relisted = s.watch_stats.relists["periodic"]
    assert all(r.ok for r in results)
    assert relisted >= 1 and s.watch_stats.relists["silent"] == 0
    # One LIST per kind and relist (plus at most one in flight per kind when the session
    # closed), never one per step: 20 steps ended through these.
    assert cluster.request_count("list") - lists <= relisted + 2
