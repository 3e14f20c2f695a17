"""`dryRun=All` on create, update, patch and delete: validated and answered, never stored."""

from __future__ import annotations

import asyncio

import aiohttp

from k8sjobs.testing import FakeCluster

from .conftest import call, wait_until
from .test_apiserver import job_body

CMS = "/api/v1/namespaces/default/configmaps"


async def watch_lines(http: aiohttp.ClientSession, url: str, into: list[bytes]) -> None:
    async with http.get(url) as response:
        async for line in response.content:
            into.append(line)


async def test_dry_run_writes_are_answered_but_change_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.url}{CMS}"
    _, real = await call(http, "POST", base, {"metadata": {"name": "real"}, "data": {"a": "1"}})
    rv_before = cluster.store.rv
    lines: list[bytes] = []
    watching = asyncio.create_task(
        watch_lines(
            http,
            f"{base}?watch=1&resourceVersion={real['metadata']['resourceVersion']}&timeoutSeconds=2",
            lines,
        )
    )

    status, created = await call(http, "POST", f"{base}?dryRun=All", {"metadata": {"name": "dry"}})
    assert status == 201
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]
    assert "resourceVersion" not in created["metadata"]
    assert cluster.get("configmaps", "dry") is None

    replaced = {**real, "data": {"a": "2"}}
    status, updated = await call(http, "PUT", f"{base}/real?dryRun=All", replaced)
    assert (status, updated["data"]) == (200, {"a": "2"})
    merge = {"Content-Type": "application/merge-patch+json"}
    status, patched = await call(
        http, "PATCH", f"{base}/real?dryRun=All", {"data": {"b": "3"}}, **merge
    )
    assert (status, patched["data"]) == (200, {"a": "1", "b": "3"})
    status, _ = await call(http, "DELETE", f"{base}/real?dryRun=All")
    assert status == 200

    assert cluster.get("configmaps", "real") == real
    assert cluster.store.rv == rv_before
    await asyncio.wait_for(watching, 10)
    assert lines == []  # no watch event for any dry run


async def test_dry_run_still_validates(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    url = f"{cluster.url}/apis/batch/v1/namespaces/default/jobs?dryRun=All"
    bad = job_body("Bad_Name")
    status, body = await call(http, "POST", url, bad)
    assert (status, body["reason"]) == (422, "Invalid")
    assert cluster.objects("jobs") == []
    await call(http, "POST", f"{cluster.url}{CMS}", {"metadata": {"name": "dup"}})
    status, body = await call(
        http, "POST", f"{cluster.url}{CMS}?dryRun=All", {"metadata": {"name": "dup"}}
    )
    assert (status, body["reason"]) == (409, "AlreadyExists")


async def test_dry_run_delete_of_a_running_pod_shows_the_grace_period(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    pod = {
        "metadata": {"name": "p", "annotations": {"fake.k8sjobs.io/duration": "60"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    url = f"{cluster.url}/api/v1/namespaces/default/pods"
    assert (await call(http, "POST", url, pod))[0] == 201
    await wait_until(lambda: bool((cluster.get("pods", "p") or {}).get("spec", {}).get("nodeName")))
    status, answer = await call(http, "DELETE", f"{url}/p?dryRun=All")
    assert status == 200
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert "deletionTimestamp" not in (cluster.get("pods", "p") or {})["metadata"]


async def test_an_unsupported_dry_run_value_is_422(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    status, body = await call(
        http, "POST", f"{cluster.url}{CMS}?dryRun=Some", {"metadata": {"name": "x"}}
    )
    assert status == 422
    assert body["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Some"}: '
        'supported values: "All"'
    )


async def test_dry_run_deletecollection_deletes_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    for name in ("x", "y"):
        await call(http, "POST", f"{cluster.url}{CMS}", {"metadata": {"name": name}})
    status, body = await call(http, "DELETE", f"{cluster.url}{CMS}?dryRun=All")
    assert status == 200
    assert [i["metadata"]["name"] for i in body["items"]] == ["x", "y"]
    assert [c["metadata"]["name"] for c in cluster.objects("configmaps", "default")] == ["x", "y"]
