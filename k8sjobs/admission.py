"""Where Kueue has a queued step: admitted, waiting and why, or evicted (pure, no I/O).

Kueue makes one Workload (``kueue.x-k8s.io/v1beta2``) per queued Job, owned by it (an
ownerReference with the Job's uid, and the ``kueue.x-k8s.io/job-uid`` label), and says in
the Workload's conditions what a suspended Job alone cannot: why it waits
(``QuotaReserved`` False ``WaitingForQuota`` "couldn't assign flavors to pod set main:
insufficient unused quota for cpu in flavor default, 1 more needed", ``Misconfigured``
"LocalQueue no-such-queue doesn't exist", ``WaitingForPreemptedWorkloads``), and that it was
evicted (``Evicted`` True ``Preempted``, ``PodsReadyTimeout``, ``InactiveWorkload``, ...),
after which it is requeued and waits again with the quota reason
(../shared/k8s-reference/kueue-*.json). ``admission`` reads one Workload; ``judge`` lays
that over the step's result as the Job's status gave it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .events import StepEvent
from .state import StepResult, StepState

__all__ = [
    "JOB_UID_LABEL",
    "Admission",
    "Stage",
    "admission",
    "eviction_event",
    "job_uid",
    "judge",
]

Obj = Mapping[str, Any]

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Kueue writes PendingEvaluation right after requeueing an evicted Workload, before the
# scheduler has looked at it again: still the eviction's news, not a new wait.
_NOT_YET_EVALUATED = "PendingEvaluation"
# How status.judge ends a PendingTimeout's message, before what the step waited for.
_WAITED = "; it waited: "


class Stage(enum.Enum):
    """What Kueue has done with a Workload."""

    WAITING = "waiting"  # no quota reserved: queued, with Kueue's reason
    ADMITTED = "admitted"  # quota reserved and admitted: the Job may run
    EVICTED = "evicted"  # evicted and not yet waiting again: its pods are being stopped


@dataclass(frozen=True)
class Admission:
    """One Workload's word on its step: ``stage``, Kueue's ``reason`` and ``message``.

    ``evictions`` is the sum of ``status.schedulingStats.evictions`` counts: it grows by one
    with each eviction, so it orders the rounds of a preempted step.
    """

    stage: Stage
    reason: str
    message: str
    evictions: int
    # The Evicted condition's words while it is True: they outlast the EVICTED stage
    # (Kueue keeps them through the requeued wait), so a watch that missed it still knows.
    evicted_reason: str = ""
    evicted_message: str = ""


def job_uid(workload: Obj) -> str:
    """Return the uid of the Job (or JobSet) that owns ``workload``, "" if none is named.

    The controller ownerReference first, as Kueue sets it; the job-uid label otherwise.
    """
    meta = workload.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "")


def admission(workload: Obj) -> Admission:
    """Return what ``workload``'s conditions say of its step."""
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or () if c.get("type")}
    evictions = sum(
        int(e.get("count") or 0)
        for e in (status.get("schedulingStats") or {}).get("evictions") or ()
    )
    reserved = conditions.get("QuotaReserved") or {}
    evicted = conditions.get("Evicted") or {}
    found = _admission(workload, conditions, reserved, evicted, evictions)
    if not _true(evicted):
        return found
    return replace(
        found, evicted_reason=_text(evicted, "reason"), evicted_message=_text(evicted, "message")
    )


def _admission(
    workload: Obj, conditions: Mapping[str, Obj], reserved: Obj, evicted: Obj, evictions: int
) -> Admission:
    if _true(evicted) and (_true(reserved) or reserved.get("reason") == _NOT_YET_EVALUATED):
        return Admission(
            Stage.EVICTED, _text(evicted, "reason"), _text(evicted, "message"), evictions
        )
    if (workload.get("spec") or {}).get("active") is False:
        # Deactivated (by hand, or by Kueue past its requeue limit): Kueue admits it no more
        # until spec.active is true again, whatever its quota conditions still say.
        why = f" ({evicted_words})" if (evicted_words := _text(evicted, "message")) else ""
        message = (
            f"its Workload is deactivated (spec.active: false){why}; Kueue admits it only once "
            "it is reactivated"
        )
        return Admission(Stage.WAITING, "Deactivated", message, evictions)
    if _true(reserved) and _true(conditions.get("Admitted") or {}):
        admitted = conditions["Admitted"]
        return Admission(
            Stage.ADMITTED, _text(admitted, "reason"), _text(admitted, "message"), evictions
        )
    if reserved and not _true(reserved):
        return Admission(
            Stage.WAITING, _text(reserved, "reason"), _text(reserved, "message"), evictions
        )
    refused = conditions.get("Admitted") or {}
    if refused and not _true(refused):
        return Admission(
            Stage.WAITING, _text(refused, "reason"), _text(refused, "message"), evictions
        )
    queue = (workload.get("spec") or {}).get("queueName") or ""
    # The Job's own reason (docs/states.md), in words that say who has yet to act.
    message = f'suspended in queue "{queue}", not yet evaluated by Kueue'
    return Admission(Stage.WAITING, "Suspended", message, evictions)


def judge(result: StepResult, found: Admission | None) -> StepResult:
    """Return ``result`` (the step as its Job's status says) with Kueue's word laid over it.

    A terminal result stands: the Job ended, whatever the Workload says. An evicted
    Workload makes the step PREEMPTED with Kueue's message, even while its Job still counts
    pods active (they are being stopped, exit 143: not the step's failure); a waiting one
    keeps the step PENDING with Kueue's reason in place of "Suspended". An admitted one
    leaves the Job's word: it runs, or waits on what its pods say (image, node, volume).
    ``evictions`` is carried to every result, the ended one too (the run's record); a step
    failed by its ``pending_timeout`` while Kueue held it says what Kueue said.
    """
    if found is None:
        return result
    result = result.evolve(evictions=max(result.evictions, found.evictions))
    if result.reason == "PendingTimeout" and found.stage is Stage.WAITING:
        # The Job only knew it was suspended; Kueue knows why (a Misconfigured queue, say).
        bound = result.message.partition(_WAITED)[0]
        return result.evolve(message=f"{bound}{_WAITED}{found.reason}: {found.message}")
    if result.state.terminal:
        return result
    if found.stage is Stage.EVICTED:
        return result.evolve(state=StepState.PREEMPTED, reason=found.reason, message=found.message)
    if found.stage is Stage.WAITING:
        return result.evolve(state=StepState.PENDING, reason=found.reason, message=found.message)
    if result.state is StepState.PENDING and result.reason == "Suspended":
        # Admitted, and Kueue has yet to unsuspend the Job: its word, not the Job's stale one.
        return result.evolve(reason=found.reason, message=found.message)
    return result


def eviction_event(found: Admission) -> StepEvent | None:
    """Return the history entry of ``found``'s latest eviction, Kueue's words; None if none.

    One per eviction, the same whichever of the Workload's states after it is seen (the
    eviction itself, or only the requeued wait a relist or a late watch shows). It costs
    the step nothing ("Ignore"): Kueue requeues it, and its pods' exit 143 spends no retry
    (a Job's pods deleted by suspension are not counted failed).
    """
    if not found.evictions or not found.evicted_reason:
        return None
    return StepEvent(
        time=None,
        pod=f"eviction {found.evictions}",
        reason=found.evicted_reason,
        message=(
            f"Kueue evicted the step ({found.evicted_reason}): {found.evicted_message}; requeued"
        ),
        action="Ignore",
    )


def _true(condition: Obj) -> bool:
    return condition.get("status") == "True"


def _text(condition: Obj, key: str) -> str:
    return str(condition.get(key) or "")
