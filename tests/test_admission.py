"""Kueue's word on a queued step, replayed from the real controller's transcripts.

Each kueue-*.json transcript (../shared/k8s-reference) is replayed as the backend's watches
would see it: Job, Pod and Workload events merged by time, every step judged after each
event by ``status.judge`` with ``admission.judge`` over it, and reported to a StepHandle, as
the kube backend does. The handle's states and reasons are what a user would have seen.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.admission import Admission, Stage, admission, eviction_event, job_uid, judge
from k8sjobs.events import pod_event
from k8sjobs.handle import StepHandle
from k8sjobs.state import StepResult, StepState
from k8sjobs.status import judge as judge_job
from k8sjobs.status import pending_deadline

from .test_handle import Recorder

REFERENCE = Path("/work/shared/k8s-reference")
if not REFERENCE.exists():  # CI lays shared/ beside the clone
    REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "k8s-reference"
P, R, X, S = StepState.PENDING, StepState.RUNNING, StepState.PREEMPTED, StepState.SUCCEEDED


def replay(name: str) -> dict[str, list[StepResult]]:
    """Return, per Job name, each change of (state, reason) its handle reported, in order."""
    data = json.loads((REFERENCE / name).read_text())
    events = [("job", e) for e in data["job_watch_events"]]
    events += [("pod", e) for e in data["pod_watch_events"]]
    events += [("workload", e) for e in data["workload_watch_events"]]
    events.sort(key=lambda item: item[1]["t"])
    jobs: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    workloads: dict[str, dict[str, Any]] = {}
    handles: dict[str, StepHandle] = {}
    seen: dict[str, list[StepResult]] = {}
    first = data["job_watch_events"][0]["object"]["metadata"]["creationTimestamp"]
    start = datetime.fromisoformat(first) - timedelta(seconds=data["job_watch_events"][0]["t"])
    for kind, event in events:
        if event["type"] == "BOOKMARK":
            continue
        obj = event["object"]
        if kind == "job":
            jobs[obj["metadata"]["uid"]] = obj
        elif kind == "pod":
            pods[obj["metadata"]["name"]] = obj
        else:
            workloads[job_uid(obj)] = obj
        now = start + timedelta(seconds=event["t"])
        for uid, job in jobs.items():
            name = job["metadata"]["name"]
            own = [
                p
                for p in pods.values()
                if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences", ()))
                and "deletionTimestamp" not in p["metadata"]
            ]
            result = judge_job(job, own, now=now, pending_grace=60).evolve(name=name)
            found = admission(workloads[uid]) if uid in workloads else None
            handle = handles.setdefault(
                uid,
                StepHandle(
                    name=name, study="t", object_name=name, namespace="demo", backend=Recorder()
                ),
            )
            before = handle.result
            handle.report(judge(result, found))
            after = handle.result
            if (after.state, after.reason) != (before.state, before.reason):
                seen.setdefault(name, []).append(after)
    return seen


def states(results: list[StepResult]) -> list[StepState]:
    folded: list[StepState] = []
    for result in results:
        if not folded or folded[-1] is not result.state:
            folded.append(result.state)
    return folded


def test_every_kueue_transcript_is_replayed_here() -> None:
    found = {p.name for p in REFERENCE.glob("kueue-*.json")}
    assert found == {
        "kueue-admitted.json",
        "kueue-pending-quota.json",
        "kueue-preempted.json",
        "kueue-no-localqueue.json",
        "kueue-indexed-multipod.json",
    }


@pytest.mark.parametrize("name", ["kueue-admitted.json", "kueue-indexed-multipod.json"])
def test_an_admitted_workload_leaves_the_job_to_say_it_runs(name: str) -> None:
    seen = replay(name)
    assert len(seen) == 1, "one Job, one Workload (an Indexed Job of 3 pods too)"
    (results,) = seen.values()
    assert states(results) == [P, R, S]
    assert [r.reason for r in results][:2] == ["Suspended", "Admitted"]


def test_a_step_waiting_on_quota_says_kueues_reason() -> None:
    seen = replay("kueue-pending-quota.json")
    assert [states(seen[n]) for n in ("q1", "q2")] == [[P, R, S], [P, R, S]]
    waiting = next(r for r in seen["q3"] if r.reason not in ("Suspended",))
    assert (waiting.state, waiting.reason) == (P, "WaitingForQuota")
    assert waiting.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
        "flavor default, 1 more needed"
    )
    assert states(seen["q3"]) == [P, R, S]


def test_a_preempted_step_is_preempted_then_waits_then_runs_and_succeeds() -> None:
    seen = replay("kueue-preempted.json")
    low = seen["low"]
    assert states(low) == [P, R, X, P, R, S]
    preempted = next(r for r in low if r.state is X)
    assert preempted.reason == "Preempted"
    assert preempted.message.startswith("Preempted to accommodate a workload (UID: ")
    assert preempted.evictions == 1
    waiting = low[low.index(preempted) + 1]
    assert (waiting.state, waiting.reason) == (P, "WaitingForQuota")
    assert "insufficient unused quota for cpu" in waiting.message
    assert all(r.state is not StepState.FAILED for r in low) and low[-1].evictions == 1
    high = seen["high"]
    assert "WaitingForPreemptedWorkloads" in [r.reason for r in high]
    assert states(high) == [P, R, S]


def test_a_missing_local_queue_is_named_from_the_first_condition() -> None:
    seen = replay("kueue-no-localqueue.json")
    (results,) = seen.values()
    said = next(r for r in results if r.reason not in ("Suspended",))
    assert (said.state, said.reason) == (P, "Misconfigured")
    assert said.message == "LocalQueue no-such-queue doesn't exist"
    assert states(results) == [P, R, S]


def test_a_workload_is_its_jobs_by_owner_reference_or_the_job_uid_label() -> None:
    owned = {"metadata": {"ownerReferences": [{"uid": "a", "controller": True}]}}
    labelled = {"metadata": {"labels": {"kueue.x-k8s.io/job-uid": "b"}}}
    assert (job_uid(owned), job_uid(labelled), job_uid({})) == ("a", "b", "")


def test_a_workload_kueue_has_not_looked_at_yet_says_its_queue() -> None:
    found = admission({"spec": {"queueName": "lq"}})
    assert found == Admission(
        Stage.WAITING, "Suspended", 'suspended in queue "lq", not yet evaluated by Kueue', 0
    )


def test_a_deactivated_workload_says_it_is_admitted_no_more_until_reactivated() -> None:
    """spec.active false (by hand, or Kueue's requeue limit): the step waited as if for
    quota, with the quota condition's stale words, saying nothing of why it never ran."""
    evicted = {
        "type": "Evicted",
        "status": "True",
        "reason": "Deactivated",
        "message": "The workload is deactivated",
    }
    stale = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "x"}
    workload = {"spec": {"active": False}, "status": {"conditions": [evicted, stale]}}
    found = admission(workload)
    assert (found.stage, found.reason) == (Stage.WAITING, "Deactivated")
    assert "deactivated (spec.active: false) (The workload is deactivated)" in found.message
    assert "reactivated" in found.message
    suspended = StepResult(name="s", state=P, reason="Suspended", message="suspended")
    assert judge(suspended, found).reason == "Deactivated"
    again = admission({**workload, "spec": {"active": True}})
    assert again.reason != "Deactivated"


@given(
    st.sampled_from(list(StepState)),
    st.sampled_from(list(Stage)),
    st.integers(0, 5),
)
def test_an_ended_job_stands_whatever_its_workload_says(
    state: StepState, stage: Stage, evictions: int
) -> None:
    result = StepResult(name="s", state=state, reason="Completed")
    judged = judge(result, Admission(stage, "Preempted", "m", evictions))
    assert judged.evictions == evictions
    if state.terminal:
        assert judged == result.evolve(evictions=evictions)
    else:
        assert judged.state is {Stage.EVICTED: X, Stage.WAITING: P}.get(stage, state)


def test_a_pending_timeout_in_a_queue_says_what_kueue_said() -> None:
    """A Misconfigured queue is bounded by pending_timeout, and the failure names the cause."""
    data = json.loads((REFERENCE / "kueue-no-localqueue.json").read_text())
    job = data["job_watch_events"][0]["object"]
    workload = next(
        e["object"]
        for e in data["workload_watch_events"]
        if e["object"].get("status", {}).get("conditions")
    )
    created = datetime.fromisoformat(job["metadata"]["creationTimestamp"])
    later = created + timedelta(seconds=30)
    timed_out = judge_job(job, [], now=later, pending_grace=60, pending_timeout=10)
    assert timed_out.reason == "PendingTimeout"
    result = judge(timed_out, admission(workload))
    assert result.state is StepState.FAILED and result.message == (
        "not started within pending_timeout (10 s); it waited: Misconfigured: "
        "LocalQueue no-such-queue doesn't exist"
    )


def test_a_pod_stopped_by_its_jobs_suspension_spends_no_retry() -> None:
    """kueue-preempted.json: low's pod is deleted (exit 143) once Kueue re-suspends its Job."""
    data = json.loads((REFERENCE / "kueue-preempted.json").read_text())
    suspended = next(
        e["object"]
        for e in data["job_watch_events"]
        if e["object"]["metadata"]["name"] == "low"
        and e["object"]["spec"].get("suspend")
        and e["object"].get("status", {}).get("startTime") is None
        and any(c["type"] == "Suspended" for c in e["object"]["status"].get("conditions", ()))
    )
    stopped = next(
        e["object"]
        for e in data["pod_watch_events"]
        if e["type"] == "DELETED" and e["object"]["metadata"]["name"].startswith("low-")
    )
    event = pod_event(suspended, stopped, deleted=True)
    assert event is not None and event.action == "Ignore"
    assert event.message.endswith("stopped as its Job was suspended")
    running = {**suspended, "spec": {**suspended["spec"], "suspend": False}}
    counted = pod_event(running, stopped, deleted=True)
    assert counted is not None and counted.action != "Ignore"


def _resuspended(data: dict[str, Any], name: str) -> dict[str, Any]:
    """Return the last recorded state of Job ``name`` suspended again after it ran."""
    return next(
        e["object"]
        for e in reversed(data["job_watch_events"])
        if e["object"]["metadata"]["name"] == name
        and e["object"]["spec"].get("suspend")
        and any(
            c["type"] == "Suspended"
            and c["status"] == "True"
            and c["lastTransitionTime"] > e["object"]["metadata"]["creationTimestamp"]
            for c in e["object"].get("status", {}).get("conditions", ())
        )
    )


@given(limit=st.integers(min_value=2, max_value=10**6))
def test_a_requeued_step_re_attached_waits_a_whole_pending_timeout_again(limit: int) -> None:
    """A preempted step's earlier round does not spend its pending_timeout.

    kueue-preempted.json's low, suspended again by its eviction, as a driver restarted
    after its pods were deleted lists it: no pod, nothing gone, created before it ran. It
    waits since it was suspended again, and stays PENDING until that wait reaches the bound
    (it failed PendingTimeout: the bound was counted from the Job's creation).
    """
    data = json.loads((REFERENCE / "kueue-preempted.json").read_text())
    job = _resuspended(data, "low")
    since = max(
        datetime.fromisoformat(c["lastTransitionTime"])
        for c in job["status"]["conditions"]
        if c["type"] == "Suspended"
    )
    created = datetime.fromisoformat(job["metadata"]["creationTimestamp"])
    assert since - created >= timedelta(seconds=1)
    now = since + timedelta(seconds=limit - 1)  # past creation + limit
    result = judge_job(job, [], now=now, pending_grace=60, pending_timeout=limit)
    assert result.state is StepState.PENDING, result
    due = pending_deadline(job, [], pending_grace=60, pending_timeout=limit)
    assert due == since + timedelta(seconds=limit)
    later = judge_job(job, [], now=due, pending_grace=60, pending_timeout=limit)
    assert later.reason == "PendingTimeout"


def test_an_eviction_seen_only_in_the_requeued_wait_is_in_the_history_once() -> None:
    """kueue-preempted.json's low: a watch that missed the Evicted stage (a relist after
    410, a driver restarted) still records the eviction, with Kueue's words, and each later
    state of that round gives the same entry (one per eviction). Before, only a step seen
    PREEMPTED got it: a step seen RUNNING, then waiting again, had no eviction in its history.
    """
    data = json.loads((REFERENCE / "kueue-preempted.json").read_text())
    lows = [
        admission(e["object"])
        for e in data["workload_watch_events"]
        if e["object"]["metadata"]["name"].startswith("job-low-")
    ]
    entries = {eviction_event(found) for found in lows} - {None}
    waiting = [f for f in lows if f.stage is Stage.WAITING and f.evictions == 1]
    assert waiting and {eviction_event(f) for f in waiting} == entries
    (entry,) = entries
    assert entry is not None and entry.action == "Ignore" and entry.pod == "eviction 1"
    assert entry.reason == "Preempted" and entry.message.startswith(
        "Kueue evicted the step (Preempted): Preempted to accommodate"
    )
