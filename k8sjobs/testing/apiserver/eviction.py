"""Evicting a pod, as the policy/v1 Eviction subresource does (kubectl drain, autoscalers).

The real registry first marks the pod with a `DisruptionTarget` condition (reason
EvictionByEvictionAPI) so that a Job's podFailurePolicy can tell an eviction from a crash,
then deletes it gracefully; the kubelet stops it and the pod ends Failed. The fake has no
PodDisruptionBudgets, so an eviction is never refused with 429.
"""

from __future__ import annotations

from typing import Any

from . import errors as _errors
from .store import Obj, Store, copy_obj, now_rfc3339

DISRUPTION_TARGET = "DisruptionTarget"


def evict(store: Store, namespace: str, name: str, grace_seconds: int | None = None) -> Obj:
    """Mark the pod as a disruption target and delete it gracefully; return the pod.

    A pod already being deleted is left as it is (the real server answers success too).
    Raises the 404 NotFound ApiError when there is no such pod.
    """
    pod = store.require("pods", namespace, name)
    if pod["metadata"].get("deletionTimestamp"):
        return pod
    updated = copy_obj(pod)
    status = updated.setdefault("status", {})
    status["conditions"] = _with_condition(status.get("conditions") or [])
    store.update("pods", namespace, updated, subresource="status", validate=False)
    deleted, _ = store.delete("pods", namespace, name, grace_seconds=grace_seconds)
    return deleted


def eviction_grace(body: Any, name: str) -> int | None:
    """Return the grace period an Eviction body asks for, checking it names the URL's pod."""
    if not isinstance(body, dict):
        raise _errors.bad_request("the body must be a policy/v1 Eviction object")
    given = (body.get("metadata") or {}).get("name")
    if given and given != name:
        raise _errors.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    grace = options.get("gracePeriodSeconds")
    return None if grace is None else int(grace)


def success_status() -> dict[str, Any]:
    """Return the body of an accepted eviction (HTTP 201), as the real server writes it."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _with_condition(conditions: list[Obj]) -> list[Obj]:
    condition = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    for i, existing in enumerate(conditions):
        if existing.get("type") == DISRUPTION_TARGET:
            if existing.get("status") == "True":
                condition["lastTransitionTime"] = existing.get("lastTransitionTime")
            return [*conditions[:i], condition, *conditions[i + 1 :]]
    return [*conditions, condition]
