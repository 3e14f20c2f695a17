"""Errors as a v1.36 API server gives them, each with its exact Status body (issue 15).

Recorded by hand on a real server (status code and body); the bodies follow the apiserver's
handlers, its NamespaceLifecycle admission and the Job validation. Also: a namespace is
deleted through Terminating, protobuf bodies get 415 and YAML bodies are read.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver.selectors import FIELD_LABELS

from .conftest import wait_until
from .test_apiserver import job_body

JOBS = "/apis/batch/v1/namespaces/default/jobs"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def failure(code: int, message: str, reason: str | None, **details: Any) -> dict[str, Any]:
    """Return a Status failure body in the real server's key order."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason is not None:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def invalid(
    kind: str, name: str, reason: str, why: str, field: str, group: str = ""
) -> dict[str, Any]:
    """Return the 422 Invalid body with one field cause."""
    cause = {"reason": reason, "message": why, "field": field}
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name, **({"group": group} if group else {}), "kind": kind}
    message = f'{qualified} "{name}" is invalid: {field}: {why}'
    return failure(422, message, "Invalid", **details, causes=[cause])


@pytest_asyncio.fixture
async def http(cluster: FakeCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        cluster.url, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        yield session


async def answer(response: aiohttp.ClientResponse) -> tuple[int, Any]:
    async with response:
        return response.status, json.loads(await response.read())


# ---------------------------------------------------------------------- query parameters


async def test_watch_with_a_bad_resource_version_is_a_500_status(
    http: aiohttp.ClientSession,
) -> None:
    code, body = await answer(await http.get(JOBS, params={"watch": "1", "resourceVersion": "abc"}))
    parse = 'strconv.ParseUint: parsing "abc": invalid syntax'
    assert (code, body) == (
        500,
        failure(500, f'resourceVersion: Invalid value: "abc": {parse}', None),
    )


@pytest.mark.parametrize("watching", ["1", "0"])
async def test_bad_timeout_seconds_is_a_400_status(
    http: aiohttp.ClientSession, watching: str
) -> None:
    query = {"watch": watching, "timeoutSeconds": "abc"}
    code, body = await answer(await http.get(JOBS, params=query))
    message = 'strconv.ParseInt: parsing "abc": invalid syntax'
    assert (code, body) == (400, failure(400, message, "BadRequest"))


async def test_unsupported_field_selector_is_a_400_status(http: aiohttp.ClientSession) -> None:
    code, body = await answer(await http.get(JOBS, params={"fieldSelector": "spec.bogus=1"}))
    assert (code, body) == (
        400,
        failure(400, "field label not supported: spec.bogus", "BadRequest"),
    )
    code, _ = await answer(await http.get(JOBS, params={"fieldSelector": "status.successful=1"}))
    assert code == 200


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(FIELD_LABELS)), st.text("abcdefghijklmnopqrstuvwxyz.", min_size=1))
def test_only_each_resource_s_field_labels_are_accepted(resource: str, path: str) -> None:
    from k8sjobs.testing.apiserver import errors as _errors
    from k8sjobs.testing.apiserver import selectors as _selectors

    supported = ("metadata.name", "metadata.namespace", *FIELD_LABELS[resource])
    try:
        _selectors.field_predicate(f"{path}=x", resource)
    except _errors.ApiError as error:
        assert path not in supported and error.code == 400
    else:
        assert path in supported


# ---------------------------------------------------------------------- bodies


async def test_namespace_in_the_body_must_be_the_url_s(http: aiohttp.ClientSession) -> None:
    cm = {"metadata": {"name": "x", "namespace": "other"}, "data": {}}
    code, body = await answer(await http.post(CONFIGMAPS, json=cm))
    message = (
        "the namespace of the provided object does not match the namespace sent on the request"
    )
    assert (code, body) == (400, failure(400, message, "BadRequest"))
    cm["metadata"]["namespace"] = "default"
    code, _ = await answer(await http.post(CONFIGMAPS, json=cm))
    assert code == 201
    cm["metadata"]["namespace"] = "other"
    code, body = await answer(await http.put(f"{CONFIGMAPS}/x", json=cm))
    assert (code, body["reason"]) == (400, "BadRequest")


async def test_negative_backoff_limit_is_422_with_the_field(http: aiohttp.ClientSession) -> None:
    code, body = await answer(await http.post(JOBS, json=job_body("neg", backoffLimit=-1)))
    why = "Invalid value: -1: must be greater than or equal to 0"
    expected = invalid("Job", "neg", "FieldValueInvalid", why, "spec.backoffLimit", "batch")
    assert (code, body) == (422, expected)


@pytest.mark.parametrize("size", [262144, 262145])
async def test_annotations_over_256_kib_are_invalid(http: aiohttp.ClientSession, size: int) -> None:
    cm = {"metadata": {"name": f"a{size}", "annotations": {"k": "v" * (size - 1)}}}
    code, body = await answer(await http.post(CONFIGMAPS, json=cm))
    if size == 262144:
        assert code == 201
        return
    why = "Too long: may not be more than 262144 bytes"
    expected = invalid("ConfigMap", f"a{size}", "FieldValueTooLong", why, "metadata.annotations")
    assert (code, body) == (422, expected)


async def test_a_body_over_3_mib_is_413(http: aiohttp.ClientSession) -> None:
    cm = {"metadata": {"name": "big"}, "data": {"x": "y" * (3 * 1024 * 1024)}}
    code, body = await answer(await http.post(CONFIGMAPS, json=cm))
    message = "Request entity too large: limit is 3145728"
    assert (code, body) == (413, failure(413, message, "RequestEntityTooLarge"))


async def test_protobuf_is_415_and_yaml_is_read(http: aiohttp.ClientSession) -> None:
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "y"},
        "data": {"a": "1"},
    }
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    code, body = await answer(await http.post(CONFIGMAPS, data=b"k8s\x00...", headers=headers))
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    assert "application/json" in body["message"]
    headers = {"Content-Type": "application/yaml"}
    code, body = await answer(await http.post(CONFIGMAPS, data=yaml.safe_dump(cm), headers=headers))
    assert (code, body["data"]) == (201, {"a": "1"})
    cm["data"] = {"a": "2"}
    cm["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
    code, body = await answer(
        await http.put(f"{CONFIGMAPS}/y", data=yaml.safe_dump(cm), headers=headers)
    )
    assert (code, body["data"]) == (200, {"a": "2"})


# ---------------------------------------------------------------------- namespaces


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
async def test_immortal_namespaces_may_not_be_deleted(
    http: aiohttp.ClientSession, name: str
) -> None:
    code, body = await answer(await http.delete(f"/api/v1/namespaces/{name}"))
    message = f'namespaces "{name}" is forbidden: this namespace may not be deleted'
    expected = failure(403, message, "Forbidden", name=name, kind="namespaces")
    assert (code, body) == (403, expected)


async def test_namespace_deletion_goes_through_terminating(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    await answer(await http.post("/api/v1/namespaces", json={"metadata": {"name": "gone"}}))
    pod = {
        "metadata": {"name": "p", "annotations": {"fake.k8sjobs.io/duration": "30"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }
    await answer(await http.post("/api/v1/namespaces/gone/pods", json=pod))
    await answer(
        await http.post("/api/v1/namespaces/gone/configmaps", json={"metadata": {"name": "c"}})
    )
    await wait_until(
        lambda: (cluster.get("pods", "p", "gone") or {})["status"].get("phase") == "Running"
    )
    cluster.faults.pause_kubelet()  # the pod stays terminating, so the namespace does
    code, body = await answer(await http.delete("/api/v1/namespaces/gone"))
    assert code == 200
    assert body["status"] == {"phase": "Terminating"}
    assert body["spec"] == {"finalizers": ["kubernetes"]}
    assert body["metadata"]["deletionTimestamp"]
    code, body = await answer(
        await http.post(
            "/api/v1/namespaces/gone/configmaps", json={"metadata": {"generateName": "n-"}}
        )
    )
    why = "unable to create new content in namespace gone because it is being terminated"
    cause = {
        "reason": "NamespaceTerminating",
        "message": "namespace gone is being terminated",
        "field": "metadata.namespace",
    }
    expected = failure(
        403,
        f'configmaps "n-" is forbidden: {why}',
        "Forbidden",
        name="n-",
        kind="configmaps",
        causes=[cause],
    )
    assert (code, body) == (403, expected)
    await wait_until(lambda: cluster.get("configmaps", "c", "gone") is None)
    assert cluster.get("namespaces", "gone") is not None  # the pod still terminates
    cluster.faults.resume_kubelet()
    await wait_until(lambda: cluster.get("namespaces", "gone") is None)
    code, _ = await answer(await http.get("/api/v1/namespaces/gone"))
    assert code == 404


@pytest.mark.parametrize("kind", ["configmaps", "secrets"])
async def test_an_immutable_object_refuses_data_changes_and_takes_metadata_ones(
    http: aiohttp.ClientSession, kind: str
) -> None:
    # ValidateConfigMapUpdate / ValidateSecretUpdate: once immutable, only metadata changes.
    url = f"/api/v1/namespaces/default/{kind}"
    data = {"a": "MQ=="}
    code, made = await answer(
        await http.post(url, json={"metadata": {"name": "i"}, "immutable": True, "data": data})
    )
    assert code == 201 and made["immutable"] is True
    kind_name = "ConfigMap" if kind == "configmaps" else "Secret"
    why = "Forbidden: field is immutable when `immutable` is set"
    for change, field in (
        ({"data": {"a": "Mg=="}}, "data"),
        ({"immutable": False}, "immutable"),
        ({"binaryData": {"b": "Mw=="}}, "binaryData"),
    ):
        if kind == "secrets" and field == "binaryData":
            continue  # a Secret has no binaryData
        patch = json.dumps(change)
        headers = {"Content-Type": "application/merge-patch+json"}
        code, body = await answer(await http.patch(f"{url}/i", data=patch, headers=headers))
        expected = invalid(kind_name, "i", "FieldValueForbidden", why, field)
        assert (code, body) == (422, expected), field
        update = {**made, **change}
        code, body = await answer(await http.put(f"{url}/i", json=update))
        assert (code, body) == (422, expected), field
    labelled = {**made, "metadata": {**made["metadata"], "labels": {"k": "v"}}}
    code, body = await answer(await http.put(f"{url}/i", json=labelled))
    assert code == 200 and body["metadata"]["labels"] == {"k": "v"}
    code, _ = await answer(await http.delete(f"{url}/i"))
    assert code == 200


async def test_a_lingering_namespace_refuses_its_name_until_it_is_gone(tmp_path: Any) -> None:
    # A real namespace stays Terminating for seconds after its deletion, and a create of
    # its name meanwhile is refused as the apiserver's registry words it.
    async with (
        FakeCluster(directory=tmp_path, namespace_linger=0.3) as fake,
        aiohttp.ClientSession(fake.url) as http,
    ):
        body = {"metadata": {"name": "again"}}
        code, _ = await answer(await http.post("/api/v1/namespaces", json=body))
        assert code == 201
        code, _ = await answer(await http.delete("/api/v1/namespaces/again"))
        assert code == 200
        code, refused = await answer(await http.post("/api/v1/namespaces", json=body))
        message = 'object is being deleted: namespaces "again" already exists'
        expected = failure(409, message, "AlreadyExists", name="again", kind="namespaces")
        assert (code, refused) == (409, expected)
        await wait_until(lambda: fake.get("namespaces", "again") is None)
        code, _ = await answer(await http.post("/api/v1/namespaces", json=body))
        assert code == 201


# ---------------------------------------------------------------------- kubectl


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_create_and_delete_namespace(cluster: FakeCluster, tmp_path: Any) -> None:
    """`kubectl create -f` (JSON) and `kubectl delete ns` (through Terminating) work; a typed
    `kubectl create namespace` sends protobuf and, as client-go falls back to JSON only after
    a CBOR 415, fails with the 415's message."""
    manifest = tmp_path / "ns.yaml"
    manifest.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tmp"}})
    )

    async def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path))
        return await asyncio.to_thread(
            subprocess.run, ["kubectl", *args], capture_output=True, text=True, env=env, timeout=60
        )

    created = await kubectl("create", "--validate=false", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert cluster.get("namespaces", "tmp") is not None
    deleted = await kubectl("delete", "namespace", "tmp", "--wait=true", "--timeout=30s")
    assert deleted.returncode == 0, deleted.stderr
    assert cluster.get("namespaces", "tmp") is None
    refused = await kubectl("delete", "namespace", "default")
    assert refused.returncode != 0 and "may not be deleted" in refused.stderr
    typed = await kubectl("create", "namespace", "proto")
    assert typed.returncode != 0 and "UnsupportedMediaType" in typed.stderr
