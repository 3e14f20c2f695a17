"""The judgement of a target: jobset step (k8sjobs.jobsetstatus), replayed from what the real
JobSet controller did (shared/k8s-reference/jobset-launcher-workers.json, jobset-failed.json):
after every recorded change the step's state is judged from what had been seen by then."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.jobsetstatus import judge_jobset, restart_event
from k8sjobs.state import StepResult, StepState

REFERENCE = Path("/work/shared/k8s-reference")
NOW = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


def _replay(name: str) -> Iterator[tuple[dict[str, Any], StepResult]]:
    """Yield (JobSet, verdict) after each JobSet change, with the Jobs and pods seen by then."""
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    data = json.loads(path.read_text())
    changes = [
        (e["t"], kind, e) for kind in ("jobset", "job", "pod") for e in data[f"{kind}_watch_events"]
    ]
    jobs: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    for _, kind, event in sorted(changes, key=lambda c: (c[0], c[1] != "jobset")):
        obj = event["object"]
        name = obj["metadata"]["name"]
        if kind == "jobset":
            by_job: dict[str, list[dict[str, Any]]] = {}
            for pod in pods.values():
                by_job.setdefault(pod["metadata"]["labels"]["job-name"], []).append(pod)
            verdict = judge_jobset(obj, jobs.values(), by_job, now=NOW, pending_grace=120)
            yield obj, verdict
            continue
        store = jobs if kind == "job" else pods
        if event["type"] == "DELETED":
            store.pop(name, None)
        else:
            store[name] = obj


def test_launcher_and_workers_complete() -> None:
    seen = list(_replay("jobset-launcher-workers.json"))
    states = [v.state for _, v in seen]
    assert states[-1] is StepState.SUCCEEDED and seen[-1][1].exit_code == 0
    # Pending until the launcher runs, then running, then done: never failed on the way.
    first_running = states.index(StepState.RUNNING)
    assert set(states[:first_running]) == {StepState.PENDING}
    assert StepState.FAILED not in states


def _job(name: str, rjob: str, replicas: int, **status: Any) -> dict[str, Any]:
    labels = {
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/global-replicas": str(replicas),
        "job-name": name,
    }
    return {"metadata": {"name": name, "labels": labels}, "status": status}


def test_workers_running_before_the_launcher_exists_wait_for_it() -> None:
    workers = _job("a-workers-0", "workers", 2, active=1, ready=1, startTime="2026-12-02T05:00:00Z")
    pod = {
        "metadata": {"name": "a-workers-0-0-x", "creationTimestamp": "2026-12-02T05:00:00Z"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "step", "state": {"running": {}}, "ready": True}],
        },
    }
    js = {"metadata": {"name": "a"}, "status": {"restarts": 0}}
    verdict = judge_jobset(js, [workers], {"a-workers-0": [pod]}, now=NOW, pending_grace=120)
    assert (verdict.state, verdict.reason) == (StepState.RUNNING, "WaitingForWorkers")
    # launch: none has no launcher to wait for: the workers' own state is the step's.
    alone = _job("a-workers-0", "workers", 1, active=1, ready=1, startTime="2026-12-02T05:00:00Z")
    verdict = judge_jobset(js, [alone], {"a-workers-0": [pod]}, now=NOW, pending_grace=120)
    assert (verdict.state, verdict.reason) == (StepState.RUNNING, "Running")


def test_a_failing_launcher_names_its_replicated_job_pod_and_exit_code() -> None:
    seen = list(_replay("jobset-failed.json"))
    final = seen[-1][1]
    assert final.state is StepState.FAILED
    assert final.exit_code == 3
    assert final.message.startswith("replicated Job launcher (pod bad-launcher-0-0-")
    assert "the script exited with code 3" in final.message
    assert "reaching max number of restarts" in final.message and "after 1 restart" in final.message
    # The restart came first, and it was not a failure: the step ran on.
    restarting = [
        v for js, v in seen if (js.get("status") or {}).get("restarts") and v is not final
    ]
    assert restarting and all(not v.state.terminal for v in restarting[:-1])


def test_a_restart_is_an_event_once() -> None:
    seen = list(_replay("jobset-failed.json"))
    events = {restart_event(js) for js, _ in seen} - {None}
    assert len({(e.pod, e.reason) for e in events if e}) == 1
    (event,) = {(e.pod, e.reason, e.action) for e in events if e}
    assert event == ("bad (restart 1)", "Restarted", "Count")
    assert restart_event(seen[0][0]) is None


def test_suspended_is_pending() -> None:
    js = {
        "metadata": {"name": "a"},
        "spec": {"suspend": True},
        "status": {
            "conditions": [
                {"type": "Suspended", "status": "True", "message": "jobset is suspended"}
            ]
        },
    }
    verdict = judge_jobset(js, [], {}, now=NOW, pending_grace=120)
    assert (verdict.state, verdict.reason) == (StepState.PENDING, "Suspended")


def test_a_restart_seen_late_is_not_given_the_present_s_words_as_its_cause() -> None:
    """A restart first seen after the set went on (by `k8sjobs status`, a relist, a watch
    that missed the moment): the RestartingJobSet condition is False by then, saying "all
    jobs are ready" or "jobset failed"; the history said "restart 1: all jobs are ready"."""
    seen = [
        js for js, _ in _replay("jobset-failed.json") if (js.get("status") or {}).get("restarts")
    ]
    said = [e.message for e in map(restart_event, seen) if e is not None]
    assert said and any("first failed job: bad-launcher-0" in m for m in said), said
    for message in said:
        assert "all jobs are ready" not in message and "jobset failed" not in message, message
        assert message.startswith("the JobSet restarted every Job (restart 1 of 1)"), message
