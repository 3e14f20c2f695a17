"""The fake cluster's scheduler view: a pod that fits no node's allocatable, or whose
nodeSelector no node matches, stays Pending with PodScheduled=False/Unschedulable and a
FailedScheduling Warning Event worded as kube-scheduler v1.36 words it, and is placed once
room frees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from k8sjobs.testing import FakeCluster, KubeletConfig, NodeConfig

from .conftest import FAST, call, wait_until

JSON = {"Content-Type": "application/json"}
LONG = {"fake.k8sjobs.io/duration": "3600"}


@pytest_asyncio.fixture
async def small(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """A cluster whose one node has 2 cpus, 1Gi, room for 3 pods and a `zone: a` label."""
    node = NodeConfig(cpu="2", memory="1Gi", pods=3, labels={"zone": "a"})
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.005)
    async with FakeCluster(
        directory=tmp_path, controller=FAST, kubelet_config=kubelet, node=node
    ) as fake:
        yield fake


def pod(name: str, resources: Any = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    annotations = spec.pop("annotations", LONG)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


async def submit(http: aiohttp.ClientSession, cluster: FakeCluster, body: Any) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/pods"
    status, created = await call(http, "POST", url, body, **JSON)
    assert status == 201, created


def scheduled(cluster: FakeCluster, name: str) -> dict[str, Any] | None:
    found = cluster.get("pods", name)
    conditions = (found or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def unschedulable_message(reasons: str, preemption: str) -> str:
    return (
        f"0/1 nodes are available: {reasons}. preemption: 0/1 nodes are available: 1 {preemption}."
    )


async def test_a_pod_asking_more_than_the_node_has_is_unschedulable(
    small: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await submit(http, small, pod("big", {"requests": {"cpu": "3", "memory": "2Gi"}}))
    await wait_until(lambda: scheduled(small, "big"), "the scheduler judged the pod")
    condition = scheduled(small, "big")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    message = unschedulable_message(
        "1 Insufficient cpu, 1 Insufficient memory", "No preemption victims found for incoming pod"
    )
    assert condition["message"] == message
    found = small.get("pods", "big")
    assert found is not None
    assert found["status"]["phase"] == "Pending" and not found["spec"].get("nodeName")
    url = f"{small.url}/apis/events.k8s.io/v1/namespaces/default/events"
    _, events = await call(http, "GET", url + "?fieldSelector=regarding.name=big,type=Warning")
    (event,) = events["items"]
    assert (event["reason"], event["note"], event["action"]) == (
        "FailedScheduling",
        message,
        "Scheduling",
    )
    assert event["reportingController"] == "default-scheduler"


async def test_too_many_pods_and_freed_room_places_the_waiting_pod(
    small: FakeCluster, http: aiohttp.ClientSession
) -> None:
    for name in ("a", "b"):
        await submit(http, small, pod(name, {"requests": {"cpu": "1"}}))
    await submit(http, small, pod("c", {"requests": {"cpu": "1"}}))
    await wait_until(lambda: scheduled(small, "c"), "c judged")
    assert scheduled(small, "c")["message"] == unschedulable_message(  # type: ignore[index]
        "1 Insufficient cpu", "No preemption victims found for incoming pod"
    )
    small.kubelet.finish("default", "a")
    await wait_until(lambda: (scheduled(small, "c") or {}).get("status") == "True", "c placed")
    await submit(http, small, pod("d", annotations={}))  # no requests: only the pod count
    await submit(http, small, pod("e", annotations={}))
    await wait_until(lambda: scheduled(small, "e"), "e judged")
    await wait_until(
        lambda: any(
            "1 Too many pods" in (scheduled(small, n) or {}).get("message", "") for n in "de"
        ),
        "the fourth pod is refused the node's pod count",
    )


async def test_a_node_selector_no_node_matches_keeps_the_pod_pending(
    small: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await submit(http, small, pod("elsewhere", nodeSelector={"zone": "b"}))
    await submit(http, small, pod("here", nodeSelector={"zone": "a"}))
    await wait_until(lambda: scheduled(small, "elsewhere"), "judged")
    assert scheduled(small, "elsewhere")["message"] == unschedulable_message(  # type: ignore[index]
        "1 node(s) didn't match Pod's node affinity/selector",
        "Preemption is not helpful for scheduling",
    )
    await wait_until(lambda: (scheduled(small, "here") or {}).get("status") == "True")


async def test_init_containers_count_at_their_peak_and_overhead_counts(
    small: FakeCluster, http: aiohttp.ClientSession
) -> None:
    peak = pod("peak", {"requests": {"cpu": "1"}})
    peak["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}
    ]
    await submit(http, small, peak)
    await wait_until(lambda: (scheduled(small, "peak") or {}).get("status") == "True")
    small.kubelet.finish("default", "peak")
    await wait_until(lambda: small.get("pods", "peak")["status"]["phase"] == "Succeeded")  # type: ignore[index]
    runtime = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata"},
        "handler": "kata",
        "overhead": {"podFixed": {"cpu": "1500m"}},
    }
    url = f"{small.url}/apis/node.k8s.io/v1/runtimeclasses"
    status, _ = await call(http, "POST", url, runtime, **JSON)
    assert status == 201
    await submit(http, small, pod("heavy", {"requests": {"cpu": "1"}}, runtimeClassName="kata"))
    await wait_until(lambda: scheduled(small, "heavy"), "judged")
    assert "1 Insufficient cpu" in scheduled(small, "heavy")["message"]  # type: ignore[index]


async def test_the_node_reports_its_allocatable(
    small: FakeCluster, http: aiohttp.ClientSession
) -> None:
    _, node = await call(http, "GET", f"{small.url}/api/v1/nodes/local-node")
    assert node["status"]["allocatable"] == {
        "cpu": "2",
        "ephemeral-storage": "1Ti",
        "memory": "1Gi",
        "pods": "3",
    }
    assert node["metadata"]["labels"]["zone"] == "a"
