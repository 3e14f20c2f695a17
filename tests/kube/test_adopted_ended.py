"""A Job that ended before its step was submitted again is adopted ended, with its own times.

Issue 34 item 14 on Kubernetes: the step is said once, ended (no PENDING or RUNNING between),
and its duration is the Job's startTime to completionTime, not the re-attach time.
"""

from __future__ import annotations

from pathlib import Path

from k8sjobs.handle import StepHandle
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from .kubehelpers import session, step


async def test_a_job_that_ended_unwatched_is_adopted_ended_with_its_own_times(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path) as s:
        first = await (await s.submit(step("a", duration=0.3))).wait(10)
    assert first.state is StepState.SUCCEEDED
    async with session(cluster, tmp_path) as s:
        again = await s.submit(step("a", duration=0.3))
        states = [again.state]
        again.add_listener(lambda h: states.append(h.state))
        result = await again.wait(10)
        assert isinstance(again, StepHandle) and again.adopted
    assert result.state is StepState.SUCCEEDED
    assert StepState.RUNNING not in states, states
    assert (result.started_at, result.finished_at) == (first.started_at, first.finished_at)
