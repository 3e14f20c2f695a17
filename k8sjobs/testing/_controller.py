"""The Job controller: turns Jobs into Pods and Pod outcomes into Job status, like v1.36's.

It reacts to store events through a delayed work queue (no periodic scans): a Job change
syncs that Job at once, a Pod change syncs its Job after `batch_period` (the real
controller batches pod updates for one second, which is why its status updates come in
~1 s steps), and deadlines, pod-recreation backoff and TTLs schedule a sync at their time.

A sync writes status the way the real controller does, in two steps: first the counters,
any new FailureTarget/SuccessCriteriaMet condition and the finished pods' uids in
`uncountedTerminatedPods`; then, after removing the pods' `batch.kubernetes.io/job-tracking`
finalizers, the uids move into `succeeded`/`failed`, and the final Complete/Failed condition
is added once no pod is still terminating.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from dataclasses import dataclass

from k8sjobs.testing._errors import ApiError
from k8sjobs.testing._store import Event, Obj, Store, copy_obj, now_rfc3339

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
_TERMINAL = ("Succeeded", "Failed")
_STATUS_ORDER = (
    "conditions",
    "startTime",
    "completionTime",
    "active",
    "succeeded",
    "failed",
    "terminating",
    "completedIndexes",
    "failedIndexes",
    "uncountedTerminatedPods",
    "ready",
)
_MESSAGES = {
    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
    "DeadlineExceeded": "Job was active longer than specified deadline",
    "CompletionsReached": "Reached expected number of succeeded pods",
}


@dataclass
class ControllerConfig:
    """Timings of the Job controller; the defaults are the real controller's.

    `time_scale` multiplies the seconds written in Job specs (activeDeadlineSeconds,
    ttlSecondsAfterFinished), so that tests can run recorded scenarios faster.
    """

    batch_period: float = 1.0
    backoff_base: float = 10.0
    backoff_max: float = 360.0
    time_scale: float = 1.0


@dataclass
class _Outcome:
    """What one sync found out about a Job's pods."""

    active: list[Obj]
    terminating: list[Obj]
    new_succeeded: list[Obj]
    new_failed: list[Obj]
    ignored: list[Obj]
    failjob_message: str | None = None


class JobController:
    """Runs Jobs: creates their Pods, counts outcomes, writes conditions in the real order."""

    def __init__(self, store: Store, config: ControllerConfig | None = None) -> None:
        self.store = store
        self.config = config or ControllerConfig()
        self._heap: list[tuple[float, int, tuple[str, str]]] = []
        self._due: dict[tuple[str, str], float] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started: dict[str, float] = {}
        self._last_failure: dict[str, float] = {}
        self._finished: dict[str, float] = {}
        store.listen(self._on_event)

    def start(self) -> None:
        """Start the worker task and sync every existing Job once."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="job-controller")
        for job in self.store.iter("jobs"):
            self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"], 0.0)

    async def stop(self) -> None:
        """Stop the worker task."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # ------------------------------------------------------------------ queue

    def _on_event(self, event: Event) -> None:
        if event.resource == "jobs":
            self._enqueue(event.namespace, event.obj["metadata"]["name"], 0.0)
        elif event.resource == "pods":
            self._on_pod(event)

    def _on_pod(self, event: Event) -> None:
        meta = event.obj["metadata"]
        ref = next((r for r in meta.get("ownerReferences", []) if r.get("controller")), None)
        if ref is None or ref.get("kind") != "Job":
            return
        job = self.store.by_uid(ref["uid"])
        if job is None or job["metadata"].get("deletionTimestamp"):
            if TRACKING_FINALIZER in meta.get("finalizers", []) and event.type != "DELETED":
                asyncio.get_running_loop().call_soon(
                    self._release_orphan, event.namespace, meta["name"]
                )
            return
        delay = 0.0 if event.type == "DELETED" else self.config.batch_period
        self._enqueue(event.namespace, job["metadata"]["name"], delay)

    def _enqueue(self, namespace: str, name: str, delay: float) -> None:
        key = (namespace, name)
        due = time.monotonic() + delay
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            synced = 0
            while self._heap and self._heap[0][0] <= now:
                due, _, key = heapq.heappop(self._heap)
                if self._due.get(key) != due:
                    continue
                del self._due[key]
                self._sync_safely(*key)
                synced += 1
                if synced % 50 == 0:
                    await asyncio.sleep(0)  # let the API server answer between syncs
            self._wake.clear()
            timeout = self._heap[0][0] - time.monotonic() if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _sync_safely(self, namespace: str, name: str) -> None:
        try:
            self.sync(namespace, name)
        except ApiError as error:
            log.debug("sync of job %s/%s failed: %s; retrying", namespace, name, error)
            self._enqueue(namespace, name, 0.05)
        except Exception:
            log.exception("sync of job %s/%s crashed", namespace, name)
            self._enqueue(namespace, name, 1.0)

    # ------------------------------------------------------------------ sync

    def sync(self, namespace: str, name: str) -> None:
        """Bring one Job's pods and status in line with its spec, as syncJob does."""
        job = self.store.get("jobs", namespace, name)
        if job is None:
            return
        uid = job["metadata"]["uid"]
        pods = [p for p in self.store.dependents(uid) if p.get("kind") == "Pod"]
        if job["metadata"].get("deletionTimestamp"):
            self._release(namespace, [p for p in pods if _tracked(p)])
            return
        if _finished_condition(job):
            self._release(namespace, [p for p in pods if _tracked(p)])
            self._handle_ttl(job)
            return
        status = copy_obj(job.get("status") or {})
        outcome = self._classify(job, pods, status)
        conditions = status.setdefault("conditions", [])
        self._decide_interim(job, status, outcome)
        if _has(conditions, "FailureTarget") or _has(conditions, "SuccessCriteriaMet"):
            outcome = self._stop_active(job, status, outcome)
        elif job["spec"].get("suspend"):
            outcome = self._suspend(job, status, outcome)
        else:
            self._resume(job, status)
            outcome.active += self._create_pods(job, status, outcome)
        self._write_counts(job, status, outcome)

    def _classify(self, job: Obj, pods: list[Obj], status: Obj) -> _Outcome:
        uncounted = status.get("uncountedTerminatedPods") or {}
        seen = set(uncounted.get("succeeded", [])) | set(uncounted.get("failed", []))
        outcome = _Outcome([], [], [], [], [])
        for pod in pods:
            phase = pod.get("status", {}).get("phase")
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            if phase not in _TERMINAL:
                (outcome.terminating if deleting else outcome.active).append(pod)
            if not _tracked(pod) or pod["metadata"]["uid"] in seen:
                continue
            if phase == "Succeeded":
                outcome.new_succeeded.append(pod)
            elif phase == "Failed":
                self._judge_failure(job, pod, outcome)
        return outcome

    def _judge_failure(self, job: Obj, pod: Obj, outcome: _Outcome) -> None:
        action, message = _pod_failure_policy(job, pod)
        if action == "Ignore":
            outcome.ignored.append(pod)
            return
        if action == "FailJob" and outcome.failjob_message is None:
            outcome.failjob_message = message
        outcome.new_failed.append(pod)

    def _decide_interim(self, job: Obj, status: Obj, outcome: _Outcome) -> None:
        conditions = status["conditions"]
        if _has(conditions, "FailureTarget") or _has(conditions, "SuccessCriteriaMet"):
            return
        spec = job["spec"]
        failed = _failed_total(status, outcome)
        if outcome.failjob_message is not None:
            _set_condition(
                conditions, "FailureTarget", "True", "PodFailurePolicy", outcome.failjob_message
            )
        elif failed > spec.get("backoffLimit", 6):
            self._fail_target(job, conditions, "BackoffLimitExceeded")
        elif self._past_deadline(job, status):
            self._fail_target(job, conditions, "DeadlineExceeded")
        elif self._succeeded_enough(job, status, outcome):
            _set_condition(
                conditions,
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                _MESSAGES["CompletionsReached"],
            )

    def _fail_target(self, job: Obj, conditions: list[Obj], reason: str) -> None:
        _set_condition(conditions, "FailureTarget", "True", reason, _MESSAGES[reason])
        self._record_event(job, "Warning", reason, _MESSAGES[reason])

    def _past_deadline(self, job: Obj, status: Obj) -> bool:
        deadline = job["spec"].get("activeDeadlineSeconds")
        uid = job["metadata"]["uid"]
        if deadline is None or not status.get("startTime") or uid not in self._started:
            return False
        return time.monotonic() >= self._started[uid] + float(deadline) * self.config.time_scale

    def _succeeded_enough(self, job: Obj, status: Obj, outcome: _Outcome) -> bool:
        spec = job["spec"]
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            indexes = _parse_indexes(status.get("completedIndexes", ""))
            indexes |= {_index(p) for p in outcome.new_succeeded}
            return completions is not None and len(indexes) >= completions
        succeeded = _succeeded_total(status, outcome)
        if completions is None:
            return succeeded > 0 and not outcome.active
        return succeeded >= int(completions)

    def _stop_active(self, job: Obj, status: Obj, outcome: _Outcome) -> _Outcome:
        failing = _has(status["conditions"], "FailureTarget")
        for pod in outcome.active:
            self._delete_pod(pod)
        deleted = [
            self.store.get("pods", p["metadata"]["namespace"], p["metadata"]["name"])
            for p in outcome.active
        ]
        outcome.terminating += [p for p in deleted if p is not None]
        outcome.active = []
        if failing:
            counted = {p["metadata"]["uid"] for p in outcome.new_failed}
            outcome.new_failed += [
                p
                for p in outcome.terminating
                if _tracked(p)
                and p["metadata"]["uid"] not in counted
                and p["metadata"]["uid"] not in _uncounted(status)
            ]
        return outcome

    def _suspend(self, job: Obj, status: Obj, outcome: _Outcome) -> _Outcome:
        conditions = status["conditions"]
        if not _has(conditions, "Suspended"):
            _set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
            status.pop("startTime", None)
            self._started.pop(job["metadata"]["uid"], None)
        for pod in outcome.active:
            self._delete_pod(pod)
        outcome.ignored += [p for p in outcome.active if _tracked(p)]
        outcome.terminating += outcome.active
        outcome.active = []
        return outcome

    def _resume(self, job: Obj, status: Obj) -> None:
        conditions = status["conditions"]
        if _has(conditions, "Suspended"):
            _set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
        uid = job["metadata"]["uid"]
        if not status.get("startTime"):
            status["startTime"] = now_rfc3339()
            self._started[uid] = time.monotonic()
        self._started.setdefault(uid, time.monotonic())
        deadline = job["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            remaining = self._started[uid] + deadline * self.config.time_scale - time.monotonic()
            self._enqueue(
                job["metadata"]["namespace"], job["metadata"]["name"], max(remaining, 0.0) + 0.001
            )

    # ------------------------------------------------------------------ pods

    def _create_pods(self, job: Obj, status: Obj, outcome: _Outcome) -> list[Obj]:
        spec = job["spec"]
        wait = self._backoff_remaining(job, status, outcome)
        if wait > 0:
            self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"], wait)
            return []
        parallelism = spec.get("parallelism", 1)
        if spec.get("completionMode") == "Indexed":
            indexes = self._missing_indexes(job, status, outcome)
            count = max(parallelism - len(outcome.active), 0)
            return [self._create_pod(job, index) for index in indexes[:count]]
        completions = spec.get("completions")
        succeeded = _succeeded_total(status, outcome)
        if completions is None:
            want = 0 if succeeded else parallelism
        else:
            want = min(parallelism, completions - succeeded)
        return [self._create_pod(job, None) for _ in range(max(want - len(outcome.active), 0))]

    def _backoff_remaining(self, job: Obj, status: Obj, outcome: _Outcome) -> float:
        uid = job["metadata"]["uid"]
        failed = _failed_total(status, outcome)
        if outcome.new_failed:
            self._last_failure[uid] = time.monotonic()
        if failed == 0 or uid not in self._last_failure:
            return 0.0
        delay = min(self.config.backoff_base * 2.0 ** (failed - 1), self.config.backoff_max)
        return self._last_failure[uid] + delay - time.monotonic()

    def _missing_indexes(self, job: Obj, status: Obj, outcome: _Outcome) -> list[int]:
        done = _parse_indexes(status.get("completedIndexes", ""))
        done |= {_index(p) for p in outcome.new_succeeded}
        held = {_index(p) for p in outcome.active}
        completions = job["spec"].get("completions") or 0
        return [i for i in range(completions) if i not in done and i not in held]

    def _create_pod(self, job: Obj, index: int | None) -> Obj:
        name = job["metadata"]["name"]
        template = copy_obj(job["spec"].get("template", {}))
        meta = template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        pod_spec = template.get("spec", {})
        generate = f"{name}-"
        if index is not None:
            generate = f"{name}-{index}-"
            labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
            pod_spec.setdefault("hostname", f"{name}-{index}")
            _inject_index_env(pod_spec)
        pod_meta: Obj = {"generateName": generate, "labels": labels}
        if annotations:
            pod_meta["annotations"] = annotations
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        pod_meta["finalizers"] = [TRACKING_FINALIZER]
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": pod_meta, "spec": pod_spec}
        return self.store.create("pods", job["metadata"]["namespace"], pod, validate=False)

    def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self.store.delete("pods", meta["namespace"], meta["name"])

    def _release(self, namespace: str, pods: list[Obj]) -> None:
        """Remove the tracking finalizer from `pods` (they are counted, or not to be counted)."""
        for pod in pods:
            current = self.store.get("pods", namespace, pod["metadata"]["name"])
            if current is None or not _tracked(current):
                continue
            updated = dict(current)
            meta = dict(current["metadata"])
            meta["finalizers"] = [f for f in meta["finalizers"] if f != TRACKING_FINALIZER]
            if not meta["finalizers"]:
                del meta["finalizers"]
            updated["metadata"] = meta
            try:
                self.store.update("pods", namespace, updated, validate=False)
            except ApiError:
                continue

    def _release_orphan(self, namespace: str, name: str) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is not None:
            self._release(namespace, [pod])

    # ------------------------------------------------------------------ status

    def _write_counts(self, job: Obj, status: Obj, outcome: _Outcome) -> None:
        ns, _name = job["metadata"]["namespace"], job["metadata"]["name"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        uncounted = status.get("uncountedTerminatedPods") or {}
        succeeded_uids = list(uncounted.get("succeeded", []))
        failed_uids = list(uncounted.get("failed", [])) + [
            p["metadata"]["uid"] for p in outcome.new_failed
        ]
        if indexed:
            done = _parse_indexes(status.get("completedIndexes", ""))
            done |= {_index(p) for p in outcome.new_succeeded}
            status["succeeded"] = len(done)
            status["completedIndexes"] = _format_indexes(done)
        else:
            succeeded_uids += [p["metadata"]["uid"] for p in outcome.new_succeeded]
        status["active"] = len(outcome.active)
        status["terminating"] = len(outcome.terminating)
        status["ready"] = sum(1 for p in outcome.active if _pod_ready(p))
        status["uncountedTerminatedPods"] = _uncounted_field(succeeded_uids, failed_uids)
        job = self._put_status(job, status)
        finished = [*outcome.new_succeeded, *outcome.new_failed, *outcome.ignored]
        uncounted_uids = set(succeeded_uids) | set(failed_uids)
        pods = [
            p
            for p in self.store.dependents(job["metadata"]["uid"])
            if p["metadata"]["uid"] in uncounted_uids
        ]
        self._release(ns, finished + pods)
        status = copy_obj(job["status"])
        status["succeeded"] = status.get("succeeded", 0) + (0 if indexed else len(succeeded_uids))
        status["failed"] = status.get("failed", 0) + len(failed_uids)
        status["uncountedTerminatedPods"] = {}
        self._finish(job, status)
        self._put_status(job, status)

    def _finish(self, job: Obj, status: Obj) -> None:
        conditions = status.setdefault("conditions", [])
        if status.get("terminating"):
            return
        if _has(conditions, "FailureTarget"):
            target = next(c for c in conditions if c["type"] == "FailureTarget")
            _set_condition(conditions, "Failed", "True", target["reason"], target["message"])
        elif _has(conditions, "SuccessCriteriaMet"):
            status["completionTime"] = now_rfc3339()
            _set_condition(
                conditions,
                "Complete",
                "True",
                "CompletionsReached",
                _MESSAGES["CompletionsReached"],
            )
            self._record_event(job, "Normal", "Completed", "Job completed")
        else:
            return
        self._finished[job["metadata"]["uid"]] = time.monotonic()
        self._handle_ttl(job)

    def _put_status(self, job: Obj, status: Obj) -> Obj:
        ordered = {k: status[k] for k in _STATUS_ORDER if k in status}
        for key in ("conditions", "completedIndexes"):
            if not ordered.get(key):
                ordered.pop(key, None)
        for key in ("active", "succeeded", "failed"):
            if not ordered.get(key):
                ordered.pop(key, None)
        if ordered == job.get("status"):
            return job
        updated = dict(job)
        updated["status"] = ordered
        return self.store.update(
            "jobs", job["metadata"]["namespace"], updated, subresource="status", validate=False
        )

    def _handle_ttl(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        uid = job["metadata"]["uid"]
        finished = self._finished.setdefault(uid, time.monotonic())
        remaining = finished + ttl * self.config.time_scale - time.monotonic()
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if remaining > 0:
            self._enqueue(ns, name, remaining)
            return
        with contextlib.suppress(ApiError):
            self.store.delete("jobs", ns, name, propagation="Background")

    def _record_event(self, job: Obj, kind: str, reason: str, message: str) -> None:
        record_event(self.store, job, kind, reason, message, "job-controller")


# ---------------------------------------------------------------------- helpers


def record_event(
    store: Store, obj: Obj, kind: str, reason: str, message: str, component: str
) -> None:
    """Write a core/v1 Event about `obj`, as kubectl describe shows it."""
    meta = obj["metadata"]
    now = now_rfc3339()
    event = {
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": {
            "kind": obj["kind"],
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": obj["apiVersion"],
            "resourceVersion": meta["resourceVersion"],
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": kind,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    with contextlib.suppress(ApiError):
        store.create("events", meta.get("namespace", "default"), event, validate=False)


def _tracked(pod: Obj) -> bool:
    return TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])


def _has(conditions: list[Obj], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _finished_condition(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return _has(conditions, "Complete") or _has(conditions, "Failed")


def _set_condition(
    conditions: list[Obj], kind: str, status: str, reason: str, message: str
) -> None:
    now = now_rfc3339()
    condition = {
        "type": kind,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }
    for i, existing in enumerate(conditions):
        if existing["type"] == kind:
            if existing["status"] == status and existing.get("reason") == reason:
                return
            conditions[i] = condition
            return
    conditions.append(condition)


def _uncounted(status: Obj) -> set[str]:
    uncounted = status.get("uncountedTerminatedPods") or {}
    return set(uncounted.get("succeeded", [])) | set(uncounted.get("failed", []))


def _uncounted_field(succeeded: list[str], failed: list[str]) -> Obj:
    field: Obj = {}
    if succeeded:
        field["succeeded"] = succeeded
    if failed:
        field["failed"] = failed
    return field


def _succeeded_total(status: Obj, outcome: _Outcome) -> int:
    uncounted = status.get("uncountedTerminatedPods") or {}
    return (
        int(status.get("succeeded", 0))
        + len(uncounted.get("succeeded", []))
        + len(outcome.new_succeeded)
    )


def _failed_total(status: Obj, outcome: _Outcome) -> int:
    uncounted = status.get("uncountedTerminatedPods") or {}
    return int(status.get("failed", 0)) + len(uncounted.get("failed", [])) + len(outcome.new_failed)


def _pod_ready(pod: Obj) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _index(pod: Obj) -> int:
    return int((pod["metadata"].get("annotations") or {}).get(INDEX_KEY, "-1"))


def _parse_indexes(text: str) -> set[int]:
    indexes: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        indexes.update(range(int(low), int(high or low) + 1))
    return indexes


def _format_indexes(indexes: set[int]) -> str:
    """Return indexes as the controller writes them: "0-2,4,6-7"."""
    parts: list[str] = []
    for index in sorted(i for i in indexes if i >= 0):
        if parts and parts[-1].split("-")[-1] == str(index - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ",".join(parts)


def _inject_index_env(pod_spec: Obj) -> None:
    env_var = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {
            "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{INDEX_KEY}']"}
        },
    }
    for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
        env = container.setdefault("env", [])
        if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
            env.append(copy_obj(env_var))


def _pod_failure_policy(job: Obj, pod: Obj) -> tuple[str | None, str]:
    """Return the action (FailJob, Ignore, Count or None) and message for a failed pod."""
    rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    status = pod.get("status", {})
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
