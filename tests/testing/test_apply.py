"""Server-side apply over real HTTP: ownership, conflicts, force, removal, lists, subresources."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver import apply as _apply

from .conftest import call
from .crdhelpers import GROUP, VERSION, define, minicluster, minicluster_crd
from .test_apiserver import job_body

CMS = "/api/v1/namespaces/default/configmaps"
APPLY = "application/apply-patch+yaml"


def cm(name: str, data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data,
    }


async def apply(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], manager: str, **params: str
) -> tuple[int, Any]:
    query = "&".join(f"{k}={v}" for k, v in {"fieldManager": manager, **params}.items())
    return await call(
        http, "PATCH", f"{url}?{query}", yaml.safe_dump(body), **{"Content-Type": APPLY}
    )


def owners(obj: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


async def test_apply_creates_then_updates_and_records_ownership(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}{CMS}/c"
    status, created = await apply(http, url, cm("c", {"a": "1"}, labels={"app": "x"}), "alice")
    assert status == 201
    assert created["data"] == {"a": "1"}
    [entry] = created["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "manager": "alice",
        "operation": "Apply",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
    }
    status, same = await apply(http, url, cm("c", {"a": "1"}, labels={"app": "x"}), "alice")
    assert status == 200
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_a_repeated_apply_a_second_later_writes_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The managedFields clock ticks between two identical applies (as on a slow machine):
    the second is still a no-op, same resourceVersion and timestamps."""
    url = f"{cluster.url}{CMS}/t"
    seconds = iter(range(10, 60))
    monkeypatch.setattr(_apply, "now_rfc3339", lambda: f"2026-01-01T00:00:{next(seconds)}Z")
    _, created = await apply(http, url, cm("t", {"a": "1"}), "alice")
    status, same = await apply(http, url, cm("t", {"a": "1"}), "alice")
    assert status == 200
    assert same["metadata"] == created["metadata"]
    _, changed = await apply(http, url, cm("t", {"a": "2"}), "alice")
    assert (
        changed["metadata"]["managedFields"][0]["time"]
        != created["metadata"]["managedFields"][0]["time"]
    )
    assert changed["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]


async def test_fieldmanager_is_required(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    status, body = await call(
        http,
        "PATCH",
        f"{cluster.url}{CMS}/c",
        yaml.safe_dump(cm("c", {})),
        **{"Content-Type": APPLY},
    )
    assert status == 422
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )
    merge = {"Content-Type": "application/merge-patch+json"}
    status, body = await call(http, "PATCH", f"{cluster.url}{CMS}/c?force=true", {}, **merge)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "force"


async def test_a_different_value_conflicts_and_force_takes_ownership(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}{CMS}/c"
    await apply(http, url, cm("c", {"a": "1", "b": "1"}), "alice")
    status, body = await apply(http, url, cm("c", {"a": "2"}), "bob")
    assert status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.a'
    assert body["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.a"}
    ]
    assert (cluster.get("configmaps", "c") or {})["data"] == {"a": "1", "b": "1"}

    status, forced = await apply(http, url, cm("c", {"a": "2"}), "bob", force="true")
    assert status == 200
    assert forced["data"] == {"a": "2", "b": "1"}
    assert owners(forced) == {
        ("alice", "Apply"): {"f:data": {"f:b": {}}},
        ("bob", "Apply"): {"f:data": {"f:a": {}}},
    }


async def test_the_same_value_is_shared_and_survives_one_managers_removal(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}{CMS}/c"
    await apply(http, url, cm("c", {"a": "1", "b": "1"}), "alice")
    status, shared = await apply(http, url, cm("c", {"a": "1"}), "bob")
    assert status == 200
    assert owners(shared)[("bob", "Apply")] == {"f:data": {"f:a": {}}}
    # alice stops applying both fields: b (hers alone) goes, a (shared with bob) stays.
    status, after = await apply(http, url, cm("c", {}), "alice")
    assert status == 200
    assert after["data"] == {"a": "1"}


async def test_conflicts_with_an_update_manager_name_its_api_version(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.url}{CMS}"
    status, _ = await call(
        http, "POST", f"{base}?fieldManager=kubectl-create", cm("c", {"a": "1", "b": "1"})
    )
    assert status == 201
    status, body = await apply(http, f"{base}/c", cm("c", {"a": "2", "b": "2"}), "kubectl")
    assert status == 409
    assert body["message"] == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-create" using v1:\n'
        "- .data.a\n- .data.b"
    )


async def test_associative_lists_merge_by_key_and_conflict_by_item(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/apis/batch/v1/namespaces/default/jobs/j"
    job = job_body("j", suspend=True)
    status, created = await apply(http, url, job, "alice")
    assert status == 201
    containers = created["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"][
        "f:spec"
    ]["f:containers"]
    assert containers == {
        'k:{"name":"main"}': {".": {}, "f:command": {}, "f:image": {}, "f:name": {}}
    }
    other = job_body("j", suspend=True)
    other["spec"]["template"]["spec"]["containers"][0]["image"] = "alpine"
    status, body = await apply(http, url, other, "bob")
    assert status == 409
    assert (
        body["details"]["causes"][0]["field"] == '.spec.template.spec.containers[name="main"].image'
    )


async def test_custom_kinds_apply_spec_and_status_separately(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    url = f"{cluster.url}/apis/{GROUP}/{VERSION}/namespaces/default/miniclusters/m"
    body = minicluster("m", size=2)
    body["status"] = {"phase": "ignored on the main resource"}
    status, created = await apply(http, url, body, "flux")
    assert status == 201
    assert "status" not in created and created["spec"]["size"] == 2
    status_body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MiniCluster",
        "metadata": {"name": "m"},
    }
    status, with_status = await apply(
        http, f"{url}/status", {**status_body, "status": {"phase": "Ready"}}, "operator"
    )
    assert status == 200
    assert with_status["status"] == {"phase": "Ready"}
    assert with_status["metadata"]["generation"] == 1
    entries = {e["manager"]: e for e in with_status["metadata"]["managedFields"]}
    assert entries["operator"]["subresource"] == "status"
    assert entries["operator"]["fieldsV1"] == {"f:status": {"f:phase": {}}}


async def test_dry_run_apply_stores_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}{CMS}/c"
    status, body = await apply(http, url, cm("c", {"a": "1"}), "alice", dryRun="All")
    assert (status, body["data"]) == (201, {"a": "1"})
    assert cluster.get("configmaps", "c") is None


async def test_a_mismatched_kind_is_400(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}
    status, answer = await apply(http, f"{cluster.url}{CMS}/c", body, "alice")
    assert (status, answer["reason"]) == (400, "BadRequest")


_DATA = st.dictionaries(st.sampled_from("abcdef"), st.sampled_from(["0", "1", "x"]), max_size=5)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=_DATA, second=_DATA, other=_DATA)
async def test_a_managers_next_apply_is_exactly_its_new_config_plus_others_fields(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    first: dict[str, str],
    second: dict[str, str],
    other: dict[str, str],
) -> None:
    url = f"{cluster.url}{CMS}/h"
    await call(http, "DELETE", url)
    await apply(http, url, cm("h", other), "bob")
    status, _ = await apply(http, url, cm("h", first), "alice", force="true")
    assert status in (200, 201)
    status, result = await apply(http, url, cm("h", second), "alice", force="true")
    assert status == 200
    data = result.get("data") or {}
    # bob keeps what alice never forced from him (new keys, or keys she set to his value).
    bob_keeps = {
        k: v for k, v in other.items() if (k not in first or first[k] == v) and k not in second
    }
    assert data == {**bob_keeps, **second}


async def test_an_apply_naming_another_namespace_is_400(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    body = cm("c", {"a": "1"}, namespace="elsewhere")
    status, answer = await apply(http, f"{cluster.url}{CMS}/c", body, "alice")
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "does not match the namespace" in answer["message"]


async def test_custom_list_map_keys_merge_items_of_different_managers(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crd = minicluster_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    containers = spec["properties"]["containers"]
    containers["x-kubernetes-list-type"] = "map"
    containers["x-kubernetes-list-map-keys"] = ["image"]
    await define(http, cluster, crd)
    url = f"{cluster.url}/apis/{GROUP}/{VERSION}/namespaces/default/miniclusters/m"
    mine = minicluster("m")
    mine["spec"]["containers"] = [{"image": "flux", "command": "a"}]
    theirs = minicluster("m")
    theirs["spec"]["containers"] = [{"image": "sidecar"}]
    assert (await apply(http, url, mine, "alice"))[0] == 201
    status, both = await apply(http, url, theirs, "bob")
    assert status == 200
    assert [c["image"] for c in both["spec"]["containers"]] == ["flux", "sidecar"]
    clash = minicluster("m")
    clash["spec"]["containers"] = [{"image": "flux", "command": "b"}]
    status, body = await apply(http, url, clash, "bob")
    assert status == 409
    assert body["details"]["causes"][0]["field"] == '.spec.containers[image="flux"].command'
