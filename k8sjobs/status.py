"""Judge a step's state from its Job and pods (pure: no I/O, the clock is an argument).

The watcher feeds this function whatever it last saw of a Job and of the Job's pods; it
returns the ``StepResult`` a user reads. The Job's conditions decide the outcome (the job
controller is the authority on success and failure); the pods supply the reason a person
can act on: the exit code of the ``step`` container, OOMKilled, Evicted, an image that
cannot be pulled, a failed output push. CANCELLED and LOST are not decided here: only the
backend knows whether a vanished Job was deleted by this driver or by someone else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .pending import blocked
from .render.manifests import (
    ANNOTATION_PENDING_TIMEOUT,
    ANNOTATION_STEP,
    ENTRYPOINT_DIR,
    MAIN_CONTAINER,
    PULL_CONTAINER,
    PUSH_CONTAINER,
)
from .render.minicluster import HANDOFF_CONTAINER
from .render.multinode import is_launched
from .state import StepResult, StepState
from .steps.failure import describe_rule, disruption, failed_rule
from .usage import Usage, parse_usage, split_message

__all__ = [
    "IMAGE_ERRORS",
    "grace_deadline",
    "judge",
    "parse_time",
    "pending_deadline",
    "pod_failure",
    "unseen_pods",
]

#: Waiting reasons that mean the container cannot start as written; after the grace time
#: the step is failed rather than left PENDING forever (ErrImagePull may be a registry blip).
IMAGE_ERRORS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)

_PULL_ERRORS = frozenset({"ImagePullBackOff", "ErrImagePull"})
_HANDOFF = frozenset({PULL_CONTAINER, PUSH_CONTAINER, HANDOFF_CONTAINER})
# A cluster without access to the published handoff image (air-gapped, or a registry
# allow-list) fails every step with artifacts: say how to fix that, not only what failed.
_MIRROR_HINT = (
    "; the cluster cannot pull the handoff image: push it to a registry your cluster can "
    "pull from (k8sjobs image build --push REGISTRY/handoff:TAG) and give that image "
    "(Session(handoff_image=...) or --handoff-image)"
)
#: Seconds after its Job's creation within which a pod's FailedMount of the step's own
#: ConfigMap is its ordinary start: k8sjobs creates the ConfigMap just after the Job, by
#: design (issue 34 item 15). Past it, a ConfigMap that never came is news.
CONFIGMAP_WINDOW = 10.0
_FAILED_CONDITIONS = ("Failed", "FailureTarget")
_COMPLETE_CONDITIONS = ("Complete", "SuccessCriteriaMet")
# Job-level reasons that already say what decided the failure; the exit code goes along.
_POLICY_REASONS = frozenset({"DeadlineExceeded", "PodFailurePolicy", "MaxFailedIndexesExceeded"})
# Failures of a launched step that the whole step is to blame for, not one index.
_WHOLE_JOB_REASONS = frozenset({"DeadlineExceeded"})
# Termination messages the multi-node role wrapper writes ("Reason: sentence").
_WRAPPER_REASONS = ("WorkersUnreachable", "WorkerSetupFailed", "InputPullFailed")
_INDEX = "batch.kubernetes.io/job-completion-index"

Obj = Mapping[str, Any]


def parse_time(value: object) -> datetime | None:
    """Return an RFC 3339 API timestamp as an aware datetime (None when absent)."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value)


def judge(
    job: Obj,
    pods: Iterable[Obj],
    *,
    now: datetime,
    pending_grace: float,
    gone: Iterable[Obj] = (),
    warnings: Iterable[Obj] = (),
    pending_timeout: float | None = None,
) -> StepResult:
    """Return the step's state, reason and facts as shown by ``job`` and its ``pods``.

    ``pending_grace`` is how many seconds a pod may sit in an image or configuration
    error (ImagePullBackOff, CreateContainerConfigError, ...), or the Job's pods be refused
    by admission for a cause that cannot clear (``pending.is_permanent``), before the step
    is FAILED. ``gone`` are the last known states of the Job's pods that were deleted (an
    evicted or deleted pod vanishes before its Job fails): they explain a failure, nothing
    else. ``warnings`` are the Warning Events about the Job and its pods (``k8sjobs.pending``):
    why a step waits. ``pending_timeout`` (seconds from the Job's creation; the Job's
    ``k8sjobs.io/pending-timeout`` annotation wins) fails a step that never started.
    """
    ordered = sorted(pods, key=_pod_order)
    gone = list(gone)
    base = _base(job, ordered)
    status = job.get("status") or {}
    failed = true_condition(status, *_FAILED_CONDITIONS)
    if failed is not None:
        every = sorted([*gone, *ordered], key=_pod_order)
        result = _failed(base, job, failed, every).evolve(usage=_usage(every))
        if result.reason == "DeadlineExceeded" and not _ever_ran(every):
            return _never_ran(result, job, ordered, gone, warnings)
        return result
    complete = true_condition(status, *_COMPLETE_CONDITIONS)
    if complete is not None:
        finished = parse_time(status.get("completionTime")) or transition_time(complete)
        message = ""
        if complete.get("reason") == "SuccessPolicy":
            # SuccessCriteriaMet comes first: the step is done, the workers are being stopped.
            message = "the launcher (index 0) succeeded; the workers are stopped"
        return base.evolve(
            state=StepState.SUCCEEDED,
            reason="Completed",
            message=message,
            exit_code=0,
            finished_at=finished,
            usage=_usage(ordered),
        )
    result = _live(base, job, ordered, now=now, grace=pending_grace, warnings=warnings, gone=gone)
    if int(status.get("failed") or 0):
        return result
    return pending_timed_out(
        result, job, [*gone, *ordered], now=now, pending_timeout=pending_timeout
    )


def pending_timed_out(
    result: StepResult,
    top: Obj,
    pods: Iterable[Obj],
    *,
    now: datetime,
    pending_timeout: float | None,
) -> StepResult:
    """Return ``result`` failed with PendingTimeout if it still waits past the step's bound.

    ``top`` is the step's Job or JobSet (its own ``pending_timeout`` annotation wins over the
    default; its present wait began at its creation or latest suspension); a step any of
    whose ``pods`` ever ran is not waiting to start. Else ``result`` as it is.
    """
    if result.state is not StepState.PENDING:
        return result
    due = timeout_deadline(top, pending_timeout)
    if due is None or now < due or _ever_ran(pods):
        return result
    limit = _pending_timeout(top, pending_timeout)
    why = f"{result.reason}: {result.message}" if result.message else result.reason
    return result.evolve(
        state=StepState.FAILED,
        reason="PendingTimeout",
        message=f"not started within pending_timeout ({limit:g} s); it waited: {why}",
        finished_at=now,
    )


def timeout_deadline(top: Obj, pending_timeout: float | None) -> datetime | None:
    """Return when the present wait of ``top`` (a Job or JobSet) outlasts pending_timeout."""
    limit = _pending_timeout(top, pending_timeout)
    since = _waiting_since(top)
    if limit is None or since is None:
        return None
    return since + timedelta(seconds=limit)


def pending_deadline(
    job: Obj,
    pods: Iterable[Obj],
    *,
    pending_grace: float,
    gone: Iterable[Obj] = (),
    warnings: Iterable[Obj] = (),
    pending_timeout: float | None = None,
) -> datetime | None:
    """Return the next moment the verdict of a waiting step changes by time alone.

    The earliest of: an image or configuration error outlasting ``pending_grace``, a
    permanent admission refusal outlasting it, the step's ``pending_timeout``. The backend
    re-judges then (a timer, not a request). None when no such moment is due.
    """
    pods = list(pods)
    moments = [grace_deadline(pods, pending_grace)]
    live = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending", "Running")]
    cause = blocked(job, live, warnings, [*pods, *gone])
    if cause is not None and cause.permanent and cause.since is not None:
        moments.append(cause.since + timedelta(seconds=pending_grace))
    moments.append(timeout_deadline(job, pending_timeout))
    known = [m for m in moments if m is not None]
    return min(known) if known else None


def _waiting_since(job: Obj) -> datetime | None:
    """Return when ``job``'s present wait began: its creation, or its latest suspension.

    Kueue suspends an evicted Job again and requeues it: that round's wait is bounded
    anew, as a driver restarted after the round's pods were deleted cannot tell it ran.
    """
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Suspended" and condition.get("status") == "True":
            since = parse_time(condition.get("lastTransitionTime"))
            if since is not None and (created is None or since > created):
                created = since
    return created


def _pending_timeout(job: Obj, default: float | None) -> float | None:
    """Return the step's own pending_timeout (its Job's annotation), else ``default``."""
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PENDING_TIMEOUT)
    try:
        return float(text) if text else default
    except ValueError:
        return default


def _ever_ran(pods: Iterable[Obj]) -> bool:
    """Return whether any of ``pods`` ever ran a container (started, ended, or is running)."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Running", "Succeeded"):
            return True
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or ():
                state = container.get("state") or {}
                if state.get("running") or (state.get("terminated") or {}).get("startedAt"):
                    return True
    return False


def _never_ran(
    result: StepResult, job: Obj, pods: list[Obj], gone: list[Obj], warnings: Iterable[Obj]
) -> StepResult:
    """Return a walltime failure that says the step never ran, and what it waited for."""
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    walltime = f" ({deadline} s)" if deadline else ""
    waited = _pending(result.evolve(state=StepState.PENDING), job, [*pods, *gone], warnings, [])
    why = f"{waited.reason}: {waited.message}" if waited.message else waited.reason
    return result.evolve(
        exit_code=None,
        message=f"the walltime{walltime} ran out before the step ever ran; it waited: {why}",
    )


def grace_deadline(pods: Iterable[Obj], pending_grace: float) -> datetime | None:
    """Return when the earliest image or configuration error outlasts the grace time.

    The backend re-judges the step at that moment, so a stuck pod fails on time without
    any request and without waiting for a further watch event.
    """
    starts = [_since(pod) for pod in pods if _waiting_error(pod) is not None]
    known = [t for t in starts if t is not None]
    return min(known) + timedelta(seconds=pending_grace) if known else None


def unseen_pods(job: Obj, pods: Iterable[Obj], gone: Iterable[Obj] = ()) -> int:
    """Return how many pods a terminal ``job`` counts whose end the pod cache has not seen.

    The Job watch and the Pod watch are separate streams with no order between them: the
    server ends a pod before the Job counts it, but the Job's event may arrive first. The
    backend holds a verdict while this is above 0 (a Job that is not terminal: always 0).
    Counted: ``status.failed``/``succeeded`` and the uids in ``uncountedTerminatedPods``
    (a FailureTarget comes before the count). A deleted pod (``gone``) has ended.
    """
    status = job.get("status") or {}
    if true_condition(status, *_FAILED_CONDITIONS, *_COMPLETE_CONDITIONS) is None:
        return 0
    ended = [p for p in pods if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded")]
    ended += list(gone)
    succeeded = sum((p.get("status") or {}).get("phase") == "Succeeded" for p in ended)
    uids = {(p.get("metadata") or {}).get("uid") for p in ended}
    uncounted = status.get("uncountedTerminatedPods") or {}
    waiting = [u for k in ("failed", "succeeded") for u in uncounted.get(k) or () if u not in uids]
    short_failed = int(status.get("failed") or 0) - (len(ended) - succeeded)
    short_succeeded = int(status.get("succeeded") or 0) - succeeded
    return int(max(len(waiting), max(short_failed, 0) + max(short_succeeded, 0)))


def _base(job: Obj, pods: list[Obj]) -> StepResult:
    meta = job.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = str(annotations.get(ANNOTATION_STEP) or meta.get("name", ""))
    status = job.get("status") or {}
    names = tuple(str((p.get("metadata") or {}).get("name", "")) for p in pods)
    return StepResult(name=name, started_at=parse_time(status.get("startTime")), pods=names)


def _pod_order(pod: Obj) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp", "")), str(meta.get("name", "")))


def true_condition(status: Obj, *types: str) -> Obj | None:
    """Return the first condition of ``types`` (in that order of preference) that is True."""
    for wanted in types:
        for cond in status.get("conditions") or ():
            if cond.get("type") == wanted and cond.get("status") == "True":
                return cond  # type: ignore[no-any-return]
    return None


def transition_time(cond: Obj) -> datetime | None:
    """Return when ``cond`` last changed, None if the server did not say."""
    return parse_time(cond.get("lastTransitionTime"))


def job_failed(job: Obj) -> bool:
    """Return whether the job controller has judged ``job`` failed (or is about to)."""
    return true_condition(job.get("status") or {}, *_FAILED_CONDITIONS) is not None


def _container(pod: Obj, name: str, *, init: bool = False) -> Obj | None:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (pod.get("status") or {}).get(key) or ():
        if status.get("name") == name:
            return status  # type: ignore[no-any-return]
    return None


def _main(pod: Obj) -> Obj | None:
    """Return the status of the pod's main container (``step``, else the first non-handoff)."""
    found = _container(pod, MAIN_CONTAINER)
    if found is not None:
        return found
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if not str(status.get("name", "")).startswith("k8sjobs-"):
            return status  # type: ignore[no-any-return]
    return None


def _usage(pods: list[Obj]) -> Usage | None:
    """Return what the last ended run of the main container used (None: none has ended).

    For a multi-node step the launcher's (index 0) counts: it runs the script.
    """
    ended = [pod for pod in pods if _terminated(_main(pod)) is not None]
    launchers = [pod for pod in ended if _pod_index(pod) <= 0]
    chosen = (launchers or ended)[-1:]
    if not chosen:
        return None
    said = str((_terminated(_main(chosen[0])) or {}).get("message") or "")
    return parse_usage(split_message(said)[1])


def _terminated(container: Obj | None) -> Obj | None:
    if container is None:
        return None
    found: Obj | None = (container.get("state") or {}).get("terminated")
    return found


def _failed(base: StepResult, job: Obj, cond: Obj, pods: list[Obj]) -> StepResult:
    """Return a FAILED result whose reason names the most specific cause found."""
    job_reason = str(cond.get("reason") or "Failed")
    result = base.evolve(
        state=StepState.FAILED,
        reason=job_reason,
        message=str(cond.get("message") or job_reason),
        finished_at=transition_time(cond),
    )
    failed_pods = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
    if not failed_pods:  # the pod is gone unseen: the controller's message may name its code
        code = _rule_code(result.message, None) if job_reason == "PodFailurePolicy" else None
        return result.evolve(exit_code=code)
    rule = failed_rule(job, result.message) if job_reason == "PodFailurePolicy" else None
    if rule is not None:  # name the step setting that decided it, then the controller's words
        code = _rule_code(result.message, pod_failure(failed_pods[-1])[2])
        text = f"{describe_rule(rule, code)} ({result.message})"
        return result.evolve(exit_code=code, message=text)
    if (is_launched(job) or _flux_operated(job)) and job_reason not in _WHOLE_JOB_REASONS:
        return _launch_failed(result, failed_pods)
    reason, message, code = pod_failure(failed_pods[-1])
    if job_reason in _POLICY_REASONS:
        return result.evolve(exit_code=code, message=f"{result.message}; last pod: {message}")
    if job_reason == "BackoffLimitExceeded":  # the usual end: say how often it was tried
        tries = len(failed_pods)
        message += f", after {tries} attempts" if tries > 1 else ""
    else:
        message += f" ({job_reason})"
    return result.evolve(reason=reason, message=message, exit_code=code)


def _flux_operated(job: Obj) -> bool:
    """Return whether ``job`` is a Flux Operator MiniCluster's: index 0 runs the command."""
    refs = (job.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("kind") == "MiniCluster" for ref in refs)


def _launch_failed(result: StepResult, failed_pods: list[Obj]) -> StepResult:
    """Return why a launched step failed: its launcher's exit, or the worker that died.

    Any failed index fails the Job at once, and the job controller then stops the rest, so
    several pods end Failed; the one to blame ended first, but a worker that died always
    comes before the launcher's own exit (which it caused). On a tie (one second apart at
    most) a worker that died by itself is blamed, then a launcher that exited by itself, a
    pod that was deleted last: a launcher's MPI gives up within that second when a node is
    lost (MPICH's Hydra does), while a worker's sshd never ends because the launcher did.
    """
    culprit = min(failed_pods, key=_blame_order)
    if _pod_index(culprit) <= 0 and not _stopped(culprit):
        # A launcher's MPI exits when it loses a node, but a worker's sshd never ends
        # because the launcher did: a worker that died is the cause, whenever it was seen.
        died = [p for p in failed_pods if _pod_index(p) > 0 and not _stopped(p)]
        culprit = min(died, key=_blame_order, default=culprit)
    index = _pod_index(culprit)
    reason, message, code = pod_failure(culprit)
    # Workers the controller stopped after the failure are not news; ones that died are.
    died = [p for p in failed_pods if not _stopped(p)]
    others = sorted({_pod_index(p) for p in died} - {index, 0, -1})
    also = f" (worker index {', '.join(map(str, others))} also failed)" if others else ""
    if index <= 0:
        return result.evolve(reason=reason, message=message + also, exit_code=code)
    name = (culprit.get("metadata") or {}).get("name", "")
    return result.evolve(
        reason="WorkerFailed",
        message=f"worker index {index} (pod {name}) failed: {message}{also}",
        exit_code=code,
    )


def _stopped(pod: Obj) -> bool:
    """Return whether ``pod`` ended because it was deleted (by the job controller, mostly)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _blame_order(pod: Obj) -> tuple[str, int, int]:
    main = _terminated(_main(pod)) or {}
    index = _pod_index(pod)
    stopped = _stopped(pod)
    # Within one second: a worker that died, then a launcher that exited on its own, then
    # pods that were deleted, the launcher last: the job controller stops it for the others.
    rank = 2 * stopped + (index <= 0)
    return str(main.get("finishedAt") or "~"), rank, index


def _pod_index(pod: Obj) -> int:
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(_INDEX) or (meta.get("labels") or {}).get(_INDEX)
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


def _rule_code(message: str, code: int | None) -> int | None:
    """Return the exit code the controller's PodFailurePolicy message names (else ``code``)."""
    match = re.search(r"failed with exit code (\d+)", message)
    return int(match[1]) if match else code


def pod_failure(pod: Obj) -> tuple[str, str, int | None]:
    """Return (reason, message, exit code) for why one failed pod failed."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    if status.get("reason") == "Evicted":
        return "Evicted", f"pod {name} was evicted: {status.get('message', '')}".strip(), None
    disrupted = disruption(pod)
    if disrupted is not None:  # evicted, preempted or lost with its node: not the script's doing
        why = f"{disrupted.get('reason', '')}: {disrupted.get('message', '')}".strip(": ")
        return "Disrupted", f"pod {name} was disrupted ({why})", _code(_terminated(_main(pod)))
    if (pod.get("metadata") or {}).get("deletionTimestamp") and status.get("phase") == "Failed":
        code = _code(_terminated(_main(pod)))
        shown = f", exit code {code}" if code is not None else ""
        return "PodDeleted", f"pod {name} was deleted while it ran{shown}", code
    pull = _terminated(_container(pod, PULL_CONTAINER, init=True))
    if pull is not None and pull.get("exitCode", 0) != 0:
        pull_code = int(pull["exitCode"])
        said = _said(pull)
        return (
            "InputPullFailed",
            f"pulling the inputs failed with exit code {pull_code}{said}",
            None,
        )
    main = _terminated(_main(pod))
    said = split_message(str((main or {}).get("message") or ""))[0]
    for known in _WRAPPER_REASONS:
        if said.startswith(f"{known}: "):
            # A MiniCluster's runner reports its sidecar's failed pull: the script never ran.
            code = None if known == "InputPullFailed" else _code(main)
            return known, said.removeprefix(f"{known}: "), code
    if main is not None and main.get("reason") == "OOMKilled":
        return "OOMKilled", "container step ran out of memory (OOMKilled)", _code(main)
    if main is not None and main.get("reason") in _START_ERRORS:
        # The runtime's own words name the program: 'exec: "/bin/zsh": executable file not
        # found in $PATH'. No log exists: the message is the only place the cause is said.
        why = said or str(main.get("reason"))
        return "StartError", f"the container could not start: {why}", _code(main)
    code = _code(main)
    if code == _NOT_FOUND:
        program = _program(pod)
        lacking = f"{program} (the step's shell) or " if program else ""
        return (
            "ExitCode",
            f"the script exited with code 127, command not found: the image lacks {lacking}"
            "a program the script runs (its log names which)",
            code,
        )
    if code is not None and code != 0:
        return "ExitCode", f"the script exited with code {code}", code
    push = _terminated(_container(pod, PUSH_CONTAINER) or _container(pod, HANDOFF_CONTAINER))
    if code == 0 and push is not None and push.get("exitCode", 0) != 0:
        push_code = int(push["exitCode"])
        return (
            "OutputPushFailed",
            f"the step exited 0 but pushing its outputs failed with exit code {push_code}"
            + _said(push),
            0,
        )
    return str(status.get("reason") or "PodFailed"), f"pod {name} failed", code


def _said(terminated: Obj) -> str:
    """Return ": <why>" from a handoff container's termination message (its one-line error,
    or its log's last line when it crashed without one), else ""."""
    lines = [line.strip() for line in str(terminated.get("message") or "").splitlines()]
    lines = [line for line in lines if line]
    return f": {lines[-1][:500]}" if lines else ""


_START_ERRORS = frozenset({"StartError", "ContainerCannotRun", "RunContainerError"})
_NOT_FOUND = 127  # what a POSIX shell exits with when it finds no such command


def _program(pod: Obj) -> str | None:
    """Return the program the wrapper of the pod's step container runs (its shell), if any."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") != MAIN_CONTAINER:
            continue
        command = list(container.get("command") or ())
        if len(command) > 2 and command[1] == f"{ENTRYPOINT_DIR}/run":
            return str(command[2])
    return None


def _code(terminated: Obj | None) -> int | None:
    if terminated is None or terminated.get("exitCode") is None:
        return None
    return int(terminated["exitCode"])


def _waiting_error(pod: Obj) -> tuple[str, str] | None:
    """Return (reason, message) when a container of ``pod`` waits on an image/config error."""
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_ERRORS:
                text = f"container {container.get('name')}: {waiting.get('message', '')}"
                text = text.rstrip(": ")
                if waiting["reason"] in _PULL_ERRORS and container.get("name") in _HANDOFF:
                    text += _MIRROR_HINT
                return str(waiting["reason"]), text
    return None


def _since(pod: Obj) -> datetime | None:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    return parse_time(status.get("startTime")) or parse_time(meta.get("creationTimestamp"))


def _live(
    base: StepResult,
    job: Obj,
    pods: list[Obj],
    *,
    now: datetime,
    grace: float,
    warnings: Iterable[Obj],
    gone: list[Obj],
) -> StepResult:
    """Return PENDING or RUNNING for a Job without a terminal condition."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending", "Running")]
    for pod in live:
        error = _waiting_error(pod)
        if error is None:
            continue
        since = _since(pod)
        reason, message = error
        if since is not None and (now - since).total_seconds() >= grace:
            return base.evolve(
                state=StepState.FAILED,
                reason=reason,
                message=f"{message} (still failing after {grace:g}s)",
                finished_at=now,
            )
        return base.evolve(state=StepState.PENDING, reason=reason, message=message)
    if any((p.get("status") or {}).get("phase") == "Running" for p in live):
        return base.evolve(state=StepState.RUNNING, reason="Running")
    if (job.get("status") or {}).get("ready"):
        return base.evolve(state=StepState.RUNNING, reason="Running")
    history = [*pods, *gone]
    result = _pending(base, job, live, warnings, history)
    if _own_configmap_coming(job, result, now):
        result = result.evolve(reason="ContainerCreating", message="")
    cause = blocked(job, live, warnings, history) if result.reason == "FailedCreate" else None
    if (
        cause is not None
        and cause.permanent
        and cause.since is not None
        and (now - cause.since).total_seconds() >= grace
    ):
        return result.evolve(
            state=StepState.FAILED,
            message=f"{result.message} (still refused after {grace:g}s)",
            finished_at=now,
        )
    return result


def _own_configmap_coming(job: Obj, result: StepResult, now: datetime) -> bool:
    """Return whether ``result`` waits only for the step's own ConfigMap, within
    ``CONFIGMAP_WINDOW`` of its Job's creation (it is made just after the Job)."""
    meta = job.get("metadata") or {}
    own = f'configmap "{meta.get("name", "")}" not found'
    created = parse_time(meta.get("creationTimestamp"))
    if result.reason != "FailedMount" or own not in result.message or created is None:
        return False
    return (now - created).total_seconds() < CONFIGMAP_WINDOW


def _pending(
    base: StepResult, job: Obj, live: list[Obj], warnings: Iterable[Obj], history: list[Obj]
) -> StepResult:
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    suspended = true_condition(status, "Suspended")
    if spec.get("suspend") or suspended is not None:
        queue = ((job.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        where = f' in queue "{queue}"' if queue else ""
        return base.evolve(
            state=StepState.PENDING,
            reason="Suspended",
            message=f"suspended{where}, waiting for admission",
        )
    for pod in live:
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = str(cond.get("reason") or "Unschedulable")
                return base.evolve(
                    state=StepState.PENDING, reason=reason, message=str(cond.get("message", ""))
                )
    cause = blocked(job, live, warnings, history)
    if cause is not None:  # a pod's FailedMount, say, or the Job's FailedCreate
        return base.evolve(state=StepState.PENDING, reason=cause.reason, message=cause.message)
    if live:
        return base.evolve(state=StepState.PENDING, reason="ContainerCreating")
    failures = int(status.get("failed") or 0)
    if failures:
        message = f"{failures} pod(s) failed; the job controller will retry after its backoff"
        return base.evolve(state=StepState.PENDING, reason="BackoffRetry", message=message)
    return base.evolve(state=StepState.PENDING, reason="Queued")
