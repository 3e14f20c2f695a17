"""Who a step is where it runs: its Job's uid, its pod, its node (pure, no I/O).

Observers name a step by what its backend knows of it, read from the objects the backend's
shared watch already holds (no request): the Job's uid on Kubernetes, the process id locally.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..handle import StepHandle

__all__ = ["Native", "NativeSource", "native"]


@dataclass(frozen=True)
class Native:
    """A step's identity where it runs ("" or None where unknown).

    ``job_uid``: the Job's metadata.uid. ``pod``/``node``: the latest pod and the node it was
    bound to. ``pid``: the main process id of a local step. ``restarts``: the latest pod's
    main container restartCount.
    """

    job_uid: str = ""
    pod: str = ""
    node: str = ""
    pid: str = ""
    restarts: int | None = None

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
    )
