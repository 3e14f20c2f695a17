"""The fake's Kueue is off unless asked for, and serves Kueue's group as v0.20 does."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from ..render.test_minicluster import crd as flux_operator_crd
from .conftest import call, wait_until
from .crdhelpers import define, minicluster

REFERENCE = Path(os.environ.get("K8S_REFERENCE", "/work/shared/k8s-reference"))
DISCOVERY = REFERENCE / "jobset-kueue-discovery.json"
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "queued", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
        }
    },
}


@pytest.mark.skipif(not DISCOVERY.exists(), reason="k8s reference transcripts not found")
async def test_with_kueue_the_group_is_discovered_as_recorded(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    recorded = json.loads(DISCOVERY.read_text())["/apis/kueue.x-k8s.io"]["body"]
    async with FakeCluster(directory=tmp_path, kueue=True) as fake:
        status, body = await call(http, "GET", f"{fake.url}/apis/kueue.x-k8s.io")
        assert (status, body) == (200, recorded)
        for version in ("v1beta2", "v1beta1"):
            status, listing = await call(http, "GET", f"{fake.url}/apis/kueue.x-k8s.io/{version}")
            kinds = {r["kind"] for r in listing["resources"]}
            assert {"ClusterQueue", "LocalQueue", "Workload", "WorkloadPriorityClass"} <= kinds
        url = f"{fake.url}/apis/batch/v1/namespaces/default/jobs"
        status, created = await call(http, "POST", url, JOB)
        assert status == 201 and created["spec"]["suspend"] is True  # Kueue's webhook


async def test_without_kueue_there_is_no_group_and_no_webhook(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with FakeCluster(directory=tmp_path) as fake:
        _, groups = await call(http, "GET", f"{fake.url}/apis")
        assert "kueue.x-k8s.io" not in {g["name"] for g in groups["groups"]}
        status, _ = await call(http, "GET", f"{fake.url}/apis/kueue.x-k8s.io")
        assert status == 404
        url = f"{fake.url}/apis/batch/v1/namespaces/default/jobs"
        status, created = await call(http, "POST", url, JOB)
        assert status == 201 and created["spec"]["suspend"] is False


async def test_kueue_admits_a_minicluster_through_its_job_labels(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The Flux Operator's Indexed Job carries `spec.jobLabels`: Kueue queues it as one
    Workload of `size` pods, suspended until admitted, then unsuspended with the flavor's
    nodeSelector; a second MiniCluster over the quota waits with Kueue's reason."""
    async with FakeCluster(directory=tmp_path, kueue=True) as fake:
        await define(http, fake, flux_operator_crd())  # the published CRD: jobLabels kept
        await make_queues(http, fake, cpu="2")
        labels = {"kueue.x-k8s.io/queue-name": "lq"}
        resources = {"requests": {"cpu": "1"}}
        for name in ("first", "second"):
            body = minicluster(name, size=2, jobLabels=labels)
            body["spec"]["containers"][0]["resources"] = resources
            url = f"{fake.url}/apis/flux-framework.org/v1alpha2/namespaces/default/miniclusters"
            status, _ = await call(http, "POST", url, body)
            assert status == 201
            await wait_until(lambda n=name: fake.get("jobs", n) is not None, f"the Job {name}")

        def workload(job: str) -> dict[str, Any]:
            found = [
                w
                for w in fake.objects("workloads")
                if w["metadata"]["name"].startswith(f"job-{job}-")
            ]
            return found[0] if found else {}

        await wait_until(lambda: reason(workload("second")) == "WaitingForQuota", "second waits")
        first, second = workload("first"), workload("second")
        assert first["spec"]["podSets"][0]["count"] == 2
        assert reason(first) == "QuotaReserved"
        assert second["status"]["conditions"][0]["message"] == (
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor default, 2 more needed"
        )
        job = fake.get("jobs", "first") or {}
        assert job["spec"]["suspend"] is False
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert (fake.get("jobs", "second") or {})["spec"]["suspend"] is True


def reason(workload: dict[str, Any]) -> str | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition["type"] == "QuotaReserved":
            return str(condition["reason"])
    return None


async def make_queues(http: aiohttp.ClientSession, fake: FakeCluster, cpu: str) -> None:
    """Create the recorded setup: flavor `default` (linux nodes), ClusterQueue cq, LocalQueue lq."""
    base = f"{fake.url}/apis/kueue.x-k8s.io/v1beta2"
    flavor = {
        "metadata": {"name": "default"},
        "spec": {"nodeLabels": {"kubernetes.io/os": "linux"}},
    }
    resources = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "2Gi"}]
    queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "default", "resources": resources}],
                }
            ]
        },
    }
    local = {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}
    for url, body, kind in (
        (f"{base}/resourceflavors", flavor, "ResourceFlavor"),
        (f"{base}/clusterqueues", queue, "ClusterQueue"),
        (f"{base}/namespaces/default/localqueues", local, "LocalQueue"),
    ):
        status, created = await call(
            http, "POST", url, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, **body}
        )
        assert status == 201, created


async def test_kueue_admits_a_jobset_as_one_workload(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """A JobSet with the queue label: suspended on create, one Workload with a podSet per
    replicated Job (replicas x parallelism pods), unsuspended on admission with the flavor's
    nodeSelector on each replicated Job's pods, Finished when the JobSet completes."""
    async with FakeCluster(directory=tmp_path, kueue=True) as fake:
        await fake.install_jobset()
        await make_queues(http, fake, cpu="2")
        pod = {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "m", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}
                ],
            }
        }

        def rjob(name: str, replicas: int) -> dict[str, Any]:
            return {"name": name, "replicas": replicas, "template": {"spec": {"template": pod}}}

        body = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"replicatedJobs": [rjob("launcher", 1), rjob("workers", 2)]},
        }
        url = f"{fake.url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
        status, created = await call(http, "POST", url, body)
        assert status == 201 and created["spec"]["suspend"] is True, created

        def workload() -> dict[str, Any]:
            found = fake.objects("workloads")
            return found[0] if found else {}

        await wait_until(lambda: finished(workload()), "the JobSet's Workload is Finished")
        wl = workload()
        assert wl["metadata"]["name"].startswith("jobset-js-")
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("launcher", 1),
            ("workers", 2),
        ]
        usage = [a["resourceUsage"] for a in wl["status"]["admission"]["podSetAssignments"]]
        assert usage == [{"cpu": "500m"}, {"cpu": "1"}]
        for job in fake.objects("jobs"):
            selector = job["spec"]["template"]["spec"].get("nodeSelector")
            assert selector == {"kubernetes.io/os": "linux"}, job["metadata"]["name"]


def finished(workload: dict[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Finished" and c["status"] == "True" for c in conditions)
