"""KubernetesBackend: create a step's objects (``create.create_step``), keep its handle current.

A step's objects are created in the order of ``kube/create.py`` (two writes for a fresh
single-node step: the Job, then its ConfigMap owned by it), against the Job this backend's
watch already knows. A Job left without its ConfigMap by a driver that died in between is
finished by the next submission of the step, and reported by ``attach`` (``unwritten``).

Handles are fed by one ``StudyWatch`` per namespace and study: a Job informer and a Pod
informer whose changes reach the right handle by dict lookup on the Job name. A study with a
``target: jobset`` step there gets a JobSet informer too (started by its first such step):
a child Job or pod reaches its JobSet's handle by the ``jobset.sigs.k8s.io/jobset-name``
label, and the step is judged by ``jobsetstatus.judge_jobset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..admission import Admission, eviction_event
from ..admission import judge as judge_admission
from ..artifacts.handoff import read_push_report
from ..errors import ApiError, ClusterUnreachable, Forbidden, NotFound, ServerUnavailable
from ..events import pod_event, warning_event
from ..handle import StepHandle
from ..jobsetstatus import jobset_of, jobset_pending_deadline, judge_jobset, restart_event
from ..observe.native import Native, native
from ..render.allocation import held_pods
from ..render.jobset import LAUNCHER, WORKERS
from ..render.manifests import (
    ANNOTATION_FAILED_OUTPUTS,
    ANNOTATION_OUTPUTS,
    ANNOTATION_STEP,
    LABEL_STUDY,
    MAIN_CONTAINER,
    PUSH_CONTAINER,
    Manifests,
)
from ..render.minicluster import HANDOFF_CONTAINER
from ..state import StepResult, StepState
from ..status import judge, pending_deadline, unseen_pods
from ..steps.names import label_value
from ..steps.spec import QUEUE_LABEL
from .client import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    JOBSETS,
    MINICLUSTERS,
    POD_LOGS,
    PODS,
    WORKLOADS,
    ClientOptions,
    Kind,
    KubeClient,
)
from .config import ClusterConfig, kubeconfig_path, load_config
from .create import create_step, ended, top_kind
from .logkeep import LogKeeper, file_name
from .reach import ApiHealth, probe
from .watch import CANCELLED_BY, Change, Informer, WatchStats, slim_event, slim_jobset
from .workloads import KueueApi, WorkloadWatch, kueue_served

__all__ = ["KubernetesBackend"]

log = logging.getLogger("k8sjobs.kube")
# Deleted pods remembered per Job: enough to explain its failure, bounded for a Job that
# keeps losing pods.
_GONE_LIMIT = 20
# Seconds a terminal Job's verdict waits for the end of a pod it counts to reach the pod
# watch (it comes within milliseconds; this bounds a pod deleted before it was ever seen).
VERDICT_GRACE = 10.0


class EventWatch:
    """The Warning Events of one namespace (one informer for every study there), by object.

    Events cannot be selected by their object's labels, so one watch with ``type=Warning``
    serves the namespace; each change re-judges only the step it is about (found by the
    study watches' Job and pod names). A namespace whose Events may not be listed (403)
    only loses the reasons: a WARNING says so and the steps are followed as before.
    """

    def __init__(self, backend: KubernetesBackend, namespace: str) -> None:
        self.namespace = namespace
        self.studies: list[StudyWatch] = []
        # (kind, name) of the object -> its Warning Events by Event name.
        self.by_object: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._about: dict[str, tuple[str, str]] = {}
        self.informer = Informer(
            backend.client,
            EVENTS,
            namespace,
            "",
            self._changed,
            fields="type=Warning",
            slimmer=slim_event,
            **backend.watch_policy(),
        )
        self._task = asyncio.create_task(self._run(), name=f"k8sjobs-watch-events-{namespace}")

    async def _run(self) -> None:
        await self.informer.run_or_do_without(
            "Warning Events",
            "why a step waits will not be shown; `k8sjobs rbac` grants list and watch on events",
        )

    async def synced(self) -> None:
        """Return once the first list has been applied (or the watch was refused)."""
        await self.informer.synced.wait()

    async def aclose(self) -> None:
        """Stop the informer."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def about(self, job: str, pods: Iterable[str]) -> list[dict[str, Any]]:
        """Return the Warning Events about the Job ``job`` and the pods named ``pods``."""
        found = list(self.by_object.get(("Job", job), {}).values())
        for pod in pods:
            found.extend(self.by_object.get(("Pod", pod), {}).values())
        return found

    def _changed(self, change: Change) -> None:
        previous = self._about.pop(change.name, None)
        if previous is not None:
            events = self.by_object.get(previous, {})
            events.pop(change.name, None)
            if not events:
                self.by_object.pop(previous, None)
        if change.obj is None:
            return
        involved = change.obj.get("involvedObject") or {}
        key = (str(involved.get("kind") or ""), str(involved.get("name") or ""))
        self.by_object.setdefault(key, {})[change.name] = change.obj
        self._about[change.name] = key
        for study in self.studies:
            study.warning_changed(key, change.obj)


class StudyWatch:
    """The Job and Pod informers of one namespace and study, and the handles they feed."""

    def __init__(
        self, backend: KubernetesBackend, namespace: str, study_label: str, events: EventWatch
    ) -> None:
        self.backend = backend
        self.namespace = namespace
        self.events = events
        events.studies.append(self)
        selector = f"{LABEL_STUDY}={study_label}"
        self._study_label = study_label
        client = backend.client
        policy = backend.watch_policy()
        self.jobs = Informer(client, JOBS, namespace, selector, self._job_changed, **policy)
        self.pods = Informer(client, PODS, namespace, selector, self._pod_changed, **policy)
        self.handles: dict[str, StepHandle] = {}
        # Started by the first target: jobset step here (``ensure_jobsets``); child Job ->
        # its JobSet.
        self.jobsets: Informer | None = None
        self.jobset_of_job: dict[str, str] = {}
        # And back: JobSet -> its child Jobs, in the order first seen (a dict as an ordered
        # set), so judging one JobSet never scans every child Job of the namespace.
        self._children: dict[str, dict[str, None]] = {}
        self.pods_by_job: dict[str, dict[str, dict[str, Any]]] = {}
        # Pod name -> its Job: a DELETED pod is found at once, not by scanning every Job.
        self._job_of_pod: dict[str, str] = {}
        # The last state of each Job's deleted pods (an evicted pod vanishes before its Job
        # fails): they explain a failure and keep their kept logs reachable. Bounded per Job.
        self.gone_by_job: dict[str, dict[str, dict[str, Any]]] = {}
        self.gone: dict[str, asyncio.Event] = {}
        # Top objects another process marked cancelled before deleting them (``CANCELLED_BY``):
        # their deletion ends the step CANCELLED, not LOST.
        self.cancelled_elsewhere: set[str] = set()
        # Re-judgements due by time alone (a grace, a pending_timeout): when, and the timer.
        self._timers: dict[str, tuple[datetime, asyncio.TimerHandle]] = {}
        # Jobs whose verdict waits for their pods' ends: the grace timer, None once it fired.
        self._held: dict[str, asyncio.TimerHandle | None] = {}
        # Jobs whose handles ``attach`` made for what it found (see ``_hold``).
        self._found: set[str] = set()
        # Job uid -> name, and back: a Workload names its Job by uid (k8sjobs.admission).
        self._by_uid: dict[str, str] = {}
        self._uid_of: dict[str, str] = {}
        self._tasks = [
            asyncio.create_task(self.jobs.run(), name=f"k8sjobs-watch-jobs-{namespace}"),
            asyncio.create_task(self.pods.run(), name=f"k8sjobs-watch-pods-{namespace}"),
        ]

    def ensure_jobsets(self) -> None:
        """Start the JobSet informer of this namespace and study, once (``synced`` waits)."""
        if self.jobsets is not None:
            return
        selector = f"{LABEL_STUDY}={self._study_label}"
        policy = self.backend.watch_policy()
        self.jobsets = Informer(
            self.backend.client,
            JOBSETS,
            self.namespace,
            selector,
            self._jobset_changed,
            slimmer=slim_jobset,
            **policy,
        )
        name = f"k8sjobs-watch-jobsets-{self.namespace}"
        self._tasks.append(asyncio.create_task(self.jobsets.run(), name=name))

    def top(self, name: str) -> dict[str, Any] | None:
        """Return the step's top object as last seen: its JobSet, else its Job."""
        if self.jobsets is not None and name in self.jobsets.cache.objects:
            found: dict[str, Any] = self.jobsets.cache.objects[name]
            return found
        return self.jobs.cache.objects.get(name)

    def step_object(self, job: str) -> str:
        """Return the name of the step's top object a (child) Job belongs to."""
        return self.jobset_of_job.get(job, job)

    def step_pods(self, name: str) -> dict[str, dict[str, Any]]:
        """Return the pods of the step ``name`` (every child Job's, for a JobSet)."""
        if self.jobsets is None or name not in self.jobsets.cache.objects:
            return self.pods_by_job.get(name, {})
        found: dict[str, dict[str, Any]] = {}
        for job in self._children.get(name, ()):
            found.update(self.pods_by_job.get(job, {}))
        return found

    async def synced(self) -> None:
        """Return once both informers have listed, so the caches hold what exists.

        Raises the error of an informer that gave up (a 403 on the first list, say).
        """
        jobsets = [] if self.jobsets is None else [self.jobsets.synced]
        if (
            self.jobs.synced.is_set()
            and self.pods.synced.is_set()
            and self.events.informer.synced.is_set()
            and all(s.is_set() for s in jobsets)
        ):
            return
        both: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(
                self.jobs.synced.wait(),
                self.pods.synced.wait(),
                self.events.synced(),
                *(s.wait() for s in jobsets),
            )
        )
        try:
            pending: list[asyncio.Future[Any]] = [both, *self._tasks]
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            both.cancel()
            # An informer that failed also failed the gather: its error is raised below.
            both.add_done_callback(lambda f: f.cancelled() or f.exception())
        for task in self._tasks:
            if task.done():
                task.result()

    async def aclose(self) -> None:
        """Stop both informers and every pending grace timer."""
        for timer in [*(t for _, t in self._timers.values()), *self._held.values()]:
            if timer is not None:
                timer.cancel()
        if self in self.events.studies:
            self.events.studies.remove(self)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def track(self, handle: StepHandle, *, found: bool = False) -> None:
        """Start feeding ``handle``; judge it at once if its Job is already known.

        ``found``: the handle was made by ``attach`` for a Job that existed already.
        """
        self.handles[handle.object_name] = handle
        if found:
            self._found.add(handle.object_name)
        job = self.jobs.cache.objects.get(handle.object_name)
        for pod in self.pods_by_job.get(handle.object_name, {}).values() if job else ():
            event = pod_event(job or {}, pod)  # what a re-attached handle can still see
            if event is not None:
                handle.add_event(event)
        pods = self.pods_by_job.get(handle.object_name, {})
        for warning in self.events.about(handle.object_name, pods) if job else ():
            said = warning_event(warning)  # why it waited, while the server keeps the Events
            if said is not None:
                handle.add_event(said)
        if job is not None or self.top(handle.object_name) is not None:
            self.refresh(handle.object_name)

    def _note_uid(self, change: Change) -> None:
        self._by_uid.pop(self._uid_of.pop(change.name, ""), None)
        if change.obj is not None and change.obj["metadata"].get("uid"):
            uid = str(change.obj["metadata"]["uid"])
            self._by_uid[uid], self._uid_of[change.name] = change.name, uid

    def was_found(self, name: str) -> bool:
        """Return whether the step ``name`` was found by ``attach``, not sent by this driver."""
        return name in self._found

    def _note_cancel(self, change: Change) -> None:
        if change.obj is None:
            return
        if CANCELLED_BY in (change.obj["metadata"].get("annotations") or {}):
            self.cancelled_elsewhere.add(change.name)
        else:
            self.cancelled_elsewhere.discard(change.name)

    def _job_changed(self, change: Change) -> None:
        self._note_uid(change)
        owner = jobset_of(change.obj) if change.obj is not None else None
        owner = owner or self.jobset_of_job.get(change.name)
        if owner is not None:  # a JobSet's child: recreated on restarts, deleted on success
            self._child_changed(change, owner)
            return
        self._note_cancel(change)
        if change.obj is None:
            self._forget_pods(change.name)
            self._vanished(change.name)
            return
        self.refresh(change.name)

    def workload_changed(self, uid: str) -> None:
        """Re-judge the step whose Job has ``uid``, if it is this study's: its Workload changed."""
        name = self._by_uid.get(uid)
        if name is not None:
            self.refresh(name)

    def _child_changed(self, change: Change, owner: str) -> None:
        if change.obj is None:
            self.jobset_of_job.pop(change.name, None)
            siblings = self._children.get(owner, {})
            siblings.pop(change.name, None)
            if not siblings:
                self._children.pop(owner, None)
            self._forget_pods(change.name)
        else:
            self.jobset_of_job[change.name] = owner
            self._children.setdefault(owner, {})[change.name] = None
            if self.jobsets is None:  # found by attach: a jobset step exists here
                self.ensure_jobsets()
        self.refresh(owner)

    def _jobset_changed(self, change: Change) -> None:
        self._note_uid(change)  # Kueue's Workload of a JobSet is owned by the JobSet
        self._note_cancel(change)
        if change.obj is not None:
            self.refresh(change.name)
            return
        self._vanished(change.name)

    def _forget_pods(self, job: str) -> None:
        """Drop what is known of the pods of ``job``, a Job that is gone."""
        for pod in self.pods_by_job.pop(job, {}):
            self._job_of_pod.pop(pod, None)
        self.gone_by_job.pop(job, None)

    def _vanished(self, name: str) -> None:
        """Tell the backend that the top object ``name`` (a Job or a JobSet) is gone."""
        self._found.discard(name)
        held = self._held.pop(name, None)
        if held is not None:
            held.cancel()
        if name in self.gone:
            self.gone[name].set()
        self.backend._vanished(self, name, elsewhere=name in self.cancelled_elsewhere)
        self.cancelled_elsewhere.discard(name)

    def _pod_changed(self, change: Change) -> None:
        job = self._job_of(change)
        if job is None:
            return
        pods = self.pods_by_job.setdefault(job, {})
        if change.obj is None:
            last = pods.pop(change.name, None)
            self._job_of_pod.pop(change.name, None)
            if last is not None:
                self._remember_gone(job, change.name, last)
        else:
            pods[change.name] = change.obj
            self._job_of_pod[change.name] = job
        self._note_event(job, change)
        self.backend._pod_seen(self, job, change)
        if job in self.jobs.cache.objects:
            self.refresh(job)

    def _remember_gone(self, job: str, name: str, pod: dict[str, Any]) -> None:
        gone = self.gone_by_job.setdefault(job, {})
        gone[name] = pod
        while len(gone) > _GONE_LIMIT:
            gone.pop(next(iter(gone)))

    def _note_event(self, job: str, change: Change) -> None:
        """Record a failed or deleted pod in its step's events (once per pod)."""
        handle = self.handles.get(self.step_object(job))
        job_obj = self.jobs.cache.objects.get(job)
        pod = change.obj or self.gone_by_job.get(job, {}).get(change.name)
        if handle is None or job_obj is None or pod is None:
            return
        event = pod_event(job_obj, pod, deleted=change.obj is None)
        if event is not None and handle.add_event(event):
            log.info('Step "%s": %s', handle.name, event.describe())

    def _job_of(self, change: Change) -> str | None:
        if change.obj is None:
            return self._job_of_pod.get(change.name)
        meta = change.obj["metadata"]
        labels = meta.get("labels") or {}
        name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if name:
            return str(name)
        owners = [o["name"] for o in meta.get("ownerReferences") or () if o.get("kind") == "Job"]
        return str(owners[0]) if owners else None

    def refresh(self, job_name: str) -> None:
        """Judge one Job from the caches and pass the verdict to its handle."""
        job_name = self.step_object(job_name)
        if self.jobsets is not None and job_name in self.jobsets.cache.objects:
            self._refresh_jobset(job_name)
            return
        handle = self.handles.get(job_name)
        job = self.jobs.cache.objects.get(job_name)
        if handle is None or job is None or handle.done:
            return
        pods = list(self.pods_by_job.get(job_name, {}).values())
        gone = list(self.gone_by_job.get(job_name, {}).values())
        grace = self.backend.pending_grace
        warnings = self.events.about(job_name, self.pods_by_job.get(job_name, {}))
        timeout = self.backend.pending_timeout
        result = judge(
            job,
            pods,
            now=datetime.now(UTC),
            pending_grace=grace,
            gone=gone,
            warnings=warnings,
            pending_timeout=timeout,
        )
        if result.name != handle.name or result.log_file != handle.result.log_file:
            result = result.evolve(name=handle.name, log_file=handle.result.log_file)
        found = self.backend._admission(self.namespace, job)
        result = judge_admission(result, found)
        self._record_eviction(handle, found)
        if result.state.terminal:
            unseen = unseen_pods(job, pods, gone)
            ended = result.finished_at if job_name in self._found else None
            if unseen and self._hold(job_name, ended):
                return  # the pod watch's event re-judges it (a relist too)
            held = self._held.pop(job_name, None)
            if held is not None:
                held.cancel()
            if unseen:  # bookkeeping, not the step's story: for whoever debugs the watch
                log.debug(
                    'Step "%s": the end of %d pod(s) its Job counts was not seen (deleted '
                    "unseen); judged without them",
                    handle.name,
                    unseen,
                )
            self.backend._finish(self, handle, job, pods, result)
            return
        handle.report(result)
        if result.state is StepState.PENDING:
            due = pending_deadline(
                job,
                pods,
                pending_grace=grace,
                gone=gone,
                warnings=warnings,
                pending_timeout=timeout,
            )
            if due is not None:
                self._arm_timer(job_name, due)

    def _record_eviction(self, handle: StepHandle, found: Admission | None) -> None:
        """Put the Workload's latest eviction, if any, in the step's history (once each)."""
        evicted = eviction_event(found) if found is not None else None
        if evicted is not None:
            handle.add_event(evicted)

    def _refresh_jobset(self, name: str) -> None:
        """Judge one JobSet from the caches (its child Jobs and their pods) for its handle."""
        assert self.jobsets is not None
        handle = self.handles.get(name)
        jobset = self.jobsets.cache.objects.get(name)
        if handle is None or jobset is None or handle.done:
            return
        children = list(self._children.get(name, ()))
        jobs = [self.jobs.cache.objects[n] for n in children if n in self.jobs.cache.objects]
        pods = {n: list(self.pods_by_job.get(n, {}).values()) for n in children}
        gone = {n: list(self.gone_by_job.get(n, {}).values()) for n in children}
        shown = [p for n in children for p in self.pods_by_job.get(n, {})]
        warnings = [w for n in [name, *children] for w in self.events.about(n, ())]
        warnings += self.events.about("", shown)
        restarted = restart_event(jobset)
        if restarted is not None and handle.add_event(restarted):
            log.info('Step "%s": %s', handle.name, restarted.describe())
        result = judge_jobset(
            jobset,
            jobs,
            pods,
            now=datetime.now(UTC),
            pending_grace=self.backend.pending_grace,
            gone=gone,
            warnings=warnings,
            pending_timeout=self.backend.pending_timeout,
        )
        if result.name != handle.name or result.log_file != handle.result.log_file:
            result = result.evolve(name=handle.name, log_file=handle.result.log_file)
        found = self.backend._admission(self.namespace, jobset)
        result = judge_admission(result, found)
        self._record_eviction(handle, found)
        if not result.state.terminal:
            handle.report(result)
            due = jobset_pending_deadline(jobset, self.backend.pending_timeout)
            if result.state is StepState.PENDING and due is not None:
                self._arm_timer(name, due)
            return
        every = [p for n in children for p in pods[n]]
        unseen = sum(unseen_pods(j, pods[str(j["metadata"]["name"])]) for j in jobs)
        ended = result.finished_at if name in self._found else None
        if unseen and self._hold(name, ended):
            return  # the pod watch's event re-judges it: the exit code is on the pod
        held = self._held.pop(name, None)
        if held is not None:
            held.cancel()
        self.backend._finish(self, handle, jobset, every, result)

    def settling(self, job_name: str) -> bool:
        """Return whether a terminal verdict of ``job_name`` waits for its pods' ends."""
        return self._held.get(job_name) is not None

    def _hold(self, job_name: str, ended: datetime | None) -> bool:
        """Return whether a terminal verdict still waits for its pods (arm its grace bound).

        For a Job ``attach`` found (``ended`` given, the server's clock), the bound runs
        from its end, capped at ``verdict_grace`` from now: one that ended long before is
        judged at once, its missing pods deleted long ago.
        """
        if job_name in self._held:
            return self._held[job_name] is not None
        wait = self.backend.verdict_grace
        if ended is not None:
            wait = min(wait, (ended - datetime.now(UTC)).total_seconds() + wait)
        if wait <= 0:
            return False

        def expire() -> None:
            self._held[job_name] = None
            self.refresh(job_name)

        loop = asyncio.get_running_loop()
        self._held[job_name] = loop.call_later(wait, expire)
        return True

    def _arm_timer(self, job_name: str, due: datetime) -> None:
        """Re-judge ``job_name`` at ``due`` (a grace or pending_timeout ends): a timer, not a
        request. A sooner moment replaces a later one; a later one waits its turn."""
        armed = self._timers.get(job_name)
        if armed is not None:
            if armed[0] <= due:
                return
            armed[1].cancel()
        delay = max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.01
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(job_name, None)
            self.refresh(job_name)

        self._timers[job_name] = (due, loop.call_later(delay, fire))

    def warning_changed(self, about: tuple[str, str], event: dict[str, Any]) -> None:
        """A Warning Event about ``about`` (kind, name) came: record it, re-judge its step."""
        kind, name = about
        job = name if kind == "Job" else self._job_of_pod.get(name) if kind == "Pod" else None
        if job is None or job not in self.jobs.cache.objects:
            return  # not this study's (a pod not seen yet is judged with it when it comes)
        handle = self.handles.get(job)
        step_event = warning_event(event)
        if handle is not None and step_event is not None and handle.add_event(step_event):
            log.info('Step "%s": %s', handle.name, step_event.describe())
        self.refresh(job)


class KubernetesBackend:
    """Runs steps as Jobs on a Kubernetes cluster (the Backend protocol).

    ``namespace`` defaults to the kubeconfig context's (else "default"); ``log_dir`` keeps
    one log file per failed step; ``keep_failed`` keeps failed Jobs for debugging (else they
    are deleted once their logs are saved); ``pending_grace`` is how long a pod may sit in
    ImagePullBackOff or a similar error before the step fails; ``relist_interval`` is the
    mean time between safety-net relists of each watch (jittered; costs one LIST per
    namespace, study and kind; None turns it off). Other keywords tune the API client (see
    ``ClientOptions``: qps, burst, max_writes, timeout, watch_idle, retries, ...).
    ``watch_stats`` counts watch reconnects and relists by reason. ``follow_logs`` is how
    many running pods' logs are followed at once into ``log_dir`` (0: none), so that the
    log of a pod deleted at its walltime or evicted is kept (see ``kube/logkeep.py``);
    ``keep_logs`` says whose: "walltime" (the default: the pods of steps with a walltime,
    which the job controller deletes when it runs out) or "all" (every running pod, one
    follow request per pod: a per-step read that a study of many steps pays).
    ``verdict_grace`` (seconds) bounds how long a terminal Job's verdict waits for the pod
    watch to show the ends of the pods the Job counts (it is woken by their events).
    ``pending_timeout`` (seconds, None: off, the default, as queues like Kueue wait by
    design) fails a step that has not started that long after its Job was made; a step's
    own ``pending_timeout`` wins. ``pending_grace`` also bounds how long a step's pods may be
    refused by admission for a cause that cannot clear (a missing PriorityClass, ...).
    """

    kind = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str | None = None,
        log_dir: str | os.PathLike[str] = ".k8sjobs/logs",
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        keep_failed: bool = False,
        pending_grace: float = 120.0,
        pending_timeout: float | None = None,
        relist_interval: float | None = 900.0,
        config: ClusterConfig | None = None,
        follow_logs: int = 32,
        keep_logs: Literal["walltime", "all"] = "walltime",
        **client_options: Any,
    ) -> None:
        self._namespace = namespace
        self.log_dir = Path(log_dir)
        if keep_logs not in ("walltime", "all"):
            raise ValueError(f'keep_logs must be "walltime" or "all" (not {keep_logs!r})')
        self.keep_logs = keep_logs
        self.logkeeper = LogKeeper(self.log_dir, follow_logs)
        self.keep_failed = keep_failed
        self.pending_grace = pending_grace
        self.pending_timeout = _check_pending_timeout(pending_timeout)
        self.verdict_grace = VERDICT_GRACE
        self._kubeconfig = kubeconfig
        self._context = context
        self._config = config
        self._options = ClientOptions(**client_options)
        self.relist_interval = relist_interval
        self.watch_stats = WatchStats()
        _check_watch_bounds(self._options.watch_idle, relist_interval)
        _check_api_bounds(self._options.connect_timeout, self._options.outage_timeout)
        self._client: KubeClient | None = None
        self._watches: dict[tuple[str, str], StudyWatch] = {}
        # The allocations' pod listeners, by (namespace, Job name) (allocations/pool.py).
        self._pod_listeners: dict[tuple[str, str], list[Callable[[], None]]] = {}
        self._event_watches: dict[str, EventWatch] = {}
        # Kueue: whether it is served (asked once, when a queued step is first seen), and
        # one Workload watch per namespace that holds queued steps (k8sjobs.kube.workloads).
        self._kueue: KueueApi | None = None
        self._workload_watches: dict[str, WorkloadWatch] = {}
        # When each namespace's wait for its first Workload list ends (loop time): one bound
        # for all its queued steps, not one per step.
        self._workloads_due: dict[str, float] = {}
        self._workloads_said: set[str] = set()
        # (namespace, name) of the steps this driver sent as Flux Operator MiniClusters.
        self._miniclusters: set[tuple[str, str]] = set()
        self._jobsets: set[tuple[str, str]] = set()
        # Whether the cluster serves jobset.x-k8s.io/v1alpha2 (None: not asked yet).
        self._jobset_api: bool | None = None
        self._watch_lock = asyncio.Lock()
        self._cancelled: set[tuple[str, str]] = set()
        self._replacing: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._finishing: set[tuple[str, str]] = set()
        # Steps that had ended when ``attach`` found them: their Jobs are left as they are.
        self._ended_before: set[tuple[str, str]] = set()
        #: ConfigMaps of the study that have no Job, found by ``attach`` (left by an older
        #: k8sjobs, which wrote the ConfigMap first).
        self.orphans: list[str] = []
        #: Jobs of the study that have no ConfigMap, found by ``attach``: a driver died
        #: between its two writes; submitting the step again writes the rest.
        self.unwritten: list[str] = []

    def watch_policy(self) -> dict[str, Any]:
        """Return the Informer keywords of this backend's watches (bounds, shared stats)."""
        return {
            "idle": self._options.watch_idle,
            "relist_every": self.relist_interval,
            "stats": self.watch_stats,
        }

    @property
    def namespace(self) -> str | None:
        """Return the namespace steps go to unless a step names its own."""
        if self._namespace:
            return self._namespace
        return self._config.namespace if self._config else None

    @property
    def default_store(self) -> str | None:
        """Return None: a cluster has no artifact store of its own (the session names one)."""
        return None

    @property
    def client(self) -> KubeClient:
        """Return the API client (after ``start``)."""
        if self._client is None:
            raise RuntimeError("KubernetesBackend.start() has not been called")
        return self._client

    async def start(self) -> None:
        """Load the cluster configuration and open the HTTP session."""
        if self._client is not None:
            return
        if self._config is None:
            self._config = await load_config(self._kubeconfig, self._context)
        client = KubeClient(self._config, self._options)
        try:
            namespace = self.namespace or "default"
            await probe(
                lambda: client.list_page(JOBS, namespace, "", {"limit": "1"}, retries=0),
                client.config.host,
                timeout=self._options.connect_timeout,
                where=self._where(),
            )
        except BaseException:
            await client.aclose()
            raise
        client.health.armed = True
        client.health.on_give_up = self._give_up
        self._client = client

    def _where(self) -> str:
        """Return where the server's address came from, for error messages."""
        path = kubeconfig_path(self._kubeconfig)
        if path is None:
            return "in-cluster configuration" if self._config and not self._kubeconfig else ""
        context = f", context {self._context}" if self._context else ""
        return f"kubeconfig {path}{context}"

    @property
    def health(self) -> ApiHealth | None:
        """Return whether the API server answers (None before ``start``): see ``kube.reach``."""
        return None if self._client is None else self._client.health

    def _give_up(self, error: ClusterUnreachable) -> None:
        """The server was lost too long: every waiting handle's ``wait`` raises ``error``."""
        for watch in self._watches.values():
            for handle in watch.handles.values():
                handle.abandon(error)

    async def aclose(self) -> None:
        """Stop every watch and close connections; the Jobs keep running."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for watch in self._watches.values():
            await watch.aclose()
        self._watches.clear()
        for events in self._event_watches.values():
            await events.aclose()
        self._event_watches.clear()
        for workloads in self._workload_watches.values():
            await workloads.aclose()
        self._workload_watches.clear()
        await self.logkeeper.aclose()
        if self._client is not None:
            await self._client.aclose()

    # ---- submit ----------------------------------------------------------------------

    async def submit(
        self, handle: StepHandle, manifests: Manifests, *, replace: bool, rerun: bool = False
    ) -> None:
        """Create the step's objects (or adopt identical ones) and track ``handle``.

        ``rerun`` runs an ended Job of the same spec again instead of adopting it.
        """
        if top_kind(manifests.job) is JOBSETS:
            await self._check_jobset_api(handle)  # before anything is written
        watch = await self._watch(handle.namespace, handle.study)
        if _queued(manifests.job):
            await self._follow_queue(handle.namespace)
            if self._kueue is KueueApi.ABSENT:  # before anything is written
                where = f" ({self._where()})" if self._where() else ""
                raise ValueError(
                    f'Step "{handle.name}" has a queue, but the cluster{where} serves no '
                    "kueue.x-k8s.io API (Kueue is not installed), so nothing would ever admit "
                    "its Job: install Kueue (https://kueue.sigs.k8s.io/docs/installation/), "
                    "or drop queue (and priority) to run it unqueued"
                )
        name = manifests.name
        key = (manifests.namespace, name)
        if top_kind(manifests.job) is MINICLUSTERS:
            self._miniclusters.add(key)
        if top_kind(manifests.job) is JOBSETS:
            self._jobsets.add(key)
            watch.ensure_jobsets()
            await self._jobsets_listed(watch)
        current = watch.top(name)
        if replace or current is not None:
            # A deletion of the old Job is ours: it must not read as a LOST step.
            self._replacing.add(key)
        health = self.client.health
        try:
            while True:
                try:
                    handle.adopted = await create_step(
                        self.client,
                        manifests,
                        current=watch.top(name),
                        replace=replace,
                        gone=lambda: self._wait_gone(watch, name),
                        rerun=ended if rerun else _keep,
                        written=lambda job: _mounted(watch.step_pods(name).values()),
                    )
                    break
                except ServerUnavailable as exc:
                    if exc.status != 0 or health.reachable:
                        raise  # an answer (overloaded, 5xx): the server spoke
                    # Lost on the way: wait for it (bounded by outage_timeout) and send
                    # again; every write of create_step is safe to send twice.
                    await health.wait_reachable()
        finally:
            self._replacing.discard(key)
        watch.track(handle)

    async def _jobsets_listed(self, watch: StudyWatch) -> None:
        """Wait for the study's first JobSet list (it decides create or adopt), bounded by
        ``connect_timeout``; past it the step is refused, before anything is written, with
        what it waited on in the server's words (it waited forever, in silence)."""
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                await watch.synced()
        except TimeoutError:
            why = self.client.refusals.get(JOBSETS.plural) or "no answer"
            message = (
                f'the JobSets of namespace "{watch.namespace}" were not listed within '
                f"{self._options.connect_timeout:g} s (connect_timeout; {why}): nothing of "
                "the step was sent, so it may be sent again"
            )
            raise ServerUnavailable(0, {"message": message}) from None

    async def _check_jobset_api(self, handle: StepHandle) -> None:
        """Refuse a ``target: jobset`` step on a cluster that serves no JobSet API.

        Asked once per backend (one discovery GET); a refusal names the API group and the
        fix, before any object of the step is written.
        """
        if self._jobset_api is None:
            try:
                path, what = JOBSETS.prefix, f"discover {JOBSETS.prefix}"
                await self.client.request("GET", path, what=what, kind=JOBSETS, verb="get")
                self._jobset_api = True
            except NotFound:
                self._jobset_api = False
        if not self._jobset_api:
            where = f" ({self._where()})" if self._where() else ""
            raise ValueError(
                f'Step "{handle.name}" has target: jobset, but the cluster{where} '
                f"serves no {JOBSETS.prefix.removeprefix('/apis/')} API (JobSet is not "
                "installed): install JobSet (https://jobset.sigs.k8s.io/docs/installation/), "
                "or use target: job (the same launcher and workers as one Indexed Job)"
            )

    async def _wait_gone(self, watch: StudyWatch, name: str) -> None:
        """Return once the watch has seen the Job ``name`` deleted (or never knew it)."""
        if watch.top(name) is None:
            return
        gone = watch.gone.setdefault(name, asyncio.Event())
        # Set by an earlier deletion of this name, before the Job was made again.
        gone.clear()
        async with asyncio.timeout(self._options.timeout * 4):
            await gone.wait()
        watch.gone.pop(name, None)

    async def _top_kind(self, handle: StepHandle) -> Kind:
        """Return what to delete to end ``handle``'s step: its Job, or its MiniCluster."""
        if (handle.namespace, handle.object_name) in self._miniclusters:
            return MINICLUSTERS  # sent by this driver: known before the watch sees its Job
        if (handle.namespace, handle.object_name) in self._jobsets:
            return JOBSETS
        watch = await self._watch(handle.namespace, handle.study)
        return top_kind(watch.top(handle.object_name) or {})

    async def _delete(self, kind: Kind, namespace: str, name: str, propagation: str) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(kind, namespace, name, propagation=propagation)

    # ---- attach, cancel --------------------------------------------------------------

    async def attach(self, study: str, namespace: str) -> list[StepHandle]:
        """Return handles for the Jobs of ``study``; log and record orphaned ConfigMaps.

        Each handle has been judged from the lists when this returns: a step whose verdict
        needs a read (a success's push report, a failure's log) or waits for its pods'
        ends is returned once that is done, so a caller never shows a state not yet read.
        """
        watch = await self._watch(namespace, study)
        if any(_queued(job) for job in watch.jobs.cache.objects.values()):
            await self._follow_queue(namespace)
        if watch.jobsets is not None:  # a child Job seen: its JobSet's list comes too
            await watch.synced()
        tops = [(n, j) for n, j in watch.jobs.cache.objects.items() if jobset_of(j) is None]
        if watch.jobsets is not None:
            tops += list(watch.jobsets.cache.objects.items())
        # An allocation's Job (or JobSet) carries the study's label too, but is no step.
        tops = [(n, j) for n, j in tops if not held_pods(j)]
        handles, settling = [], []
        for name, job in tops:
            existing = watch.handles.get(name)
            if existing is not None:
                handles.append(existing)
                continue
            step = str((job["metadata"].get("annotations") or {}).get(ANNOTATION_STEP) or name)
            handle = StepHandle(
                name=step, study=study, object_name=name, namespace=namespace, backend=self
            )
            watch.track(handle, found=True)
            if watch.settling(name) or (namespace, name) in self._finishing:
                # Ended before this driver saw it: looking at it (`k8sjobs status`) must
                # not delete the Job that ``keep_failed`` kept.
                self._ended_before.add((namespace, name))
                settling.append(handle)
            handles.append(handle)
        await self._find_orphans(watch, study)
        for handle in settling:
            await handle.wait()
        return handles

    async def _find_orphans(self, watch: StudyWatch, study: str) -> None:
        selector = f"{LABEL_STUDY}={label_value(study)}"
        found = await self.client.list_all(CONFIGMAPS, watch.namespace, selector)
        have = {item["metadata"]["name"] for item in found["items"]}
        for name, job in watch.jobs.cache.objects.items():
            if name in have or ended(job) or name in self.unwritten or jobset_of(job):
                continue
            if held_pods(job):  # an allocation's: its ConfigMap is its pool's business
                continue
            step = (job["metadata"].get("annotations") or {}).get(ANNOTATION_STEP, name)
            log.warning(
                'Step "%s": Job "%s" has no ConfigMap (a driver stopped between creating '
                "them), so its pods wait; submitting the step again creates it.",
                step,
                name,
            )
            self.unwritten.append(name)
        for item in found["items"]:
            meta = item["metadata"]
            if held_pods(item):  # an allocation's agent: its pool, not a step, owns it
                continue
            if not meta.get("ownerReferences") and watch.top(meta["name"]) is None:
                step = (meta.get("annotations") or {}).get(ANNOTATION_STEP, meta["name"])
                log.warning(
                    'Step "%s": ConfigMap "%s" has no Job (a driver stopped between creating '
                    "them); submitting the step again adopts it.",
                    step,
                    meta["name"],
                )
                if meta["name"] not in self.orphans:
                    self.orphans.append(meta["name"])

    async def cancel(self, handle: StepHandle) -> None:
        """Delete the step's Job (Background propagation); the handle ends CANCELLED.

        A step this backend found (``attach``: ``k8sjobs cancel`` from another shell) may be
        another driver's: it is marked ``CANCELLED_BY`` first (one patch), so that driver
        ends it CANCELLED, as docs/cli.md says, not LOST to "someone else".
        """
        key = (handle.namespace, handle.object_name)
        self._cancelled.add(key)
        kind = await self._top_kind(handle)
        watch = await self._watch(handle.namespace, handle.study)
        with contextlib.suppress(NotFound):
            if handle.adopted or watch.was_found(handle.object_name):
                await self._mark_cancelled(kind, key, handle.name)
                if kind is MINICLUSTERS:  # its driver follows it through the operator's Job
                    with contextlib.suppress(NotFound):
                        await self._mark_cancelled(JOBS, key, handle.name)
            await self.client.delete(kind, key[0], key[1], propagation="Background")
        handle.report(
            handle.result.evolve(
                state=StepState.CANCELLED,
                reason="Cancelled",
                message="cancelled by this driver",
                finished_at=datetime.now(UTC),
            )
        )

    async def _mark_cancelled(self, kind: Kind, key: tuple[str, str], step: str) -> None:
        """Annotate the step's object ``CANCELLED_BY`` before it is deleted; a Role without
        patch (older than this release) only costs the other driver's word: it says LOST."""
        mark = {"metadata": {"annotations": {CANCELLED_BY: "another process"}}}
        try:
            await self.client.merge_patch(kind, key[0], key[1], mark, answer=False)
        except Forbidden as exc:
            log.warning(
                'Step "%s": could not mark its %s cancelled (%s); it is deleted all the same, '
                "and a driver running it will say LOST",
                step,
                kind.plural,
                exc,
            )

    def _pod_seen(self, watch: StudyWatch, job: str, change: Change) -> None:
        """Start keeping the step container's log of a pod that runs (see logkeep.py); tell
        an allocation (``on_pods``) that one of its pods changed."""
        listeners = self._pod_listeners.get((watch.namespace, watch.step_object(job)))
        if listeners:  # an allocation's pods: their agent is followed, not their log
            for callback in list(listeners):
                callback()
            return
        handle = watch.handles.get(watch.step_object(job))
        pod = change.obj
        if handle is None or pod is None or (pod.get("status") or {}).get("phase") != "Running":
            return
        if self.keep_logs == "walltime" and not _has_walltime(watch.jobs.cache.objects.get(job)):
            return
        where = (handle.study, handle.name, self._run_of(handle))
        self.logkeeper.follow(self.client, watch.namespace, where, change.name, self._main(handle))

    def pods_of(self, handle: StepHandle) -> dict[str, str]:
        """Return the pods of ``handle``'s Job as the watch last saw them, each's phase."""
        watch = self._watches.get((handle.namespace, label_value(handle.study)))
        pods = {} if watch is None else watch.step_pods(handle.object_name)
        return {n: str((p.get("status") or {}).get("phase") or "Pending") for n, p in pods.items()}

    def on_pods(self, handle: StepHandle, callback: Callable[[], None]) -> None:
        """Call ``callback`` on every change of a pod of ``handle``'s Job (an allocation's)."""
        self._pod_listeners.setdefault((handle.namespace, handle.object_name), []).append(callback)

    def _vanished(self, watch: StudyWatch, name: str, *, elsewhere: bool = False) -> None:
        """A Job disappeared: ours to cancel or replace, cancelled by another process
        (``elsewhere``: it was marked ``CANCELLED_BY``), else somebody else deleted it."""
        handle = watch.handles.get(name)
        key = (watch.namespace, name)
        if handle is None or handle.done or key in self._replacing:
            return
        ours = key in self._cancelled
        state = StepState.CANCELLED if ours or elsewhere else StepState.LOST
        # The object the step is: a user looks for what the message names.
        kind = "JobSet" if key in self._jobsets else "Job"
        message = (
            "cancelled by this driver"
            if ours
            else "cancelled from another process"
            if elsewhere
            else f"its {kind} was deleted by someone else"
        )
        reason = "Cancelled" if state is StepState.CANCELLED else "JobDeleted"
        handle.report(
            handle.result.evolve(
                state=state, reason=reason, message=message, finished_at=datetime.now(UTC)
            )
        )

    # ---- terminal states: logs, outputs, cleanup -------------------------------------

    def _finish(
        self,
        watch: StudyWatch,
        handle: StepHandle,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        result: StepResult,
    ) -> None:
        """Complete a terminal verdict: outputs on success, saved logs on failure."""
        key = (handle.namespace, handle.object_name)
        if key in self._cancelled:
            return
        outputs = _tag_outputs(job)
        needs_io = result.state is StepState.FAILED or (result.ok and outputs)
        if not needs_io:
            handle.report(result)
            return
        if key in self._finishing:
            return
        self._finishing.add(key)
        self._spawn(self._finish_io(handle, pods, result, outputs))

    async def _finish_io(
        self,
        handle: StepHandle,
        pods: list[dict[str, Any]],
        result: StepResult,
        outputs: dict[str, str],
    ) -> None:
        key = (handle.namespace, handle.object_name)
        try:
            if result.ok:
                result = result.evolve(outputs={**outputs, **await self._pushed(handle, pods)})
            else:
                result = await self._save_failure(handle, pods, result)
                result = await self._failed_outputs(handle, pods, result)
        finally:
            self._finishing.discard(key)
            handle.report(result)
        if not result.ok and not self.keep_failed and key not in self._ended_before:
            # Only now: the log is saved and the handle is final, so the deletion event
            # finds a terminal handle and is not mistaken for a LOST step.
            kind = await self._top_kind(handle)
            await self._delete(kind, handle.namespace, handle.object_name, "Background")

    async def _pushed(self, handle: StepHandle, pods: list[dict[str, Any]]) -> dict[str, str]:
        """Return the digest references the push container printed as its last line."""
        for pod in _succeeded_first(pods):
            # A MiniCluster's pod pushes from its handoff sidecar (k8sjobs.render.minicluster).
            names = {c.get("name") for c in pod["status"].get("containerStatuses") or ()}
            pusher = HANDOFF_CONTAINER if HANDOFF_CONTAINER in names else PUSH_CONTAINER
            try:
                text = await self.client.log(handle.namespace, _name(pod), pusher, tail=5)
            except ApiError as exc:
                log.info('Step "%s": output digests unreadable (%s); using tags', handle.name, exc)
                continue
            digests = read_push_report(text)
            if digests:
                return digests
        return {}

    async def _failed_outputs(
        self, handle: StepHandle, pods: list[dict[str, Any]], result: StepResult
    ) -> StepResult:
        """Return ``result`` with what a failed step pushed (``push_outputs: always``)."""
        job = self._job_of(handle) or {}
        raw = (job.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_FAILED_OUTPUTS)
        if not raw:
            return result
        return result.evolve(outputs={**json.loads(raw), **await self._pushed(handle, pods)})

    def _main(self, handle: StepHandle) -> str:
        """Return the step's own container: the Flux Operator names a MiniCluster's pods'
        runner after the MiniCluster, where a Job step's is ``step``."""
        minicluster = (handle.namespace, handle.object_name) in self._miniclusters
        if minicluster or top_kind(self._job_of(handle) or {}) is MINICLUSTERS:
            return handle.object_name
        return MAIN_CONTAINER

    def _job_of(self, handle: StepHandle) -> dict[str, Any] | None:
        watch = self._watches.get((handle.namespace, label_value(handle.study)))
        return None if watch is None else watch.top(handle.object_name)

    def native_of(self, handle: StepHandle) -> Native:
        """Return the step's Job uid, pod and node as the watch last saw them (observers')."""
        watch = self._watches.get((handle.namespace, label_value(handle.study)))
        pods = [] if watch is None else list(watch.pods_by_job.get(handle.object_name, {}).values())
        return native(self._job_of(handle), pods)

    def _run_of(self, handle: StepHandle) -> str:
        """Return the uid of the step's Job: its kept logs' folder ("" once the Job is gone)."""
        job = self._job_of(handle) or {}
        return str((job.get("metadata") or {}).get("uid") or "")

    async def _save_failure(
        self, handle: StepHandle, pods: list[dict[str, Any]], result: StepResult
    ) -> StepResult:
        """Return ``result`` with the failed pod's log kept in log_dir/<study>/<step>.log."""
        failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"] or pods
        names = [_name(p) for p in failed] or list(result.pods)
        if names:
            path = self.log_dir / file_name(handle.study) / f"{file_name(handle.name)}.log"
            try:
                text = await self._pod_log(handle, names[-1], self._main(handle), None)
                await asyncio.to_thread(_write, path, text)
                result = result.evolve(log_file=str(path))
            except (ApiError, OSError) as exc:
                log.warning('Step "%s": could not save its log: %s', handle.name, exc)
        return result

    async def _pod_log(self, handle: StepHandle, pod: str, container: str, tail: int | None) -> str:
        """Return one pod's log from the API, or the kept copy once the pod is gone."""
        try:
            return await self.client.log(handle.namespace, pod, container, tail)
        except NotFound:
            run = self._run_of(handle)
            if not run:  # the Job is gone too: no run to look in
                raise
            kept = self.logkeeper.path(handle.study, handle.name, run, pod, container)
            # The kept copy is complete once its follow has read the end of the stream.
            await self.logkeeper.wait(kept, self._options.timeout)
            try:
                text = await asyncio.to_thread(kept.read_text, errors="replace")
            except FileNotFoundError:
                raise NotFound(
                    404,
                    {"reason": "NotFound", "message": f'pod "{pod}" is gone; its log was not kept'},
                ) from None
            return _tail(text, tail)

    # ---- logs --------------------------------------------------------------------------

    async def logs(
        self,
        handle: StepHandle,
        *,
        container: str | None,
        tail: int | None,
        index: int | None = None,
    ) -> str:
        """Return the log of the step's pods (joined, newest pod last).

        Of a multi-node step, the launcher's pods (index 0: the program's output) unless
        ``index`` names another index or a ``container`` is named (then every index's).
        """
        main = self._main(handle)
        chosen = container or main
        live = await self._pod_names(handle)
        run = self._run_of(handle)
        kept = (
            await asyncio.to_thread(self.logkeeper.kept, handle.study, handle.name, run, chosen)
            if run
            else {}
        )
        # Pods deleted before this process saw them (an evicted pod, a walltime) come first.
        pods = [p for p in kept if p not in live] + live
        if top_kind(self._job_of(handle) or {}) is JOBSETS:
            pods = _of_jobset_index(pods, handle, container, index)
        else:
            pods = _of_index(pods, handle, container, index)
        container = chosen
        texts = []
        for pod in pods:
            try:
                texts.append(await self._pod_log(handle, pod, container, tail))
            except NotFound:
                continue
            except ApiError as exc:  # one node of several still starting: the others' logs
                if exc.status != 400 or "waiting to start" not in str(exc):
                    raise
        if not texts and handle.result.log_file and container == main:
            return await asyncio.to_thread(Path(handle.result.log_file).read_text)
        return _tail("".join(texts), tail)

    async def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        """Yield the step's log lines as written (follow=true), until its container ends."""
        pods: list[str] = []
        while not pods and not handle.done:
            pods = await self._pod_names(handle)
            if not pods:
                await _first_change(handle)
        for pod in pods[-1:]:
            params = {"container": container or self._main(handle), "follow": "true"}
            path = POD_LOGS.path(handle.namespace, pod)
            what = f'follow the log of pod "{pod}"'
            async for line in self.client.stream_lines(
                path, params, what=what, kind=POD_LOGS, verb="get"
            ):
                yield line.decode("utf-8", "replace")

    async def _pod_names(self, handle: StepHandle) -> list[str]:
        watch = await self._watch(handle.namespace, handle.study)
        pods = watch.step_pods(handle.object_name)
        ordered = sorted(pods.values(), key=lambda p: p["metadata"].get("creationTimestamp", ""))
        return [_name(p) for p in ordered] or list(handle.result.pods)

    # ---- plumbing ----------------------------------------------------------------------

    async def _watch(self, namespace: str, study: str) -> StudyWatch:
        """Return the (started, synced) watch of one namespace and study."""
        key = (namespace, label_value(study))
        async with self._watch_lock:
            watch = self._watches.get(key)
            if watch is None:
                events = self._event_watches.get(namespace)
                if events is None:
                    events = self._event_watches[namespace] = EventWatch(self, namespace)
                watch = StudyWatch(self, namespace, key[1], events)
                self._watches[key] = watch
        await watch.synced()
        return watch

    async def _follow_queue(self, namespace: str) -> None:
        """Watch the Workloads of ``namespace``, once, if the cluster serves Kueue (asked once).

        Returns once the first list is applied, so ``attach`` (``k8sjobs status``) shows
        Kueue's reasons at once; bounded by ``connect_timeout``, after which the steps are
        followed from their Jobs until the watch catches up.
        """
        async with self._watch_lock:
            if self._kueue is None:
                self._kueue = await kueue_served(self.client)
            workloads = self._workload_watches.get(namespace)
            if self._kueue is KueueApi.SERVED and workloads is None:
                workloads = self._workload_watches[namespace] = WorkloadWatch(
                    self.client,
                    namespace,
                    lambda uid: self._workload_changed(namespace, uid),
                    self.watch_policy(),
                )
        if workloads is not None and not workloads.informer.synced.is_set():
            await self._first_workloads(namespace, workloads)

    async def _first_workloads(self, namespace: str, workloads: WorkloadWatch) -> None:
        """Wait for ``namespace``'s first Workload list, within one ``connect_timeout`` shared
        by every step sent meanwhile; past it, one WARNING says on what it waited, in the
        server's words, and the steps go on, followed from their Jobs until the list comes."""
        loop = asyncio.get_running_loop()
        due = self._workloads_due.setdefault(namespace, loop.time() + self._options.connect_timeout)
        if loop.time() >= due:
            return
        try:
            async with asyncio.timeout_at(due):
                await workloads.informer.synced.wait()
        except TimeoutError:
            if namespace in self._workloads_said:
                return  # another step's wait said it
            self._workloads_said.add(namespace)
            why = self.client.refusals.get(WORKLOADS.plural) or "no answer"
            log.warning(
                'Kueue\'s Workloads in namespace "%s" were not listed within %g s '
                "(connect_timeout; %s): queued steps are followed from their Jobs until "
                "they are, and why a step waits is shown then",
                namespace,
                self._options.connect_timeout,
                why,
            )

    def _workload_changed(self, namespace: str, uid: str) -> None:
        for (where, _), watch in self._watches.items():
            if where == namespace:
                watch.workload_changed(uid)

    def _admission(self, namespace: str, job: Mapping[str, Any]) -> Admission | None:
        workloads = self._workload_watches.get(namespace)
        if workloads is None:
            return None
        return workloads.of(str(job["metadata"].get("uid") or ""))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _queued(job: Mapping[str, Any]) -> bool:
    """Return whether ``job`` (a Job, JobSet or MiniCluster, rendered or watched) is queued."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    jobs = (job.get("spec") or {}).get("jobLabels") or {}
    return QUEUE_LABEL in labels or QUEUE_LABEL in jobs


def _check_api_bounds(connect: float, outage: float | None) -> None:
    """Refuse bounds on reaching the API server that would fail at once or never."""
    if not (isinstance(connect, (int, float)) and connect > 0):
        raise ValueError(
            f"connect_timeout must be a number of seconds above 0 (not {connect!r}); try 10"
        )
    if outage is not None and not (isinstance(outage, (int, float)) and outage > 0):
        raise ValueError(
            f"outage_timeout must be a number of seconds above 0, or None to wait for as long "
            f"as it takes (not {outage!r}); try 900"
        )


def _check_pending_timeout(value: float | None) -> float | None:
    """Return ``value`` if it is a positive number of seconds or None; refuse it otherwise."""
    if value is not None and not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(
            f"pending_timeout must be a number of seconds above 0, or None to wait for as "
            f"long as it takes (not {value!r}); try 3600"
        )
    return value


def _check_watch_bounds(idle: float, relist_interval: float | None) -> None:
    """Refuse watch bounds that would make a watch relist all the time, or never notice."""
    if not idle > 0:
        raise ValueError(f"watch_idle must be a number of seconds above 0 (not {idle!r}); try 120")
    if relist_interval is not None and not relist_interval > 0:
        raise ValueError(
            f"relist_interval must be a number of seconds above 0, or None for no periodic relist "
            f"(not {relist_interval!r}); try 900"
        )


def _of_index(
    pods: list[str], handle: StepHandle, container: str | None, index: int | None
) -> list[str]:
    """Return the pods whose log ``logs`` reads: an indexed step's pod names carry their
    index (``<job>-<index>-<suffix>``); by default the launcher's, index 0."""
    if index is None and container is not None:
        return pods
    wanted = f"{handle.object_name}-{0 if index is None else index}-"
    chosen = [p for p in pods if p.startswith(wanted)]
    if index is None:
        return chosen or pods  # not an indexed step: every pod, as before
    if not chosen and pods:
        raise ValueError(f'Step "{handle.name}" has no pod of index {index}')
    return chosen


def _of_jobset_index(
    pods: list[str], handle: StepHandle, container: str | None, index: int | None
) -> list[str]:
    """Return the pods whose log ``logs`` reads of a JobSet step: the launcher's by default
    (rank host 0), ``index`` i the i-th host of its hostfile (a worker's pod)."""
    if index is None and container is not None:
        return pods
    name = handle.object_name
    launcher = [p for p in pods if p.startswith(f"{name}-{LAUNCHER}-0-0-")]
    if launcher:  # launch: ssh, or one node: the launcher is host 0, then the workers
        if not index:
            return launcher
        wanted = f"{name}-{WORKERS}-0-{index - 1}-"
    else:  # launch: none (or no launcher yet): the workers' indexes are the step's
        wanted = f"{name}-{WORKERS}-0-{index or 0}-"
    chosen = [p for p in pods if p.startswith(wanted)]
    if not chosen and pods and index:
        gone = ""
        if launcher and handle.state is StepState.SUCCEEDED:
            gone = (
                " now: a JobSet that succeeded deletes its workers' pods (read them while it runs)"
            )
        raise ValueError(f'Step "{handle.name}" has no pod of index {index}{gone}')
    return chosen


def _tag_outputs(job: dict[str, Any]) -> dict[str, str]:
    raw = (job["metadata"].get("annotations") or {}).get(ANNOTATION_OUTPUTS)
    return dict(json.loads(raw)) if raw else {}


def _succeeded_first(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: (p.get("status") or {}).get("phase") != "Succeeded")


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def _tail(text: str, tail: int | None) -> str:
    return text if tail is None else "".join(text.splitlines(keepends=True)[-tail:])


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def _first_change(handle: StepHandle) -> None:
    changed = asyncio.Event()
    callback: Callable[[StepHandle], None] = lambda _h: changed.set()  # noqa: E731
    handle.add_listener(callback)
    await changed.wait()


def _has_walltime(job: dict[str, Any] | None) -> bool:
    """Return whether a cached Job has a walltime (its pods are deleted when it runs out)."""
    return bool(job and (job.get("spec") or {}).get("activeDeadlineSeconds"))


def _keep(job: Mapping[str, Any]) -> bool:
    """Return False: an ended Job of the same spec is adopted, not run again."""
    return False


#: The pod condition a kubelet sets once the pod's sandbox and volumes are ready.
_MOUNTED = "PodReadyToStartContainers"


def _mounted(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Return whether one of a Job's pods got past mounting its volumes: then its step's
    ConfigMap, created after every other object of the step, exists."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Running", "Succeeded"):
            return True
        for condition in status.get("conditions") or ():
            if (condition.get("type"), condition.get("status")) == (_MOUNTED, "True"):
                return True
    return False
