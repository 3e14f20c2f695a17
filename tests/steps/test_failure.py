"""The failure policy model: validation, rendering, and rule matching as the job controller does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from k8sjobs.render.manifests import render
from k8sjobs.steps.failure import describe_rule, pod_failure_policy, rule_action
from k8sjobs.steps.spec import Step


def _step(**fields: object) -> Step:
    return Step(name="s", script="true", **fields)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"fail_on_exit_codes": [0]}, "fail_on_exit_codes", "0 is success"),
        ({"fail_on_exit_codes": [256]}, "fail_on_exit_codes", "from 1 to 255"),
        ({"retry_on_exit_codes": [3, 3], "retries": 1}, "retry_on_exit_codes", "twice"),
        ({"retry_on_exit_codes": [75]}, "retry_on_exit_codes", "retries is 0"),
        (
            {"retry_on_exit_codes": [75], "fail_on_exit_codes": [1], "retries": 2},
            "fail_on_exit_codes",
            "not both",
        ),
        ({"disruptions": "never"}, "disruptions", "ignore"),
        ({"push_outputs": "sometimes"}, "push_outputs", "on_success"),
    ],
)
def test_bad_settings_name_the_field(fields: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        _step(**fields)
    error = info.value.errors()[0]
    assert error["loc"][0] == field
    assert words in str(info.value)


def test_default_policy_only_ignores_disruptions() -> None:
    job = render(_step()).job
    assert job["spec"]["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "podFailurePolicy" not in render(_step(disruptions="count")).job["spec"]


def _failed_pod(code: int, *, disrupted: bool = False) -> dict[str, object]:
    conditions = [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []
    terminated = {"terminated": {"exitCode": code}}
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "status": {
            "phase": "Failed",
            "conditions": conditions,
            "containerStatuses": [{"name": "step", "state": terminated}],
        },
    }


codes = st.lists(st.integers(1, 255), unique=True, max_size=8)


@given(codes, codes, st.integers(1, 255), st.booleans(), st.booleans())
def test_rules_decide_as_the_step_fields_say(
    retry_on: list[int], fail_on: list[int], code: int, disrupted: bool, ignore: bool
) -> None:
    policy = pod_failure_policy(
        "ignore" if ignore else "count", sorted(retry_on), sorted(fail_on), "step"
    )
    job = {"spec": {"podFailurePolicy": policy}} if policy else {"spec": {}}
    matched = rule_action(job, _failed_pod(code, disrupted=disrupted))
    action = matched[1] if matched else "Count"
    if disrupted and ignore:
        expected = "Ignore"
    elif code in fail_on or (retry_on and code not in retry_on):
        expected = "FailJob"
    else:
        expected = "Count"
    assert action == expected
    if matched and action == "FailJob":
        rule = job["spec"]["podFailurePolicy"]["rules"][matched[0]]
        assert describe_rule(rule, code).startswith(f"exit code {code} is ")


def test_an_exit_code_of_another_container_or_zero_matches_nothing() -> None:
    policy = pod_failure_policy("count", [], [1], "step")
    pod = _failed_pod(1)
    pod["status"]["containerStatuses"][0]["name"] = "k8sjobs-push"  # type: ignore[index]
    assert rule_action({"spec": {"podFailurePolicy": policy}}, pod) is None
    retry = pod_failure_policy("count", [75], [], "step")
    assert rule_action({"spec": {"podFailurePolicy": retry}}, _failed_pod(0)) is None
