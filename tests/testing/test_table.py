"""Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver.table import human_duration

from .conftest import call, wait_until
from .crdhelpers import GROUP, VERSION, define, minicluster, minicluster_crd
from .test_apiserver import job_body

TABLE = (  # what kubectl get sends
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


async def get_table(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    status, body = await call(http, "GET", url, Accept=TABLE)
    assert status == 200, body
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    table: dict[str, Any] = body
    return table


def names(table: dict[str, Any], wide: bool = False) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"] if wide or c["priority"] == 0]


async def test_jobs_and_pods_print_kubectls_columns(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.url}/apis/batch/v1/namespaces/default/jobs"
    assert (await call(http, "POST", base, job_body("t", completions=2, parallelism=2)))[0] == 201
    await wait_until(
        lambda: (cluster.get("jobs", "t") or {}).get("status", {}).get("succeeded") == 2
    )
    await wait_until(
        lambda: any(
            c["type"] == "Complete"
            for c in (cluster.get("jobs", "t") or {})["status"].get("conditions", [])
        )
    )
    jobs = await get_table(http, base)
    assert names(jobs) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert names(jobs, wide=True)[5:] == ["Containers", "Images", "Selector"]
    [row] = jobs["rows"]
    assert row["cells"][:3] == ["t", "Complete", "2/2"]
    assert row["cells"][5:7] == ["main", "busybox"]
    assert row["cells"][7].startswith("batch.kubernetes.io/controller-uid=")
    assert row["object"]["kind"] == "PartialObjectMetadata"  # includeObject=Metadata by default
    assert jobs["metadata"]["resourceVersion"]

    pods = await get_table(
        http, f"{cluster.url}/api/v1/namespaces/default/pods?includeObject=Object"
    )
    assert names(pods) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert names(pods, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    assert [r["cells"][1:4] for r in pods["rows"]] == [["0/1", "Completed", "0"]] * 2
    assert all(r["conditions"] == [{"type": "Completed", "status": "True"}] for r in pods["rows"])
    assert pods["rows"][0]["object"]["kind"] == "Pod"


async def test_configmaps_namespaces_and_single_objects(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/configmaps"
    body = {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"z": "AA=="}}
    assert (await call(http, "POST", url, body))[0] == 201
    one = await get_table(http, f"{url}/c?includeObject=None")
    assert names(one) == ["Name", "Data", "Age"]
    assert one["rows"][0]["cells"][:2] == ["c", 3]
    assert "object" not in one["rows"][0]
    namespaces = await get_table(http, f"{cluster.url}/api/v1/namespaces")
    assert names(namespaces) == ["Name", "Status", "Age"]
    assert namespaces["rows"][0]["cells"][:2] == ["default", "Active"]


async def test_other_kinds_get_name_and_created_at(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/secrets"
    _, created = await call(
        http, "POST", url, {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    secrets = await get_table(http, url)
    assert [(c["name"], c["type"]) for c in secrets["columnDefinitions"]] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    assert secrets["rows"][0]["cells"] == ["s", created["metadata"]["creationTimestamp"]]


async def test_custom_kinds_print_their_printer_columns(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    url = f"{cluster.url}/apis/{GROUP}/{VERSION}/namespaces/default/miniclusters"
    assert (await call(http, "POST", url, minicluster("m", size=4)))[0] == 201
    table = await get_table(http, url)
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Size", "integer"),
        ("Age", "date"),
    ]
    assert table["rows"][0]["cells"][:2] == ["m", 4]
    assert table["rows"][0]["cells"][2].endswith("s")  # date columns print as an age


async def test_a_custom_kind_without_printer_columns_prints_name_and_age(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crd = minicluster_crd()
    del crd["spec"]["versions"][0]["additionalPrinterColumns"]
    await define(http, cluster, crd)
    url = f"{cluster.url}/apis/{GROUP}/{VERSION}/namespaces/default/miniclusters"
    assert (await call(http, "POST", url, minicluster("m")))[0] == 201
    table = await get_table(http, url)
    assert names(table) == ["Name", "Age"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 120, "3h2m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (20 * 86400, "20d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
    ],
)
def test_human_duration_matches_kubectl(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


@given(st.integers(min_value=0, max_value=10**10))
def test_human_duration_never_grows_shorter(seconds: int) -> None:
    def magnitude(text: str) -> float:
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
        total, number = 0.0, ""
        for char in text:
            if char.isdigit():
                number += char
            else:
                total += int(number) * units[char]
                number = ""
        return total

    shown = magnitude(human_duration(seconds))
    assert shown <= seconds < shown + max(60.0, seconds * 0.5)


async def test_a_table_watch_sends_one_row_tables_with_columns_first(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/configmaps"
    await call(http, "POST", url, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    async with http.get(f"{url}?watch=1&timeoutSeconds=10", headers={"Accept": TABLE}) as response:
        first = json.loads(await response.content.readline())
        await call(http, "POST", url, {"metadata": {"name": "b"}})
        second = json.loads(await response.content.readline())
    assert first["type"] == "ADDED" and first["object"]["kind"] == "Table"
    assert names(first["object"]) == ["Name", "Data", "Age"]
    assert first["object"]["rows"][0]["cells"][:2] == ["a", 1]
    assert second["object"]["columnDefinitions"] == []
    assert second["object"]["rows"][0]["cells"][:2] == ["b", 0]
