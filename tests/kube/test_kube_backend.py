"""KubernetesBackend on the fake cluster: creation order, adoption, states and reasons."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from k8sjobs.errors import SpecMismatch
from k8sjobs.kube import KubeClient, KubernetesBackend, load_config
from k8sjobs.kube.client import CONFIGMAPS, JOBS
from k8sjobs.render.manifests import Target, render
from k8sjobs.session import Session
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .kubehelpers import FAKE, orphans, session, step


async def test_creation_order_owner_references_and_two_writes(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        cluster.requests.reset()
        handle = await s.submit(step("a"))
        writes = sum(cluster.request_count(v) for v in ("create", "patch", "update", "delete"))
        result = await handle.wait(10)
    assert result.state is StepState.SUCCEEDED
    assert writes == 2  # the Job, then its ConfigMap already owned by it
    job = cluster.get("jobs", handle.object_name)
    configmap = cluster.get("configmaps", handle.object_name)
    assert job is not None and configmap is not None
    (owner,) = configmap["metadata"]["ownerReferences"]
    assert owner["uid"] == job["metadata"]["uid"] and owner["kind"] == "Job"
    assert owner["controller"] is False and owner["blockOwnerDeletion"] is False


async def test_resubmission_adopts_identical_spec_without_writes(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        await (await s.submit(step("a", duration=0.3))).wait(10)
    async with session(cluster, tmp_path) as s:
        cluster.requests.reset()
        again = await s.submit(step("a", duration=0.3))
        assert cluster.request_count("create") == 0
        assert (await again.wait(5)).state is StepState.SUCCEEDED
    assert len(cluster.objects("jobs")) == 1


async def test_a_changed_spec_replaces_an_ended_job_and_is_refused_while_one_runs(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        await (await s.submit(step("a"))).wait(10)
    async with session(cluster, tmp_path) as s:
        # The ended Job is an older run's leftover: no SpecMismatch in a study's normal flow.
        handle = await s.submit(step("a", duration=0.06))
        assert (await handle.wait(10)).state is StepState.SUCCEEDED
        assert not handle.adopted
    (job,) = cluster.objects("jobs")
    assert job["metadata"]["annotations"][f"{FAKE}duration"] == "0.06"
    async with session(cluster, tmp_path) as s:
        running = await s.submit(step("a", duration=30))
        await wait_until(lambda: running.state is StepState.RUNNING)
    async with session(cluster, tmp_path) as s:
        with pytest.raises(SpecMismatch, match=r'Step "a".*still running.*--replace'):
            await s.submit(step("a", duration=0.07))
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("a", duration=0.07), replace=True)
        assert (await handle.wait(10)).state is StepState.SUCCEEDED
    (job,) = cluster.objects("jobs")
    assert job["metadata"]["annotations"][f"{FAKE}duration"] == "0.07"


async def test_orphaned_configmap_is_reported_then_adopted(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # A driver that died between the ConfigMap and the Job left this behind.
    manifests = render(step("a"), Target(study="s"))
    async with KubeClient(await load_config(cluster.kubeconfig_path)) as client:
        await client.create(CONFIGMAPS, "default", manifests.configmap)
    async with session(cluster, tmp_path) as s:
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend)
        assert await s.attach() == []
        assert manifests.name in backend.orphans
        result = await (await s.submit(step("a"))).wait(10)
    assert result.ok
    assert orphans(cluster) == []


async def test_exit_code_is_reported_and_log_saved(cluster: FakeCluster, tmp_path: Path) -> None:
    notes = {f"{FAKE}exit-code": "3", f"{FAKE}logs": "boom\n"}
    async with session(cluster, tmp_path) as s:
        result = await (await s.submit(step("bad", annotations=notes))).wait(10)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)
    assert result.log_file is not None
    assert Path(result.log_file) == tmp_path / "logs" / "s" / "bad.log"
    assert await asyncio.to_thread(Path(result.log_file).read_text) == "boom\n"
    name = render(step("bad"), Target(study="s")).name
    await wait_until(lambda: cluster.get("jobs", name) is None, "the failed job is deleted")


async def test_keep_failed_keeps_the_job(cluster: FakeCluster, tmp_path: Path) -> None:
    notes = {f"{FAKE}exit-code": "1"}
    async with Session(
        study="s", kubeconfig=cluster.kubeconfig_path, log_dir=tmp_path, keep_failed=True
    ) as s:
        handle = await s.submit(step("bad", annotations=notes))
        await handle.wait(10)
        await asyncio.sleep(0.2)  # the time a deletion (which keep_failed prevents) would take
    assert cluster.get("jobs", handle.object_name) is not None


async def test_oom_killed(cluster: FakeCluster, tmp_path: Path) -> None:
    notes = {f"{FAKE}memory-usage": "2Gi"}
    async with session(cluster, tmp_path) as s:
        bad = step("oom", annotations=notes, resources={"memory": "1Gi"})
        result = await (await s.submit(bad)).wait(10)
    assert (result.state, result.reason) == (StepState.FAILED, "OOMKilled")


async def test_deadline_exceeded(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        slow = step("slow", duration=30, walltime="2s")
        result = await (await s.submit(slow)).wait(15)
    assert (result.state, result.reason) == (StepState.FAILED, "DeadlineExceeded")


async def test_backoff_retries_then_fails(cluster: FakeCluster, tmp_path: Path) -> None:
    notes = {f"{FAKE}exit-code": "2"}
    async with session(cluster, tmp_path) as s:
        result = await (await s.submit(step("r", annotations=notes, retries=1))).wait(15)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 2)
    assert result.message == "the script exited with code 2, after 2 attempts"
    assert len(result.pods) == 2


async def test_image_pull_error_fails_after_grace(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("img", image="example.org/does-not-exist:1"))
        result = await handle.wait(10)
    assert result.state is StepState.FAILED
    assert result.reason in ("ImagePullBackOff", "ErrImagePull")


async def test_unschedulable_stays_pending_with_reason(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("big", resources={"cores_per_task": 1000}))
        await wait_until(
            lambda: handle.result.reason == "Unschedulable", "the pod is unschedulable"
        )
        assert (handle.state, handle.result.reason) == (StepState.PENDING, "Unschedulable")
        await handle.cancel()


async def test_cancel_ends_cancelled_and_deletes_the_job(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("long", duration=30))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        await handle.cancel()
        result = await handle.wait(5)
    assert result.state is StepState.CANCELLED
    await wait_until(lambda: cluster.get("jobs", handle.object_name) is None, "the job is deleted")


async def test_job_deleted_by_someone_else_is_lost(cluster: FakeCluster, tmp_path: Path) -> None:
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("long", duration=30))
        async with KubeClient(await load_config(cluster.kubeconfig_path)) as other:
            await other.delete(JOBS, "default", handle.object_name, propagation="Background")
        result = await handle.wait(5)
    assert (result.state, result.reason) == (StepState.LOST, "JobDeleted")


async def test_logs_read_the_step_container(cluster: FakeCluster, tmp_path: Path) -> None:
    notes = {f"{FAKE}logs": "line 1\nline 2\n"}
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("talk", annotations=notes))
        await handle.wait(10)
        assert await handle.logs() == "line 1\nline 2\n"
