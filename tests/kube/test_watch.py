"""The shared watch under stress: drops, 410, 429 storms, restarts, a killed driver."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from k8sjobs.kube.watch import Cache
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from .kubehelpers import count_terminal, orphans, session, step


def test_cache_skips_replayed_events_and_relist_synthesizes_deletions() -> None:
    cache = Cache()
    job = {"metadata": {"name": "a", "resourceVersion": "5"}, "status": {}}
    assert cache.apply("ADDED", job) is not None
    assert cache.apply("MODIFIED", job) is None  # same resourceVersion: seen already
    changes = cache.replace([], "9")
    assert [(c.name, c.obj) for c in changes] == [("a", None)]
    assert cache.resource_version == "9"


async def test_zero_reads_while_waiting_and_two_watches(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handles = await s.submit_many([step(f"w{i}", duration=0.5) for i in range(40)])
        cluster.requests.reset()
        results = await s.gather(*handles, timeout=20)
    assert all(r.ok for r in results)
    assert cluster.request_count("get", "jobs") == 0
    assert cluster.request_count("list") == 0
    assert cluster.request_count("get", "pods", "") == 0
    assert cluster.request_count("watch") <= 2


async def test_watch_drops_lose_nothing_and_repeat_nothing(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handles = await s.submit_many([step(f"d{i}", duration=0.3) for i in range(30)])
        seen = count_terminal(handles)
        for _ in range(5):
            await asyncio.sleep(0.1)
            cluster.faults.drop_watches()
        results = await s.gather(*handles, timeout=20)
    assert all(r.ok for r in results)
    assert set(seen.values()) == {1}


async def test_410_gone_relists_and_reconciles(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        handles = await s.submit_many([step(f"g{i}", duration=0.4) for i in range(20)])
        seen = count_terminal(handles)
        await asyncio.sleep(0.1)
        cluster.faults.fail("watch", status=503, times=None)
        cluster.faults.drop_watches()
        await asyncio.sleep(0.6)  # steps change while the watch is down...
        cluster.faults.compact()  # ...and the history that held the changes is gone
        cluster.faults.clear()
        results = await s.gather(*handles, timeout=20)
        relists = s.watch_stats.relists
    assert all(r.ok for r in results)
    assert set(seen.values()) == {1}
    assert relists["gone"] >= 1


async def test_job_deleted_while_watch_is_down_is_lost(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("x", duration=30))
        await asyncio.sleep(0.1)
        cluster.faults.fail("watch", status=503, times=3)
        cluster.faults.compact()
        cluster.faults.drop_watches()
        cluster.store.delete("jobs", "default", handle.object_name)
        result = await handle.wait(10)
    assert (result.state, result.reason) == (StepState.LOST, "JobDeleted")


async def test_429_storm_honours_retry_after(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        cluster.faults.fail("create", status=429, times=3, retry_after=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        handle = await s.submit(step("busy"))
        elapsed = loop.time() - started
        assert (await handle.wait(10)).ok
    assert elapsed >= 2.9  # three Retry-After: 1 answers were waited out
    assert cluster.request_count("create") == 5  # 3 refused + ConfigMap + Job


async def test_5xx_on_writes_is_retried(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path, backoff=0.01) as s:
        cluster.faults.fail("create", status=500, times=2)
        cluster.faults.fail("patch", status=503, times=2)
        assert (await (await s.submit(step("flaky"))).wait(10)).ok
    assert orphans(cluster) == []


async def test_server_restart_mid_watch(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path, backoff=0.01) as s:
        handles = await s.submit_many([step(f"r{i}", duration=0.5) for i in range(20)])
        seen = count_terminal(handles)
        await asyncio.sleep(0.2)
        await cluster.faults.restart_server()
        results = await s.gather(*handles, timeout=20)
    assert all(r.ok for r in results)
    assert set(seen.values()) == {1}


DRIVER = """
import asyncio, sys
from k8sjobs.session import Session
from k8sjobs import Step

async def main():
    async with Session(study="crash", kubeconfig=sys.argv[1]) as s:
        for i in range(int(sys.argv[2])):
            await s.submit(Step(name=f"c{i}", script="echo hi",
                                annotations={"fake.k8sjobs.io/duration": "0.5"}))
            print(i, flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_killed_driver_reattached_loses_nothing(cluster: FakeCluster, tmp_path: Path) -> None:
    steps = 30
    root = await asyncio.to_thread(lambda: str(Path(__file__).resolve().parents[2]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        DRIVER,
        str(cluster.kubeconfig_path),
        str(steps),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert proc.stdout is not None
    while True:  # an empty line is the driver's end: it died before submitting half
        line = await proc.stdout.readline()
        assert line, f"the driver ended early with {await proc.wait()}"
        if int(line) >= steps // 2:
            break
    proc.send_signal(signal.SIGKILL)  # mid-submission: some steps may be half created
    await proc.wait()
    async with session(cluster, tmp_path, study="crash") as s:
        attached = await s.attach()
        assert attached
        handles = [await s.submit(step(f"c{i}", duration=0.5)) for i in range(steps)]
        results = await s.gather(*handles, timeout=30)
    assert all(r.ok for r in results)
    assert len(cluster.objects("jobs", "default")) == steps  # no duplicates
    assert orphans(cluster) == []
