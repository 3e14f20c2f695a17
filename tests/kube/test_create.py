"""The one create path (kube/create.py), paged lists and the one-object deletion watch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.errors import NotFound, SpecMismatch
from k8sjobs.kube import KubeClient, load_config
from k8sjobs.kube.client import CONFIGMAPS, JOBS
from k8sjobs.kube.create import create_step
from k8sjobs.kube.watch import wait_deleted
from k8sjobs.render.manifests import Manifests, Target, render
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .kubehelpers import step


@pytest_asyncio.fixture
async def client(cluster: FakeCluster) -> AsyncIterator[KubeClient]:
    config = await load_config(str(cluster.kubeconfig_path))
    async with KubeClient(config) as kube:
        yield kube


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


def _ended(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def _ready(cluster: FakeCluster, name: str) -> bool:
    return bool(((cluster.get("jobs", name) or {}).get("status") or {}).get("ready"))


async def _create(client: KubeClient, manifests: Manifests, **options: Any) -> None:
    try:
        current = await client.get(JOBS, manifests.namespace, manifests.name)
    except NotFound:
        current = None
    await create_step(
        client,
        manifests,
        current=current,
        gone=lambda: wait_deleted(client, JOBS, "default", manifests.name, timeout=20),
        **{"replace": False, **options},
    )


async def test_list_all_follows_continue_tokens(cluster: FakeCluster, client: KubeClient) -> None:
    for i in range(7):
        cluster.store.create("configmaps", "default", _configmap(f"cm-{i}"))
    cluster.requests.reset()
    found = await client.list_all(CONFIGMAPS, "default", limit=3)
    names = {item["metadata"]["name"] for item in found["items"]}
    assert {f"cm-{i}" for i in range(7)} <= names
    assert cluster.request_count("list") == -(-len(found["items"]) // 3)
    assert found["metadata"]["resourceVersion"]
    assert "continue" not in found["metadata"]


async def test_wait_deleted_watches_instead_of_polling(
    cluster: FakeCluster, client: KubeClient
) -> None:
    cluster.store.create("configmaps", "default", _configmap("doomed"))
    cluster.requests.reset()
    waiter = asyncio.create_task(wait_deleted(client, CONFIGMAPS, "default", "doomed", timeout=20))
    await wait_until(lambda: cluster.request_count("watch") == 1, "the watch to open")
    assert not waiter.done()
    cluster.store.delete("configmaps", "default", "doomed")
    await asyncio.wait_for(waiter, 20)
    assert cluster.request_count("get") == 1  # one GET, then the watch: no polling


async def test_wait_deleted_returns_at_once_for_a_missing_object(
    cluster: FakeCluster, client: KubeClient
) -> None:
    cluster.requests.reset()
    await wait_deleted(client, CONFIGMAPS, "default", "never-was", timeout=20)
    assert cluster.request_count("watch") == 0


async def test_rerun_replaces_an_ended_job_of_the_same_spec_and_owns_the_extras(
    cluster: FakeCluster, client: KubeClient
) -> None:
    manifests = render(step("a", duration=0.05), Target(study="s"))
    await _create(client, manifests)
    first = cluster.get("jobs", manifests.name)
    assert first is not None
    await wait_until(lambda: _ended(cluster.get("jobs", manifests.name) or {}), "the Job to end")
    await _create(client, manifests, rerun=_ended)
    second = cluster.get("jobs", manifests.name)
    assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]
    configmap = cluster.get("configmaps", manifests.name)
    assert configmap is not None
    (owner,) = configmap["metadata"]["ownerReferences"]
    assert owner["uid"] == second["metadata"]["uid"]


async def test_same_spec_is_adopted_without_writes_and_another_spec_is_refused(
    cluster: FakeCluster, client: KubeClient
) -> None:
    manifests = render(step("a", duration=30), Target(study="s"))
    await _create(client, manifests)
    # Not known to have its ConfigMap yet: its create is sent again, refused (AlreadyExists)
    # and the one found is ours (it names the Job as owner); nothing changes.
    configmap = cluster.get("configmaps", manifests.name)
    cluster.requests.reset()
    await _create(client, manifests)
    assert cluster.request_count("create") == 1
    assert sum(cluster.request_count(v) for v in ("patch", "update", "delete")) == 0
    assert cluster.get("configmaps", manifests.name) == configmap
    # Once a pod of it is ready (so it mounted the ConfigMap), adopting it writes nothing.
    await wait_until(lambda: _ready(cluster, manifests.name), "its pod is ready")
    cluster.requests.reset()
    await _create(client, manifests)
    assert sum(cluster.request_count(v) for v in ("create", "patch", "update", "delete")) == 0
    other = render(step("a", duration=31), Target(study="s"))
    with pytest.raises(SpecMismatch, match=r'Step "a": Job .* still running.*--replace'):
        await _create(client, other)
