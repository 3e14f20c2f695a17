"""What a failed pod costs a step: disruptions, exit-code rules and the Job's podFailurePolicy.

Pure (no I/O). A step says how its pod failures are treated with three fields of ``Step``:

- ``disruptions``: ``"ignore"`` (the default) retries a pod that was evicted, preempted or
  lost with its node (the pod carries the ``DisruptionTarget`` condition) without spending
  the step's ``retries``; ``"count"`` makes such a pod a failure like any other.
- ``fail_on_exit_codes``: these exit codes of the script fail the step at once, whatever
  ``retries`` is left (a bug or bad input that a retry cannot fix).
- ``retry_on_exit_codes``: only these exit codes are retried (spending ``retries``); any
  other non-zero code fails the step at once. This is what "retry on 75 (EX_TEMPFAIL)"
  means to users of Airflow, Argo and Nextflow: a retry for the transient failure, none for
  the rest.

``pod_failure_policy`` renders them as the Job's ``podFailurePolicy`` (which needs
``restartPolicy: Never``, as every k8sjobs pod has); the local backend, which plays the job
controller, applies the same rules with ``rule_action``; ``describe_rule`` turns the rule a
Job failed on back into the step field a person wrote.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "DISRUPTION_CONDITION",
    "Disruptions",
    "check_exit_code_rules",
    "check_exit_codes",
    "describe_rule",
    "disruption",
    "failed_rule",
    "pod_failure_policy",
    "rule_action",
]

DISRUPTION_CONDITION = "DisruptionTarget"
Disruptions = Literal["ignore", "count"]
# The API server allows at most 255 values in one onExitCodes rule, and 0 never in "In".
_MAX_CODES = 255
_RULE_INDEX = re.compile(r"rule at index (\d+)")

Obj = Mapping[str, Any]


def check_exit_codes(codes: Sequence[int]) -> list[int]:
    """Return ``codes`` sorted (the API server requires it), or raise naming the bad one."""
    for code in codes:
        if isinstance(code, bool) or not 1 <= code <= 255:
            raise ValueError(
                f"{code!r} is not an exit code a failed script can return; "
                "write codes from 1 to 255 (0 is success)"
            )
    if len(set(codes)) != len(codes):
        raise ValueError("lists a code twice; write each code once")
    if len(codes) > _MAX_CODES:
        raise ValueError(f"lists {len(codes)} codes; Kubernetes takes at most {_MAX_CODES}")
    return sorted(codes)


def check_exit_code_rules(
    retries: int, retry_on: Sequence[int], fail_on: Sequence[int]
) -> tuple[str, str] | None:
    """Return (field, message) when the exit-code fields contradict each other or ``retries``."""
    if retry_on and fail_on:
        return (
            "fail_on_exit_codes",
            "give retry_on_exit_codes (retry only these codes) or fail_on_exit_codes "
            "(never retry these codes), not both: with retry_on_exit_codes every other "
            "code already fails the step at once",
        )
    if retry_on and retries == 0:
        return (
            "retry_on_exit_codes",
            "retry_on_exit_codes retries a failed pod, but retries is 0; set retries "
            "(how many times those codes may be retried)",
        )
    return None


def pod_failure_policy(
    disruptions: Disruptions,
    retry_on: Sequence[int],
    fail_on: Sequence[int],
    container: str,
) -> dict[str, Any] | None:
    """Return the Job's ``podFailurePolicy`` for these settings, or None when none is needed.

    Rules are tried in order: a disruption first (an evicted pod's script exits 143 too,
    which must not read as a failure of the script), then the exit-code rules of
    ``container`` (the step's own; the handoff containers have no say).
    """
    rules: list[dict[str, Any]] = []
    if disruptions == "ignore":
        rules.append(
            {
                "action": "Ignore",
                "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
            }
        )
    for operator, codes in (("In", fail_on), ("NotIn", retry_on)):
        if codes:
            on_codes = {"containerName": container, "operator": operator, "values": list(codes)}
            rules.append({"action": "FailJob", "onExitCodes": on_codes})
    return {"rules": rules} if rules else None


def rule_action(job: Obj, pod: Obj) -> tuple[int, str, str] | None:
    """Return (rule index, action, message) of the Job's first rule matching a failed pod.

    None means no rule matched (the failure counts against ``backoffLimit``). The message is
    worded as the job controller writes it into the Job's condition.
    """
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or ()
    meta = pod.get("metadata") or {}
    where = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
    status = pod.get("status") or {}
    containers = [
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ]
    for index, rule in enumerate(rules):
        action = str(rule.get("action", "Count"))
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for name, code in _exit_codes(containers):
                wanted = on_codes.get("containerName")
                if wanted not in (None, name):
                    continue
                if (code in on_codes.get("values", ())) == (on_codes.get("operator") == "In"):
                    return (
                        index,
                        action,
                        (
                            f"Container {name} for pod {where} failed with exit code {code} "
                            f"matching {action} rule at index {index}"
                        ),
                    )
        for pattern in rule.get("onPodConditions") or ():
            if _has_condition(status, pattern["type"], pattern.get("status", "True")):
                return (
                    index,
                    action,
                    (
                        f"Pod {where} has condition {pattern['type']} matching {action} rule "
                        f"at index {index}"
                    ),
                )
    return None


def _exit_codes(containers: Iterable[Obj]) -> Iterable[tuple[str, int]]:
    """Yield (container, exit code) of each container that ended with a non-zero code."""
    for container in containers:
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if code:  # the job controller never matches a container that exited 0
            yield str(container.get("name", "")), int(code)


def _has_condition(status: Obj, kind: str, value: str = "True") -> bool:
    return any(
        c.get("type") == kind and c.get("status") == value for c in status.get("conditions") or ()
    )


def disruption(pod: Obj) -> Obj | None:
    """Return the pod's ``DisruptionTarget`` condition (evicted, preempted, node lost), if any."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == DISRUPTION_CONDITION and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None


def failed_rule(job: Obj, message: str) -> Obj | None:
    """Return the podFailurePolicy rule a Job's ``PodFailurePolicy`` condition names."""
    match = _RULE_INDEX.search(message)
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or ()
    if match is None or int(match[1]) >= len(rules):
        return None
    rule: Obj = rules[int(match[1])]
    return rule


def describe_rule(rule: Obj, code: int | None) -> str:
    """Return the step setting behind ``rule``, in the words a person wrote it with."""
    on_codes = rule.get("onExitCodes") or {}
    codes = ", ".join(str(c) for c in on_codes.get("values", ()))
    shown = f"exit code {code}" if code is not None else "the exit code"
    if on_codes.get("operator") == "In":
        return f"{shown} is in fail_on_exit_codes [{codes}], so the step was not retried"
    if on_codes.get("operator") == "NotIn":
        return f"{shown} is not in retry_on_exit_codes [{codes}], so the step was not retried"
    kinds = ", ".join(p.get("type", "") for p in rule.get("onPodConditions") or ())
    return f"the pod had condition {kinds}, which its podFailurePolicy fails the step on"
