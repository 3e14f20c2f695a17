"""Admission of pods in the fake cluster: PriorityClass, RuntimeClass, LimitRange and
ResourceQuota refuse or change a pod as kube-apiserver v1.36 does, with its words, and the
job controller reports each refusal as a FailedCreate Warning Event and retries."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver.podresources import Quantity

from .conftest import call, wait_until

JSON = {"Content-Type": "application/json"}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if "resources" in spec:
        container["resources"] = spec.pop("resources")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


async def create(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    return await call(http, "POST", url, body, **JSON)


@pytest.fixture
def pods_url(cluster: FakeCluster) -> str:
    return f"{cluster.url}/api/v1/namespaces/default/pods"


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1", "1"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("1024Mi", "1Gi"),
        ("512Ki", "512Ki"),
        ("0.5Ki", "512"),
        ("100m", "100m"),
        ("0", "0"),
        ("1e3", "1e3"),
        ("2G", "2G"),
    ],
)
def test_quantities_print_as_go_canonicalises_them(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical
    assert str(Quantity(Fraction(3, 2))) == "1500m"


async def test_a_missing_priority_class_refuses_the_pod_naming_its_prefix(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    body = pod("", priorityClassName="no-such-class")
    body["metadata"] = {"generateName": "prio-"}
    status, refusal = await create(http, pods_url, body)
    assert status == 403
    assert refusal["reason"] == "Forbidden"
    assert refusal["message"] == (
        'pods "prio-" is forbidden: no PriorityClass with name no-such-class was found'
    )
    assert refusal["details"] == {"name": "prio-", "kind": "pods"}
    assert cluster.objects("pods") == []


async def test_a_priority_class_sets_priority_and_a_global_default_applies(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    classes = f"{cluster.url}/apis/scheduling.k8s.io/v1/priorityclasses"
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
        "preemptionPolicy": "Never",
    }
    low = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "low"},
        "value": 10,
        "globalDefault": True,
    }
    for body in (high, low):
        status, created = await create(http, classes, body)
        assert status == 201, created
    _, listed = await call(http, "GET", classes)
    assert listed["items"][1]["preemptionPolicy"] == "PreemptLowerPriority"  # defaulted
    _, hi = await create(http, pods_url, pod("hi", priorityClassName="high"))
    assert (hi["spec"]["priority"], hi["spec"]["preemptionPolicy"]) == (1000, "Never")
    _, plain = await create(http, pods_url, pod("plain"))
    assert (plain["spec"]["priorityClassName"], plain["spec"]["priority"]) == ("low", 10)
    status, refusal = await create(http, pods_url, pod("x", priorityClassName="high", priority=5))
    assert status == 403
    assert (
        "the integer value of priority (5) must not be provided in pod spec" in (refusal["message"])
    )


async def test_runtime_class_missing_is_refused_and_its_overhead_applies(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    status, refusal = await create(http, pods_url, pod("r", runtimeClassName="gvisor"))
    assert (status, refusal["message"]) == (
        403,
        'pods "r" is forbidden: pod rejected: RuntimeClass "gvisor" not found',
    )
    runtime = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
        "overhead": {"podFixed": {"cpu": "250m"}},
        "scheduling": {"nodeSelector": {"sandbox": "yes"}},
    }
    status, created = await create(
        http, f"{cluster.url}/apis/node.k8s.io/v1/runtimeclasses", runtime
    )
    assert status == 201, created
    _, admitted = await create(http, pods_url, pod("r", runtimeClassName="gvisor"))
    assert admitted["spec"]["overhead"] == {"cpu": "250m"}
    assert admitted["spec"]["nodeSelector"] == {"sandbox": "yes"}


async def _limit_range(http: aiohttp.ClientSession, cluster: FakeCluster, item: Any) -> Any:
    body = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "lr"},
        "spec": {"limits": [{"type": "Container", **item}]},
    }
    url = f"{cluster.url}/api/v1/namespaces/default/limitranges"
    status, created = await create(http, url, body)
    assert status == 201, created
    return created


async def test_a_limit_range_fills_defaults_and_notes_them(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    created = await _limit_range(
        http, cluster, {"max": {"cpu": "2"}, "defaultRequest": {"memory": "64Mi"}}
    )
    assert created["spec"]["limits"][0] == {
        "type": "Container",
        "max": {"cpu": "2"},
        "default": {"cpu": "2"},  # a default limit from max, as the API server defaults it
        "defaultRequest": {"cpu": "2", "memory": "64Mi"},
    }
    _, admitted = await create(http, pods_url, pod("d", resources={"requests": {"cpu": "1"}}))
    resources = admitted["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2"}, "requests": {"cpu": "1", "memory": "64Mi"}}
    assert admitted["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: memory request for container main; cpu limit for container main"
    )


@pytest.mark.parametrize(
    ("item", "resources", "why"),
    [
        (
            {"max": {"cpu": "100m"}},
            {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
            "maximum cpu usage per Container is 100m, but limit is 1",
        ),
        (
            {"min": {"memory": "1Gi"}},
            {"requests": {"memory": "512Mi"}},
            "minimum memory usage per Container is 1Gi, but request is 512Mi",
        ),
        (
            {"maxLimitRequestRatio": {"cpu": "2"}},
            {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
            "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000",
        ),
        (
            {"min": {"cpu": "1"}, "max": {"memory": "1Gi"}},
            {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi"}},
            "[minimum cpu usage per Container is 1, but request is 500m, maximum memory usage per "
            "Container is 1Gi, but limit is 2Gi]",
        ),
    ],
)
async def test_a_limit_range_refuses_a_pod_outside_it_after_naming_it(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    pods_url: str,
    item: Any,
    resources: Any,
    why: str,
) -> None:
    await _limit_range(http, cluster, item)
    body = pod("", resources=resources)
    body["metadata"] = {"generateName": "limit-"}
    status, refusal = await create(http, pods_url, body)
    assert status == 403, refusal
    name = refusal["details"]["name"]
    assert name.startswith("limit-") and len(name) == len("limit-") + 5  # named, then refused
    assert refusal["message"] == f'pods "{name}" is forbidden: {why}'
    assert cluster.objects("pods") == []


async def _quota(http: aiohttp.ClientSession, cluster: FakeCluster, hard: Any) -> str:
    url = f"{cluster.url}/api/v1/namespaces/default/resourcequotas"
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q"},
        "spec": {"hard": hard},
    }
    status, created = await create(http, url, body)
    assert status == 201, created
    return f"{url}/q"


async def test_a_quota_counts_pods_until_they_end_and_keeps_status_used(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    cluster.kubelet.pause(True)  # the pods stay Pending until the test ends one
    quota = await _quota(http, cluster, {"pods": "1", "count/configmaps": "5"})

    async def used() -> Any:
        return ((await call(http, "GET", quota))[1].get("status") or {}).get("used")

    await wait_until(lambda: cluster.get("resourcequotas", "q").get("status"), "a status")  # type: ignore[union-attr]
    assert await used() == {"count/configmaps": "0", "pods": "0"}
    status, _ = await create(http, pods_url, pod("first"))
    assert status == 201
    status, refusal = await create(http, pods_url, pod("second"))
    assert (status, refusal["message"]) == (
        403,
        'pods "second" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, '
        "limited: pods=1",
    )
    assert (await used())["pods"] == "1"
    cluster.kubelet.pause(False)
    await wait_until(lambda: cluster.get("pods", "first")["status"]["phase"] == "Succeeded")  # type: ignore[index]
    await wait_until(lambda: cluster.get("resourcequotas", "q")["status"]["used"]["pods"] == "0")  # type: ignore[index]
    status, _ = await create(http, pods_url, pod("second"))
    assert status == 201


async def test_a_compute_quota_needs_values_and_refuses_too_much(
    cluster: FakeCluster, http: aiohttp.ClientSession, pods_url: str
) -> None:
    cluster.kubelet.pause(True)
    await _quota(http, cluster, {"requests.cpu": "2", "limits.memory": "1Gi"})
    status, refusal = await create(http, pods_url, pod("bare"))
    assert (status, refusal["message"]) == (
        403,
        'pods "bare" is forbidden: failed quota: q: must specify limits.memory for: main; '
        "requests.cpu for: main",
    )
    sized = {"requests": {"cpu": "1500m"}, "limits": {"memory": "512Mi"}}
    status, _ = await create(http, pods_url, pod("a", resources=sized))
    assert status == 201
    status, refusal = await create(http, pods_url, pod("b", resources=sized))
    assert (status, refusal["message"]) == (
        403,
        'pods "b" is forbidden: exceeded quota: q, requested: requests.cpu=1500m, '
        "used: requests.cpu=1500m, limited: requests.cpu=2",
    )


async def test_the_job_controller_reports_refusals_and_runs_once_the_quota_allows(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    quota = await _quota(http, cluster, {"pods": "0"})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "quota"},
        "spec": {"backoffLimit": 0, "template": {"spec": pod("")["spec"]}},
    }
    url = f"{cluster.url}/apis/batch/v1/namespaces/default/jobs"
    status, created = await create(http, url, job)
    assert status == 201, created

    def failed_creates() -> list[dict[str, Any]]:
        return [e for e in cluster.objects("events") if e["reason"] == "FailedCreate"]

    await wait_until(lambda: len(failed_creates()) >= 2, "two FailedCreate events")
    event = failed_creates()[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "quota"
    assert event["message"].startswith('Error creating: pods "quota-')
    assert event["message"].endswith(
        "is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0"
    )
    assert cluster.objects("pods") == []
    assert "conditions" not in cluster.get("jobs", "quota")["status"]  # type: ignore[index]
    status, _ = await call(
        http,
        "PATCH",
        quota,
        {"spec": {"hard": {"pods": "1"}}},
        **{"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200

    def complete() -> bool:
        conditions = cluster.get("jobs", "quota")["status"].get("conditions", [])  # type: ignore[index]
        return any(c["type"] == "Complete" for c in conditions)

    await wait_until(complete, "the Job completes once its pod is admitted")
