"""Queued steps on the fake cluster, with the test playing Kueue: the backend discovers
kueue.x-k8s.io once, watches the namespace's Workloads (one watch, no read per step) and
shows each Workload's word on its step: Misconfigured, admitted, evicted (PREEMPTED, with
the eviction in the step's history), waiting for quota again, then SUCCEEDED.

The fake's own Kueue emulation (issue 32 item 6) is built apart; here the Workload CRD is
installed by hand and its objects written as the recorded controller writes them
(../shared/k8s-reference/kueue-preempted.json, kueue-no-localqueue.json), so the backend is
held to the transcripts' conditions over real HTTP.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from k8sjobs.state import StepState
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster

from ..testing.crdhelpers import established, widget_crd
from ..waiting import wait_until
from .kubehelpers import session, step


def workload_crd() -> dict[str, Any]:
    """Return a namespaced Workload CRD (kueue.x-k8s.io/v1beta2) that keeps any spec and status."""
    crd = widget_crd()
    crd["metadata"]["name"] = "workloads.kueue.x-k8s.io"
    crd["spec"] |= {
        "group": "kueue.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "workloads", "singular": "workload", "kind": "Workload"},
    }
    crd["spec"]["versions"][0]["name"] = "v1beta2"
    return crd


MISCONFIGURED = "LocalQueue no-such-queue doesn't exist"
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
    "default, 1 more needed"
)
PREEMPTED = "Preempted to accommodate a workload (UID: 3a7c, JobUID: 1aad) due to prioritization"


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


ADMITTED = [
    _condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
    _condition("Admitted", "True", "Admitted", "The workload is admitted"),
]
NO_RESERVATION = _condition("Admitted", "False", "NoReservation", "The workload has no reservation")


async def _install(cluster: FakeCluster) -> None:
    cluster.store.create("customresourcedefinitions", "", workload_crd())
    await wait_until(
        lambda: established(cluster, "workloads.kueue.x-k8s.io"), "the Workload CRD is Established"
    )


def _set_job_suspended(cluster: FakeCluster, name: str, suspend: bool) -> None:
    job = copy.deepcopy(cluster.get("jobs", name))
    assert job is not None
    job["spec"]["suspend"] = suspend
    cluster.store.update("jobs", "default", job)


def _write_workload(
    cluster: FakeCluster, job_name: str, conditions: list[dict[str, str]], evictions: int = 0
) -> None:
    job = cluster.get("jobs", job_name)
    assert job is not None
    name = f"job-{job_name}-1a2b3"
    status: dict[str, Any] = {"conditions": conditions}
    if evictions:
        status["schedulingStats"] = {
            "evictions": [{"count": evictions, "reason": "Preempted", "underlyingCause": ""}]
        }
    current = cluster.get("workloads", name)
    if current is None:
        uid = job["metadata"]["uid"]
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "labels": {"kueue.x-k8s.io/job-uid": uid},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1}]},
            "status": status,
        }
        cluster.store.create("workloads", "default", body)
        return
    updated = copy.deepcopy(current)
    updated["status"] = status
    cluster.store.update("workloads", "default", updated)


async def test_a_queued_step_says_kueues_words_through_preemption_to_success(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await _install(cluster)
    cluster.requests.reset()
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("low", duration=1.0, queue="lq", priority="low"))
        name = handle.object_name
        await wait_until(lambda: cluster.get("jobs", name) is not None, "the Job exists")
        assert cluster.get("jobs", name)["spec"]["suspend"] is True  # type: ignore[index]
        bad = _condition("QuotaReserved", "False", "Misconfigured", MISCONFIGURED)
        _write_workload(cluster, name, [bad, NO_RESERVATION])
        await wait_until(lambda: handle.result.reason == "Misconfigured", "Kueue's reason")
        assert (handle.state, handle.result.message) == (StepState.PENDING, MISCONFIGURED)

        _write_workload(cluster, name, ADMITTED)
        _set_job_suspended(cluster, name, False)
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")

        evicted = [
            ADMITTED[0],
            _condition("Evicted", "True", "Preempted", PREEMPTED),
            ADMITTED[1],
            _condition("Preempted", "True", "InClusterQueue", PREEMPTED),
        ]
        _write_workload(cluster, name, evicted, evictions=1)
        _set_job_suspended(cluster, name, True)
        await wait_until(lambda: handle.state is StepState.PREEMPTED, "the step is preempted")
        assert (handle.result.reason, handle.result.message) == ("Preempted", PREEMPTED)

        waiting = [_condition("QuotaReserved", "False", "WaitingForQuota", QUOTA), *evicted[1:]]
        waiting[2] = NO_RESERVATION
        _write_workload(cluster, name, waiting, evictions=1)
        await wait_until(lambda: handle.result.reason == "WaitingForQuota", "waits again")
        assert (handle.state, handle.result.message) == (StepState.PENDING, QUOTA)

        again = [*ADMITTED, _condition("Evicted", "False", "QuotaReserved", "Previously: x")]
        _write_workload(cluster, name, again, evictions=1)
        _set_job_suspended(cluster, name, False)
        result = await handle.wait(60)
    assert result.state is StepState.SUCCEEDED and result.evictions == 1
    (eviction,) = [e for e in handle.events if e.reason == "Preempted"]
    assert PREEMPTED in eviction.message and eviction.action == "Ignore"
    # Its pod, stopped by the suspension (exit 143), spent no retry.
    assert [e.action for e in handle.events if e.action != "Ignore"] == []
    # One discovery, one Workload watch for the namespace, no read of any Workload.
    assert cluster.requests.count("get", "workloads") == 0
    assert cluster.requests.count("list", "workloads") == 1


async def test_unqueued_steps_ask_nothing_of_kueue(cluster: FakeCluster, tmp_path: Path) -> None:
    await _install(cluster)
    cluster.requests.reset()
    async with session(cluster, tmp_path) as s:
        result = await (await s.submit(step("plain"))).wait(60)
    assert result.state is StepState.SUCCEEDED
    assert [k for k in cluster.requests.counts if "kueue" in str(k) or "workload" in str(k)] == []


async def test_an_attached_queued_step_has_kueues_reason_when_attach_returns(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """`k8sjobs status` attaches: the Workload watch has listed before the handles return."""
    await _install(cluster)
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("orphan", queue="no-such-queue"))
        await wait_until(lambda: cluster.get("jobs", handle.object_name), "the Job exists")
        bad = _condition("QuotaReserved", "False", "Misconfigured", MISCONFIGURED)
        _write_workload(cluster, handle.object_name, [bad, NO_RESERVATION])
    cluster.requests.reset()
    async with session(cluster, tmp_path) as again:
        (found,) = await again.attach()
        assert (found.state, found.result.reason) == (StepState.PENDING, "Misconfigured")
        assert found.result.message == MISCONFIGURED
    assert cluster.requests.count("get", "workloads") == 0


async def test_a_queued_jobset_step_says_kueues_reason_from_the_jobsets_workload(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """Kueue's Workload of a JobSet is owned by the JobSet, not by a child Job."""
    await cluster.install_jobset()
    await _install(cluster)
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(
            Step(name="js", script="$(LAUNCHER) true\n", target="jobset", queue="lq")
        )
        name = handle.object_name
        await wait_until(lambda: cluster.get("jobsets", name) is not None, "the JobSet exists")
        jobset = cluster.get("jobsets", name)
        assert jobset is not None and jobset["spec"]["suspend"] is True
        uid = jobset["metadata"]["uid"]
        bad = _condition("QuotaReserved", "False", "Misconfigured", MISCONFIGURED)
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"jobset-{name}-1a2b3",
                "labels": {"kueue.x-k8s.io/job-uid": uid},
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": name,
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {"queueName": "lq"},
            "status": {"conditions": [bad, NO_RESERVATION]},
        }
        cluster.store.create("workloads", "default", body)
        await wait_until(lambda: handle.result.reason == "Misconfigured", "Kueue's reason")
        assert (handle.state, handle.result.message) == (StepState.PENDING, MISCONFIGURED)
