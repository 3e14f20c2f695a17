"""Disruptions, exit-code rules, step events and kept logs on the fake cluster (issue 17)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from k8sjobs.events import StepEvent
from k8sjobs.kube.backend import KubernetesBackend
from k8sjobs.kube.client import JOBS, PODS
from k8sjobs.render.manifests import MAIN_CONTAINER
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .kubehelpers import FAKE, session, step


def _running_pod(cluster: FakeCluster, job: str) -> str | None:
    for pod in cluster.objects("pods", "default"):
        labels = pod["metadata"].get("labels") or {}
        running = (pod.get("status") or {}).get("phase") == "Running"
        if labels.get("batch.kubernetes.io/job-name") == job and running:
            return str(pod["metadata"]["name"])
    return None


async def _started(cluster: FakeCluster, job: str) -> str:
    await wait_until(lambda: _running_pod(cluster, job) is not None)
    pod = _running_pod(cluster, job)
    assert pod is not None
    return pod


async def test_an_evicted_pod_is_replaced_without_spending_retries(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("evicted", duration=3, retries=0))
        first = await _started(cluster, handle.object_name)
        cluster.evict(first)
        result = await handle.wait(30)
    assert (result.state, result.reason) == (StepState.SUCCEEDED, "Completed")
    assert len(result.pods) >= 1 and first not in result.pods
    # Under load the first pod may also wait for the step's own ConfigMap (created just after
    # the Job, by design): that wait is no disruption, and the test is about the eviction.
    events = [e for e in handle.events if e.pod == first and not e.expected_of(handle.object_name)]
    (event,) = events
    assert (event.reason, event.action) == ("Disrupted", "Ignore")
    assert "EvictionByEvictionAPI" in event.message
    assert "without spending a retry" in event.describe()


async def test_with_disruptions_counted_a_deleted_running_pod_fails_the_step(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("deleted", duration=30, disruptions="count"))
        pod = await _started(cluster, handle.object_name)
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend)
        await backend.client.delete(PODS, "default", pod, propagation="Background")
        result = await handle.wait(30)
    assert (result.state, result.reason) == (StepState.FAILED, "PodDeleted")
    assert f"pod {pod} was deleted while it ran" in result.message
    assert [e.reason for e in handle.events] == ["PodDeleted"]


async def test_fail_on_exit_codes_ends_the_step_at_once_naming_the_rule(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    notes = {f"{FAKE}exit-code": "42"}
    async with session(cluster, tmp_path) as s:
        bad = step("bad", annotations=notes, retries=5, fail_on_exit_codes=[42])
        result = await (await s.submit(bad)).wait(30)
    assert (result.state, result.reason, result.exit_code) == (
        StepState.FAILED,
        "PodFailurePolicy",
        42,
    )
    assert result.message.startswith("exit code 42 is in fail_on_exit_codes [42]")
    assert len(result.pods) == 1  # not retried, with five retries left


def _spent(events: Sequence[StepEvent]) -> list[str]:
    """Return the actions of the events that cost the step (not a wait that cleared)."""
    return [e.action for e in events if e.action not in ("Wait", "Refused")]


async def test_retry_on_exit_codes_retries_only_those(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        flaky = step("flaky", annotations={f"{FAKE}exit-code": "75"}, retries=1)
        flaky = flaky.model_copy(update={"retry_on_exit_codes": [75]})
        other = step("other", annotations={f"{FAKE}exit-code": "3"}, retries=4)
        other = other.model_copy(update={"retry_on_exit_codes": [75]})
        flaky_h, other_h = await s.submit(flaky), await s.submit(other)
        flaky_r, other_r = await flaky_h.wait(30), await other_h.wait(30)
        # Each pod's failure reaches the handle through the pod watch, which can trail the
        # Job's end on a loaded machine; a first pod may also have waited for its ConfigMap
        # (a "Wait" event). The condition is waited for, then only what cost retries compared.
        await wait_until(lambda: len(_spent(flaky_h.events)) >= 2, "both failed pods seen")
    assert (flaky_r.reason, len(flaky_r.pods)) == ("ExitCode", 2)  # retried, then out of retries
    assert _spent(flaky_h.events) == ["Count", "Count"]
    assert other_r.reason == "PodFailurePolicy" and len(other_r.pods) == 1
    assert other_r.message.startswith("exit code 3 is not in retry_on_exit_codes [75]")


async def test_a_step_killed_by_its_walltime_keeps_its_log(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    notes = {f"{FAKE}logs": "step 1 of 100 done\n\nstep 2 of 100 done\n"}
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("long", duration=600, walltime="1h", annotations=notes))
        pod = await _started(cluster, handle.object_name)
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend)
        job = cluster.get("jobs", handle.object_name)
        assert job is not None
        kept = backend.logkeeper.path("s", "long", job["metadata"]["uid"], pod, MAIN_CONTAINER)
        await wait_until(lambda: kept.exists() and kept.stat().st_size > 0)
        # The walltime runs out now: the job controller deletes the pod, and its log.
        await backend.client.request(
            "PATCH",
            JOBS.path("default", handle.object_name),
            body={"spec": {"activeDeadlineSeconds": 1}},
            content_type="application/merge-patch+json",
            what="shorten the walltime",
            kind=JOBS,
            verb="patch",
        )
        result = await handle.wait(30)
        await wait_until(lambda: cluster.get("pods", pod) is None)
        assert await handle.logs() == "step 1 of 100 done\n\nstep 2 of 100 done\n"
    assert result.reason == "DeadlineExceeded"
    assert result.log_file is not None
    text = await asyncio.to_thread(Path(result.log_file).read_text)
    assert text == "step 1 of 100 done\n\nstep 2 of 100 done\n"


def _log_follows(cluster: FakeCluster) -> int:
    return sum(
        v
        for k, v in cluster.requests.counts.items()
        if (k.resource, k.subresource) == ("pods", "log")
    )


async def test_only_steps_with_a_walltime_have_their_logs_followed_unless_all_are_asked(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # A follow is one request per pod: by default only the pods the job controller deletes
    # at their walltime pay it, so a study of many steps keeps its bill of no per-step reads.
    async with session(cluster, tmp_path) as s:
        result = await (await s.submit(step("plain", duration=0.5))).wait(30)
    assert result.ok and _log_follows(cluster) == 0
    async with session(cluster, tmp_path, study="t", keep_logs="all") as s:
        result = await (await s.submit(step("plain", duration=0.5))).wait(30)
    assert result.ok
    await wait_until(lambda: _log_follows(cluster) >= 1, "a follow of the step's log")
