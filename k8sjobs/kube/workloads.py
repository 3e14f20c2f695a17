"""Kueue's Workloads of one namespace: one shared watch, started only for queued steps.

A cluster that runs Kueue says why a queued Job waits in the Job's Workload, not in the Job
(``k8sjobs.admission``). Once per backend, and only when a step with a queue is sent or
found, discovery asks whether ``kueue.x-k8s.io/v1beta2`` is served (one GET); where it is,
each namespace with queued steps gets one Workload informer (list, then watch, with the
resume, bookmark, 410-relist and idle bounds of ``k8sjobs.kube.watch``). Each change
re-judges only the step whose Job owns the Workload: no read per step. Where Kueue is not
served, or Workloads may not be listed (403), the steps are followed as before, from their
Jobs alone, and a WARNING says once what is lost.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..admission import JOB_UID_LABEL, Admission, admission, job_uid
from ..errors import ApiError, NotFound
from .client import WORKLOADS, KubeClient
from .watch import Change, Informer

__all__ = ["KueueApi", "WorkloadWatch", "kueue_served", "slim_workload"]

log = logging.getLogger("k8sjobs.kube")

GROUP_PATH = "/apis/kueue.x-k8s.io"
VERSION = "v1beta2"
_CONDITION_FIELDS = ("type", "status", "reason", "message")


class KueueApi(enum.Enum):
    """What discovery said of Kueue's API group."""

    SERVED = "served"  # v1beta2: Workloads are watched
    OTHER = "other"  # served without v1beta2 (an older Kueue), or not discoverable
    ABSENT = "absent"  # no kueue.x-k8s.io at all: nothing will ever admit a queued Job


async def kueue_served(client: KubeClient) -> KueueApi:
    """Return what the cluster serves of Kueue's API (one discovery GET)."""
    try:
        group = await client.request(
            "GET", GROUP_PATH, what="discover kueue.x-k8s.io", kind=WORKLOADS, verb="get"
        )
    except NotFound:
        return KueueApi.ABSENT
    except ApiError as exc:
        log.warning("Kueue's API could not be discovered (%s): queued steps say less", exc)
        return KueueApi.OTHER
    versions = group.get("versions") or () if isinstance(group, dict) else ()
    served = any(v.get("version") == VERSION for v in versions if isinstance(v, dict))
    return KueueApi.SERVED if served else KueueApi.OTHER


def slim_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return the parts of a Workload ``k8sjobs.admission`` reads: its owner, queue,
    conditions and eviction counts (no pod sets, no managedFields)."""
    meta = obj.get("metadata") or {}
    owners = [
        {"uid": o.get("uid"), "controller": o.get("controller")}
        for o in meta.get("ownerReferences") or ()
        if o.get("controller")
    ]
    labels = meta.get("labels") or {}
    kept_meta: dict[str, Any] = {
        k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta
    }
    kept_meta["ownerReferences"] = owners
    kept_meta["labels"] = {k: labels[k] for k in (JOB_UID_LABEL,) if k in labels}
    status = obj.get("status") or {}
    conditions = [
        {k: c[k] for k in _CONDITION_FIELDS if k in c} for c in status.get("conditions") or ()
    ]
    kept_status: dict[str, Any] = {"conditions": conditions}
    evictions = (status.get("schedulingStats") or {}).get("evictions")
    if evictions:
        kept_status["schedulingStats"] = {"evictions": evictions}
    queue = (obj.get("spec") or {}).get("queueName")
    return {
        "metadata": kept_meta,
        "spec": {"queueName": queue} if queue else {},
        "status": kept_status,
    }


class WorkloadWatch:
    """The Workloads of one namespace, judged once per change, by the uid of their Job.

    ``on_change(job_uid)`` is called for each Workload that changed (the study watches
    re-judge that one step); ``of(job_uid)`` is what Kueue says of that Job's step.
    """

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        on_change: Callable[[str], None],
        policy: Mapping[str, Any],
    ) -> None:
        self.namespace = namespace
        self._on_change = on_change
        self._by_job: dict[str, Admission] = {}
        self._job_of: dict[str, str] = {}  # Workload name -> its Job's uid
        self.informer = Informer(
            client,
            WORKLOADS,
            namespace,
            "",
            self._changed,
            slimmer=slim_workload,
            **policy,
        )
        self._task = asyncio.create_task(self._run(), name=f"k8sjobs-watch-workloads-{namespace}")

    def of(self, uid: str) -> Admission | None:
        """Return Kueue's word on the step whose Job has ``uid``, None if it has no Workload."""
        return self._by_job.get(uid)

    async def aclose(self) -> None:
        """Stop the informer."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        await self.informer.run_or_do_without(
            "Kueue's Workloads",
            "why a queued step waits, and its preemption, will not be shown; grant list and "
            "watch on workloads.kueue.x-k8s.io",
        )

    def _changed(self, change: Change) -> None:
        if change.obj is None:
            uid = self._job_of.pop(change.name, "")
            self._by_job.pop(uid, None)
        else:
            uid = job_uid(change.obj)
            if not uid:
                return
            self._job_of[change.name] = uid
            self._by_job[uid] = admission(change.obj)
        if uid:
            self._on_change(uid)
