"""Queued studies on the fake cluster's Kueue (FakeCluster(kueue=True)): a 2-CPU ClusterQueue
never runs more than two one-CPU steps, a missing LocalQueue is named, and a preempted
step is PREEMPTED, then waits, then SUCCEEDED; one Workload watch, no Workload read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.handle import StepHandle
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .conftest import FAST
from .kubehelpers import session, step

KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest_asyncio.fixture
async def kueue(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5, kueue=True
    ) as fake:
        quota = {"name": "cpu", "nominalQuota": "2"}
        flavors = [{"name": "default", "resources": [quota]}]
        queues: list[tuple[str, str, dict[str, Any]]] = [
            ("resourceflavors", "", {"metadata": {"name": "default"}}),
            (
                "clusterqueues",
                "",
                {
                    "metadata": {"name": "cq"},
                    "spec": {
                        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}],
                        "preemption": {"withinClusterQueue": "LowerPriority"},
                    },
                },
            ),
            (
                "localqueues",
                "default",
                {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}},
            ),
            ("workloadpriorityclasses", "", {"metadata": {"name": "low"}, "value": 100}),
            ("workloadpriorityclasses", "", {"metadata": {"name": "high"}, "value": 1000}),
        ]
        for plural, namespace, body in queues:
            fake.store.create(plural, namespace, {"apiVersion": KUEUE, **body})
        yield fake


async def test_a_2_cpu_queue_never_runs_more_than_two_steps(
    kueue: FakeCluster, tmp_path: Path
) -> None:
    running: set[str] = set()
    most = 0

    def note(handle: StepHandle) -> None:
        nonlocal most
        (running.add if handle.state is StepState.RUNNING else running.discard)(handle.name)
        most = max(most, len(running))

    kueue.requests.reset()
    async with session(kueue, tmp_path) as s:
        handles = []
        for i in range(20):
            handle = await s.submit(
                step(f"s{i}", duration=0.5, queue="lq", resources={"cores_per_task": 1})
            )
            handle.add_listener(note)
            handles.append(handle)
        results = [await h.wait(120) for h in handles]
    assert [r.state for r in results] == [StepState.SUCCEEDED] * 20
    assert most == 2, f"at most {most} steps ran at once"
    assert kueue.requests.count("get", "workloads") == 0
    assert kueue.requests.count("list", "workloads") == 1


async def test_a_missing_local_queue_is_named(kueue: FakeCluster, tmp_path: Path) -> None:
    async with session(kueue, tmp_path) as s:
        handle = await s.submit(step("orphan", queue="no-such-queue"))
        await wait_until(lambda: handle.result.reason == "Misconfigured", "Kueue's reason")
        assert handle.state is StepState.PENDING
        assert handle.result.message == "LocalQueue no-such-queue doesn't exist"


async def test_a_preempted_step_is_preempted_then_succeeds(
    kueue: FakeCluster, tmp_path: Path
) -> None:
    seen: list[StepState] = []
    async with session(kueue, tmp_path) as s:
        two = {"cores_per_task": 2}
        low = await s.submit(step("low", duration=5.0, queue="lq", priority="low", resources=two))
        low.add_listener(lambda h: seen.append(h.state))
        await wait_until(lambda: low.state is StepState.RUNNING, "low runs")
        high = await s.submit(
            step("high", duration=0.5, queue="lq", priority="high", resources=two)
        )
        await wait_until(lambda: low.state is StepState.PREEMPTED, "low is preempted")
        assert low.result.reason == "Preempted"
        assert low.result.message.startswith("Preempted to accommodate a workload")
        assert (await high.wait(120)).state is StepState.SUCCEEDED
        result = await low.wait(120)
    assert result.state is StepState.SUCCEEDED and result.evictions == 1
    folded = [state for i, state in enumerate(seen) if i == 0 or seen[i - 1] is not state]
    assert folded[folded.index(StepState.PREEMPTED) :] == [
        StepState.PREEMPTED,
        StepState.PENDING,
        StepState.RUNNING,
        StepState.SUCCEEDED,
    ]
    assert [e.reason for e in low.events if e.reason == "Preempted"] == ["Preempted"]
    assert all(e.action == "Ignore" for e in low.events)


@pytest.mark.parametrize("target", ["job", "jobset"])
async def test_a_queued_step_of_any_target_is_bounded_by_its_pending_timeout(
    kueue: FakeCluster, tmp_path: Path, target: str
) -> None:
    # Nothing happens to a step whose LocalQueue does not exist: no event re-judges it,
    # so only a timer can end its wait.
    if target == "jobset":
        await kueue.install_jobset()
    async with session(kueue, tmp_path) as s:
        orphan = step("orphan", queue="no-such-queue", target=target, pending_timeout=2)
        result = await (await s.submit(orphan)).wait(60)
    assert (result.state, result.reason) == (StepState.FAILED, "PendingTimeout"), result.describe()
    assert "LocalQueue no-such-queue doesn't exist" in result.message
