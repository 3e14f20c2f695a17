"""Scheduling knobs: priority and runtime class, node affinity, topology spread.

The API server's rules for each are checked at the field (operators and their values, label
keys and values, object names); the rendered pod fields pass the strict Kubernetes schema
over a hypothesis sweep; a golden file pins the bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.render.manifests import Target
from k8sjobs.steps.spec import Step

from ..render.test_render import assert_valid, render
from .test_spec import refused
from .test_volumes import assert_golden


def step(**fields: Any) -> Step:
    fields.setdefault("name", "train")
    fields.setdefault("script", "echo hi\n")
    return Step(**fields)


def pod_spec(s: Step) -> dict[str, Any]:
    manifests = render(s, Target(study="sched"))
    assert_valid(manifests)
    spec: dict[str, Any] = manifests.job["spec"]["template"]["spec"]
    return spec


def test_nothing_set_renders_nothing() -> None:
    spec = pod_spec(step())
    for key in ("priorityClassName", "runtimeClassName", "affinity", "topologySpreadConstraints"):
        assert key not in spec


def test_priority_and_runtime_class_are_object_names() -> None:
    spec = pod_spec(step(priority_class="high-priority", runtime_class="nvidia"))
    assert spec["priorityClassName"] == "high-priority"
    assert spec["runtimeClassName"] == "nvidia"
    refused(lambda: step(priority_class="High"), ("priority_class",), "object name")
    refused(lambda: step(runtime_class="gvisor sandbox"), ("runtime_class",), "object name")


def test_required_and_preferred_affinity_render_node_affinity() -> None:
    affinity = {
        "required": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100", "H100"]},
            {"key": "example.com/cores", "operator": "Gt", "values": ["32"]},
        ],
        "preferred": [{"key": "zone", "operator": "NotIn", "values": ["z1"], "weight": 30}],
    }
    node = pod_spec(step(affinity=affinity))["affinity"]["nodeAffinity"]
    required = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert required == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100", "H100"]},
                {"key": "example.com/cores", "operator": "Gt", "values": ["32"]},
            ]
        }
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "weight": 30,
            "preference": {
                "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]
            },
        }
    ]


@pytest.mark.parametrize(
    ("expression", "loc", "phrase"),
    [
        ({"key": "a", "operator": "In"}, ("affinity", "required", 0), "needs values"),
        ({"key": "a", "operator": "NotIn", "values": []}, ("affinity", "required", 0), "needs"),
        ({"key": "a", "operator": "Exists", "values": ["x"]}, ("affinity", "required", 0), "no"),
        (
            {"key": "a", "operator": "Gt", "values": ["x"]},
            ("affinity", "required", 0),
            "whole number",
        ),
        ({"key": "a", "operator": "Lt", "values": ["1", "2"]}, ("affinity", "required", 0), "one"),
        ({"key": "a", "operator": "Near"}, ("affinity", "required", 0, "operator"), ""),
        ({"key": "a b", "operator": "Exists"}, ("affinity", "required", 0, "key"), "label key"),
        (
            {"key": "a", "operator": "In", "values": ["x y"]},
            ("affinity", "required", 0, "values"),
            "",
        ),
    ],
)
def test_bad_expressions_are_refused_at_their_field(
    expression: dict[str, Any], loc: tuple[str | int, ...], phrase: str
) -> None:
    refused(lambda: step(affinity={"required": [expression]}), loc, phrase)


@pytest.mark.parametrize("weight", [0, 101])
def test_preference_weights_are_1_to_100(weight: int) -> None:
    pref = {"key": "a", "operator": "Exists", "weight": weight}
    refused(lambda: step(affinity={"preferred": [pref]}), ("affinity", "preferred", 0, "weight"))


def test_an_empty_affinity_is_refused() -> None:
    refused(lambda: step(affinity={}), ("affinity",), "required or preferred")


@pytest.mark.parametrize(
    ("spread", "key"),
    [
        ("hostname", "kubernetes.io/hostname"),
        ("zone", "topology.kubernetes.io/zone"),
        ("topology.kubernetes.io/region", "topology.kubernetes.io/region"),
    ],
)
def test_spread_spreads_the_steps_pods_over_a_topology(spread: str, key: str) -> None:
    s = step(spread=spread, resources={"nodes": 4, "tasks": 4})
    manifests = render(s, Target(study="sched"))
    assert_valid(manifests)
    spec = manifests.job["spec"]["template"]["spec"]
    assert spec["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": manifests.name}},
        }
    ]


@pytest.mark.parametrize("spread", ["not a key", "/x", "a/", ""])
def test_spread_must_be_a_shorthand_or_label_key(spread: str) -> None:
    refused(lambda: step(spread=spread), ("spread",), "hostname")


label_keys = st.sampled_from(["zone", "example.com/tier", "nvidia.com/gpu.product"])
label_values = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?", fullmatch=True)
expressions = st.one_of(
    st.fixed_dictionaries(
        {
            "key": label_keys,
            "operator": st.sampled_from(["In", "NotIn"]),
            "values": st.lists(label_values, min_size=1, max_size=3),
        }
    ),
    st.fixed_dictionaries(
        {"key": label_keys, "operator": st.sampled_from(["Exists", "DoesNotExist"])}
    ),
    st.fixed_dictionaries(
        {
            "key": label_keys,
            "operator": st.sampled_from(["Gt", "Lt"]),
            "values": st.integers(0, 10**6).map(lambda n: [str(n)]),
        }
    ),
)
preferences = expressions.flatmap(lambda e: st.integers(1, 100).map(lambda w: {**e, "weight": w}))
affinities = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"required": st.lists(expressions, min_size=1, max_size=3)},
        optional={"preferred": st.lists(preferences, max_size=3)},
    ),
    st.fixed_dictionaries({"preferred": st.lists(preferences, min_size=1, max_size=3)}),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    affinity=affinities,
    spread=st.sampled_from([None, "hostname", "zone", "example.com/rack"]),
    priority=st.sampled_from([None, "high", "system.batch"]),
    runtime=st.sampled_from([None, "nvidia", "kata"]),
    nodes=st.integers(1, 3),
)
def test_every_knob_renders_valid_kubernetes(
    affinity: dict[str, Any] | None,
    spread: str | None,
    priority: str | None,
    runtime: str | None,
    nodes: int,
) -> None:
    spec = pod_spec(
        step(
            affinity=affinity,
            spread=spread,
            priority_class=priority,
            runtime_class=runtime,
            resources={"nodes": nodes, "tasks": nodes},
        )
    )
    assert ("affinity" in spec) == (affinity is not None)
    assert ("topologySpreadConstraints" in spec) == (spread is not None)


def test_golden_scheduling() -> None:
    s = Step(
        name="solve",
        script="$(LAUNCHER) ./solver\n",
        resources={"nodes": 4, "tasks": 64, "cores_per_task": 2},
        priority_class="hpc-high",
        runtime_class="nvidia",
        affinity={
            "required": [{"key": "node.example.com/fabric", "operator": "In", "values": ["ib"]}],
            "preferred": [
                {
                    "key": "topology.kubernetes.io/zone",
                    "operator": "In",
                    "values": ["a"],
                    "weight": 50,
                }
            ],
        },
        spread="hostname",
        shm="8Gi",
    )
    assert_golden(render(s, Target(study="hpc", namespace="hpc")), "scheduling")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority_class", "high"),
        ("runtime_class", "nvidia"),
        ("spread", "zone"),
        ("affinity", {"required": [{"key": "a", "operator": "Exists"}]}),
        ("shm", "1Gi"),
        ("volumes", [{"name": "d", "claim": "d", "mount_path": "/d"}]),
    ],
)
def test_a_minicluster_step_refuses_what_it_would_drop(field: str, value: Any) -> None:
    refused(lambda: step(target="minicluster", **{field: value}), (field,), "target: job")
