"""A pod's FailedMount of the step's own ConfigMap is no wait within the expected window.

k8sjobs creates a step's ConfigMap just after its Job, by design, so a first pod may fail to
mount it for a moment (issue 34 item 15): within ``CONFIGMAP_WINDOW`` of the Job's creation
it is the step's ordinary start (ContainerCreating); after it, a ConfigMap that never came
is news, said in the kubelet's words. Any other volume's FailedMount is news at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.state import StepState
from k8sjobs.status import CONFIGMAP_WINDOW, judge

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = "st-a-1234abcd"


def _stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mount(configmap: str, at: float) -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": "FailedMount",
        "message": f'MountVolume.SetUp failed for volume "script" : configmap "{configmap}" '
        "not found",
        "involvedObject": {"kind": "Pod", "name": f"{JOB}-x"},
        "firstTimestamp": _stamp(at),
        "lastTimestamp": _stamp(at),
    }


@given(
    after=st.floats(min_value=0.0, max_value=3 * CONFIGMAP_WINDOW),
    own=st.booleans(),
)
def test_the_own_configmap_mount_is_a_wait_only_past_its_window(after: float, own: bool) -> None:
    job = {
        "metadata": {"name": JOB, "creationTimestamp": _stamp(0)},
        "spec": {},
        "status": {"startTime": _stamp(0), "active": 1},
    }
    pod = {
        "metadata": {"name": f"{JOB}-x", "creationTimestamp": _stamp(0)},
        "status": {"phase": "Pending"},
    }
    event = _mount(JOB if own else "site-config", 0)
    now = T0 + timedelta(seconds=after)
    result = judge(job, [pod], now=now, pending_grace=30, warnings=[event])
    assert result.state is StepState.PENDING
    if own and after < CONFIGMAP_WINDOW:
        assert (result.reason, result.message) == ("ContainerCreating", "")
    else:
        assert (result.reason, result.message) == ("FailedMount", event["message"])
