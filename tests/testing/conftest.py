"""Shared helpers for the fake cluster's tests: a cluster with short timings and clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from kubernetes_asyncio import client, config

from k8sjobs.testing import ControllerConfig, FakeCluster, KubeletConfig

from ..waiting import wait_until as wait_until  # the one helper, re-exported for this folder

FAST = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=1.0)


def core_api(api: client.ApiClient) -> Any:
    """Return the official client's CoreV1Api on ``api``, typed loosely (see ``batch_api``)."""
    return client.CoreV1Api(api)


def batch_api(api: client.ApiClient) -> Any:
    """Return the official client's BatchV1Api on ``api``, typed loosely.

    Its hints name model classes (``V1Job``) where it takes plain dicts too, as users of
    kubectl-shaped manifests send them; these tests send dicts, so the API object is Any.
    """
    return client.BatchV1Api(api)


def custom_api(api: client.ApiClient) -> Any:
    """Return the official client's CustomObjectsApi on ``api``, typed loosely (as above)."""
    return client.CustomObjectsApi(api)


async def api_client(cluster: FakeCluster) -> client.ApiClient:
    """Return a kubernetes_asyncio client built from the cluster's kubeconfig."""
    return await config.new_client_from_config(config_file=str(cluster.kubeconfig_path))


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """A simulated cluster with fast controller and kubelet timings."""
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.005, default_duration=0.05)
    async with FakeCluster(
        directory=tmp_path, controller=FAST, kubelet_config=kubelet, bookmark_interval=0.2
    ) as fake:
        yield fake


@pytest_asyncio.fixture
async def api(cluster: FakeCluster) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient talking to `cluster` over HTTP."""
    async with await api_client(cluster) as api_client_:
        yield api_client_


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain aiohttp session, for requests a generated client cannot make."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    """Send one request (a dict body as JSON); return the status and the decoded body."""
    data = json.dumps(body) if body is not None and not isinstance(body, str) else body
    async with http.request(method, url, data=data, headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else None


async def assert_invalid(
    http: aiohttp.ClientSession,
    cluster: FakeCluster,
    path: str,
    kind: str,
    body: dict[str, Any],
    causes: list[dict[str, str]],
    group: str = "",
) -> None:
    """Assert that POSTing `body` to `path` (ending in the plural) is the 422 Invalid the real
    server answers, listing `causes` in its details and its message, and stores nothing."""
    status, answer = await call(
        http, "POST", f"{cluster.url}{path}", body, **{"Content-Type": "application/json"}
    )
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    name = body["metadata"]["name"]
    details = {"name": name, "kind": kind, "causes": causes, **({"group": group} if group else {})}
    assert answer["details"] == details
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    summary = summary if len(causes) == 1 else f"[{summary}]"
    qualified = f"{kind}.{group}" if group else kind
    assert answer["message"] == f'{qualified} "{name}" is invalid: {summary}'
    assert cluster.objects(path.rsplit("/", 1)[-1]) == []
