"""The Job spec's policies, as pure functions of a Job and its Pods (no store, no clock).

What the job controller asks of `successPolicy`, `podFailurePolicy`, `backoffLimitPerIndex`
and `podReplacementPolicy`, written after v1.36's pkg/controller/job (success_policy.go,
pod_failure_policy.go, indexed_job_utils.go), with the same messages, because clients and
users read them from the Job's conditions.
"""

from __future__ import annotations

from ...render.jobindex import format_indexes as format_indexes
from ...render.jobindex import match_success_policy as match_success_policy
from ...render.jobindex import parse_indexes as parse_indexes
from ..apiserver.store import Obj

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"


# ---------------------------------------------------------------------- indexes


def pod_index(pod: Obj) -> int:
    """Return the pod's completion index, or -1 when it has none (or a bad one)."""
    text = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY, "-1")
    try:
        return max(int(text), -1)
    except ValueError:
        return -1


# ---------------------------------------------------------------------- pod failure policy


def only_replace_failed(job: Obj) -> bool:
    """Return whether a terminating pod waits to be Failed before it counts or is replaced.

    That is `podReplacementPolicy: Failed`, which a `podFailurePolicy` implies.
    """
    spec = job["spec"]
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def pod_failed(job: Obj, pod: Obj) -> bool:
    """Return whether the controller treats `pod` as failed (isPodFailed).

    A Failed pod is; under the default TerminatingOrFailed policy a pod being deleted that
    did not succeed is too, so that orphans and evicted pods are counted at once.
    """
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return bool(pod["metadata"].get("deletionTimestamp")) and phase != "Succeeded"


def pod_failure_action(job: Obj, pod: Obj) -> tuple[str | None, str]:
    """Return the matching rule's action (FailJob, FailIndex, Ignore, Count) and message.

    None (no rule matched, or no policy) means the failure counts.
    """
    rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    status = pod.get("status") or {}
    statuses = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    for i, rule in enumerate(rules):
        action = rule.get("action", "Count")
        if on_codes := rule.get("onExitCodes"):
            for cs in statuses:
                code = _exit_code(cs)
                if code in (None, 0) or on_codes.get("containerName") not in (None, cs["name"]):
                    continue
                inside = code in on_codes.get("values", [])
                if inside == (on_codes.get("operator", "In") == "In"):
                    return action, (
                        f"Container {cs['name']} for pod {ns}/{name} failed with exit "
                        f"code {code} matching {action} rule at index {i}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for cond in status.get("conditions") or []:
                if cond["type"] == pattern["type"] and cond["status"] == pattern.get(
                    "status", "True"
                ):
                    return action, (
                        f"Pod {ns}/{name} has condition {cond['type']} matching "
                        f"{action} rule at index {i}"
                    )
    return None, ""


def _exit_code(container_status: Obj) -> int | None:
    terminated = (container_status.get("state") or {}).get("terminated")
    return None if terminated is None else int(terminated.get("exitCode", 0))


# ---------------------------------------------------------------------- backoff per index


def failure_counts(pod: Obj) -> tuple[int, int]:
    """Return the (counted, ignored) failures of the pod's index before this pod ran."""
    annotations = pod["metadata"].get("annotations") or {}
    return _int(annotations.get(FAILURE_COUNT_KEY)), _int(annotations.get(IGNORED_COUNT_KEY))


def index_failed(job: Obj, pod: Obj, action: str | None) -> bool:
    """Return whether this failed pod fails its whole index (isIndexFailed).

    It does under a FailIndex rule, or when it counts and its index had already failed
    `backoffLimitPerIndex` times.
    """
    if action == "FailIndex":
        return True
    limit = job["spec"].get("backoffLimitPerIndex")
    return action != "Ignore" and limit is not None and failure_counts(pod)[0] >= int(limit)


def next_failure_counts(job: Obj, replaced: Obj | None) -> tuple[int, int]:
    """Return the failure counts a pod replacing `replaced` carries in its annotations."""
    if replaced is None:
        return 0, 0
    counted, ignored = failure_counts(replaced)
    if pod_failure_action(job, replaced)[0] == "Ignore":
        return counted, ignored + 1
    return counted + 1, ignored


def _int(text: str | None) -> int:
    try:
        return max(int(text or 0), 0)
    except ValueError:
        return 0
