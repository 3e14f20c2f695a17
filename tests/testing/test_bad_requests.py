"""Malformed requests get what kube-apiserver v1.36 answers, never a 500 (issue 25, 15-18):
bad query parameters and mistyped bodies a 400 Status, the ConfigMap/Secret size rule as the
real validation counts it, headers up to 1 MiB, and unknown subresources a 404 that changes
nothing."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from .conftest import call

REFERENCE = Path(os.environ.get("K8S_REFERENCE", "/work/shared/k8s-reference"))
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024


def configmaps(cluster: FakeCluster) -> str:
    return f"{cluster.url}/api/v1/namespaces/default/configmaps"


async def send(
    http: aiohttp.ClientSession, method: str, url: str, data: str | bytes | None = None
) -> tuple[int, Any]:
    async with http.request(method, url, data=data, headers=JSON) as response:
        text = await response.text()
        assert response.content_type == "application/json", text[:200]
        return response.status, json.loads(text)


def bad_request(message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }


POD = {
    "metadata": {"name": "p"},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
}
PARSE = 'strconv.ParseInt: parsing "abc": invalid syntax'


# ---------------------------------------------------------------------- 15: query parameters


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/namespaces/default/configmaps?limit=abc"),
        ("GET", "/api/v1/configmaps?limit=abc"),
        ("GET", "/apis/batch/v1/namespaces/default/jobs?watch=1&limit=abc&timeoutSeconds=1"),
        ("GET", "/api/v1/namespaces/default/pods?timeoutSeconds=abc"),
        ("DELETE", "/api/v1/namespaces/default/configmaps/c?gracePeriodSeconds=abc"),
        ("DELETE", "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=abc"),
        ("GET", "/api/v1/namespaces/default/pods/p/log?tailLines=abc"),
        ("GET", "/api/v1/namespaces/default/pods/nosuchpod/log?tailLines=abc"),
    ],
)
async def test_a_number_that_is_not_one_is_a_bad_request(
    cluster: FakeCluster, http: aiohttp.ClientSession, method: str, path: str
) -> None:
    cluster.store.create("configmaps", "default", {"metadata": {"name": "c"}})
    cluster.store.create("pods", "default", POD)
    assert await send(http, method, cluster.url + path) == (400, bad_request(PARSE))
    assert cluster.get("configmaps", "c") is not None  # nothing was deleted


async def test_a_number_out_of_range_and_a_negative_tail(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    huge = "99999999999999999999"
    status, body = await send(http, "GET", f"{configmaps(cluster)}?limit={huge}")
    assert (status, body["message"]) == (
        400,
        f'strconv.ParseInt: parsing "{huge}": value out of range',
    )
    cluster.store.create("pods", "default", POD)
    url = f"{cluster.url}/api/v1/namespaces/default/pods/p/log?tailLines=-1"
    status, body = await send(http, "GET", url)
    assert (status, body["reason"], body["message"]) == (
        422,
        "Invalid",
        'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: must be greater than or '
        "equal to 0",
    )


async def test_delete_options_in_the_body_win_and_are_typed(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.store.create("configmaps", "default", {"metadata": {"name": "c"}})
    url = f"{configmaps(cluster)}/c?gracePeriodSeconds=abc"  # not read: there is a body
    status, body = await send(http, "DELETE", url, json.dumps({"gracePeriodSeconds": "x"}))
    assert (status, body["message"]) == (
        400,
        'DeleteOptions in version "v1" cannot be handled as a DeleteOptions: json: cannot '
        "unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64",
    )
    status, _ = await send(http, "DELETE", url, json.dumps({"gracePeriodSeconds": 0}))
    assert status == 200 and cluster.get("configmaps", "c") is None


# ---------------------------------------------------------------------- 15: bodies


def _cannot(kind: str, error: str) -> str:
    return f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal {error}'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metadata": {"name": 5}},
            _cannot(
                "ConfigMap", "number into Go struct field ObjectMeta.metadata.name of type string"
            ),
        ),
        (
            {"metadata": "x"},
            _cannot(
                "ConfigMap", "string into Go struct field ConfigMap.metadata of type v1.ObjectMeta"
            ),
        ),
        (
            {"metadata": {"name": "a"}, "data": [1]},
            _cannot(
                "ConfigMap", "array into Go struct field ConfigMap.data of type map[string]string"
            ),
        ),
        (
            {"metadata": {"name": "a"}, "data": {"k": 1}},
            _cannot("ConfigMap", "number into Go struct field ConfigMap.data of type string"),
        ),
        (
            {"metadata": {"name": "a", "labels": {"x": True}}},
            _cannot(
                "ConfigMap", "bool into Go struct field ObjectMeta.metadata.labels of type string"
            ),
        ),
        (
            {"metadata": {"name": "a"}, "immutable": "yes"},
            _cannot("ConfigMap", "string into Go struct field ConfigMap.immutable of type bool"),
        ),
        (
            [1],
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get "
            "version/kind; json parse error: json: cannot unmarshal array into Go value of type "
            'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
            '"json:\\"kind,omitempty\\"" } (5b315d)',
        ),
    ],
)
async def test_a_value_of_the_wrong_type_is_a_bad_request(
    cluster: FakeCluster, http: aiohttp.ClientSession, body: Any, message: str
) -> None:
    status, answer = await send(http, "POST", configmaps(cluster), json.dumps(body))
    assert (status, answer) == (400, bad_request(message))
    assert cluster.objects("configmaps") == []


async def test_a_job_template_of_the_wrong_type_names_the_deep_field(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": 1.5, "template": {"spec": {"containers": "main"}}},
    }
    url = f"{cluster.url}/apis/batch/v1/namespaces/default/jobs"
    status, answer = await send(http, "POST", url, json.dumps(job))
    assert (status, answer["message"]) == (
        400,
        _cannot("Job", "number 1.5 into Go struct field JobSpec.spec.parallelism of type int32"),
    )
    job["spec"]["parallelism"] = 1
    status, answer = await send(http, "PUT", f"{url}/j", json.dumps(job))
    assert (status, answer["message"]) == (
        400,
        _cannot(
            "Job",
            "string into Go struct field PodSpec.spec.template.spec.containers of "
            "type []v1.Container",
        ),
    )


@pytest.mark.parametrize("bracket", ["{", "["])
async def test_json_nested_100000_deep_is_a_bad_request(
    cluster: FakeCluster, http: aiohttp.ClientSession, bracket: str
) -> None:
    depth = 100_000
    body = ('{"a":' * depth + "1" + "}" * depth) if bracket == "{" else "[" * depth + "]" * depth
    status, answer = await send(http, "POST", configmaps(cluster), body)
    assert status == 400
    summary = body[:30] if bracket == "{" else body[:30].encode().hex()
    assert answer["message"] == (
        "the object provided is unrecognized (must be of type ConfigMap): couldn't get "
        f"version/kind; json parse error: invalid character '{bracket}' exceeded max depth "
        f"({summary} ...)"
    )
    url = f"{configmaps(cluster)}/x"
    cluster.store.create("configmaps", "default", {"metadata": {"name": "x"}})
    async with http.patch(
        url, data=body, headers={"Content-Type": "application/merge-patch+json"}
    ) as response:
        assert response.status == 400


# ---------------------------------------------------------------------- 16: the size rule


async def test_configmap_values_are_counted_in_bytes_without_keys(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = configmaps(cluster)
    exact = {"metadata": {"name": "exact"}, "data": {"k" * 200: "a" * MIB}}
    status, created = await send(http, "POST", url, json.dumps(exact))
    assert status == 201, created
    binary = {
        "metadata": {"name": "binary"},
        "data": {"a": "a" * (MIB // 2)},
        "binaryData": {"b": base64.b64encode(b"\0" * (MIB // 2)).decode()},
    }
    status, created = await send(http, "POST", url, json.dumps(binary))
    assert status == 201, created
    errors = json.loads((REFERENCE / "errors.json").read_text())
    recorded = errors["configmap_too_large"]
    over = {
        "metadata": {"name": "big"},
        "data": {"a": "a" * (MIB // 2), "b": "b" * (MIB // 2 + 10)},
    }
    assert await send(http, "POST", url, json.dumps(over)) == (
        recorded["http_status"],
        recorded["body"],
    )
    two_byte = {"metadata": {"name": "big"}, "data": {"k": "é" * 524_289}}  # 1 MiB + 2 bytes
    status, answer = await send(http, "POST", url, json.dumps(two_byte, ensure_ascii=False))
    assert (status, answer["message"]) == (422, recorded["body"]["message"])


async def test_secret_data_counts_decoded_bytes_and_string_data(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/secrets"
    exact = {"metadata": {"name": "exact"}, "data": {"key": base64.b64encode(b"x" * MIB).decode()}}
    status, created = await send(http, "POST", url, json.dumps(exact))
    assert status == 201, created["message"] if status != 201 else ""
    over = {
        "metadata": {"name": "over"},
        "data": {"a": base64.b64encode(b"x" * 10).decode()},
        "stringData": {"b": "y" * MIB},
    }
    status, answer = await send(http, "POST", url, json.dumps(over))
    assert (status, answer["message"]) == (
        422,
        'Secret "over" is invalid: data: Too long: may not be more than 1048576 bytes',
    )
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 1048576 bytes",
            "field": "data",
        }
    ]


# ---------------------------------------------------------------------- 17: headers


async def test_headers_up_to_a_mebibyte_are_taken(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = configmaps(cluster)
    for headers in (
        {"X-Big": "a" * 16 * 1024},
        {f"X-H{i}": "v" for i in range(200)},
        {"X-Big": "a" * (MIB - 10_000)},
    ):
        async with http.get(url, headers=headers) as response:
            assert response.status == 200, await response.text()
    async with http.get(url, headers={"X-Big": "a" * (MIB + 5000)}) as response:
        assert response.status == 431
        assert await response.text() == "431 Request Header Fields Too Large"


# ---------------------------------------------------------------------- 18: subresources


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "configmaps/x/bogus"),
        ("GET", "configmaps/x/log"),
        ("DELETE", "configmaps/x/bogus"),
        ("PUT", "configmaps/x/status"),
        ("PATCH", "configmaps/x/status"),
        ("POST", "configmaps/x/eviction"),
        ("GET", "configmaps/x/status/more"),
        ("GET", "pods/p/attach"),  # exec is served (apiserver/exec.py), attach is not
        ("DELETE", "pods/p/bogus"),
    ],
)
async def test_an_unknown_subresource_is_not_found_and_changes_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession, method: str, path: str
) -> None:
    cluster.store.create("configmaps", "default", {"metadata": {"name": "x"}, "data": {"a": "1"}})
    cluster.store.create("pods", "default", POD)
    before = cluster.get("configmaps", "x")
    url = f"{cluster.url}/api/v1/namespaces/default/{path}"
    body = json.dumps({"metadata": {"name": "x"}, "data": {"a": "2"}})
    status, answer = await send(http, method, url, body if method in ("PUT", "PATCH") else None)
    assert (status, answer["reason"], answer["details"]) == (404, "NotFound", {})
    assert answer["message"] == "the server could not find the requested resource"
    assert cluster.get("configmaps", "x") is before  # not written, not deleted
    assert cluster.get("pods", "p") is not None


async def test_a_known_subresource_with_a_verb_it_lacks_is_not_allowed(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.store.create("pods", "default", POD)
    url = f"{cluster.url}/api/v1/namespaces/default/pods/p"
    status, answer = await call(http, "DELETE", f"{url}/status")
    assert (status, answer["reason"]) == (405, "MethodNotAllowed")
    status, answer = await call(http, "GET", f"{url}/status")
    assert status == 200 and answer["metadata"]["name"] == "p"
    assert cluster.get("pods", "p") is not None


@pytest.mark.parametrize(
    ("content_type", "patch", "status", "message"),
    [
        ("application/merge-patch+json", "5", 400, "Invalid JSON Patch"),
        ("application/merge-patch+json", "null", 400, "Invalid JSON Patch"),
        (
            "application/strategic-merge-patch+json",
            "[]",
            400,
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            "application/merge-patch+json",
            '{"metadata": {"labels": 5}}',
            422,
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of "
            "type map[string]string",
        ),
    ],
)
async def test_a_patch_that_is_no_object_or_mistypes_the_result_is_refused(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    content_type: str,
    patch: str,
    status: int,
    message: str,
) -> None:
    cluster.store.create("configmaps", "default", {"metadata": {"name": "x"}})
    before = cluster.get("configmaps", "x")
    url = f"{configmaps(cluster)}/x"
    async with http.patch(url, data=patch, headers={"Content-Type": content_type}) as response:
        answer = json.loads(await response.text())
    assert response.status == status
    assert answer["message"] == message if status == 400 else answer["message"].endswith(message)
    if status == 422:
        assert answer["details"]["causes"][0]["field"] == "patch"
    assert cluster.get("configmaps", "x") is before


@pytest.mark.parametrize(
    ("resource", "body", "message"),
    [
        (
            "secrets",
            {"metadata": {"name": "s"}, "data": {"k": "not base64!"}},
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input '
            "byte 3",
        ),
        (
            "configmaps",
            {"metadata": {"name": "c"}, "binaryData": {"k": "YWJjZA"}},
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: illegal base64 data at '
            "input byte 4",
        ),
    ],
)
async def test_bytes_that_are_not_base64_are_a_bad_request(
    cluster: FakeCluster, http: aiohttp.ClientSession, resource: str, body: Any, message: str
) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/{resource}"
    assert await send(http, "POST", url, json.dumps(body)) == (400, bad_request(message))
    body["metadata"]["name"] += "-ok"
    for values in (body.get("data"), body.get("binaryData")):
        if values is not None and resource == "secrets":
            values["k"] = base64.b64encode(b"fine\n").decode()
        elif values is not None:
            values["k"] = "YWJjZA=="
    status, _ = await send(http, "POST", url, json.dumps(body))
    assert status == 201


@pytest.mark.parametrize(
    ("body", "error", "summary"),
    [
        ('{"a":1', "unexpected end of JSON input", '{"a":1'),
        ("{x}", "invalid character 'x' looking for beginning of object key string", "{x}"),
        ('{"a":1 "b":2}', "invalid character '\"' after object key:value pair", '{"a":1 "b":2}'),
        ("[1 2]", "invalid character '2' after array element", "5b3120325d"),
        ("{} x", "invalid character 'x' after top-level value", "{} x"),
        # Python's decoder takes NaN and Infinity; Go's refuses them where a value begins
        ('{"a":NaN}', "invalid character 'N' looking for beginning of value", '{"a":NaN}'),
        (
            '{"a":[Infinity]}',
            "invalid character 'I' looking for beginning of value",
            '{"a":[Infinity]}',
        ),
        ('{"a":-Infinity}', "invalid character 'I' in numeric literal", '{"a":-Infinity}'),
        (
            '{"s":"NaN \\" Infinity","a":NaN}',
            "invalid character 'N' looking for beginning of value",
            '{"s":"NaN \\" Infinity","a":NaN ...',
        ),
        # an escaped quote does not end a string: the pair is the object's, not an array's
        ('{"k\\"[":1 2}', "invalid character '2' after object key:value pair", '{"k\\"[":1 2}'),
    ],
)
async def test_json_syntax_errors_are_worded_as_go_words_them(
    cluster: FakeCluster, http: aiohttp.ClientSession, body: str, error: str, summary: str
) -> None:
    status, answer = await send(http, "POST", configmaps(cluster), body)
    assert (status, answer) == (
        400,
        bad_request(
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get "
            f"version/kind; json parse error: {error} ({summary})"
        ),
    )
