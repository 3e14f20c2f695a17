"""A study's ``allocations:`` and its steps' ``allocation:`` (k8sjobs.study): read by the
Allocation model, errors at file:line naming the field, duplicate names and unknown
allocations refused naming the known ones, and a step that cannot run in its allocation
refused at load, before anything runs."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs import StudyError
from k8sjobs.steps.allocation import Allocation
from k8sjobs.study import parse_study

from .fuzz_values import any_values


def _load(body: str) -> Any:
    return parse_study("name: s\n" + textwrap.dedent(body).lstrip("\n"), source="s.yaml")


def _error(body: str) -> str:
    with pytest.raises(StudyError) as caught:
        _load(body)
    return str(caught.value)


def test_allocations_are_read_and_steps_name_them() -> None:
    study = _load(
        """
        allocations:
          - name: pool
            nodes: 2
            image: python:3.12-slim
            resources: {cores_per_task: 2, memory: 1Gi}
            idle_timeout: 5m
        steps:
          - name: s1
            allocation: pool
            script: echo hi
          - name: s2
            script: echo alone
        """
    )
    (pool,) = study.allocations
    assert pool == Allocation(
        name="pool", nodes=2, resources={"cores_per_task": 2, "memory": "1Gi"}, idle_timeout=300
    )
    assert study.step("s1").allocation == "pool" and study.step("s2").allocation is None


def test_a_study_without_allocations_has_none() -> None:
    assert _load("steps: [{name: a, script: 'true'}]").allocations == ()


def test_anchors_and_merge_keys_build_allocations_and_defaults_name_one() -> None:
    study = _load(
        """
        allocations:
          - &base {name: small, resources: {cores_per_task: 1}, idle_timeout: 1m}
          - <<: *base
            name: big
            resources: {cores_per_task: 4}
        defaults:
          allocation: big
        steps:
          - {name: a, script: 'true', resources: {cores_per_task: 3}}
          - {name: b, script: 'true', allocation: small}
        """
    )
    by_name = {a.name: a for a in study.allocations}
    assert (
        by_name["big"].pod_cpu == 4 and by_name["big"].idle_timeout == by_name["small"].idle_timeout
    )
    assert study.step("a").allocation == "big" and study.step("b").allocation == "small"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            """
            allocations: pool
            steps: [{name: a, script: 'true'}]
            """,
            "s.yaml:2: allocations: write a list of allocations",
        ),
        (
            """
            allocations:
              - pool
            steps: [{name: a, script: 'true'}]
            """,
            "s.yaml:3: allocation 1: each allocation is a mapping with a name",
        ),
        (
            """
            allocations:
              - name: pool
                nodes: 0
            steps: [{name: a, script: 'true'}]
            """,
            's.yaml:4: allocation "pool": nodes: Input should be greater than 0',
        ),
        (
            """
            allocations:
              - name: pool
                idle_timeout: soon
            steps: [{name: a, script: 'true'}]
            """,
            's.yaml:4: allocation "pool": idle_timeout: "soon" is not a duration',
        ),
        (
            """
            allocations:
              - name: pool
                resources:
                  nodes: 2
            steps: [{name: a, script: 'true'}]
            """,
            "write nodes: 2 on the allocation itself",
        ),
        (
            """
            allocations:
              - name: a-name-that-is-far-too-long-for-an-allocation-xx
            steps: [{name: a, script: 'true'}]
            """,
            's.yaml:3: allocation "a-name-that-is-far-too-long-for-an-allocation-xx": name: '
            "String should have at most 40 characters",
        ),
        (
            """
            allocations:
              - name: pool
                nodez: 2
            steps: [{name: a, script: 'true'}]
            """,
            's.yaml:4: allocation "pool": nodez: "nodez" is not a field of Allocation; '
            'did you mean "nodes"?',
        ),
        (
            """
            allocations:
              - name: pool
              - name: other
              - name: pool
            steps: [{name: a, script: 'true'}]
            """,
            's.yaml:5: allocation "pool": name: another allocation is called "pool" (s.yaml:3)',
        ),
        (
            """
            allocations:
              - name: pool
              - name: gpus
            steps:
              - name: a
                script: 'true'
                allocation: poool
            """,
            's.yaml:8: step "a": allocation: no allocation is called "poool"; the study\'s '
            'allocations: "pool", "gpus"; did you mean "pool"?',
        ),
        (
            """
            steps:
              - name: a
                script: 'true'
                allocation: pool
            """,
            's.yaml:5: step "a": allocation: no allocation is called "pool"; the study\'s '
            "allocations: none (add allocations: to it)",
        ),
        (
            """
            allocations:
              - {name: pool, image: "python:3.12-slim"}
            steps:
              - name: a
                script: 'true'
                image: ghcr.io/me/tool:1
                allocation: pool
            """,
            's.yaml:8: step "a": allocation: it cannot run in allocation "pool": its image '
            '"ghcr.io/me/tool:1" is not the image of allocation "pool"',
        ),
        (
            """
            allocations:
              - {name: pool, resources: {cores_per_task: 2}}
            defaults:
              allocation: pool
            steps:
              - name: a
                script: 'true'
                resources: {cores_per_task: 4}
            """,
            's.yaml:5: step "a": allocation: it cannot run in allocation "pool": it needs 4 '
            "cores and each pod",
        ),
    ],
)
def test_errors_name_the_line_and_the_field(body: str, expected: str) -> None:
    assert expected in _error(body)


def test_every_bad_allocation_and_step_is_reported_at_once() -> None:
    said = _error(
        """
        allocations:
          - {name: a, nodes: 0}
          - {name: b, idle_timeout: never}
        steps: [{name: x, script: 'true'}]
        """
    )
    assert "s.yaml:3:" in said and "s.yaml:4:" in said
    said = _error(
        """
        allocations: [{name: pool}]
        steps:
          - {name: x, script: 'true', allocation: nope}
          - {name: y, script: 'true', allocation: pool, resources: {gpus: 1}}
          - {name: z, script: 'true', allocation: pool}
        """
    )
    assert said.count("\n") == 1 and 'step "x"' in said and 'step "y"' in said


def test_a_parameter_sweep_is_refused_once_for_its_step() -> None:
    said = _error(
        """
        allocations: [{name: pool}]
        steps:
          - name: x
            script: 'true'
            allocation: pool
            parameters: {N: [1, 2, 3]}
            resources: {cores_per_task: 2}
        """
    )
    assert said.count('step "x"') == 1


_values = any_values(
    words=["pool", "5m", "1Gi", "job", "jobset", "restricted"],
    keys=st.one_of(st.sampled_from(sorted(Allocation.model_fields)), st.text(max_size=6)),
)
_allocations = st.lists(
    st.one_of(
        _values,
        st.fixed_dictionaries(
            {"name": st.sampled_from(["pool", "p", "Pool", ""])},
            optional={
                "nodes": st.one_of(st.integers(-1, 3), _values),
                "idle_timeout": st.one_of(st.sampled_from(["5m", "0", "x"]), _values),
                "resources": st.one_of(st.just({"nodes": 2}), _values),
            },
        ),
    ),
    max_size=3,
)


@given(allocations=st.one_of(_allocations, _values), named=st.sampled_from(["pool", None]))
@settings(max_examples=300, deadline=None)
def test_any_allocations_load_or_are_a_study_error(allocations: Any, named: str | None) -> None:
    document = {
        "allocations": allocations,
        "steps": [{"name": "a", "script": "true", **({"allocation": named} if named else {})}],
    }
    try:
        text = yaml.safe_dump(document)
    except yaml.YAMLError:
        return
    try:
        parse_study(text, source="s.yaml")
    except StudyError as exc:
        assert str(exc).startswith("s.yaml"), exc
