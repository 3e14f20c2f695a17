"""judge(): Job and pod statuses to StepState, against real transcripts and hand-made cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.state import StepResult, StepState
from k8sjobs.status import grace_deadline, judge

REFERENCE = Path("/work/shared/k8s-reference")
if not REFERENCE.exists():  # CI lays shared/ beside the clone
    REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "k8s-reference"
T0 = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)
P, R, S, F = StepState.PENDING, StepState.RUNNING, StepState.SUCCEEDED, StepState.FAILED


def transcript_states(
    path: Path,
) -> Iterator[tuple[datetime, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]]:
    """Yield (time, Job, pods, Warning Events) as the watches would know them after every
    event, in order (Job, Pod and Event watches merged by their time)."""
    data = json.loads(path.read_text())
    events = [("job", e) for e in data["job_watch_events"]]
    events += [("pod", e) for e in data.get("pod_watch_events", ())]
    events += [("event", e) for e in data.get("event_watch_events", ())]
    events.sort(key=lambda item: item[1]["t"])
    job: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = {}
    warnings: dict[str, dict[str, Any]] = {}
    start = datetime.fromisoformat(data["create_response"]["metadata"]["creationTimestamp"])
    for kind, event in events:
        if event["type"] == "BOOKMARK":
            continue
        obj = event["object"]
        if kind == "job":
            job = obj
        elif kind == "event":
            if obj.get("type") != "Warning":
                continue
            if event["type"] == "DELETED":
                warnings.pop(obj["metadata"]["name"], None)
            else:
                warnings[obj["metadata"]["name"]] = obj
        elif event["type"] == "DELETED":
            pods.pop(obj["metadata"]["name"], None)
        else:
            pods[obj["metadata"]["name"]] = obj
        if job is not None:
            now = start + timedelta(seconds=event["t"])
            yield now, job, list(pods.values()), list(warnings.values())


#: Seconds a pod may sit in an image error, or a Job's pods be refused for a cause that
#: cannot clear, in the replays: below the 31.6 s over which the job controller's
#: FailedCreate retries were recorded, so a permanent refusal fails within the transcript.
GRACE = 20


def _replay(path: Path) -> Iterator[StepResult]:
    """Yield judge()'s verdict after every Job, Pod or Event watch event, in order."""
    for now, job, pods, warnings in transcript_states(path):
        yield judge(job, pods, now=now, pending_grace=GRACE, warnings=warnings)


def _states(results: list[StepResult]) -> list[StepState]:
    """Return the states a handle would show: forward moves only, stopping at terminal."""
    shown: list[StepState] = []
    order = {P: 0, R: 1}
    for result in results:
        if shown and shown[-1].terminal:
            break
        if shown and not result.state.terminal and order[result.state] <= order[shown[-1]]:
            continue
        shown.append(result.state)
    return shown


def _transcripts() -> list[Path]:
    found = sorted(REFERENCE.glob("job-*.json"))
    assert found, f"no reference transcripts under {REFERENCE}"
    return found


EXPECTED = {
    "job-succeeded.json": ([P, R, S], "Completed", 0),
    "job-failed-backoff1.json": ([P, R, F], "ExitCode", 3),
    "job-deadline-exceeded.json": ([P, R, F], "DeadlineExceeded", None),
    "job-indexed-3.json": ([P, R, S], "Completed", 0),
    "job-pod-failure-policy-failjob.json": ([P, R, F], "PodFailurePolicy", 42),
    "job-suspended-then-resumed.json": ([P, R, S], "Completed", 0),
    "job-success-policy-index0.json": ([P, R, S], "Completed", 0),
    "job-backoff-limit-per-index.json": ([P, R, F], "ExitCode", 1),
    "job-evicted-pod-failure-policy-ignore.json": ([P, R, S], "Completed", 0),
    # The script did not fail: its pod was deleted (SIGTERM, 143), and the step says so.
    "job-running-pod-deleted.json": ([P, R, F], "PodDeleted", 143),
    # The pod waited ContainerCreating for its ConfigMap (FailedMount), then ran.
    "job-configmap-created-after-job.json": ([P, R, S], "Completed", 0),
    # Admission refuses every pod; only the job controller's Warning Events say so. A cause
    # that cannot clear fails the step after the grace; a used-up quota keeps it PENDING.
    "job-failedcreate-missing-priorityclass.json": ([P, F], "FailedCreate", None),
    "job-failedcreate-missing-runtimeclass.json": ([P, F], "FailedCreate", None),
    "job-failedcreate-limitrange-max.json": ([P, F], "FailedCreate", None),
    "job-failedcreate-quota-exceeded.json": ([P], "FailedCreate", None),
}


@pytest.mark.parametrize("path", _transcripts(), ids=lambda p: p.stem)
def test_transcript_state_sequence(path: Path) -> None:
    results = list(_replay(path))
    states, reason, code = EXPECTED[path.name]
    assert _states(results) == states
    final = next((r for r in results if r.state.terminal), results[-1])
    assert final.reason == reason
    assert final.exit_code == code
    if reason == "FailedCreate":  # no pod ever existed: the server's own words say why
        warning = json.loads(path.read_text())["event_watch_events"][-1]["object"]
        told = warning["message"]
        assert final.message == told + (
            f" (still refused after {GRACE}s)" if final.state is F else ""
        )
        assert final.finished_at is not None or final.state is P
        return
    assert final.started_at is not None and final.finished_at is not None
    assert final.pods


def test_a_refusal_is_pending_with_the_servers_words_before_the_grace() -> None:
    """Before the grace, every refused step is PENDING with the job controller's reason and
    message (the newest Event's): that is what the handle, the table and status show."""
    for name in ("missing-priorityclass", "limitrange-max", "quota-exceeded"):
        path = REFERENCE / f"job-failedcreate-{name}.json"
        first = next(r for r in _replay(path) if r.reason == "FailedCreate")
        assert first.state is P
        assert (
            first.message.startswith("Error creating: pods ") and " is forbidden: " in first.message
        )


def test_failed_step_names_the_rule_or_the_deletion() -> None:
    failjob = next(
        r for r in _replay(REFERENCE / "job-pod-failure-policy-failjob.json") if r.state is F
    )
    assert failjob.message.startswith(
        "exit code 42 is in fail_on_exit_codes [42], so the step was not retried ("
    )
    assert "matching FailJob rule at index 0" in failjob.message
    deleted = next(r for r in _replay(REFERENCE / "job-running-pod-deleted.json") if r.state is F)
    assert "was deleted while it ran, exit code 143" in deleted.message


def test_suspended_job_is_pending_with_reason() -> None:
    results = list(_replay(REFERENCE / "job-suspended-then-resumed.json"))
    assert results[0].state is P and results[0].reason == "Suspended"


def test_failure_between_retries_reads_backoff_retry() -> None:
    results = list(_replay(REFERENCE / "job-failed-backoff1.json"))
    assert "BackoffRetry" in {r.reason for r in results}


def test_launcher_success_completes_at_success_criteria_met() -> None:
    # The launcher (index 0) succeeds at 3.3 s; the job controller sets SuccessCriteriaMet at
    # 4.17 s and stops the two workers (exit 143), then Complete at 5.17 s, both with reason
    # SuccessPolicy: the step is SUCCEEDED from SuccessCriteriaMet on, never FAILED by the
    # stopped workers, and finished when the criteria were met (not when they were gone).
    results = list(_replay(REFERENCE / "job-success-policy-index0.json"))
    first = next(r for r in results if r.state is S)
    assert (first.reason, first.exit_code) == ("Completed", 0)
    assert first.message == "the launcher (index 0) succeeded; the workers are stopped"
    assert first.finished_at == datetime(2026, 11, 30, 13, 43, 54, tzinfo=UTC)
    after = results[results.index(first) :]
    assert {r.state for r in after} == {S}
    assert after[-1].finished_at == datetime(2026, 11, 30, 13, 43, 56, tzinfo=UTC)
    assert len(after[-1].pods) == 1  # the stopped workers were deleted


def test_deadline_exceeded_is_noticed_at_failure_target() -> None:
    results = list(_replay(REFERENCE / "job-deadline-exceeded.json"))
    first_failed = next(r for r in results if r.state is F)
    assert first_failed.reason == "DeadlineExceeded"
    assert "deadline" in first_failed.message


# Hand-made cases ---------------------------------------------------------------------


def _job(*conditions: tuple[str, str], suspend: bool = False, **status: Any) -> dict[str, Any]:
    conds = [
        {"type": t, "status": "True", "reason": r, "message": r, "lastTransitionTime": _ts(9)}
        for t, r in conditions
    ]
    return {
        "metadata": {"name": "s-1", "annotations": {"k8sjobs.io/step-name": "train"}},
        "spec": {"suspend": suspend},
        "status": {"startTime": _ts(0), "conditions": conds, **status},
    }


def _ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminated(name: str, code: int, reason: str = "Error") -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def _waiting(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": "no such image"}}}


def _pod(phase: str, *containers: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "s-1-abcde", "creationTimestamp": _ts(0)},
        "status": {
            "phase": phase,
            "startTime": _ts(0),
            "containerStatuses": list(containers),
            **status,
        },
    }


def _judge(job: dict[str, Any], *pods: dict[str, Any], at: float = 1) -> StepResult:
    return judge(job, pods, now=T0 + timedelta(seconds=at), pending_grace=30)


BACKOFF = ("Failed", "BackoffLimitExceeded")


def test_name_comes_from_the_step_annotation() -> None:
    assert _judge(_job()).name == "train"


def test_no_pods_yet_is_queued() -> None:
    assert (_judge(_job()).state, _judge(_job()).reason) == (P, "Queued")


def test_main_exit_code_is_the_reason() -> None:
    pod = _pod("Failed", _terminated("step", 7), _terminated("k8sjobs-push", 0))
    result = _judge(_job(BACKOFF), pod)
    assert (result.state, result.reason, result.exit_code) == (F, "ExitCode", 7)
    assert result.message == "the script exited with code 7"


def test_retries_are_counted_in_the_message() -> None:
    pods = [_pod("Failed", _terminated("step", 7)) for _ in range(3)]
    for i, pod in enumerate(pods):
        pod["metadata"]["name"] = f"s-{i}-abcde"
    result = _judge(_job(BACKOFF), *pods)
    assert result.message == "the script exited with code 7, after 3 attempts"


def test_main_exit_code_is_preferred_over_push_container() -> None:
    pod = _pod("Failed", _terminated("k8sjobs-push", 1), _terminated("step", 2))
    assert _judge(_job(BACKOFF), pod).exit_code == 2


def test_push_failure_after_success_is_output_push_failed() -> None:
    pod = _pod("Failed", _terminated("step", 0, "Completed"), _terminated("k8sjobs-push", 1))
    result = _judge(_job(BACKOFF), pod)
    assert (result.reason, result.exit_code) == ("OutputPushFailed", 0)


def test_a_handoff_containers_termination_message_is_the_steps_why() -> None:
    """The handoff's one-line error (its termination message, in the Pod watch) ends the
    step's message: no log read to learn why a push or a pull failed."""
    push = _terminated("k8sjobs-push", 1)
    push["state"]["terminated"]["message"] = "Pushing o.txt to reg:5000/x: cannot connect\n"
    pod = _pod("Failed", _terminated("step", 0, "Completed"), push)
    assert _judge(_job(BACKOFF), pod).message == (
        "the step exited 0 but pushing its outputs failed with exit code 1: "
        "Pushing o.txt to reg:5000/x: cannot connect"
    )
    pull = _terminated("k8sjobs-pull", 1)
    # A crash leaves its log's tail (FallbackToLogsOnError): its last line is the error.
    pull["state"]["terminated"]["message"] = (
        "Traceback (most recent call last):\n  ...\nMemoryError"
    )
    pod = _pod("Failed", initContainerStatuses=[pull])
    result = _judge(_job(BACKOFF), pod)
    assert result.message == "pulling the inputs failed with exit code 1: MemoryError"


def test_oom_killed() -> None:
    pod = _pod("Failed", _terminated("step", 137, "OOMKilled"))
    result = _judge(_job(BACKOFF), pod)
    assert (result.reason, result.exit_code) == ("OOMKilled", 137)


def test_evicted() -> None:
    pod = _pod("Failed", reason="Evicted", message="The node was low on resource: memory.")
    result = _judge(_job(BACKOFF), pod)
    assert result.reason == "Evicted" and "low on resource" in result.message


def test_input_pull_failure() -> None:
    pod = _pod("Failed", initContainerStatuses=[_terminated("k8sjobs-pull", 3)])
    assert _judge(_job(BACKOFF), pod).reason == "InputPullFailed"


def test_failed_without_pods_keeps_the_job_reason() -> None:
    result = _judge(_job(BACKOFF))
    assert (result.state, result.reason) == (F, "BackoffLimitExceeded")


@pytest.mark.parametrize(
    "reason",
    [
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
    ],
)
def test_image_errors_fail_only_after_the_grace_time(reason: str) -> None:
    pod = _pod("Pending", _waiting("step", reason))
    early = _judge(_job(), pod, at=29)
    late = _judge(_job(), pod, at=31)
    assert (early.state, early.reason) == (P, reason)
    assert (late.state, late.reason) == (F, reason)
    assert "after 30s" in late.message


@pytest.mark.parametrize("container", ["k8sjobs-pull", "k8sjobs-push"])
@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull"])
def test_a_handoff_image_that_cannot_be_pulled_says_how_to_mirror_it(
    container: str, reason: str
) -> None:
    key = "initContainerStatuses" if container == "k8sjobs-pull" else "containerStatuses"
    pod = _pod("Pending", **{key: [_waiting(container, reason)]})
    result = _judge(_job(), pod, at=31)
    assert (result.state, result.reason) == (F, reason)
    assert "k8sjobs image build --push" in result.message


def test_the_step_image_failing_to_pull_gets_no_mirror_hint() -> None:
    result = _judge(_job(), _pod("Pending", _waiting("step", "ImagePullBackOff")), at=31)
    assert "k8sjobs image" not in result.message


def test_grace_deadline_is_when_the_earliest_error_expires() -> None:
    pod = _pod("Pending", _waiting("step", "ImagePullBackOff"))
    assert grace_deadline([pod], 30) == T0 + timedelta(seconds=30)
    assert grace_deadline([_pod("Running")], 30) is None


def test_unschedulable_is_pending_with_the_scheduler_message() -> None:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes: Insufficient nvidia.com/gpu",
    }
    result = _judge(_job(), _pod("Pending", conditions=[cond]))
    assert (result.state, result.reason) == (P, "Unschedulable")
    assert "nvidia.com/gpu" in result.message


def test_kueue_suspended_names_the_queue() -> None:
    job = _job(suspend=True)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    result = _judge(job)
    assert (result.state, result.reason) == (P, "Suspended")
    assert '"gpu"' in result.message


def test_running_pod_is_running() -> None:
    assert _judge(_job(active=1), _pod("Running")).state is R


def test_ready_count_is_running_before_pods_are_seen() -> None:
    assert _judge(_job(active=1, ready=1)).state is R


def test_complete_takes_the_completion_time() -> None:
    result = _judge(_job(("Complete", "CompletionsReached"), completionTime=_ts(5)))
    assert (result.state, result.exit_code) == (S, 0)
    assert result.duration == 5


# Launched (multi-node, launch: ssh) steps -----------------------------------------------


def _launched(*conditions: tuple[str, str], **status: Any) -> dict[str, Any]:
    job = _job(*conditions, **status)
    job["spec"] = {"successPolicy": {"rules": [{"succeededIndexes": "0"}]}}
    return job


def _indexed(index: int, code: int, finished: float, message: str = "") -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": "Error", "finishedAt": _ts(finished)}
    if message:
        terminated["message"] = message
    pod = _pod("Failed", {"name": "step", "state": {"terminated": terminated}})
    pod["metadata"]["name"] = f"s-1-{index}-abcde"
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    if code == 143:  # stopped: the job controller (or a person) deleted it
        pod["metadata"]["deletionTimestamp"] = _ts(finished + 30)
    return pod


_MAX = ("Failed", "MaxFailedIndexesExceeded")


def test_launcher_failure_is_the_script_exit_code_not_the_stopped_workers() -> None:
    pods = [_indexed(0, 3, 4), _indexed(1, 143, 4), _indexed(2, 143, 5)]
    result = _judge(_launched(_MAX), *pods)
    assert (result.state, result.reason, result.exit_code) == (F, "ExitCode", 3)
    assert result.message == "the script exited with code 3"


@pytest.mark.parametrize("launcher_code", [143, 1])
def test_a_worker_that_died_first_is_named_by_its_index(launcher_code: int) -> None:
    # The worker died at 4 s; the launcher ended after it (stopped, or its mpirun gave up).
    pods = [_indexed(0, launcher_code, 5), _indexed(1, 0, 2), _indexed(2, 137, 4)]
    pods[1]["status"]["phase"] = "Succeeded"
    result = _judge(_launched(_MAX), *pods)
    assert (result.state, result.reason, result.exit_code) == (F, "WorkerFailed", 137)
    assert result.message.startswith("worker index 2 (pod s-1-2-abcde) failed: ")


def test_a_worker_stopped_in_the_launchers_second_is_not_blamed() -> None:
    pods = [_indexed(1, 143, 4), _indexed(0, 2, 4)]
    result = _judge(_launched(_MAX), *pods)
    assert (result.reason, result.exit_code) == ("ExitCode", 2)


def test_a_worker_that_died_in_the_launchers_second_is_blamed() -> None:
    # MPICH's mpiexec exits 255 within the second its node's proxy is lost.
    pods = [_indexed(0, 255, 4), _indexed(1, 137, 4)]
    result = _judge(_launched(_MAX), *pods)
    assert (result.reason, result.exit_code) == ("WorkerFailed", 137)
    assert result.message.startswith("worker index 1 ")


def test_a_worker_that_died_is_blamed_even_when_seen_after_the_launcher() -> None:
    # Its pod reported after the launcher's mpiexec gave up on it (the status came later).
    pods = [_indexed(0, 255, 4), _indexed(1, 137, 6), _indexed(2, 143, 7)]
    result = _judge(_launched(_MAX), *pods)
    assert (result.reason, result.exit_code) == ("WorkerFailed", 137)
    assert result.message.startswith("worker index 1 ")


def test_a_stopped_launcher_in_the_workers_second_is_not_blamed() -> None:
    pods = [_indexed(0, 143, 4), _indexed(1, 1, 4)]
    result = _judge(_launched(_MAX), *pods)
    assert (result.reason, result.exit_code) == ("WorkerFailed", 1)
    assert "worker index 1" in result.message


def test_other_workers_that_died_are_mentioned() -> None:
    pods = [_indexed(0, 143, 6), _indexed(3, 1, 4), _indexed(1, 1, 5), _indexed(2, 143, 6)]
    result = _judge(_launched(_MAX), *pods)
    assert result.message.startswith("worker index 3 ")
    assert result.message.endswith("(worker index 1 also failed)")


def test_unreachable_workers_are_the_reason_not_an_exit_code() -> None:
    said = "WorkersUnreachable: worker w-1.w.ns.svc did not answer on port 2222 within 300s"
    result = _judge(_launched(_MAX), _indexed(0, 1, 300, said), _indexed(1, 143, 301))
    assert result.reason == "WorkersUnreachable"
    assert result.message.startswith("worker w-1.w.ns.svc did not answer")


def test_a_launched_step_past_its_walltime_says_deadline() -> None:
    result = _judge(_launched(("Failed", "DeadlineExceeded")), _indexed(0, 143, 9))
    assert result.reason == "DeadlineExceeded"
