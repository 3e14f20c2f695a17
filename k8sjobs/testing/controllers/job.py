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
from dataclasses import dataclass, field

from ..apiserver.errors import ApiError
from ..apiserver.events import record_event
from ..apiserver.store import Event, Obj, Store, copy_obj, now_rfc3339
from . import job_policies as policies
from .job_policies import INDEX_KEY, format_indexes, parse_indexes, pod_index

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
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
    "FailedIndexes": "Job has failed indexes",
    "MaxFailedIndexesExceeded": "Job has exceeded the specified maximal number of failed indexes",
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
    #: After a sync whose pod creation the API server refused (FailedCreate), the Job is
    #: synced again after this delay, doubling per failure up to `api_backoff_max`: the
    #: real controller's work-queue rate limit (1 s to 60 s; 1, 2, 4, 8, 16 s recorded).
    api_backoff_base: float = 1.0
    api_backoff_max: float = 60.0


@dataclass
class _Outcome:
    """What one sync found out about a Job's pods."""

    active: list[Obj]
    terminating: list[Obj]
    new_succeeded: list[Obj]
    new_failed: list[Obj]
    ignored: list[Obj]
    failjob_message: str | None = None
    failed_indexes: set[int] = field(default_factory=set)
    # Whether the API server refused a pod this sync (the Job is retried with backoff).
    create_failed: bool = False
    # Failed pods whose finalizer waits until their index has a replacement (which copies
    # their failure count), under backoffLimitPerIndex: neither counted nor released yet.
    delayed: list[Obj] = field(default_factory=list)


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
        # Per Job uid: (failures since the last success, when the last was seen), and
        # when each failed pod was first seen; the pod-recreation backoff counts from them.
        self._failures: dict[str, tuple[int, float]] = {}
        self._failed_at: dict[str, dict[str, float]] = {}
        self._finished: dict[str, float] = {}
        self._generations: dict[str, int] = {}
        # Per Job (namespace, name): syncs in a row whose pod creation failed.
        self._create_failures: dict[tuple[str, str], int] = {}
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
            self._on_job(event)
        elif event.resource == "pods":
            self._on_pod(event)

    def _on_job(self, event: Event) -> None:
        # As the real updateJob: a new Job or a spec change syncs at once, a status-only
        # change (most often this controller's own write) waits for the batch period.
        meta = event.obj["metadata"]
        generation = meta.get("generation", 1)
        if event.type == "DELETED":
            self._generations.pop(meta["uid"], None)
            return
        seen = self._generations.get(meta["uid"])
        self._generations[meta["uid"]] = generation
        delay = 0.0 if seen != generation else self.config.batch_period
        self._enqueue(event.namespace, meta["name"], delay)

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
            # asyncio.timeout, never wait_for: wait_for (Python 3.11) drops a cancellation
            # that lands as the event is set, and the controller would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

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
            self._forget_failures(uid)
            self._handle_ttl(job)
            return
        status = copy_obj(job.get("status") or {})
        outcome = self._classify(job, pods, status)
        self._note_failures(job, pods, outcome)
        conditions = status.setdefault("conditions", [])
        self._decide_interim(job, status, outcome)
        if _has(conditions, "FailureTarget") or _has(conditions, "SuccessCriteriaMet"):
            # A finishing Job keeps no pod back for its index's replacement.
            outcome.new_failed += outcome.delayed
            outcome.delayed = []
            outcome = self._stop_active(job, status, outcome)
        elif job["spec"].get("suspend"):
            outcome = self._suspend(job, status, outcome)
        else:
            self._resume(job, status)
            outcome.active += self._create_pods(job, status, outcome, pods)
        self._write_counts(job, status, outcome)
        self._retry_if_refused(namespace, name, outcome.create_failed)

    def _retry_if_refused(self, namespace: str, name: str, failed: bool) -> None:
        """Sync a Job whose pods were refused again, after the doubling API backoff."""
        key = (namespace, name)
        if not failed:
            self._create_failures.pop(key, None)
            return
        count = self._create_failures.get(key, 0)
        self._create_failures[key] = count + 1
        delay = min(self.config.api_backoff_base * 2.0**count, self.config.api_backoff_max)
        self._enqueue(namespace, name, delay)

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
            elif policies.pod_failed(job, pod):
                self._judge_failure(job, pod, outcome)
        if job["spec"].get("backoffLimitPerIndex") is not None:
            self._delay_for_replacement(status, outcome)
        return outcome

    def _judge_failure(self, job: Obj, pod: Obj, outcome: _Outcome) -> None:
        action, message = policies.pod_failure_action(job, pod)
        if job["spec"].get("backoffLimitPerIndex") is not None and policies.index_failed(
            job, pod, action
        ):
            outcome.failed_indexes.add(pod_index(pod))
        if action == "Ignore":
            outcome.ignored.append(pod)
            return
        if action == "FailJob" and outcome.failjob_message is None:
            outcome.failjob_message = message
        outcome.new_failed.append(pod)

    def _delay_for_replacement(self, status: Obj, outcome: _Outcome) -> None:
        """Hold back the latest failed pod of each index that is not replaced yet."""
        settled = parse_indexes(status.get("completedIndexes"))
        settled |= {pod_index(p) for p in outcome.new_succeeded}
        settled |= parse_indexes(status.get("failedIndexes")) | outcome.failed_indexes
        settled |= {pod_index(p) for p in outcome.active}
        latest: dict[int, Obj] = {}
        for pod in outcome.new_failed:
            index = pod_index(pod)
            if index < 0 or index in settled:
                continue
            if index not in latest or _replacement_order(pod) >= _replacement_order(latest[index]):
                latest[index] = pod
        held = {p["metadata"]["uid"] for p in latest.values()}
        outcome.delayed = list(latest.values())
        outcome.new_failed = [p for p in outcome.new_failed if p["metadata"]["uid"] not in held]

    def _note_failures(self, job: Obj, pods: list[Obj], outcome: _Outcome) -> None:
        """Remember when each failed pod was first seen: the retry backoff counts from it."""
        uid = job["metadata"]["uid"]
        seen = self._failed_at.setdefault(uid, {})
        now = time.monotonic()
        fresh = [
            p
            for p in [*outcome.new_failed, *outcome.ignored, *outcome.delayed]
            if p["metadata"]["uid"] not in seen and policies.pod_failed(job, p)
        ]
        for pod in fresh:
            seen[pod["metadata"]["uid"]] = now
        count, last = self._failures.get(uid, (0, 0.0))
        if outcome.new_succeeded:
            count = 0  # the backoff grows with the failures since the last success
        if fresh:
            count, last = count + len(fresh), now
        self._failures[uid] = (count, last)

    def _forget_failures(self, uid: str) -> None:
        self._failed_at.pop(uid, None)
        self._failures.pop(uid, None)

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
        elif reason := _failed_indexes_reason(job, status, outcome):
            self._fail_target(job, conditions, reason)
        elif message := _success_policy_message(job, status, outcome):
            _set_condition(conditions, "SuccessCriteriaMet", "True", "SuccessPolicy", message)
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
            indexes = _succeeded_indexes(status, outcome)
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
        counted = {p["metadata"]["uid"] for p in [*outcome.new_failed, *outcome.ignored]}
        stopped = [
            p
            for p in outcome.terminating
            if _tracked(p)
            and p["metadata"]["uid"] not in counted
            and p["metadata"]["uid"] not in _uncounted(status)
        ]
        # Pods stopped by a failing Job count as failed; by a succeeding one, not at all.
        if failing:
            outcome.new_failed += stopped
        else:
            outcome.ignored += stopped
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

    def _create_pods(self, job: Obj, status: Obj, outcome: _Outcome, pods: list[Obj]) -> list[Obj]:
        spec = job["spec"]
        parallelism = spec.get("parallelism", 1)
        # Under podReplacementPolicy Failed, a terminating pod still holds its place.
        holding = outcome.active + (
            outcome.terminating if policies.only_replace_failed(job) else []
        )
        if spec.get("completionMode") == "Indexed" and spec.get("backoffLimitPerIndex") is not None:
            return self._create_indexed_with_backoff(job, status, outcome, pods, holding)
        wait = self._backoff_remaining(job)
        if wait > 0:
            self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"], wait)
            return []
        if spec.get("completionMode") == "Indexed":
            indexes = self._missing_indexes(job, status, outcome, holding)
            count = max(parallelism - len(holding), 0)
            return self._create_batches(job, outcome, [(i, None) for i in indexes[:count]])
        completions = spec.get("completions")
        succeeded = _succeeded_total(status, outcome)
        if completions is None:
            want = 0 if succeeded else parallelism
        else:
            want = min(parallelism, completions - succeeded)
        wanted: list[tuple[int | None, tuple[int, int] | None]] = [(None, None)] * max(
            want - len(holding), 0
        )
        return self._create_batches(job, outcome, wanted)

    def _create_batches(
        self,
        job: Obj,
        outcome: _Outcome,
        wanted: list[tuple[int | None, tuple[int, int] | None]],
    ) -> list[Obj]:
        """Create pods in slow-start batches (1, 2, 4, ...), as the real controller does; a
        batch with a refused pod ends the sync's creations. Each refusal is a FailedCreate
        Warning Event on the Job ("Error creating: <the API server's message>")."""
        created: list[Obj] = []
        size, start = 1, 0
        while start < len(wanted):
            for index, counts in wanted[start : start + size]:
                try:
                    created.append(self._create_pod(job, index, counts))
                except ApiError as error:
                    outcome.create_failed = True
                    if not _namespace_terminating(error):
                        message = f"Error creating: {error.message}"
                        self._record_event(job, "Warning", "FailedCreate", message)
            if outcome.create_failed:
                break
            start, size = start + size, size * 2
        return created

    def _create_indexed_with_backoff(
        self, job: Obj, status: Obj, outcome: _Outcome, pods: list[Obj], holding: list[Obj]
    ) -> list[Obj]:
        """Create the missing indexes whose own backoff (backoffLimitPerIndex) has passed."""
        count = max(job["spec"].get("parallelism", 1) - len(holding), 0)
        created: list[Obj] = []
        wanted: list[tuple[int | None, tuple[int, int] | None]] = []
        soonest: float | None = None
        for index in self._missing_indexes(job, status, outcome, holding):
            if len(created) == count:
                break
            replaced = _latest_failed(job, pods, index)
            wait = self._index_backoff_remaining(job, replaced)
            if wait > 0:
                soonest = wait if soonest is None else min(soonest, wait)
                continue
            wanted.append((index, policies.next_failure_counts(job, replaced)))
            created += self._create_batches(job, outcome, wanted[-1:])
            if outcome.create_failed:
                break
        if soonest is not None:
            self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"], soonest)
        return created

    def _backoff_remaining(self, job: Obj) -> float:
        failures, last = self._failures.get(job["metadata"]["uid"], (0, 0.0))
        if failures == 0:
            return 0.0
        return last + self._backoff_delay(failures) - time.monotonic()

    def _index_backoff_remaining(self, job: Obj, replaced: Obj | None) -> float:
        if replaced is None:
            return 0.0
        counted, ignored = policies.next_failure_counts(job, replaced)
        seen = self._failed_at.get(job["metadata"]["uid"], {})
        failed_at = seen.get(replaced["metadata"]["uid"], time.monotonic())
        return failed_at + self._backoff_delay(counted + ignored) - time.monotonic()

    def _backoff_delay(self, failures: int) -> float:
        return min(self.config.backoff_base * 2.0 ** (failures - 1), self.config.backoff_max)

    def _missing_indexes(
        self, job: Obj, status: Obj, outcome: _Outcome, holding: list[Obj]
    ) -> list[int]:
        done = _succeeded_indexes(status, outcome)
        done |= parse_indexes(status.get("failedIndexes")) | outcome.failed_indexes
        held = {pod_index(p) for p in holding}
        completions = job["spec"].get("completions") or 0
        return [i for i in range(completions) if i not in done and i not in held]

    def _create_pod(
        self, job: Obj, index: int | None, failure_counts: tuple[int, int] | None = None
    ) -> Obj:
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
        if failure_counts is not None:
            counted, ignored = failure_counts
            annotations[policies.FAILURE_COUNT_KEY] = str(counted)
            if ignored:
                annotations[policies.IGNORED_COUNT_KEY] = str(ignored)
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
                self.store.update("pods", namespace, updated, validate=False, owned=True)
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
            done = _succeeded_indexes(status, outcome)
            status["succeeded"] = len(done)
            status["completedIndexes"] = format_indexes(done)
        if job["spec"].get("backoffLimitPerIndex") is not None:
            failed_indexes = parse_indexes(status.get("failedIndexes")) | outcome.failed_indexes
            status["failedIndexes"] = format_indexes(failed_indexes)
        if not indexed:
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
            met = next(c for c in conditions if c["type"] == "SuccessCriteriaMet")
            _set_condition(conditions, "Complete", "True", met["reason"], met["message"])
            self._record_event(job, "Normal", "Completed", "Job completed")
        else:
            return
        self._finished[job["metadata"]["uid"]] = time.monotonic()
        self._forget_failures(job["metadata"]["uid"])
        self._handle_ttl(job)

    def _put_status(self, job: Obj, status: Obj) -> Obj:
        ordered = {k: status[k] for k in _STATUS_ORDER if k in status}
        for key in ("conditions", "completedIndexes"):
            if not ordered.get(key):
                ordered.pop(key, None)
        if job["spec"].get("backoffLimitPerIndex") is None:
            ordered.pop("failedIndexes", None)  # written, even empty, only per index
        for key in ("active", "succeeded", "failed"):
            if not ordered.get(key):
                ordered.pop(key, None)
        if ordered == job.get("status"):
            return job
        updated = dict(job)
        updated["status"] = ordered
        return self.store.update(
            "jobs",
            job["metadata"]["namespace"],
            updated,
            subresource="status",
            validate=False,
            owned=True,
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


def _namespace_terminating(error: ApiError) -> bool:
    """Return whether a refusal is NamespaceLifecycle's (the real controller records none)."""
    causes = (error.details or {}).get("causes") or []
    return any(c.get("reason") == "NamespaceTerminating" for c in causes)


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


def _succeeded_indexes(status: Obj, outcome: _Outcome) -> set[int]:
    done = parse_indexes(status.get("completedIndexes"))
    return done | {pod_index(p) for p in outcome.new_succeeded}


def _failed_indexes_reason(job: Obj, status: Obj, outcome: _Outcome) -> str | None:
    """Return why a Job with backoffLimitPerIndex fails now for its failed indexes, if it does."""
    spec = job["spec"]
    if spec.get("backoffLimitPerIndex") is None:
        return None
    failed = parse_indexes(status.get("failedIndexes")) | outcome.failed_indexes
    limit = spec.get("maxFailedIndexes")
    if limit is not None and len(failed) > int(limit):
        return "MaxFailedIndexesExceeded"
    settled = len(failed) + len(_succeeded_indexes(status, outcome) - failed)
    if failed and settled >= int(spec.get("completions") or 0):
        return "FailedIndexes"
    return None


def _success_policy_message(job: Obj, status: Obj, outcome: _Outcome) -> str | None:
    if job["spec"].get("completionMode") != "Indexed" or not job["spec"].get("successPolicy"):
        return None
    return policies.match_success_policy(job, _succeeded_indexes(status, outcome))


def _latest_failed(job: Obj, pods: list[Obj], index: int) -> Obj | None:
    """Return the pod a new pod for `index` replaces: its index's last failed pod."""
    failed = [p for p in pods if pod_index(p) == index and policies.pod_failed(job, p)]
    return max(failed, key=_replacement_order, default=None)


def _replacement_order(pod: Obj) -> tuple[int, str]:
    counted, ignored = policies.failure_counts(pod)
    return counted + ignored, pod["metadata"].get("creationTimestamp", "")
