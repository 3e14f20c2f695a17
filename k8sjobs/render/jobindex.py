"""A Job's completion indexes: interval lists and the success policy (pure: no I/O).

The job controller's reading of ``completedIndexes``, ``failedIndexes`` and ``successPolicy``,
written after v1.36's pkg/controller/job (indexed_job_utils.go, success_policy.go) with the
same messages. Both job controllers of this project use it: the fake cluster's and the local
backend's (which plays the job controller for its own Jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_indexes", "match_success_policy", "parse_indexes"]


def parse_indexes(text: str | None) -> set[int]:
    """Return the indexes of a "0-2,4,6,7" interval list (completedIndexes, failedIndexes)."""
    indexes: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        low, _, high = part.partition("-")
        indexes.update(range(int(low), int(high or low) + 1))
    return indexes


def format_indexes(indexes: set[int]) -> str:
    """Return indexes as the controller writes them: runs of three or more as "a-b".

    The real orderedIntervals.String writes a run of two as "a,b" ("0,1", not "0-1").
    """
    runs: list[list[int]] = []
    for index in sorted(i for i in indexes if i >= 0):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    parts = []
    for first, last in runs:
        if first == last:
            parts.append(str(first))
        elif last == first + 1:
            parts.append(f"{first},{last}")
        else:
            parts.append(f"{first}-{last}")
    return ",".join(parts)


def match_success_policy(job: Mapping[str, Any], succeeded: set[int]) -> str | None:
    """Return the SuccessCriteriaMet message when a `successPolicy` rule is met, else None.

    A rule with `succeededIndexes` is met when all those indexes succeeded, or, with
    `succeededCount` too, when that many of them did; a rule with only `succeededCount`
    when that many indexes succeeded. The first rule met wins.
    """
    policy = job["spec"].get("successPolicy") or {}
    if not succeeded:
        return None
    completions = int(job["spec"].get("completions") or 0)
    for i, rule in enumerate(policy.get("rules") or []):
        count = rule.get("succeededCount")
        if rule.get("succeededIndexes") is not None:
            required = {x for x in parse_indexes(rule["succeededIndexes"]) if x < completions}
            if not required:
                continue
            done = len(required & succeeded)
            met = done >= count if count is not None else done == len(required)
        else:
            met = count is not None and len(succeeded) >= count
        if met:
            return f"Matched rules at index {i}"
    return None
