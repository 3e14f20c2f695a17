"""k8sjobs.pending: which causes of a waiting step can clear by themselves (pure)."""

from __future__ import annotations

import pytest

from k8sjobs.pending import blocked, is_permanent

NEVER = [
    'pods "p-" is forbidden: no PriorityClass with name gold was found',
    'pods "r-" is forbidden: pod rejected: RuntimeClass "kata" not found',
    'pods "l-x" is forbidden: maximum cpu usage per Container is 100m, but limit is 1',
    'pods "l-x" is forbidden: minimum memory usage per Pod is 1Gi, but request is 64Mi',
    'pods "l-x" is forbidden: cpu max limit to request ratio per Container is 2, but provided '
    "ratio is 4.000000",
    'pods "s-" is forbidden: error looking up service account hpc/runner: serviceaccount '
    '"runner" not found',
    'pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged',
]
CLEARS = [
    'pods "q-x" is forbidden: exceeded quota: nopods, requested: pods=1, used: pods=0, '
    "limited: pods=0",
    "Internal error occurred: failed calling webhook",
    "",
]


@pytest.mark.parametrize("message", NEVER)
def test_a_refusal_no_waiting_cures_is_permanent(message: str) -> None:
    assert is_permanent("FailedCreate", f"Error creating: {message}")


@pytest.mark.parametrize("message", CLEARS)
def test_a_refusal_that_can_clear_is_not(message: str) -> None:
    assert not is_permanent("FailedCreate", f"Error creating: {message}")


def test_only_the_job_controllers_refusals_are_permanent() -> None:
    assert not is_permanent("FailedScheduling", "no PriorityClass with name gold was found")


def _event(kind: str, name: str, reason: str, message: str, last: str) -> dict[str, object]:
    return {
        "type": "Warning",
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "message": message,
        "firstTimestamp": "2026-12-01T10:00:00Z",
        "lastTimestamp": last,
    }


def test_a_refusal_older_than_the_jobs_newest_pod_is_history() -> None:
    """Refused once (a quota), then a pod was made after all: that refusal does not say why
    the step waits now."""
    job = {"metadata": {"name": "j"}}
    refusal = _event("Job", "j", "FailedCreate", "exceeded quota: q", "2026-12-01T10:00:05Z")
    pod = {"metadata": {"name": "j-x", "creationTimestamp": "2026-12-01T10:00:09Z"}}
    assert blocked(job, [], [refusal], [pod]) is None
    cause = blocked(job, [], [refusal])
    assert cause is not None and (cause.reason, cause.permanent) == ("FailedCreate", False)
    combined = {**refusal, "message": "(combined from similar events): exceeded quota: q"}
    again = blocked(job, [], [combined])
    assert again is not None and again.message == "exceeded quota: q"
