"""Why a step is not running: the Warning Events about its Job and pods (pure, no I/O).

A Job whose pods admission refuses gets no condition at all: the job controller writes a
``FailedCreate`` Warning Event on the Job at each attempt (1, 2, 4, 8, 16, ... s apart) and
nothing else changes (../shared/k8s-reference/job-failedcreate-*.json). A pod that cannot be
scheduled or whose volume cannot be mounted says so in Events on the pod (``FailedScheduling``,
``FailedMount``). The backend's one Event watch per namespace feeds them here; ``blocked``
returns the cause a person reads, and whether it can clear by itself:

- **permanent** (the step fails after ``pending_grace``): admission refuses the pod for a
  reason no waiting cures: a missing PriorityClass or RuntimeClass, a LimitRange maximum or
  minimum, a ServiceAccount that does not exist, a Pod Security violation;
- **transient** (the step stays PENDING, up to ``pending_timeout`` if one is set): a used-up
  ResourceQuota, no node with room, a missing PersistentVolumeClaim or ConfigMap, a volume
  that cannot be mounted yet, and any cause not known to be permanent.

Events are accepted as the API server sends them (core/v1) or as the watch slims them: only
``involvedObject``, ``reason``, ``message``, ``type`` and the times are read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["POD_REASONS", "Blocked", "blocked", "event_time", "is_permanent", "last_seen"]

Obj = Mapping[str, Any]

#: Warning reasons on a pod that say why it is not running yet.
POD_REASONS = frozenset(
    {
        "FailedScheduling",
        "FailedMount",
        "FailedAttachVolume",
        "FailedCreatePodSandBox",
        "FailedCreatePodContainer",
    }
)
# Admission refusals that no waiting cures, as the API server words them.
_PERMANENT = re.compile(
    "|".join(
        (
            r"no PriorityClass with name .* was found",
            r"RuntimeClass \S+ not found",
            r"(maximum|minimum) \S+ usage per (Container|Pod) is",
            r"\S+ max limit to request ratio per (Container|Pod) is",
            r"error looking up service account",
            r"serviceaccount \S+ not found",
            r"violates PodSecurity",
        )
    ),
    re.IGNORECASE,
)
_COMBINED = "(combined from similar events): "
_LAST = ("lastTimestamp", "lastObservedTime", "eventTime")
_FIRST = ("firstTimestamp", "eventTime")


@dataclass(frozen=True)
class Blocked:
    """Why a step's pods do not run: ``reason`` and ``message`` as the server gave them.

    ``since`` is when the cause was first seen (the earliest Event of it that still stands),
    ``permanent`` whether it cannot clear by itself.
    """

    reason: str
    message: str
    since: datetime | None
    permanent: bool


def is_permanent(reason: str, message: str) -> bool:
    """Return whether a Warning's cause cannot clear by itself (see the module's list)."""
    return reason == "FailedCreate" and _PERMANENT.search(message) is not None


def event_time(event: Obj, *, last: bool) -> datetime | None:
    """Return when an Event was first (``last=False``) or last seen (None when it says not).

    core/v1 Events carry ``firstTimestamp``/``lastTimestamp``; those written through
    events.k8s.io (kube-scheduler's) carry ``eventTime`` and, once repeated,
    ``series.lastObservedTime``.
    """
    series = event.get("series") or {}
    keys = (
        ("lastTimestamp", "lastObservedTime", "eventTime")
        if last
        else ("firstTimestamp", "eventTime")
    )
    for key in keys:
        value = series.get(key) if key == "lastObservedTime" else event.get(key)
        if isinstance(value, str) and value:
            return datetime.fromisoformat(value)
    meta = event.get("metadata") or {}
    stamp = meta.get("creationTimestamp")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) and stamp else None


def last_seen(event: Obj) -> datetime | None:
    """Return when an Event was last seen (``event_time(last=True)``)."""
    return event_time(event, last=True)


def blocked(
    job: Obj, live: Iterable[Obj], warnings: Iterable[Obj], history: Iterable[Obj] = ()
) -> Blocked | None:
    """Return why the step of ``job`` waits, from ``warnings`` about it and its pods.

    ``live`` are the Job's pods that have not ended, ``history`` the others (ended or
    deleted), for their times only: a ``FailedCreate`` older than the Job's newest pod is
    history (the pod was made after all), not the reason it waits now. Without a pod still
    Pending, the Job's ``FailedCreate`` is the cause; with one, the newest of the pods' own
    warnings (``POD_REASONS``). None when nothing is known.
    """
    job_name = str((job.get("metadata") or {}).get("name") or "")
    live = list(live)
    waiting = {
        str((p.get("metadata") or {}).get("name") or "")
        for p in live
        if (p.get("status") or {}).get("phase") in (None, "Pending")
    }
    times = [_created(p) for p in [*live, *history]]
    newest_pod = max((t for t in times if t is not None), default=None)
    on_job: list[Obj] = []
    on_pods: list[Obj] = []
    for event in warnings:
        if event.get("type") not in (None, "Warning"):
            continue
        involved = event.get("involvedObject") or {}
        name = str(involved.get("name") or "")
        kind = involved.get("kind")
        if kind == "Job" and name == job_name and event.get("reason") == "FailedCreate":
            seen = last_seen(event)
            if newest_pod is None or seen is None or seen >= newest_pod:
                on_job.append(event)
        elif kind == "Pod" and name in waiting and event.get("reason") in POD_REASONS:
            on_pods.append(event)
    if not live and on_job:
        return _cause(on_job)
    if on_pods:
        return _cause(on_pods)
    return None


def _cause(events: list[Obj]) -> Blocked:
    """Return the cause the newest of ``events`` gives, seen since the first of its kind."""
    newest = max(events, key=lambda e: _sortable(last_seen(e)))
    reason = str(newest.get("reason") or "")
    message = _text(newest)
    permanent = is_permanent(reason, message)
    same = [
        e
        for e in events
        if e.get("reason") == reason and is_permanent(reason, _text(e)) == permanent
    ]
    starts = [t for t in (event_time(e, last=False) for e in same) if t is not None]
    return Blocked(reason, message, min(starts) if starts else None, permanent)


def _text(event: Obj) -> str:
    return str(event.get("message") or event.get("note") or "").removeprefix(_COMBINED).strip()


def _created(pod: Obj) -> datetime | None:
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) and stamp else None


def _sortable(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else float("-inf")
