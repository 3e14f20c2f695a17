"""Quantities and what a LimitRange or ResourceQuota may say, through real HTTP to the fake
API server (issue 34, item 26): a quantity resource.Quantity's parser refuses is a 400 in its
words wherever one is read (a Pod's limits and requests, a LimitRange, a ResourceQuota), on a
create, an update and a patch; a LimitRange whose min, default and max disagree, or a quota
that is negative, fractional for a count or on an unknown resource, is a 422 with the real
validation's causes. Nothing refused is stored."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.steps.quantity import FORMAT_WRONG, NUMERIC, SUFFIX, Quantity, QuantityError
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver import decoding
from k8sjobs.testing.apiserver.errors import ApiError

from .conftest import assert_invalid as invalid_on_create
from .conftest import call, wait_until

JSON = {"Content-Type": "application/json"}
CORE = "/api/v1/namespaces/default"
# Quantities the real parser refuses, with what it says of each.
REFUSED = {
    "lots": FORMAT_WRONG,
    "1Gb": FORMAT_WRONG,
    "0x10": FORMAT_WRONG,
    "1.5.5": FORMAT_WRONG,
    "\t1": FORMAT_WRONG,  # sent as "\t1": Go trims spaces of the raw JSON text, not escapes
    "": FORMAT_WRONG,
    "1ki": SUFFIX,
    "1e": SUFFIX,
    "Pi": NUMERIC,
}


def pod(value: Any, where: str = "limits") -> tuple[str, str, dict[str, Any]]:
    container = {"name": "main", "image": "busybox", "resources": {where: {"cpu": value}}}
    body = {
        "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    return "pods", "Pod", body


def limit_range(value: Any, key: str = "max") -> tuple[str, str, dict[str, Any]]:
    body = {
        "metadata": {"name": "l"},
        "spec": {"limits": [{"type": "Container", key: {"memory": value}}]},
    }
    return "limitranges", "LimitRange", body


def quota(value: Any) -> tuple[str, str, dict[str, Any]]:
    return (
        "resourcequotas",
        "ResourceQuota",
        {"metadata": {"name": "q"}, "spec": {"hard": {"pods": value}}},
    )


OBJECTS = {
    "pod-limits": pod,
    "pod-requests": lambda value: pod(value, "requests"),
    "limitrange-max": limit_range,
    "limitrange-default": lambda value: limit_range(value, "default"),
    "resourcequota": quota,
}


async def post(
    http: aiohttp.ClientSession, cluster: FakeCluster, plural: str, body: Any
) -> tuple[int, Any]:
    return await call(http, "POST", f"{cluster.url}{CORE}/{plural}", body, **JSON)


@pytest.mark.parametrize("text", sorted(REFUSED))
@pytest.mark.parametrize("kind", sorted(OBJECTS))
async def test_a_quantity_the_parser_refuses_is_a_bad_request_in_its_words(
    cluster: FakeCluster, http: aiohttp.ClientSession, kind: str, text: str
) -> None:
    plural, go_kind, body = OBJECTS[kind](text)
    status, answer = await post(http, cluster, plural, body)
    assert (status, answer["reason"]) == (400, "BadRequest"), answer
    assert (
        answer["message"]
        == f'{go_kind} in version "v1" cannot be handled as a {go_kind}: {REFUSED[text]}'
    )
    assert cluster.objects(plural) == []


@given(st.text(alphabet="0123456789.+-eEKMGTPinumkxb \t", max_size=10))
def test_decoding_refuses_exactly_what_the_parser_refuses_in_its_words(text: str) -> None:
    container = {"name": "m", "image": "i", "resources": {"requests": {"cpu": text}}}
    bodies = {
        "Pod": {"spec": {"containers": [container], "overhead": {"cpu": text}}},
        "LimitRange": {
            "spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"x": text}}]}
        },
        "ResourceQuota": {"spec": {"hard": {"pods": "1"}}, "status": {"used": {"pods": text}}},
    }
    try:
        Quantity.parse(text)
        reason = None
    except QuantityError as error:
        reason = error.reason
    for kind, body in bodies.items():
        try:
            decoding.check_types("", "v1", kind, body)
        except ApiError as error:
            assert (error.code, error.message) == (
                400,
                f'{kind} in version "v1" cannot be handled as a {kind}: {reason}',
            ), text
        else:
            assert reason is None, f"{text!r} decoded into a {kind}"


@pytest.mark.parametrize("value", [True, {"amount": 1}, [1]])
async def test_a_quantity_of_another_json_type_is_refused_likewise(
    cluster: FakeCluster, http: aiohttp.ClientSession, value: Any
) -> None:
    status, answer = await post(http, cluster, *quota(value)[::2])
    assert (status, answer["message"]) == (
        400,
        f'ResourceQuota in version "v1" cannot be handled as a ResourceQuota: {FORMAT_WRONG}',
    )


@pytest.mark.parametrize("kind", sorted(OBJECTS))
async def test_an_update_and_a_patch_read_quantities_alike(
    cluster: FakeCluster, http: aiohttp.ClientSession, kind: str
) -> None:
    plural, go_kind, body = OBJECTS[kind]("2")
    status, created = await post(http, cluster, plural, body)
    assert status == 201, created
    url = f"{cluster.url}{CORE}/{plural}/{body['metadata']['name']}"
    bad = OBJECTS[kind]("1Gb")[2]
    bad["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, answer = await call(http, "PUT", url, bad, **JSON)
    assert (status, answer["message"]) == (
        400,
        f'{go_kind} in version "v1" cannot be handled as a {go_kind}: {FORMAT_WRONG}',
    )
    merge = {"Content-Type": "application/merge-patch+json"}
    status, answer = await call(
        http, "PATCH", url, {"spec": OBJECTS[kind]("0x10")[2]["spec"]}, **merge
    )
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    [cause] = answer["details"]["causes"]
    assert (cause["field"], cause["message"].rsplit(": ", 1)[-1]) == ("patch", FORMAT_WRONG)
    stored = cluster.objects(plural)[0]["spec"]  # a status, a pod's node may be added since
    assert {key: stored[key] for key in created["spec"]} == created["spec"]


@pytest.mark.parametrize("text", ["1.5", "+1", ".5", "1e3", "1E", "  2Ki ", "100n", 7, 0.25])
async def test_what_the_parser_takes_is_stored(
    cluster: FakeCluster, http: aiohttp.ClientSession, text: Any
) -> None:
    status, created = await post(http, cluster, *pod(text, "requests")[::2])
    assert status == 201, created


def _go(mantissa: int, scale: int, canonical: str, go_format: str = "DecimalSI") -> str:
    return (
        f"resource.Quantity{{i:resource.int64Amount{{value:{mantissa}, scale:{scale}}}, "
        f'd:resource.infDecAmount{{Dec:(*inf.Dec)(nil)}}, s:"{canonical}", Format:"{go_format}"}}'
    )


def _invalid(field: str, message: str) -> dict[str, str]:
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


async def assert_invalid(
    http: aiohttp.ClientSession,
    cluster: FakeCluster,
    plural: str,
    body: dict[str, Any],
    causes: list[dict[str, str]],
) -> None:
    """Assert that creating the LimitRange or ResourceQuota `body` is the 422 Invalid
    listing `causes`."""
    kind = {"limitranges": "LimitRange", "resourcequotas": "ResourceQuota"}[plural]
    await invalid_on_create(http, cluster, f"{CORE}/{plural}", kind, body, causes)


MIN_ABOVE_MAX = [
    _invalid(
        "spec.limits[0].min[cpu]",
        f"Invalid value: {_go(2, 0, '2')}: min value 2 is greater than max value 1",
    ),
    # the server fills default and defaultRequest from max before it validates
    _invalid(
        "spec.limits[0].defaultRequest[cpu]",
        f"Invalid value: {_go(1, 0, '1')}: min value 2 is greater than default request value 1",
    ),
    _invalid(
        "spec.limits[0].default[cpu]",
        f"Invalid value: {_go(2, 0, '2')}: min value 2 is greater than default value 1",
    ),
]
GIB = 2**30
DEFAULT_ABOVE_MAX = [
    _invalid(
        "spec.limits[0].defaultRequest[memory]",
        f"Invalid value: {_go(2 * GIB, 0, '2Gi', 'BinarySI')}: default request value 2Gi is "
        "greater than max value 1Gi",
    ),
    _invalid(
        "spec.limits[0].default[memory]",
        f"Invalid value: {_go(GIB, 0, '1Gi', 'BinarySI')}: default value 2Gi is greater than "
        "max value 1Gi",
    ),
]


@pytest.mark.parametrize(
    ("item", "causes"),
    [
        ({"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}, MIN_ABOVE_MAX),
        ({"type": "Pod", "min": {"cpu": "2"}, "max": {"cpu": "1000m"}}, MIN_ABOVE_MAX[:1]),
        (
            {"type": "Container", "default": {"memory": "2Gi"}, "max": {"memory": "1Gi"}},
            DEFAULT_ABOVE_MAX,
        ),
        (
            {
                "type": "Container",
                "max": {"cpu": "2"},
                "defaultRequest": {"cpu": "1500m"},
                "default": {"cpu": "1"},
            },
            [
                _invalid(
                    "spec.limits[0].defaultRequest[cpu]",
                    f"Invalid value: {_go(1500, -3, '1500m')}: default request value 1500m is "
                    "greater than default limit value 1",
                )
            ],
        ),
        (
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}},
            [
                _invalid(
                    "spec.limits[0].maxLimitRequestRatio[cpu]",
                    f"Invalid value: {_go(500, -3, '500m')}: ratio 500m is less than 1",
                )
            ],
        ),
        (
            {
                "type": "Container",
                "min": {"cpu": "1"},
                "max": {"cpu": "2"},
                "maxLimitRequestRatio": {"cpu": "3"},
            },
            [
                _invalid(
                    "spec.limits[0].maxLimitRequestRatio[cpu]",
                    f"Invalid value: {_go(3, 0, '3')}: ratio 3 is greater than max/min = 2.000000",
                )
            ],
        ),
        (
            {"type": "Pod", "max": {"cpu": "1"}, "default": {"cpu": "1"}},
            [
                {
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: may not be specified when `type` is 'Pod'",
                    "field": "spec.limits[0].default",
                }
            ],
        ),
        (
            {"type": "Pod", "max": {"gpus": "1"}},
            [
                _invalid(
                    "spec.limits[0].max[gpus]",
                    'Invalid value: "gpus": must be a standard resource type or fully qualified',
                ),
                _invalid(
                    "spec.limits[0].max[gpus]",
                    'Invalid value: "gpus": must be a standard resource for containers',
                ),
            ],
        ),
    ],
)
async def test_a_limit_range_whose_bounds_disagree_is_invalid_with_the_real_causes(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    item: dict[str, Any],
    causes: list[dict[str, str]],
) -> None:
    body = {"metadata": {"name": "l"}, "spec": {"limits": [item]}}
    await assert_invalid(http, cluster, "limitranges", body, causes)


@pytest.mark.parametrize(
    ("hard", "causes"),
    [
        (
            {"pods": "-1"},
            [
                _invalid(
                    "spec.hard[pods]", 'Invalid value: "-1": must be greater than or equal to 0'
                )
            ],
        ),
        (
            {"requests.memory": "-0.5Gi"},
            [
                _invalid(
                    "spec.hard[requests.memory]",
                    'Invalid value: "-512Mi": must be greater than or equal to 0',
                )
            ],
        ),
        (
            {"gpus": "1"},
            [
                _invalid(
                    "spec.hard[gpus]",
                    'Invalid value: "gpus": must be a standard resource type or fully qualified',
                ),
                _invalid(
                    "spec.hard[gpus]",
                    'Invalid value: "gpus": must be a standard resource for quota',
                ),
            ],
        ),
        (
            {"storage": "1Gi"},
            [
                _invalid(
                    "spec.hard[storage]",
                    'Invalid value: "storage": must be a standard resource for quota',
                )
            ],
        ),
        (
            {"pods": "1.5"},
            [
                _invalid(
                    "spec.hard[pods]", f"Invalid value: {_go(15, -1, '1500m')}: must be an integer"
                )
            ],
        ),
        (
            {"example.com/gpu": "500m"},
            [
                _invalid(
                    "spec.hard[example.com/gpu]",
                    f"Invalid value: {_go(500, -3, '500m')}: must be an integer",
                )
            ],
        ),
        (
            {"Example.com/gpu": "1"},
            [
                _invalid(
                    "spec.hard[Example.com/gpu]",
                    'Invalid value: "Example.com/gpu": prefix part a lowercase RFC 1123 subdomain '
                    "must consist of lower case alphanumeric characters, '-' or '.', and must "
                    "start and end with an alphanumeric character (e.g. 'example.com', regex used "
                    "for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                )
            ],
        ),
    ],
)
async def test_a_quota_negative_fractional_or_on_an_unknown_resource_is_invalid(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    hard: dict[str, str],
    causes: list[dict[str, str]],
) -> None:
    body = {"metadata": {"name": "q"}, "spec": {"hard": hard}}
    await assert_invalid(http, cluster, "resourcequotas", body, causes)


async def test_quotas_and_limit_ranges_the_real_server_takes_are_stored(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    hard = {
        "pods": "10",
        "requests.cpu": "1.5",
        "limits.memory": "4Gi",
        "count/jobs.batch": "3",
        "requests.nvidia.com/gpu": "2",
        "hugepages-2Mi": "1Gi",
        "services.loadbalancers": "0",
    }
    status, created = await post(
        http, cluster, "resourcequotas", {"metadata": {"name": "q"}, "spec": {"hard": hard}}
    )
    assert status == 201, created
    item = {
        "type": "Container",
        "min": {"cpu": "100m", "memory": "64Mi"},
        "max": {"cpu": "2", "memory": "1Gi", "example.com/fpga": "2"},
        "default": {"cpu": "1"},
        "defaultRequest": {"cpu": "500m"},
        "maxLimitRequestRatio": {"cpu": "4"},
    }
    pvc = {"type": "PersistentVolumeClaim", "max": {"storage": "10Gi"}}
    body = {"metadata": {"name": "l"}, "spec": {"limits": [item, pvc]}}
    status, created = await post(http, cluster, "limitranges", body)
    assert status == 201, created
    assert json.dumps(created["spec"]["limits"][0]["default"], sort_keys=True) == json.dumps(
        {"cpu": "1", "example.com/fpga": "2", "memory": "1Gi"}, sort_keys=True
    )


# A quantity beyond a float (the parser takes "1e400"): every reader of it once converted it
# to a float, and Python's OverflowError was a 500, or a kubelet callback that died.
HUGE = "1e400"


@pytest.mark.parametrize(
    "item",
    [
        {"min": {"cpu": "1"}, "max": {"cpu": HUGE}, "maxLimitRequestRatio": {"cpu": "2"}},
        {"min": {"cpu": "1"}, "max": {"cpu": "2"}, "maxLimitRequestRatio": {"cpu": HUGE}},
    ],
    ids=["max", "ratio"],
)
async def test_a_limit_range_of_huge_quantities_is_judged_not_a_500(
    cluster: FakeCluster, http: aiohttp.ClientSession, item: dict[str, Any]
) -> None:
    body = {"metadata": {"name": "l"}, "spec": {"limits": [{"type": "Container", **item}]}}
    status, answer = await post(http, cluster, "limitranges", body)
    if "2" in item["max"].values():  # a ratio above max/min = 2
        assert (status, answer["reason"]) == (422, "Invalid"), answer
        assert "is greater than max/min = 2.000000" in answer["message"]
    else:
        assert status == 201, answer


async def test_a_pod_whose_limit_is_huge_is_refused_by_the_ratio_not_a_500(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    ratio = {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}
    body = {"metadata": {"name": "l"}, "spec": {"limits": [ratio]}}
    assert (await post(http, cluster, "limitranges", body))[0] == 201
    plural, _, pod_body = pod(HUGE)
    pod_body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    status, answer = await post(http, cluster, plural, pod_body)
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"].endswith("but provided ratio is +Inf"), answer["message"]


async def test_a_pod_asking_for_more_than_a_float_is_unschedulable(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    status, answer = await post(http, cluster, *pod(HUGE, "requests")[::2])
    assert status == 201, answer

    def scheduled() -> dict[str, Any] | None:
        [stored] = cluster.objects("pods")
        conditions = (stored.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    await wait_until(scheduled, "the pod's PodScheduled condition")
    condition = scheduled()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in condition["message"]
