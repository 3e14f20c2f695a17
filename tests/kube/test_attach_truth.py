"""attach() returns handles only once what exists has been judged: no state it has not read."""

from __future__ import annotations

from pathlib import Path

from k8sjobs.session import Session
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from .kubehelpers import FAKE, session, step


def stored(cluster: FakeCluster, tmp_path: Path) -> Session:
    """Return a session whose steps' outputs go to a registry (tags: the fake pushes none)."""
    return Session(
        study="s",
        kubeconfig=cluster.kubeconfig_path,
        log_dir=tmp_path / "logs",
        store="registry.example/p",
    )


async def test_attach_after_a_run_reads_succeeded_for_steps_with_outputs(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A succeeded step with outputs needs its push report read before it is SUCCEEDED; an
    attach returned it PENDING while that read was under way (`k8sjobs status` printed it)."""
    outputs = {"data": "data.txt"}
    async with stored(cluster, tmp_path) as s:
        done = await s.submit(step("made", outputs=outputs))
        assert (await done.wait(10)).ok
    async with stored(cluster, tmp_path) as again:
        (found,) = await again.attach()
        assert found.state is StepState.SUCCEEDED
        assert "data" in found.result.outputs


async def test_attach_to_a_kept_failed_step_reads_failed_and_keeps_its_job(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A failed Job kept for debugging is FAILED at once on attach (its log is read first),
    and looking at it (`k8sjobs status`) does not delete it."""
    notes = {f"{FAKE}exit-code": "3"}
    async with session(cluster, tmp_path, keep_failed=True) as s:
        bad = await s.submit(step("bad", annotations=notes))
        assert (await bad.wait(10)).exit_code == 3
    async with session(cluster, tmp_path) as again:
        (found,) = await again.attach()
        assert found.state is StepState.FAILED and found.result.exit_code == 3
        assert found.result.log_file is not None
    assert cluster.get("jobs", bad.object_name) is not None
