"""The fake's Kueue is off unless asked for, and serves Kueue's group as v0.20 does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from .conftest import call

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
