"""Step events: bounded, each pod's failure once, and what a failed or deleted pod cost."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.events import EVENT_LIMIT, EventLog, StepEvent, pod_event
from k8sjobs.steps.failure import pod_failure_policy


def _event(pod: str, reason: str = "ExitCode") -> StepEvent:
    return StepEvent(time=None, pod=pod, reason=reason, message="m", action="Count")


@given(st.lists(st.sampled_from([f"p{i}" for i in range(80)]), max_size=300))
def test_the_log_keeps_the_last_events_each_pod_once(pods: list[str]) -> None:
    log = EventLog()
    for pod in pods:
        log.add(_event(pod))
    unique = list(dict.fromkeys(pods))
    assert [e.pod for e in log] == unique[-EVENT_LIMIT:]


def test_events_round_trip_through_json() -> None:
    event = StepEvent(datetime(2026, 1, 2, 3, 4, tzinfo=UTC), "p", "Disrupted", "m", "Ignore")
    assert StepEvent.from_json(event.to_json()) == event


def test_a_running_pod_deleted_with_a_disruption_is_ignored_by_the_default_policy() -> None:
    job = {"spec": {"podFailurePolicy": pod_failure_policy("ignore", [], [], "step")}}
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "X"}],
        },
    }
    assert pod_event(job, pod) is None  # still running: nothing happened yet
    event = pod_event(job, pod, deleted=True)
    assert event is not None and (event.reason, event.action) == ("Disrupted", "Ignore")
    succeeded = {"metadata": {"name": "q"}, "status": {"phase": "Succeeded"}}
    assert pod_event(job, succeeded, deleted=True) is None
