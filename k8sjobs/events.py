"""A step's events: each failed or disrupted pod, what it cost, and why (pure values).

A handle's state says where the step is; its events say what happened on the way, so that
a step that succeeded on its third pod still tells that two were evicted. The backends feed
them from what they already see (the shared watch on a cluster, the pod runner locally):
one ``StepEvent`` per failed or deleted pod, built by ``pod_event`` from the pod and its
Job's ``podFailurePolicy``. A handle keeps the last ``EVENT_LIMIT`` of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from .pending import POD_REASONS, is_permanent, last_seen
from .status import parse_time, pod_failure
from .steps.failure import disruption, rule_action

__all__ = ["EVENT_LIMIT", "EventLog", "StepEvent", "pod_event", "warning_event"]

#: Events a handle keeps (the oldest go first): a pod evicted in a loop cannot grow memory.
EVENT_LIMIT = 50

# What each podFailurePolicy action means for the step, in a person's words.
_ACTION_TEXT = {
    "Wait": "the step waits until it clears",
    "Refused": "the step fails unless it clears within pending_grace",
    "Ignore": "retried without spending a retry",
    "Count": "counted against retries",
    "FailJob": "the step fails",
    "FailIndex": "its index fails",
    "RetryOOM": "run again with more memory (retry_oom)",
}

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class StepEvent:
    """One thing that happened to a step's pod.

    ``reason`` is short and machine-readable ("Disrupted", "PodDeleted", "ExitCode",
    "OOMKilled", ...); ``action`` is what it cost the step: "Ignore" (replaced without
    spending ``retries``), "Count" (spent one retry) or "FailJob" (ended the step).
    """

    time: datetime | None
    pod: str
    reason: str
    message: str
    action: str

    def describe(self, *, cleared: bool = False) -> str:
        """Return one line a person can read; ``cleared``: the step went on since (it left
        PENDING), so a wait it caused is history, not a warning."""
        if cleared and self.action in ("Wait", "Refused"):
            return f"{self.message} (it cleared; the step went on)"
        return f"{self.message} ({_ACTION_TEXT.get(self.action, self.action)})"

    def expected_of(self, object_name: str) -> bool:
        """Return whether this is the step's own ConfigMap not mounted yet: created just
        after its Job, by design, so a first pod's FailedMount of it is no news once the
        step went on."""
        return self.reason == "FailedMount" and f'configmap "{object_name}" not found' in (
            self.message
        )

    def to_json(self) -> dict[str, Any]:
        """Return the event as JSON-ready data (the local backend's step record keeps it)."""
        data = asdict(self)
        data["time"] = self.time.isoformat() if self.time else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepEvent:
        """Return the event ``to_json`` wrote."""
        return cls(**{**data, "time": parse_time(data.get("time"))})


class EventLog:
    """The last ``limit`` events of one step, each pod's failure recorded once."""

    __slots__ = ("_events", "_limit", "_seen")

    def __init__(self, limit: int = EVENT_LIMIT) -> None:
        self._limit = limit
        # Made at the first event: most steps have none, and a driver keeps 100,000 logs.
        self._events: deque[StepEvent] | None = None
        self._seen: set[tuple[str, str]] | None = None

    def add(self, event: StepEvent) -> bool:
        """Keep ``event``; return False if this pod's failure was already recorded."""
        key = (event.pod, event.reason)
        if self._seen is None or self._events is None:
            self._seen, self._events = set(), deque(maxlen=self._limit)
        elif key in self._seen:
            return False
        self._seen.add(key)
        self._events.append(event)
        return True

    def __iter__(self) -> Iterator[StepEvent]:
        return iter(self._events or ())

    def __len__(self) -> int:
        return len(self._events or ())


def pod_event(job: Obj, pod: Obj, *, deleted: bool = False) -> StepEvent | None:
    """Return the event for a pod that failed (or was deleted before it ended), else None."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded" or (phase != "Failed" and not deleted):
        return None
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    reason, message, _code = pod_failure(pod)
    matched = rule_action(job, pod)  # a deleted pod ends Failed with the conditions it has
    action = matched[1] if matched else "Count"
    when = _finished(status) or parse_time(meta.get("deletionTimestamp"))
    if phase != "Failed":  # deleted while pending or running: it ends Failed, and counts
        reason = "Disrupted" if disruption(pod) else "PodDeleted"
        message = f"pod {name} was deleted before it ended"
    if (job.get("spec") or {}).get("suspend"):
        # Stopped by its Job's suspension (Kueue evicting the step): the job controller
        # does not count such a pod failed (kueue-preempted.json), so no retry is spent.
        action, message = "Ignore", f"{message}, stopped as its Job was suspended"
    return StepEvent(time=when, pod=name, reason=reason, message=message, action=action)


def warning_event(event: Obj) -> StepEvent | None:
    """Return the step event for a Warning Event about a step's Job or pod (``pending``),
    else None: why it waits, once per object and reason."""
    reason = str(event.get("reason") or "")
    involved = event.get("involvedObject") or {}
    kind = involved.get("kind")
    if not (kind == "Job" and reason == "FailedCreate") and not (
        kind == "Pod" and reason in POD_REASONS
    ):
        return None
    message = str(event.get("message") or "").removeprefix("(combined from similar events): ")
    action = "Refused" if is_permanent(reason, message) else "Wait"
    return StepEvent(
        time=last_seen(event),
        pod=str(involved.get("name") or ""),
        reason=reason,
        message=message,
        action=action,
    )


def _finished(status: Obj) -> datetime | None:
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("finishedAt"):
            return parse_time(terminated["finishedAt"])
    return None
