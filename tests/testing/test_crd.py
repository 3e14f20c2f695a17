"""CustomResourceDefinitions on the fake API server, over real HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client, watch

from k8sjobs.testing import FakeCluster

from .conftest import call, custom_api, wait_until
from .crdhelpers import (
    GROUP,
    VERSION,
    define,
    established,
    minicluster,
    minicluster_crd,
    widget_crd,
)

MC = f"/apis/{GROUP}/{VERSION}/namespaces/default/miniclusters"


async def test_crd_becomes_established_with_names_accepted(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crds = f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    status, created = await call(http, "POST", crds, minicluster_crd())
    assert status == 201
    assert created["spec"]["names"]["singular"] == "minicluster"
    assert created["spec"]["names"]["listKind"] == "MiniClusterList"
    assert created["status"]["storedVersions"] == [VERSION]
    await wait_until(lambda: established(cluster, created["metadata"]["name"]))
    _, crd = await call(http, "GET", f"{crds}/{created['metadata']['name']}")
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["NamesAccepted"]["reason"] == "NoConflicts"
    assert conditions["Established"]["reason"] == "InitialNamesAccepted"
    assert crd["status"]["acceptedNames"]["kind"] == "MiniCluster"


async def test_crd_validation_names_the_field(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crds = f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    crd = minicluster_crd()
    crd["metadata"]["name"] = "wrong.example.com"
    crd["spec"]["scope"] = "Global"
    status, body = await call(http, "POST", crds, crd)
    assert status == 422
    fields = [c["field"] for c in body["details"]["causes"]]
    assert fields == ["metadata.name", "spec.scope"]
    assert body["message"].startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "wrong.example.com" is invalid: ['
    )


async def test_a_crd_clashing_with_a_served_plural_is_not_established(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = "pods.example.com"
    crd["spec"]["names"] = {"plural": "pods", "kind": "Pod"}
    crds = f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert (await call(http, "POST", crds, crd))[0] == 201

    def names_rejected() -> bool:
        got = cluster.store.get("customresourcedefinitions", "", "pods.example.com") or {}
        return any(
            c["type"] == "NamesAccepted" and c["status"] == "False"
            for c in got.get("status", {}).get("conditions", [])
        )

    await wait_until(names_rejected)
    assert not established(cluster, "pods.example.com")
    assert (await call(http, "GET", f"{cluster.url}/apis/example.com/v1/pods"))[0] == 404


async def test_discovery_lists_the_custom_group_and_resource(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    _, groups = await call(http, "GET", f"{cluster.url}/apis")
    listed = {g["name"]: g for g in groups["groups"]}
    assert listed[GROUP]["preferredVersion"]["version"] == VERSION
    assert "apiextensions.k8s.io" in listed
    _, resources = await call(http, "GET", f"{cluster.url}/apis/{GROUP}/{VERSION}")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["miniclusters"]["kind"] == "MiniCluster"
    assert by_name["miniclusters"]["namespaced"] is True
    assert by_name["miniclusters"]["shortNames"] == ["mc"]
    assert by_name["miniclusters/status"]["verbs"] == ["get", "patch", "update"]
    _, extensions = await call(http, "GET", f"{cluster.url}/apis/apiextensions.k8s.io/v1")
    [crds, _status] = extensions["resources"]
    assert (crds["name"], crds["namespaced"]) == ("customresourcedefinitions", False)
    assert crds["shortNames"] == ["crd", "crds"]


async def test_custom_objects_crud_and_watch(
    cluster: FakeCluster, api: client.ApiClient, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    objects = custom_api(api)
    args = (GROUP, VERSION, "default", "miniclusters")
    created = await objects.create_namespaced_custom_object(*args, minicluster("a"))
    assert created["spec"]["size"] == 1  # the schema default
    assert created["metadata"]["generation"] == 1
    events: list[tuple[str, str]] = []

    async def follow() -> None:
        stream = watch.Watch().stream(
            objects.list_namespaced_custom_object,
            *args,
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=10,
        )
        async for event in stream:
            events.append((event["type"], event["object"]["metadata"]["name"]))
            if event["type"] == "DELETED":
                return

    watcher = asyncio.create_task(follow())
    await wait_until(lambda: cluster.store.watcher_count() > 0)
    await objects.patch_namespaced_custom_object(
        *args, "a", {"spec": {"size": 3}}, _content_type="application/merge-patch+json"
    )
    listed = await objects.list_namespaced_custom_object(*args)
    assert [o["spec"]["size"] for o in listed["items"]] == [3]
    await objects.delete_namespaced_custom_object(*args, "a")
    await asyncio.wait_for(watcher, 10)
    assert events == [("MODIFIED", "a"), ("DELETED", "a")]


async def test_cluster_scoped_custom_objects(
    cluster: FakeCluster, api: client.ApiClient, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, widget_crd())
    objects = custom_api(api)
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    created = await objects.create_cluster_custom_object(
        "example.com", "v1", "widgets", {**body, "spec": {"anything": {"goes": [1]}}}
    )
    assert "namespace" not in created["metadata"]
    assert created["spec"] == {"anything": {"goes": [1]}}
    got = await objects.get_cluster_custom_object("example.com", "v1", "widgets", "w")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    # Without a status subresource, status is an ordinary field and counts for generation.
    updated = await objects.patch_cluster_custom_object(
        "example.com",
        "v1",
        "widgets",
        "w",
        {"status": {"ready": True}},
        _content_type="application/merge-patch+json",
    )
    assert updated["status"] == {"ready": True}
    assert updated["metadata"]["generation"] == 2
    status, _ = await call(http, "GET", f"{cluster.url}/apis/example.com/v1/widgets/w/status")
    assert status == 404


async def test_schema_violations_are_422_with_the_field_as_cause(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    bad = minicluster("bad", size="three", network="bridge")
    bad["spec"]["containers"] = [{"command": "hostname"}]
    status, body = await call(http, "POST", f"{cluster.url}{MC}", bad)
    assert status == 422
    assert body["reason"] == "Invalid"
    assert body["details"] == {
        "name": "bad",
        "group": GROUP,
        "kind": "MiniCluster",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.containers[0].image",
            },
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "bridge": supported values: "flux-service", "host"',
                "field": "spec.network",
            },
            {
                "reason": "FieldValueTypeInvalid",
                "message": 'Invalid value: "string": spec.size in body must be of type integer: '
                '"string"',
                "field": "spec.size",
            },
        ],
    }
    assert body["message"].startswith(f'MiniCluster.{GROUP} "bad" is invalid: [')
    status, body = await call(http, "POST", f"{cluster.url}{MC}", minicluster("zero", size=0))
    assert status == 422
    assert body["details"]["causes"][0]["message"] == (
        "Invalid value: 0: spec.size in body should be greater than or equal to 1"
    )


async def test_unknown_fields_are_pruned(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    await define(http, cluster, minicluster_crd())
    body = minicluster("p", bogus=1)
    body["extra"] = {"x": 1}
    status, created = await call(http, "POST", f"{cluster.url}{MC}", body)
    assert status == 201
    assert "bogus" not in created["spec"] and "extra" not in created


async def test_status_subresource_splits_spec_and_status_writes(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    body = minicluster("s")
    body["status"] = {"phase": "ignored on create"}
    _, created = await call(http, "POST", f"{cluster.url}{MC}", body)
    assert "status" not in created
    url = f"{cluster.url}{MC}/s"
    merge = {"Content-Type": "application/merge-patch+json"}
    _, after_status = await call(
        http, "PATCH", f"{url}/status", {"status": {"phase": "Ready"}, "spec": {"size": 9}}, **merge
    )
    assert after_status["status"] == {"phase": "Ready"}
    assert after_status["spec"]["size"] == 1  # a status write ignores spec
    assert after_status["metadata"]["generation"] == 1
    _, after_spec = await call(
        http, "PATCH", url, {"status": {"phase": "Lost"}, "spec": {"size": 2}}, **merge
    )
    assert after_spec["status"] == {"phase": "Ready"}  # a spec write ignores status
    assert after_spec["spec"]["size"] == 2
    assert after_spec["metadata"]["generation"] == 2
    _, relabelled = await call(http, "PATCH", url, {"metadata": {"labels": {"a": "b"}}}, **merge)
    assert relabelled["metadata"]["generation"] == 2  # metadata is not spec


async def test_deleting_the_crd_deletes_its_objects_and_stops_serving(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    for name in ("x", "y"):
        assert (await call(http, "POST", f"{cluster.url}{MC}", minicluster(name)))[0] == 201
    crd_url = (
        f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/miniclusters.{GROUP}"
    )
    status, deleting = await call(http, "DELETE", crd_url)
    assert status == 200
    assert deleting["metadata"]["deletionTimestamp"]
    assert "customresourcecleanup.apiextensions.k8s.io" in deleting["metadata"]["finalizers"]
    assert any(c["type"] == "Terminating" for c in deleting["status"]["conditions"])
    await wait_until(
        lambda: cluster.store.get("customresourcedefinitions", "", f"miniclusters.{GROUP}") is None
    )
    assert cluster.objects("miniclusters") == []
    assert (await call(http, "GET", f"{cluster.url}{MC}"))[0] == 404
    _, groups = await call(http, "GET", f"{cluster.url}/apis")
    assert GROUP not in [g["name"] for g in groups["groups"]]


_SIZES = st.one_of(
    st.integers(min_value=-3, max_value=5),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(size=_SIZES)
async def test_any_size_is_stored_only_when_the_schema_allows_it(
    cluster: FakeCluster, http: aiohttp.ClientSession, size: Any
) -> None:
    if not established(cluster, f"miniclusters.{GROUP}"):
        await define(http, cluster, minicluster_crd())
    body = minicluster("h", size=size)
    status, answer = await call(http, "POST", f"{cluster.url}{MC}", body)
    valid = size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 1)
    assert status == (201 if valid else 422), answer
    if valid:
        assert answer["spec"]["size"] == (1 if size is None else size)  # null takes the default
        await call(http, "DELETE", f"{cluster.url}{MC}/h")
    else:
        assert [c["field"] for c in answer["details"]["causes"]] == ["spec.size"]


async def test_field_validation_strict_rejects_and_warn_reports_unknown_fields(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    body = minicluster("f", bogus=1)
    status, answer = await call(http, "POST", f"{cluster.url}{MC}?fieldValidation=Strict", body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == (
        f'MiniCluster in version "{VERSION}" cannot be handled as a MiniCluster: '
        'strict decoding error: unknown field "spec.bogus"'
    )
    async with http.post(f"{cluster.url}{MC}?fieldValidation=Warn", json=body) as response:
        assert response.status == 201
        assert response.headers.getall("Warning") == ['299 - "unknown field \\"spec.bogus\\""']


async def test_status_writes_are_validated_against_the_schema(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crd = minicluster_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["status"] = {
        "type": "object",
        "properties": {"ready": {"type": "integer", "minimum": 0}},
    }
    await define(http, cluster, crd)
    await call(http, "POST", f"{cluster.url}{MC}", minicluster("s"))
    merge = {"Content-Type": "application/merge-patch+json"}
    url = f"{cluster.url}{MC}/s/status"
    status, body = await call(http, "PATCH", url, {"status": {"ready": -1}}, **merge)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "status.ready"
    status, body = await call(http, "PATCH", url, {"status": {"ready": 2}}, **merge)
    assert (status, body["status"]) == (200, {"ready": 2})


async def test_updating_a_crd_changes_what_its_kind_accepts(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await define(http, cluster, minicluster_crd())
    crds = f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    _, crd = await call(http, "GET", f"{crds}/miniclusters.{GROUP}")
    version = crd["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]["maximum"] = 4
    served_too = {**version, "name": "v1beta1", "storage": False}
    crd["spec"]["versions"] = [version, served_too]
    status, updated = await call(http, "PUT", f"{crds}/miniclusters.{GROUP}", crd)
    assert status == 200, updated
    assert updated["metadata"]["generation"] == 2

    def limited() -> bool:
        resource = cluster.store.resources["miniclusters"]
        schema = getattr(resource.hooks, "schema", {})
        return bool(schema["properties"]["spec"]["properties"]["size"].get("maximum") == 4)

    await wait_until(limited)
    status, body = await call(http, "POST", f"{cluster.url}{MC}", minicluster("big", size=5))
    assert status == 422
    assert body["details"]["causes"][0]["message"] == (
        "Invalid value: 5: spec.size in body should be less than or equal to 4"
    )
    other = f"{cluster.url}/apis/{GROUP}/v1beta1/namespaces/default/miniclusters"
    status, _ = await call(
        http, "POST", other, {**minicluster("b"), "apiVersion": f"{GROUP}/v1beta1"}
    )
    assert status == 201
    _, resources = await call(http, "GET", f"{cluster.url}/apis/{GROUP}/v1beta1")
    assert [r["name"] for r in resources["resources"]] == ["miniclusters", "miniclusters/status"]
    _, group = await call(http, "GET", f"{cluster.url}/apis/{GROUP}")
    assert [v["version"] for v in group["versions"]] == ["v1beta1", VERSION]
    assert group["preferredVersion"]["version"] == "v1beta1"  # beta outranks alpha


async def test_an_update_leaving_an_invalid_field_as_it_was_is_taken(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    """Validation ratcheting (CRDValidationRatcheting, on since v1.30): an object made valid
    under a looser schema can still be patched elsewhere (a label, an annotation: how
    k8sjobs marks a step cancelled), while a change to the invalid field is refused. The
    fake refused the annotation patch on a MiniCluster whose status its operator had left
    short of the schema."""
    await define(http, cluster, minicluster_crd())
    status, _ = await call(http, "POST", f"{cluster.url}{MC}", minicluster("big", size=5))
    assert status == 201
    crds = f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    _, crd = await call(http, "GET", f"{crds}/miniclusters.{GROUP}")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["size"]["maximum"] = 4
    assert (await call(http, "PUT", f"{crds}/miniclusters.{GROUP}", crd))[0] == 200

    def limited() -> bool:
        resource = cluster.store.resources["miniclusters"]
        found = getattr(resource.hooks, "schema", {})
        return bool(found["properties"]["spec"]["properties"]["size"].get("maximum") == 4)

    await wait_until(limited)
    merge = {"Content-Type": "application/merge-patch+json"}
    label = {"metadata": {"annotations": {"k8sjobs.io/cancelled-by": "another process"}}}
    status, body = await call(http, "PATCH", f"{cluster.url}{MC}/big", label, **merge)
    assert status == 200, body
    status, body = await call(
        http, "PATCH", f"{cluster.url}{MC}/big", {"spec": {"size": 6}}, **merge
    )
    assert status == 422
    assert body["details"]["causes"][0]["message"] == (
        "Invalid value: 6: spec.size in body should be less than or equal to 4"
    )


async def test_aggregated_discovery_requests_get_the_plain_documents(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    # kubectl asks for the aggregated form first; a plain answer (as from a server without
    # aggregated discovery) makes client-go fall back to one request per group version.
    aggregated = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
        "application/json"
    )
    await define(http, cluster, minicluster_crd())
    for path, kind in (("/api", "APIVersions"), ("/apis", "APIGroupList")):
        async with http.get(f"{cluster.url}{path}", headers={"Accept": aggregated}) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("application/json")
            assert "apidiscovery" not in response.headers["Content-Type"]
            assert (await response.json())["kind"] == kind
