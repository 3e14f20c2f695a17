"""refusal(step, allocation): why a step cannot run in an allocation's pods, said before
anything is sent, with the fix; and None for every step that fits."""

from __future__ import annotations

from typing import Any

import pytest

from k8sjobs.steps.allocation import Allocation, refusal
from k8sjobs.steps.spec import Resources, Step

POOL = Allocation(
    name="pool",
    image="python:3.12-slim",
    resources=Resources(cores_per_task=4, memory="2Gi", gpus=1),
    node_selector={"pool": "cpu"},
    service_account="runner",
)


def _step(**fields: Any) -> Step:
    return Step(**{"name": "s", "script": "true", "allocation": "pool", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"image": "python:3.12-slim"},  # the allocation's own, written out
        {"resources": Resources(cores_per_task=4, memory="2Gi", gpus=1)},
        {"resources": Resources(cpu="250m")},
        {"node_selector": {"pool": "cpu"}},  # the same as the allocation's: nothing lost
        {"service_account": "runner"},
        {"retries": 3, "walltime": "1m", "env": {"A": "b"}},
    ],
)
def test_a_step_that_fits_is_not_refused(fields: dict[str, Any]) -> None:
    assert refusal(_step(**fields), POOL) is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"image": "ghcr.io/x/y:1"}, "drop the step's image or use the same one"),
        ({"resources": Resources(nodes=2, tasks=2)}, "a Job of its own"),
        ({"resources": Resources(cores_per_task=5)}, "needs 5 cores and each pod"),
        ({"resources": Resources(cpu="4.5")}, "needs 4.5 cores"),
        ({"resources": Resources(gpus=2)}, "needs 2 GPUs"),
        ({"resources": Resources(memory="3Gi")}, "needs 3Gi of memory"),
        ({"target": "jobset"}, "it sets target"),
        ({"node_selector": {"pool": "gpu"}}, "it sets node_selector"),
        ({"shm": "1Gi"}, "it sets shm"),
        ({"priority_class": "urgent"}, "it sets priority_class"),
        ({"service_account": "other"}, "it sets service_account"),
        ({"queue": "q"}, "it sets queue"),
        ({"namespace": "elsewhere"}, 'namespace "elsewhere"'),
        ({"security": "restricted"}, 'set security: "restricted" on the allocation'),
    ],
)
def test_a_step_that_does_not_fit_is_refused_with_the_fix(
    fields: dict[str, Any], words: str
) -> None:
    allocation = POOL.model_copy(update={"namespace": "science"})
    said = refusal(_step(**fields), allocation)
    assert said is not None and words in said, said
    assert 'allocation "pool"' in said


def test_a_step_s_namespace_is_its_allocation_s_when_that_sets_none() -> None:
    assert refusal(_step(namespace="science"), POOL) is None
