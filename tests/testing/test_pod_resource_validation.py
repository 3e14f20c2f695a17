"""A container's resources, judged through real HTTP to the fake API server as kube-apiserver's
ValidateResourceRequirements judges them: a negative quantity, a request above its limit, a
name no container may ask for, an extended resource asked unlike its limit, hugepages in part
pages or alone, in a Pod (after its requests default to its limits) and in a Job's pod template
(not defaulted), are a 422 Invalid with the real causes, field paths and order; nothing refused
is stored, and what the real server takes is stored."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from .conftest import assert_invalid as invalid_on_create
from .conftest import call

JSON = {"Content-Type": "application/json"}
PODS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
C0 = "spec.containers[0].resources"


def _invalid(field: str, value: str, detail: str) -> dict[str, str]:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {value}: {detail}",
        "field": field,
    }


def _go(mantissa: int, scale: int, canonical: str) -> str:
    """A quantity as Go's %#v prints it in a field error."""
    return (
        f"resource.Quantity{{i:resource.int64Amount{{value:{mantissa}, scale:{scale}}}, "
        f'd:resource.infDecAmount{{Dec:(*inf.Dec)(nil)}}, s:"{canonical}", Format:"DecimalSI"}}'
    )


NEGATIVE = "must be greater than or equal to 0"


def pod_spec(resources: dict[str, Any], init: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": init}]
    return spec


def job(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "spec": {"template": {"spec": spec}}}


async def assert_invalid(
    http: aiohttp.ClientSession,
    cluster: FakeCluster,
    kind: str,
    body: dict[str, Any],
    causes: list[dict[str, str]],
) -> None:
    """Assert that creating the Pod or Job `body` is the 422 Invalid listing `causes`."""
    path, group = {"Pod": (PODS, ""), "Job": (JOBS, "batch")}[kind]
    await invalid_on_create(http, cluster, path, kind, body, causes, group)


POD_CASES = {
    # the Pod's request defaults to its limit before validation: both are negative
    "negative-cpu-limit": (
        {"limits": {"cpu": "-1"}},
        [
            _invalid(f"{C0}.limits[cpu]", '"-1"', NEGATIVE),
            _invalid(f"{C0}.requests[cpu]", '"-1"', NEGATIVE),
        ],
    ),
    "negative-memory-request": (
        {"requests": {"memory": "-0.5Gi"}},
        [_invalid(f"{C0}.requests[memory]", '"-512Mi"', NEGATIVE)],
    ),
    "cpu-request-above-limit": (
        {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
        [_invalid(f"{C0}.requests", '"2"', "must be less than or equal to cpu limit of 1")],
    ),
    "memory-request-above-limit": (
        {"requests": {"memory": "1.5Gi"}, "limits": {"memory": "1024Mi"}},
        [
            _invalid(
                f"{C0}.requests", '"1536Mi"', "must be less than or equal to memory limit of 1Gi"
            )
        ],
    ),
    "name-no-container-asks": (
        {"requests": {"gpus": "1"}},
        [
            _invalid(
                f"{C0}.requests[gpus]",
                '"gpus"',
                "must be a standard resource type or fully qualified",
            ),
            _invalid(
                f"{C0}.requests[gpus]", '"gpus"', "must be a standard resource for containers"
            ),
        ],
    ),
    "name-of-a-quota": (
        {
            "limits": {"requests.example.com/gpu": "1"},
            "requests": {"requests.example.com/gpu": "1"},
        },
        [
            _invalid(
                f"{C0}.{where}[requests.example.com/gpu]",
                '"requests.example.com/gpu"',
                "doesn't follow extended resource name standard",
            )
            for where in ("limits", "requests")
        ],
    ),
    "extended-request-below-limit": (
        {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}},
        [_invalid(f"{C0}.requests", '"1"', "must be equal to example.com/gpu limit of 2")],
    ),
    "extended-part": (
        {"limits": {"example.com/gpu": "500m"}},
        [
            _invalid(f"{C0}.{where}[example.com/gpu]", _go(500, -3, "500m"), "must be an integer")
            for where in ("limits", "requests")
        ],
    ),
    "hugepages-part-page-alone": (
        {"limits": {"hugepages-2Mi": "3Mi"}},
        [
            *(
                _invalid(
                    f"{C0}.{where}[hugepages-2Mi]",
                    '"3Mi"',
                    "3Mi is not positive integer multiple of hugepages-2Mi",
                )
                for where in ("limits", "requests")
            ),
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: HugePages require cpu or memory",
                "field": C0,
            },
        ],
    ),
    # limits first, then requests, each by name; Go's map order is random
    "sorted-limits-then-requests": (
        {"limits": {"memory": "-1", "cpu": "1"}, "requests": {"cpu": "-2", "memory": "-1"}},
        [
            _invalid(f"{C0}.limits[memory]", '"-1"', NEGATIVE),
            _invalid(f"{C0}.requests[cpu]", '"-2"', NEGATIVE),
            _invalid(f"{C0}.requests[memory]", '"-1"', NEGATIVE),
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(POD_CASES))
async def test_a_pod_whose_container_resources_the_real_server_refuses_is_invalid(
    cluster: FakeCluster, http: aiohttp.ClientSession, case: str
) -> None:
    resources, causes = POD_CASES[case]
    body = {"metadata": {"name": "p"}, "spec": pod_spec(resources)}
    await assert_invalid(http, cluster, "Pod", body, causes)


async def test_containers_come_before_init_containers_and_the_overhead(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    spec = pod_spec({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, {"limits": {"cpu": "-1"}})
    spec["overhead"] = {"memory": "-1"}
    causes = [
        _invalid(f"{C0}.requests", '"2"', "must be less than or equal to cpu limit of 1"),
        _invalid("spec.initContainers[0].resources.limits[cpu]", '"-1"', NEGATIVE),
        _invalid("spec.initContainers[0].resources.requests[cpu]", '"-1"', NEGATIVE),
        _invalid("spec.overhead.limits[memory]", '"-1"', NEGATIVE),
    ]
    await assert_invalid(http, cluster, "Pod", {"metadata": {"name": "p"}, "spec": spec}, causes)


T0 = "spec.template.spec.containers[0].resources"


@pytest.mark.parametrize(
    ("resources", "causes"),
    [
        (
            {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
            [_invalid(f"{T0}.requests", '"2"', "must be less than or equal to cpu limit of 1")],
        ),
        # a pod template's requests are not defaulted from its limits: one cause, not two
        ({"limits": {"memory": "-1Gi"}}, [_invalid(f"{T0}.limits[memory]", '"-1Gi"', NEGATIVE)]),
        (
            {"requests": {"example.com/gpu": "1"}},
            [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: Limit must be set for non overcommitable resources",
                    "field": f"{T0}.limits",
                }
            ],
        ),
        (
            {"limits": {"cpu": "1", "example.com/gpu": "2"}, "requests": {"example.com/gpu": "3"}},
            [_invalid(f"{T0}.requests", '"3"', "must be equal to example.com/gpu limit of 2")],
        ),
    ],
)
async def test_a_job_whose_pod_template_asks_so_is_invalid_at_the_template_path(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    resources: dict[str, Any],
    causes: list[dict[str, str]],
) -> None:
    await assert_invalid(http, cluster, "Job", job(pod_spec(resources)), causes)


async def test_a_jobs_counts_come_before_its_template_and_its_restart_policy_after(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    body = job(pod_spec({"limits": {"cpu": "-1"}}))
    body["spec"]["parallelism"] = -1
    del body["spec"]["template"]["spec"]["restartPolicy"]  # defaulted to Always: refused
    causes = [
        _invalid("spec.parallelism", "-1", NEGATIVE),
        _invalid(f"{T0}.limits[cpu]", '"-1"', NEGATIVE),
        {
            "reason": "FieldValueRequired",
            "message": 'Required value: valid values: "OnFailure", "Never"',
            "field": "spec.template.spec.restartPolicy",
        },
    ]
    await assert_invalid(http, cluster, "Job", body, causes)


ACCEPTED = [
    {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1Gi"}},
    {"limits": {"cpu": "2", "memory": "512Mi", "example.com/gpu": "1"}},
    {"requests": {"cpu": "250m", "memory": "0", "ephemeral-storage": "1Gi"}},
    {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
    {"limits": {"memory": "1Gi", "hugepages-2Mi": "4Mi", "example.com/gpu": "2"}},
    {"requests": {"example.com/gpu": "2"}, "limits": {"example.com/gpu": "2", "cpu": "1"}},
    {},
]


@pytest.mark.parametrize("resources", ACCEPTED)
async def test_resources_the_real_server_takes_are_stored_in_a_pod_and_a_job(
    cluster: FakeCluster, http: aiohttp.ClientSession, resources: dict[str, Any]
) -> None:
    body = {"metadata": {"name": "p"}, "spec": pod_spec(resources, resources)}
    status, created = await call(http, "POST", f"{cluster.url}{PODS}", body, **JSON)
    assert status == 201, created
    status, created = await call(http, "POST", f"{cluster.url}{JOBS}", job(body["spec"]), **JSON)
    assert status == 201, created


@pytest.mark.parametrize(
    ("policy", "failure_policy", "reason", "message"),
    [
        (
            "Always",
            False,
            "FieldValueRequired",
            'Required value: valid values: "OnFailure", "Never"',
        ),
        (
            "Sometimes",
            False,
            "FieldValueNotSupported",
            'Unsupported value: "Sometimes": supported values: "OnFailure", "Never"',
        ),
        (
            "OnFailure",
            True,
            "FieldValueInvalid",
            'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is '
            "specified",
        ),
    ],
    ids=["always", "unknown", "onfailure-with-pod-failure-policy"],
)
async def test_a_jobs_restart_policy_is_judged_as_validate_job_spec_does(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    policy: str,
    failure_policy: bool,
    reason: str,
    message: str,
) -> None:
    """An explicit Always reads as an unset policy (the server defaults it first), not as an
    unsupported value; OnFailure beside a podFailurePolicy is refused."""
    body = job(pod_spec({}))
    body["spec"]["template"]["spec"]["restartPolicy"] = policy
    if failure_policy:
        rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
        body["spec"]["podFailurePolicy"] = {"rules": [rule]}
    cause = {"reason": reason, "message": message, "field": "spec.template.spec.restartPolicy"}
    await assert_invalid(http, cluster, "Job", body, [cause])


@pytest.mark.parametrize(
    "spec",
    [None, {"template": None}, {"template": {"spec": None}}],
    ids=["spec", "template", "pod-spec"],
)
async def test_a_job_whose_spec_or_template_is_null_is_refused_not_a_500(
    cluster: FakeCluster, spec: dict[str, Any] | None
) -> None:
    """A null decodes to Go's zero struct: a Job without a pod spec is 422 Invalid (its
    restartPolicy and containers are missing); the restartPolicy check's .get on None was
    a 500 and a traceback in the server."""
    body = {"metadata": {"name": "j"}, "spec": spec}
    async with aiohttp.ClientSession() as http:
        status, answer = await call(http, "POST", f"{cluster.url}{JOBS}", body, **JSON)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    fields = [c["field"] for c in answer["details"]["causes"]]
    assert "spec.template.spec.restartPolicy" in fields
    assert cluster.objects("jobs") == []


@pytest.mark.parametrize("containers", [[], [None]], ids=["none", "null"])
async def test_a_pod_without_a_container_is_invalid_and_a_null_one_is_no_500(
    cluster: FakeCluster, http: aiohttp.ClientSession, containers: list[Any]
) -> None:
    """``containers: []`` was stored (and crashed the kubelet), ``[null]`` was a 500: Go
    decodes a null element as an empty Container, which validation then refuses."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    body["spec"] = {"containers": containers}
    status, answer = await call(http, "POST", f"{cluster.url}/api/v1/namespaces/default/pods", body)
    assert status == 422, answer
    if not containers:
        assert answer["details"]["causes"] == [
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.containers",
            }
        ]
