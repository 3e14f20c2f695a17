"""Why a step waits, as it happens: the Warning Events watch feeds the handle, its events and
`k8sjobs status`; a cause that cannot clear fails the step, one that can waits until
``pending_timeout``. The fake cluster's own event recorder writes the Events, as its job
controller and kubelet do (the job controller is stopped where it would create the pods
that admission refuses on a real cluster)."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

from k8sjobs.state import StepState
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver.events import record_event

from ..waiting import wait_until
from .kubehelpers import session, step

PRIORITY = 'Error creating: pods "x-" is forbidden: no PriorityClass with name gold was found'
QUOTA = (
    'Error creating: pods "x-abcde" is forbidden: exceeded quota: nopods, requested: pods=1, '
    "used: pods=0, limited: pods=0"
)
MOUNT = 'MountVolume.SetUp failed for volume "data" : persistentvolumeclaim "data" not found'


async def _job_made(cluster: FakeCluster, name: str) -> None:
    await wait_until(lambda: cluster.get("jobs", name) is not None, f"the Job {name} exists")


def _refuse(cluster: FakeCluster, job_name: str, message: str) -> None:
    job = cluster.get("jobs", job_name)
    assert job is not None
    record_event(cluster.store, job, "Warning", "FailedCreate", message, "job-controller")


async def test_a_refusal_that_cannot_clear_fails_the_step_with_the_servers_words(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await cluster.controller.stop()  # no pods: admission refuses them, as the events say
    async with session(cluster, tmp_path, pending_grace=2.0) as s:
        handle = await s.submit(step("prio"))
        await wait_until(lambda: cluster.get("jobs", handle.object_name), "the Job exists")
        _refuse(cluster, handle.object_name, PRIORITY)
        await wait_until(lambda: handle.result.reason == "FailedCreate", "the reason is shown")
        assert handle.state is StepState.PENDING and handle.result.message == PRIORITY
        (event,) = handle.events
        assert event.reason == "FailedCreate" and event.message == PRIORITY
        assert "pending_grace" in event.describe()
        result = await handle.wait(30)
    assert result.state is StepState.FAILED and result.reason == "FailedCreate"
    assert result.message == f"{PRIORITY} (still refused after 2s)"
    # The failed step's Job goes, as any failed step's: no controller retrying for ever.
    await wait_until(lambda: cluster.get("jobs", handle.object_name) is None, "the Job is gone")


async def test_a_quota_keeps_the_step_pending_until_its_pending_timeout(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await cluster.controller.stop()
    async with session(cluster, tmp_path) as s:
        waits = await s.submit(step("waits"))
        bounded = await s.submit(step("bounded", pending_timeout=1))
        for handle in (waits, bounded):
            await _job_made(cluster, handle.object_name)
            _refuse(cluster, handle.object_name, QUOTA)
        result = await bounded.wait(30)
        assert result.state is StepState.FAILED and result.reason == "PendingTimeout"
        assert (
            result.message
            == f"not started within pending_timeout (1 s); it waited: FailedCreate: {QUOTA}"
        )
        # The same cause without a bound: still PENDING, with the reason, after the other ended.
        assert waits.state is StepState.PENDING
        assert (waits.result.reason, waits.result.message) == ("FailedCreate", QUOTA)


async def test_a_pod_whose_volume_cannot_be_mounted_says_so(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.kubelet.pause(True)  # the pod exists and waits, as for its volume
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("mounts"))
        await wait_until(lambda: handle.result.pods, "the pod is seen")
        pod = cluster.get("pods", handle.result.pods[0])
        assert pod is not None
        record_event(cluster.store, pod, "Warning", "FailedMount", MOUNT, "kubelet", host="node")
        await wait_until(lambda: handle.result.reason == "FailedMount", "the reason is shown")
        assert handle.result.message == MOUNT and handle.state is StepState.PENDING
        cluster.kubelet.pause(False)
        assert (await handle.wait(30)).ok  # it cleared: the step ran


async def test_k8sjobs_status_shows_why_a_step_waits(cluster: FakeCluster, tmp_path: Path) -> None:
    await cluster.controller.stop()
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("waits"))
        await wait_until(lambda: cluster.get("jobs", handle.object_name), "the Job exists")
        _refuse(cluster, handle.object_name, QUOTA)
        await wait_until(lambda: handle.result.reason == "FailedCreate")
    args = ["status", "--study", "s", "--backend", "kubernetes"]
    args += ["--kubeconfig", str(cluster.kubeconfig_path)]
    # A process of its own, while this loop serves the fake cluster (never blocked).
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k8sjobs.cli", *args, cwd=tmp_path, stdout=PIPE, stderr=PIPE
    )
    out, err = await process.communicate()
    stdout = out.decode()
    assert process.returncode == 1, stdout + err.decode()
    assert "PENDING" in stdout and "exceeded quota: nopods" in stdout
    assert "waits: Error creating: pods" in stdout  # the step's event under the table


async def test_one_events_watch_per_namespace_and_no_reads_per_step(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A second study in the namespace shares the Event watch; steps add no reads of it."""
    async with session(cluster, tmp_path, study="a") as a:
        handles = [await a.submit(step(f"s{i}")) for i in range(5)]
        cluster.requests.reset()
        await a.attach("b")
        assert cluster.request_count("list", "jobs") == 1
        assert cluster.request_count("list", "events") == 0
        for handle in handles:
            assert (await handle.wait(30)).ok
        assert cluster.request_count("list", "events") == 0
        assert cluster.request_count("get", "events") == 0


# --- the five causes measured on a real cluster, as the fake's admission and scheduler give them


def _add(cluster: FakeCluster, resource: str, obj: dict[str, object]) -> None:
    cluster.store.create(resource, "default", obj)


async def _refused(cluster: FakeCluster, tmp_path: Path, made: Step) -> tuple[str, str]:
    """Return (reason, message) the step was PENDING with, once it has ended FAILED."""
    async with session(cluster, tmp_path, pending_grace=1.0) as s:
        handle = await s.submit(made)
        await wait_until(lambda: handle.result.reason == "FailedCreate", "the refusal is shown")
        pending = (handle.result.reason, handle.result.message)
        assert handle.state is StepState.PENDING
        result = await handle.wait(60)
    assert (result.state, result.reason) == (StepState.FAILED, "FailedCreate")
    assert result.message == f"{pending[1]} (still refused after 1s)"
    return pending


async def test_a_missing_priority_class_fails_the_step(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    _reason, message = await _refused(cluster, tmp_path, step("p", priority_class="no-such"))
    assert message.startswith("Error creating: pods ")
    assert "no PriorityClass with name no-such was found" in message


async def test_a_missing_runtime_class_fails_the_step(cluster: FakeCluster, tmp_path: Path) -> None:
    _reason, message = await _refused(cluster, tmp_path, step("r", runtime_class="no-such-rt"))
    assert 'pod rejected: RuntimeClass "no-such-rt" not found' in message


async def test_a_limit_range_maximum_fails_the_step(cluster: FakeCluster, tmp_path: Path) -> None:
    limits = {"limits": [{"type": "Container", "max": {"cpu": "100m"}}]}
    _add(cluster, "limitranges", {"metadata": {"name": "small"}, "spec": limits})
    _reason, message = await _refused(cluster, tmp_path, step("l", resources={"cpu": "1"}))
    assert "maximum cpu usage per Container is 100m" in message


async def test_a_used_up_quota_waits_with_the_reason(cluster: FakeCluster, tmp_path: Path) -> None:
    _add(
        cluster, "resourcequotas", {"metadata": {"name": "nopods"}, "spec": {"hard": {"pods": "0"}}}
    )
    async with session(cluster, tmp_path, pending_grace=0.5) as s:
        waits = await s.submit(step("q"))
        bounded = await s.submit(step("qb", pending_timeout=2))
        result = await bounded.wait(60)
        assert (result.state, result.reason) == (StepState.FAILED, "PendingTimeout")
        assert "FailedCreate: Error creating: pods " in result.message
        assert "exceeded quota: nopods" in result.message
        assert waits.state is StepState.PENDING and waits.result.reason == "FailedCreate"
        assert "exceeded quota: nopods" in waits.result.message


async def test_a_step_too_big_for_any_node_waits_then_says_it_never_ran(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        big = await s.submit(step("big", resources={"cpu": "100000"}, walltime=2))
        await wait_until(lambda: big.result.reason == "Unschedulable", "the scheduler's reason")
        assert "0/1 nodes are available: 1 Insufficient cpu" in big.result.message
        assert big.state is StepState.PENDING
        result = await big.wait(60)
    assert (result.state, result.reason) == (StepState.FAILED, "DeadlineExceeded")
    assert result.message.startswith("the walltime (2 s) ran out before the step ever ran")
    assert "it waited: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu" in result.message
