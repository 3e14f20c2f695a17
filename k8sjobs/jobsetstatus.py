"""Judge a ``target: jobset`` step from its JobSet, child Jobs and pods (pure: no I/O).

The JobSet controller is the authority on the outcome: its conditions (``Completed``,
``Failed``, ``Suspended``, ``RestartingJobSet``), ``terminalState``, ``restarts`` and
``replicatedJobsStatus`` say where the set is. The child Jobs and their pods, judged one by
one with ``status.judge`` (the same reading as a ``target: job`` step's), supply what a
person can act on: the replicated Job that failed, its pod and the exit code. A restart is
not a failure: ``restart_event`` makes it an event in the step's history, and the step runs
on with the recreated Jobs (those of the latest ``restart-attempt`` are the ones judged).
Shapes as recorded from the real controller: shared/k8s-reference/jobset-*.json.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from .events import StepEvent
from .render.jobset import JOBSET_NAME_LABEL, LAUNCHER, WORKERS, replicated_job_of
from .render.manifests import ANNOTATION_STEP
from .state import StepResult, StepState
from .status import (
    job_failed,
    judge,
    parse_time,
    pending_timed_out,
    timeout_deadline,
    transition_time,
    true_condition,
)

__all__ = ["RESTART_LABEL", "current_jobs", "jobset_of", "judge_jobset", "restart_event"]

RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
# "... (first failed job: mpi-launcher-0)", as the controller ends its failure messages.
_FIRST_FAILED = re.compile(r"first failed job: ([-a-z0-9.]+)\)")

Obj = Mapping[str, Any]


def jobset_of(obj: Obj) -> str | None:
    """Return the name of the JobSet a child Job or pod belongs to (None: no JobSet's)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    name = labels.get(JOBSET_NAME_LABEL)
    return str(name) if name else None


def current_jobs(jobset: Obj, jobs: Iterable[Obj]) -> list[Obj]:
    """Return the child Jobs of the JobSet's latest restart attempt (older ones are going)."""
    attempt = str(int((jobset.get("status") or {}).get("restarts") or 0))
    found = [j for j in jobs if ((j.get("metadata") or {}).get("labels") or {}).get(RESTART_LABEL)]
    return [j for j in found if j["metadata"]["labels"][RESTART_LABEL] == attempt]


def judge_jobset(
    jobset: Obj,
    jobs: Iterable[Obj],
    pods: Mapping[str, Iterable[Obj]],
    *,
    now: datetime,
    pending_grace: float,
    gone: Mapping[str, Iterable[Obj]] | None = None,
    warnings: Iterable[Obj] = (),
    pending_timeout: float | None = None,
) -> StepResult:
    """Return the step's state as shown by ``jobset``, its child ``jobs`` and their ``pods``.

    ``pods`` and ``gone`` (deleted pods' last states) are keyed by child Job name; the
    other arguments are ``status.judge``'s, applied to the child Job that speaks for the
    step (the failed one, the launcher, else the workers).
    """
    gone = gone or {}
    children = {str(j["metadata"]["name"]): j for j in current_jobs(jobset, jobs)}

    def child_result(name: str) -> StepResult:
        return judge(
            children[name],
            list(pods.get(name, ())),
            now=now,
            pending_grace=pending_grace,
            gone=list(gone.get(name, ())),
            warnings=warnings,
            pending_timeout=pending_timeout,
        )

    meta = jobset.get("metadata") or {}
    status = jobset.get("status") or {}
    step = str((meta.get("annotations") or {}).get(ANNOTATION_STEP) or meta.get("name", ""))
    every_pod = tuple(str(p["metadata"]["name"]) for name in children for p in pods.get(name, ()))
    started = [parse_time((j.get("status") or {}).get("startTime")) for j in children.values()]
    base = StepResult(
        name=step, pods=every_pod, started_at=min((t for t in started if t), default=None)
    )
    restarts = int(status.get("restarts") or 0)
    failed = true_condition(status, "Failed")
    if failed is not None:
        return _failed(base, failed, children, child_result, pods, restarts)
    completed = true_condition(status, "Completed")
    if completed is not None:
        decides = _decider(children)
        usage = child_result(decides).usage if decides else None
        shown = f" after {_restarts(restarts)}" if restarts else ""
        return base.evolve(
            state=StepState.SUCCEEDED,
            reason="Completed",
            message=f"the JobSet completed{shown}",
            exit_code=0,
            finished_at=transition_time(completed),
            usage=usage,
        )
    suspended = true_condition(status, "Suspended")
    if suspended is not None or jobset.get("spec", {}).get("suspend"):
        said = str((suspended or {}).get("message") or "the JobSet is suspended")
        waiting = base.evolve(state=StepState.PENDING, reason="Suspended", message=said)
        ran = [p for table in (pods, gone) for found in table.values() for p in found]
        return pending_timed_out(waiting, jobset, ran, now=now, pending_timeout=pending_timeout)
    return _live(base, status, children, child_result)


def jobset_pending_deadline(jobset: Obj, pending_timeout: float | None) -> datetime | None:
    """Return when a suspended JobSet (queued: Kueue holds it) has waited past its bound.

    Nothing else happens to a JobSet whose queue never admits it, so only a timer set for
    this moment ends its wait; None when it is not suspended or has no bound.
    """
    status = jobset.get("status") or {}
    if true_condition(status, "Suspended") is None and not jobset.get("spec", {}).get("suspend"):
        return None
    return timeout_deadline(jobset, pending_timeout)


def restart_event(jobset: Obj) -> StepEvent | None:
    """Return the event of the JobSet's latest restart (None: it never restarted)."""
    status = jobset.get("status") or {}
    restarts = int(status.get("restarts") or 0)
    if not restarts:
        return None
    cond: Obj = next(
        (c for c in status.get("conditions") or () if c.get("type") == "RestartingJobSet"), {}
    )
    # Only the True condition says why it restarted ("first failed job: ..."); once False
    # its words are the present ("all jobs are ready", "jobset failed"), not the restart's.
    said = str(cond.get("message") or "") if cond.get("status") == "True" else ""
    name = str((jobset.get("metadata") or {}).get("name", ""))
    most = _max_restarts(jobset)
    of = f" of {most}" if most is not None else ""
    # Keyed by the JobSet and the attempt: the condition's words change as the set goes on.
    return StepEvent(
        time=transition_time(cond) if cond else None,
        pod=f"{name} (restart {restarts})",
        reason="Restarted",
        message=f"the JobSet restarted every Job (restart {restarts}{of})"
        + (f": {said}" if said else ""),
        action="Count",
    )


def _failed(
    base: StepResult,
    cond: Obj,
    children: Mapping[str, Obj],
    child_result: Any,
    pods: Mapping[str, Iterable[Obj]],
    restarts: int,
) -> StepResult:
    """Return FAILED naming the replicated Job, its pod and exit code where they are seen."""
    said = str(cond.get("message") or cond.get("reason") or "Failed")
    result = base.evolve(
        state=StepState.FAILED,
        reason=str(cond.get("reason") or "Failed"),
        message=said,
        finished_at=transition_time(cond),
    )
    first = _FIRST_FAILED.search(said)
    name = first[1] if first and first[1] in children else None
    if name is None:  # the message named none (or a Job gone): a failed child, if any
        name = next((n for n, j in children.items() if job_failed(j)), None)
    if name is None:
        return result
    judged: StepResult = child_result(name)
    rjob = replicated_job_of(children[name]) or name
    failed = [p for p in pods.get(name, ()) if (p.get("status") or {}).get("phase") == "Failed"]
    pod = str(failed[-1]["metadata"]["name"]) if failed else ""
    where = f"replicated Job {rjob} (pod {pod})" if pod else f"replicated Job {rjob}"
    shown = f", after {_restarts(restarts)}" if restarts else ""
    return result.evolve(
        reason=judged.reason if judged.state is StepState.FAILED else result.reason,
        message=f"{where}: {judged.message} ({said}{shown})",
        exit_code=judged.exit_code,
        usage=judged.usage,
    )


def _live(
    base: StepResult, status: Obj, children: Mapping[str, Obj], child_result: Any
) -> StepResult:
    """Return PENDING or RUNNING: the launcher's state once it exists, else the workers'."""
    restarting = true_condition(status, "RestartingJobSet")
    failed = next((n for n, j in children.items() if job_failed(j)), None)
    if failed is not None:
        # A child Job failed; the controller decides whether the set restarts or fails.
        said = child_result(failed).message
        return base.evolve(
            state=StepState.RUNNING,
            reason="JobFailed",
            message=f"Job {failed} failed ({said}); the JobSet's failurePolicy decides next",
        )
    decides = _decider(children)
    if decides is None:
        workers = next((n for n, j in children.items() if replicated_job_of(j) == WORKERS), None)
        if workers is None:
            why = "waiting for the JobSet controller to create its Jobs"
            if restarting is not None:
                why = f"restarting: {restarting.get('message') or ''}".rstrip(": ")
            return base.evolve(state=StepState.PENDING, reason="Created", message=why)
        judged: StepResult = child_result(workers)
        if judged.state is StepState.RUNNING:
            return base.evolve(
                state=StepState.RUNNING,
                reason="WaitingForWorkers",
                message="the launcher starts once every worker is Ready",
            )
        return base.evolve(state=judged.state, reason=judged.reason, message=judged.message)
    judged = child_result(decides)
    if judged.state.terminal and judged.state is not StepState.FAILED:
        # The launcher's Job ended; the JobSet's own condition follows.
        return base.evolve(state=StepState.RUNNING, reason="Finishing")
    if restarting is not None and judged.state is not StepState.FAILED:
        said = str(restarting.get("message") or "")
        return base.evolve(state=StepState.RUNNING, reason="Restarting", message=said)
    return judged.evolve(name=base.name, pods=base.pods, started_at=base.started_at)


def _decider(children: Mapping[str, Obj]) -> str | None:
    """Return the child Job whose success decides the step's: the launcher's, else (launch:
    none) the workers'."""
    by_rjob = {replicated_job_of(j): n for n, j in children.items()}
    if LAUNCHER in by_rjob:
        return by_rjob[LAUNCHER]
    return None if not by_rjob or _has_launcher_spec(children) else by_rjob.get(WORKERS)


def _has_launcher_spec(children: Mapping[str, Obj]) -> bool:
    """Return whether the set also has a launcher (created later: it waits for the workers)."""
    for job in children.values():
        labels = (job.get("metadata") or {}).get("labels") or {}
        if int(labels.get("jobset.sigs.k8s.io/global-replicas") or 1) > len(children):
            return True
    return False


def _restarts(count: int) -> str:
    return f"{count} restart{'s' if count != 1 else ''}"


def _max_restarts(jobset: Obj) -> int | None:
    value = ((jobset.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts")
    return int(value) if value is not None else None
