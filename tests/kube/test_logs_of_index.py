"""Which pods a step's ``logs()`` reads: a multi-node step's launcher unless told otherwise."""

from __future__ import annotations

import pytest

from k8sjobs.handle import StepHandle
from k8sjobs.kube.backend import KubernetesBackend, _of_index, _of_jobset_index
from k8sjobs.state import StepResult, StepState

JOB = "s-mpi-1a2b3c4d"
PODS = [f"{JOB}-0-aaaaa", f"{JOB}-1-bbbbb", f"{JOB}-2-ccccc", f"{JOB}-0-ddddd"]


def _handle() -> StepHandle:
    return StepHandle(
        name="mpi", study="s", object_name=JOB, namespace="default", backend=KubernetesBackend()
    )


def test_the_default_is_the_launchers_pods_not_the_workers_sshd() -> None:
    assert _of_index(PODS, _handle(), None, None) == [f"{JOB}-0-aaaaa", f"{JOB}-0-ddddd"]


def test_an_index_names_a_workers_pods_and_a_container_alone_every_index() -> None:
    assert _of_index(PODS, _handle(), None, 2) == [f"{JOB}-2-ccccc"]
    assert _of_index(PODS, _handle(), "step", None) == PODS
    assert _of_index(PODS, _handle(), "step", 1) == [f"{JOB}-1-bbbbb"]


def test_a_single_pod_step_reads_every_pod_and_a_missing_index_is_named() -> None:
    plain = [f"{JOB}-x7wk4", f"{JOB}-q2z9p"]
    assert _of_index(plain, _handle(), None, None) == plain
    with pytest.raises(ValueError, match='Step "mpi" has no pod of index 5'):
        _of_index(PODS, _handle(), None, 5)


def test_a_worker_of_a_jobset_that_succeeded_is_said_gone_and_why() -> None:
    """JobSet deletes the workers' Job when the set succeeds: the missing pod is no typo."""
    handle = _handle()
    launcher = [f"{JOB}-launcher-0-0-aaaaa"]
    with pytest.raises(ValueError, match=r"has no pod of index 1$"):
        _of_jobset_index(launcher, handle, None, 1)  # still running: no reason known
    handle.report(StepResult(name="mpi", state=StepState.SUCCEEDED))
    with pytest.raises(ValueError, match="a JobSet that succeeded deletes its workers' pods"):
        _of_jobset_index(launcher, handle, None, 1)
