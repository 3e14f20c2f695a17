"""The fake API server, driven only through kubernetes_asyncio over HTTP (and kubectl)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from k8sjobs.testing import FakeCluster

from .conftest import api_client, batch_api, core_api, wait_until

REFERENCE = Path(os.environ.get("K8S_REFERENCE", "/work/shared/k8s-reference"))


def job_body(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "command": ["true"]}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def status_of(cluster: FakeCluster, resource: str, name: str) -> dict[str, Any]:
    """Return the status of the object `name` in "default" ({} while it does not exist)."""
    found = cluster.get(resource, name) or {}
    status: dict[str, Any] = found.get("status") or {}
    return status


def cm_body(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}, **meta}, "data": {"a": "1"}}


async def error_of(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.body is not None
    return caught.value.status, json.loads(caught.value.body)


@pytest.mark.skipif(not (REFERENCE / "errors.json").exists(), reason="no reference")
async def test_error_bodies_match_the_recorded_ones(api: client.ApiClient) -> None:
    recorded = json.loads((REFERENCE / "errors.json").read_text())
    core, batch = core_api(api), batch_api(api)
    assert await error_of(core.read_namespaced_config_map("nope", "default")) == (
        404,
        recorded["get_missing"]["body"],
    )
    created = await core.create_namespaced_config_map("default", cm_body("c1"))
    assert await error_of(core.create_namespaced_config_map("default", cm_body("c1"))) == (
        409,
        recorded["create_duplicate"]["body"],
    )
    stale = cm_body("c1", resourceVersion="1")
    await core.replace_namespaced_config_map(
        "c1",
        "default",
        {
            **cm_body("c1"),
            "metadata": {"name": "c1", "resourceVersion": created.metadata.resource_version},
        },
    )
    assert await error_of(core.replace_namespaced_config_map("c1", "default", stale)) == (
        409,
        recorded["update_stale_resource_version"]["body"],
    )
    bad = job_body("Bad_Name")
    del bad["spec"]["template"]["spec"]["restartPolicy"]
    assert await error_of(batch.create_namespaced_job("default", bad)) == (
        422,
        recorded["invalid_job"]["body"],
    )
    big = {"metadata": {"name": "big"}, "data": {"k": "x" * (1024 * 1024 + 9)}}
    assert await error_of(core.create_namespaced_config_map("default", big)) == (
        422,
        recorded["configmap_too_large"]["body"],
    )


async def test_schema_violations_and_immutable_template_are_invalid(api: client.ApiClient) -> None:
    batch = batch_api(api)
    wrong = job_body("typo")
    wrong["spec"]["template"]["spec"]["containers"][0]["comand"] = ["true"]
    status, body = await error_of(batch.create_namespaced_job("default", wrong))
    assert (status, body["reason"]) == (422, "Invalid")
    assert "comand" in body["details"]["causes"][0]["message"]
    await batch.create_namespaced_job("default", job_body("j"))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}
    status, body = await error_of(batch.patch_namespaced_job("j", "default", patch))
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.template"


async def test_job_create_fills_in_the_server_defaults(api: client.ApiClient) -> None:
    batch = batch_api(api)
    job = await batch.create_namespaced_job("default", job_body("d"))
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert (job.spec.manual_selector, job.spec.suspend, job.spec.completion_mode) == (
        False,
        False,
        "NonIndexed",
    )
    assert job.spec.pod_replacement_policy == "TerminatingOrFailed"
    assert job.metadata.labels["job-name"] == "d" and job.metadata.generation == 1
    pod_spec = job.spec.template.spec
    assert (
        pod_spec.dns_policy,
        pod_spec.scheduler_name,
        pod_spec.termination_grace_period_seconds,
    ) == ("ClusterFirst", "default-scheduler", 30)
    container = pod_spec.containers[0]
    assert (container.image_pull_policy, container.termination_message_path) == (
        "Always",
        "/dev/termination-log",
    )


async def test_missing_namespace_is_not_found(api: client.ApiClient) -> None:
    status, body = await error_of(
        core_api(api).create_namespaced_config_map("nowhere", cm_body("c"))
    )
    assert (status, body["message"]) == (404, 'namespaces "nowhere" not found')


async def test_list_filters_by_label_and_field_selectors(api: client.ApiClient) -> None:
    core = core_api(api)
    for name, labels in [("a", {"app": "x", "tier": "1"}), ("b", {"app": "y"}), ("c", {})]:
        await core.create_namespaced_config_map("default", cm_body(name, labels))

    async def names(**kwargs: str) -> list[str]:
        found = await core.list_namespaced_config_map("default", **kwargs)
        return [item.metadata.name for item in found.items]

    assert await names(label_selector="app=x") == ["a"]
    assert await names(label_selector="app!=x") == ["b", "c"]
    assert await names(label_selector="app in (x, y)") == ["a", "b"]
    assert await names(label_selector="app notin (x)") == ["b", "c"]
    assert await names(label_selector="app") == ["a", "b"]
    assert await names(label_selector="!app") == ["c"]
    assert await names(label_selector="app=x,tier=1") == ["a"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="metadata.namespace=default,metadata.name!=b") == ["a", "c"]


async def test_list_pages_with_limit_and_continue_until_compacted(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core = core_api(api)
    for i in range(5):
        await core.create_namespaced_config_map("default", cm_body(f"cm{i}"))
    first = await core.list_namespaced_config_map("default", limit=2)
    assert [i.metadata.name for i in first.items] == ["cm0", "cm1"]
    assert first.metadata.remaining_item_count == 3
    second = await core.list_namespaced_config_map(
        "default", limit=2, _continue=first.metadata._continue
    )
    assert [i.metadata.name for i in second.items] == ["cm2", "cm3"]
    cluster.faults.compact()
    status, body = await error_of(
        core.list_namespaced_config_map("default", limit=2, _continue=second.metadata._continue)
    )
    assert (status, body["reason"]) == (410, "Expired")


async def test_a_page_reads_its_own_objects_not_every_one_before_it(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """A relist of 100,000 objects in pages of 500 walked every object for each page; a
    page now starts by bisection. With a selector, remainingItemCount is left out (unknown
    then), as a real API server does."""
    for i in range(300):
        meta = {"name": f"cm{i:03d}", "labels": {"app": "x"}}
        cluster.store.create("configmaps", "default", {"metadata": meta, "data": {}})
    store_get, store_iter, reads = cluster.store.get, cluster.store.iter, [0]

    def counting_get(resource: str, namespace: str, name: str) -> Any:
        reads[0] += 1
        return store_get(resource, namespace, name)

    def counting_iter(
        resource: str, namespace: str | None = None, after: str = ""
    ) -> Iterator[Any]:
        for obj in store_iter(resource, namespace, after):
            reads[0] += 1
            yield obj

    cluster.store.get = counting_get  # type: ignore[method-assign]
    cluster.store.iter = counting_iter  # type: ignore[method-assign]
    core, seen, token, pages = core_api(api), [], None, 0
    while True:
        reads[0] = 0
        page = await core.list_namespaced_config_map(
            "default", limit=10, label_selector="app=x", _continue=token
        )
        pages += 1
        assert reads[0] <= 12, (pages, reads[0])  # the page's 10 and the one after
        assert page.metadata.remaining_item_count is None
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"cm{i:03d}" for i in range(300)] and pages == 30
    reads[0] = 0
    whole = await core.list_namespaced_config_map("default", limit=100)
    assert whole.metadata.remaining_item_count == 200
    assert reads[0] <= 102  # counting the rest does not walk it


async def collect(api: client.ApiClient, count: int, **kwargs: Any) -> list[tuple[str, str]]:
    core = core_api(api)
    seen: list[tuple[str, str]] = []
    async with watch.Watch() as watcher, asyncio.timeout(10):
        async for event in watcher.stream(
            core.list_namespaced_config_map, "default", timeout_seconds=5, **kwargs
        ):
            seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
            if len(seen) == count:
                break
    return seen


async def test_watch_replays_from_a_resource_version_and_filters(api: client.ApiClient) -> None:
    core = core_api(api)
    listed = await core.list_namespaced_config_map("default")
    rv = listed.metadata.resource_version
    await core.create_namespaced_config_map("default", cm_body("w1", {"k": "v"}))
    await core.create_namespaced_config_map("default", cm_body("w2"))
    await core.patch_namespaced_config_map("w1", "default", {"data": {"b": "2"}})
    await core.delete_namespaced_config_map("w1", "default")
    events = await collect(api, 3, resource_version=rv, label_selector="k=v")
    assert events == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert await collect(api, 1) == [("ADDED", "w2")]  # no RV: the current state first


async def test_watch_from_a_compacted_version_answers_410(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core = core_api(api)
    await core.create_namespaced_config_map("default", cm_body("x"))
    rv = (await core.list_namespaced_config_map("default")).metadata.resource_version
    await core.create_namespaced_config_map("default", cm_body("y"))
    cluster.faults.compact()
    with pytest.raises(ApiException) as caught:
        await collect(api, 1, resource_version=rv)
    assert caught.value.status == 410


async def test_watch_sends_bookmarks_and_ends_at_its_timeout(api: client.ApiClient) -> None:
    core = core_api(api)
    rv = (await core.list_namespaced_config_map("default")).metadata.resource_version
    response = await core.list_namespaced_config_map(
        "default",
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    lines = (await response.read()).splitlines()
    assert lines and all(json.loads(line)["type"] == "BOOKMARK" for line in lines)


async def test_dropped_watches_end_their_streams(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core = core_api(api)
    response = await core.list_namespaced_config_map(
        "default", watch=True, timeout_seconds=30, _preload_content=False
    )
    await wait_until(lambda: cluster.store.watcher_count() == 1, "the watch is open")
    assert cluster.faults.drop_watches() == 1
    async with asyncio.timeout(5):
        assert await response.read() == b""


async def test_watches_whose_clients_vanish_are_unregistered(cluster: FakeCluster) -> None:
    """kube-apiserver ends a watch once its client has gone; left registered, each would hold
    its queue (and take every event) for its 30 minute timeout."""
    start, tasks, threads = (
        cluster.store.watcher_count(),
        asyncio.all_tasks(),
        threading.active_count(),
    )
    host, port = cluster.url.removeprefix("http://").split(":")
    request = f"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: {host}\r\n\r\n"
    writers = []
    for _ in range(100):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request.encode())
        writers.append((reader, writer))
    await wait_until(lambda: cluster.store.watcher_count() == start + 100, "100 watches open")
    for i, (reader, writer) in enumerate(writers):
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        if i % 2:
            writer.transport.abort()  # a reset, as a killed client leaves
        else:
            writer.close()  # a clean close, as a client that stopped reading
    await wait_until(lambda: cluster.store.watcher_count() == start, "the dead watches end")
    await wait_until(lambda: not asyncio.all_tasks() - tasks - {asyncio.current_task()})
    assert threading.active_count() == threads


async def test_a_slow_watcher_is_dropped_instead_of_blocking_writers(tmp_path: Path) -> None:
    async with FakeCluster(directory=tmp_path, watch_buffer=5) as fake:
        watcher = fake.store.watch("configmaps", None, lambda obj: True, fake.store.rv)
        for i in range(10):
            fake.store.create("configmaps", "default", cm_body(f"s{i}"))
        assert watcher.closed and len(watcher.pending) == 5


async def test_replace_and_patches(api: client.ApiClient) -> None:
    core, batch = core_api(api), batch_api(api)
    await batch.create_namespaced_job("default", job_body("p", suspend=True))
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1"}
    patched = await batch.patch_namespaced_job(
        "p",
        "default",
        {
            "metadata": {
                "labels": {"extra": "1"},
                "annotations": {"note": "x"},
                "ownerReferences": [owner],
            },
            "spec": {"suspend": False},
        },
    )  # strategic merge
    assert patched.metadata.labels["extra"] == "1" and patched.spec.suspend is False
    assert patched.metadata.labels["job-name"] == "p" and patched.metadata.generation == 2
    patched = await batch.patch_namespaced_job(
        "p",
        "default",
        [
            {"op": "add", "path": "/metadata/labels/more", "value": "2"},
            {"op": "remove", "path": "/metadata/annotations/note"},
        ],
    )  # JSON patch
    assert patched.metadata.labels["more"] == "2" and not patched.metadata.annotations
    cm = await core.create_namespaced_config_map("default", cm_body("m"))
    merged = await core.api_client.call_api(
        "/api/v1/namespaces/default/configmaps/m",
        "PATCH",
        header_params={"Content-Type": "application/merge-patch+json"},
        body={"data": {"a": None, "b": "2"}},
        response_types_map={200: "V1ConfigMap"},
        _return_http_data_only=True,
    )
    assert merged.data == {"b": "2"}
    assert int(merged.metadata.resource_version) > int(cm.metadata.resource_version)


async def test_deleting_a_job_collects_its_pods_and_owned_objects(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core, batch = core_api(api), batch_api(api)
    job = await batch.create_namespaced_job("default", job_body("gc", suspend=False))
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "gc", "uid": job.metadata.uid}]
    await core.create_namespaced_config_map("default", cm_body("gc-script", ownerReferences=owner))
    await wait_until(lambda: cluster.objects("pods"), "the job's pod exists")
    await batch.delete_namespaced_job("gc", "default", propagation_policy="Background")
    await wait_until(lambda: not (cluster.objects("pods") or cluster.objects("configmaps")))


async def test_foreground_deletion_waits_for_dependents(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch = batch_api(api)
    await batch.create_namespaced_job("default", job_body("fg", parallelism=2, completions=2))
    await wait_until(lambda: len(cluster.objects("pods")) == 2, "both dependents exist")
    await batch.delete_namespaced_job("fg", "default", propagation_policy="Foreground")
    job = await batch.read_namespaced_job("fg", "default")
    assert job.metadata.deletion_timestamp and "foregroundDeletion" in job.metadata.finalizers
    await wait_until(lambda: not (cluster.get("jobs", "fg") is not None))
    assert not cluster.objects("pods")


async def test_orphan_deletion_keeps_dependents(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core, batch = core_api(api), batch_api(api)
    job = await batch.create_namespaced_job("default", job_body("or"))
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "or", "uid": job.metadata.uid}]
    await core.create_namespaced_config_map("default", cm_body("kept", ownerReferences=owner))
    await batch.delete_namespaced_job("or", "default", propagation_policy="Orphan")
    kept = await core.read_namespaced_config_map("kept", "default")
    assert not kept.metadata.owner_references


async def test_deletecollection_and_graceful_pod_deletion(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core = core_api(api)
    for i in range(3):
        await core.create_namespaced_config_map("default", cm_body(f"d{i}", {"g": "1"}))
    await core.delete_collection_namespaced_config_map("default", label_selector="g=1")
    assert not (await core.list_namespaced_config_map("default")).items
    pod = {
        "metadata": {"name": "p", "annotations": {"fake.k8sjobs.io/duration": "60"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep"]}]},
    }
    await core.create_namespaced_pod("default", pod)
    await wait_until(
        lambda: status_of(cluster, "pods", "p").get("phase") == "Running", "the pod runs"
    )
    deleting = await core.delete_namespaced_pod("p", "default", grace_period_seconds=30)
    assert deleting.metadata.deletion_grace_period_seconds == 30
    await wait_until(lambda: not (cluster.get("pods", "p") is not None))


async def test_pod_logs_with_tail_and_follow(cluster: FakeCluster, api: client.ApiClient) -> None:
    core = core_api(api)
    pod = {
        "metadata": {
            "name": "lg",
            "annotations": {"fake.k8sjobs.io/logs": "a\nb\nc\n", "fake.k8sjobs.io/duration": "0.3"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["x"]}],
        },
    }
    await core.create_namespaced_pod("default", pod)
    await wait_until(
        lambda: status_of(cluster, "pods", "lg").get("phase") in ("Running", "Succeeded"),
        "the pod ran",
    )
    assert await core.read_namespaced_pod_log("lg", "default", tail_lines=2) == "b\nc\n"
    followed = await core.read_namespaced_pod_log("lg", "default", follow=True, container="c")
    assert followed == "a\nb\nc\n"
    status, _ = await error_of(core.read_namespaced_pod_log("lg", "default", previous=True))
    assert status == 400


async def test_bearer_token_and_tls(tmp_path: Path) -> None:
    async with FakeCluster(directory=tmp_path, tls=True) as fake:
        assert fake.url.startswith("https://")
        async with await api_client(fake) as api:
            found = await core_api(api).list_namespace()
            assert [n.metadata.name for n in found.items] == ["default"]
        configuration = client.Configuration(host=fake.url)
        configuration.ssl_ca_cert = str(fake.ca_path)
        async with client.ApiClient(configuration) as anonymous:
            status, body = await error_of(core_api(anonymous).list_namespace())
            assert (status, body["reason"]) == (401, "Unauthorized")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_gets_describes_logs_and_deletes(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch = batch_api(api)
    job = job_body("kc")
    job["spec"]["template"]["metadata"] = {"annotations": {"fake.k8sjobs.io/logs": "hi\n"}}
    await batch.create_namespaced_job("default", job)
    await wait_until(lambda: status_of(cluster, "jobs", "kc").get("succeeded") == 1, "kc succeeds")
    pod = cluster.objects("pods")[0]["metadata"]["name"]

    async def kubectl(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--kubeconfig={cluster.kubeconfig_path}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()
        return out.decode()

    assert "job.batch/kc" in await kubectl("get", "jobs,pods", "-o", "name")
    assert "1 Succeeded" in await kubectl("describe", "job", "kc")
    assert "Completed" in await kubectl("describe", "pod", pod)
    assert await kubectl("logs", pod) == "hi\n"
    assert 'job.batch "kc" deleted' in await kubectl("delete", "job", "kc")
