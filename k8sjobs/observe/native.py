"""Who a step is where it runs: its Job's uid, its pod, its node (pure, no I/O).

Observers name a step by what its backend knows of it, read from the objects the backend's
shared watch already holds (no request): the Job's uid on Kubernetes, the process id locally.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..render.manifests import MAIN_CONTAINER, PULL_CONTAINER, PUSH_CONTAINER

if TYPE_CHECKING:
    from ..handle import StepHandle

__all__ = ["Native", "NativeSource", "native"]


@dataclass(frozen=True)
class Native:
    """A step's identity where it runs ("" or None where unknown).

    ``job_uid``: the Job's metadata.uid. ``pod``/``node``: the latest pod and the node it was
    bound to. ``pid``: the main process id of a local step. ``restarts``: the latest pod's
    main container restartCount. ``input_pull``/``output_push``: (start, end) in nanoseconds
    since the epoch of the pod's handoff, from its containers' states (None where the pod has
    none or they have not ended): the pull init container's start to finish, and the main
    container's finish to the push container's.
    """

    job_uid: str = ""
    pod: str = ""
    node: str = ""
    pid: str = ""
    restarts: int | None = None
    input_pull: tuple[int, int] | None = None
    output_push: tuple[int, int] | None = None

    @property
    def id(self) -> str:
        """Return the native id a trace file shows: the Job uid, else the pid."""
        return self.job_uid or self.pid


@runtime_checkable
class NativeSource(Protocol):
    """A backend that can say who a step is without a request (both backends are)."""

    def native_of(self, handle: StepHandle) -> Native:
        """Return the step's identity as the backend last saw it."""


def native(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> Native:
    """Return the identity that ``job`` and its ``pods`` (any order) give."""
    uid = str(((job or {}).get("metadata") or {}).get("uid") or "")
    if not pods:
        return Native(job_uid=uid)
    latest = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))
    meta = latest.get("metadata") or {}
    status = latest.get("status") or {}
    containers = status.get("containerStatuses") or []
    pid = ""
    restarts = None
    if containers:
        first = containers[0]
        restarts = int(first.get("restartCount") or 0)
        local = str(first.get("containerID") or "").removeprefix("local://")
        pid = local if local.isdigit() else ""
    return Native(
        job_uid=uid,
        pod=str(meta.get("name") or ""),
        node=str((latest.get("spec") or {}).get("nodeName") or ""),
        pid=pid,
        restarts=restarts,
        input_pull=_ordered(_ended(status.get("initContainerStatuses"), PULL_CONTAINER)),
        output_push=_push(containers),
    )


def _ended(statuses: object, name: str) -> tuple[int, int] | None:
    """Return the start and finish (ns) of container ``name`` once terminated, else None."""
    for item in statuses if isinstance(statuses, list) else []:
        if isinstance(item, Mapping) and item.get("name") == name:
            done = (item.get("state") or {}).get("terminated") or {}
            start, end = _ns(done.get("startedAt")), _ns(done.get("finishedAt"))
            return None if start is None or end is None else (start, end)
    return None


def _push(containers: object) -> tuple[int, int] | None:
    """Return the main container's finish to the push container's (ns), once both ended."""
    main, push = _ended(containers, MAIN_CONTAINER), _ended(containers, PUSH_CONTAINER)
    if main is None or push is None:
        return None
    return _ordered((main[1], push[1]))


def _ordered(times: tuple[int, int] | None) -> tuple[int, int] | None:
    """Return ``times`` with the end never before the start (clocks read to the second)."""
    return None if times is None else (times[0], max(times))


def _ns(text: object) -> int | None:
    """Return an RFC 3339 time as nanoseconds since the epoch (None if it is not one)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None
