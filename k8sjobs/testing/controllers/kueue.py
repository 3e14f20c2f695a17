"""A small Kueue for the fake cluster: queueing, quota, admission and preemption of Jobs.

On when the cluster is made with ``kueue=True`` (`FakeCluster`, ``serve --kueue``): it installs
Kueue's CRDs (`kueue_api`) and then plays Kueue v0.20 as the recorded transcripts
(shared/k8s-reference/kueue-*.json) show it:

- its mutating webhook: a Job created with the ``kueue.x-k8s.io/queue-name`` label is
  suspended on create (the create response says so);
- the same for a JobSet with the label (with the JobSet CRD installed): one Workload with a
  podSet per replicated Job (replicas x parallelism pods), suspended and unsuspended through
  its ``spec.suspend`` (not recorded: its messages are the Job's);
- its job reconciler: one Workload per such Job, ``job-<name>-<hash>`` as Kueue names it,
  owned by the Job, labelled with its uid, one podSet ``main`` of ``parallelism`` pods, the
  priority of the WorkloadPriorityClass its ``kueue.x-k8s.io/priority-class`` label names;
- its scheduler: BestEffortFIFO by priority, quota per ClusterQueue, flavor and resource
  (nominal quota only: no cohorts, no borrowing), ``Misconfigured`` for a missing LocalQueue
  or ClusterQueue, ``WaitingForQuota`` with Kueue's message otherwise, admission that
  unsuspends the Job with the flavor's nodeLabels as nodeSelector, the podset/queue labels
  and the ``kueue.x-k8s.io/workload`` annotation;
- preemption ``withinClusterQueue: LowerPriority``: the lowest-priority admitted workloads
  are Evicted/Preempted, their Jobs re-suspended (the job controller deletes the pods, which
  the kubelet ends with 143, not counted failed), and once their pods are gone they give back
  their quota and are Requeued, to be admitted again when quota frees;
- PodsReady and Finished on the Workload, LocalQueue/ClusterQueue status, Kueue's Events.

Conditions are kept in one order (QuotaReserved, Evicted, Admitted, Preempted, Requeued,
Finished, PodsReady); on a real cluster PodsReady's place depends on which of two
controllers writes first. Not emulated: cohorts and borrowing, fair sharing, admission
checks, TAS, the visibility API, partial admission, waitForPodsReady timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import hashlib
import time
from fractions import Fraction
from typing import Any

from ..apiserver.errors import ApiError
from ..apiserver.events import record_event
from ..apiserver.podresources import ZERO, Quantity, Resources, pod_resources
from ..apiserver.resources import Resource
from ..apiserver.store import Event, Obj, Store, copy_obj
from . import kueue_api

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
PODSET = "main"
_ORDER = ("QuotaReserved", "Evicted", "Admitted", "Preempted", "Requeued", "Finished", "PodsReady")
_INJECTED = (
    "kueue.x-k8s.io/cluster-queue-name",
    "kueue.x-k8s.io/local-queue-name",
    "kueue.x-k8s.io/podset",
)
#: The kinds Kueue manages here: plural -> (kind, group); a JobSet needs the JobSet CRD.
_MANAGED = {"jobs": ("Job", "batch"), "jobsets": ("JobSet", "jobset.x-k8s.io")}
_PLURALS = {kind: plural for plural, (kind, _) in _MANAGED.items()}
_ADMISSION = "kueue-admission"
_JOBS = "batch/job-kueue-controller"
_NOT_READY = ("WaitForStart", "Not all pods are ready or succeeded")


class Kueue:
    """Kueue's webhook, job reconciler and scheduler, acting through the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.enabled = False
        self._pending_pass = False
        self._queued_at: dict[str, float] = {}
        #: Set once the store serves every Kueue kind (its CRDs are established).
        self.ready = asyncio.Event()
        store.listen(self._on_event)

    # ------------------------------------------------------------------ install

    def install(self) -> None:
        """Create Kueue's CRDs; from then on the webhook and controllers act."""
        self.enabled = True
        self.store.admission.append(self)
        for crd in kueue_api.crds():
            if self.store.get("customresourcedefinitions", "", crd["metadata"]["name"]) is None:
                self.store.create("customresourcedefinitions", "", crd)

    def established(self) -> bool:
        """Return whether the store serves every Kueue kind yet."""
        return all(plural in self.store.resources for plural, *_ in kueue_api.KINDS)

    # ------------------------------------------------------------------ webhook

    def mutate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Suspend a new Job that names a queue; default new queues (Kueue's webhooks)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        managed = _MANAGED.get(res.plural, ("", None))[1] == res.group
        if managed and labels.get(QUEUE_LABEL):
            obj.setdefault("spec", {})["suspend"] = True
        elif res.group == kueue_api.GROUP:
            kueue_api.defaults(res.kind, obj)

    def validate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Kueue's validating webhook refuses nothing the fake is asked to hold."""

    # ------------------------------------------------------------------ events

    def _on_event(self, event: Event) -> None:
        if not self.enabled:
            return
        if event.resource == "customresourcedefinitions" and self.established():
            self.ready.set()
        if event.resource in _MANAGED and _queue(event.obj):
            meta = event.obj["metadata"]
            if event.type == "ADDED":
                self._later(self._create_workload, event.resource, meta["namespace"], meta["name"])
            elif event.type == "MODIFIED":
                self._later(self._sync_job, event.resource, meta["namespace"], meta["name"])
        elif event.resource == "jobs" and event.type == "MODIFIED":
            for ref in event.obj["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "JobSet":  # a JobSet's progress is its Jobs'
                    self._later(self._sync_job, "jobsets", event.namespace, ref["name"])
        elif event.resource in ("localqueues", "clusterqueues") and event.type == "ADDED":
            self._later(self._init_queue, event.resource, event.namespace, event.obj)
        elif _being_deleted(event):
            self._later(self._release_deleted, event.namespace, event.obj["metadata"]["name"])

    def _later(self, callback: Any, *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: the cluster is not running
            asyncio.get_running_loop().call_soon(callback, *args)

    def _schedule_soon(self) -> None:
        if not self._pending_pass:
            self._pending_pass = True
            self._later(self._schedule)

    # ------------------------------------------------------------------ workloads

    def _create_workload(self, resource: str, namespace: str, name: str) -> None:
        job = self.store.get(resource, namespace, name)
        if job is None or self._workload_of(job) is not None:
            return
        meta = job["metadata"]
        priority_class = (meta.get("labels") or {}).get(PRIORITY_LABEL)
        spec: Obj = {
            "active": True,
            "podSets": _podsets(job),
            "priority": self._priority(priority_class),
            "queueName": _queue(job),
        }
        if priority_class:
            spec["priorityClassRef"] = {
                "group": kueue_api.GROUP,
                "kind": "WorkloadPriorityClass",
                "name": priority_class,
            }
        body: Obj = {
            "apiVersion": f"{kueue_api.GROUP}/{kueue_api.VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(name, meta["uid"], *_MANAGED[resource]),
                "namespace": namespace,
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "finalizers": [FINALIZER],
                "ownerReferences": [_owner(job)],
            },
            "spec": spec,
        }
        with contextlib.suppress(ApiError):
            created = self.store.create("workloads", namespace, body)
            self._queued_at[created["metadata"]["uid"]] = time.time()
            record_event(
                self.store,
                job,
                "Normal",
                "CreatedWorkload",
                f"Created Workload: {namespace}/{body['metadata']['name']}",
                _JOBS,
                action="CreatedWorkload",
                instance=f"{_JOBS}-fake",
            )
            self._schedule_soon()
            self._later(self._mark_not_ready, namespace, body["metadata"]["name"])

    def _priority(self, name: str | None) -> int:
        if not name:
            return 0
        found = self.store.get("workloadpriorityclasses", "", name)
        return int((found or {}).get("value") or 0)

    def _workload_of(self, job: Obj) -> Obj | None:
        uid = job["metadata"]["uid"]
        for workload in self.store.iter("workloads", job["metadata"]["namespace"]):
            labels = workload["metadata"].get("labels") or {}
            if labels.get(JOB_UID_LABEL) == uid:
                return workload
        return None

    def _mark_not_ready(self, namespace: str, name: str) -> None:
        workload = self.store.get("workloads", namespace, name)
        if workload is not None and _condition(workload, "PodsReady") is None:
            self._write(workload, [("PodsReady", "False", *_NOT_READY)])

    def _write(
        self,
        workload: Obj,
        conditions: list[tuple[str, str, str, str]],
        **status: Any,
    ) -> Obj:
        """Set conditions (type, status, reason, message) and status fields (None: drop)."""
        updated = copy_obj(workload)
        body = updated.setdefault("status", {})
        for kind, state, reason, message in conditions:
            _set(body, kind, state, reason, message, workload["metadata"].get("generation", 1))
        for key, value in status.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        body["conditions"] = sorted(body.get("conditions", []), key=lambda c: _rank(c["type"]))
        namespace = workload["metadata"]["namespace"]
        return self.store.update("workloads", namespace, updated, subresource="status")

    # ------------------------------------------------------------------ scheduling

    def _schedule(self) -> None:
        """Try every pending workload, highest priority first, then oldest (BestEffortFIFO)."""
        self._pending_pass = False
        pending = [w for w in self.store.iter("workloads") if _pending(w)]
        pending.sort(key=lambda w: (-int(w["spec"].get("priority") or 0), _created(w)))
        changed = False
        for workload in pending:
            changed = self._try_admit(workload) or changed
        if changed:
            self._update_queues()

    def _try_admit(self, workload: Obj) -> bool:
        namespace = workload["metadata"]["namespace"]
        queue_name = workload["spec"].get("queueName", "")
        local = self.store.get("localqueues", namespace, queue_name)
        if local is None:
            return self._misconfigured(workload, f"LocalQueue {queue_name} doesn't exist")
        cq_name = (local.get("spec") or {}).get("clusterQueue", "")
        cluster_queue = self.store.get("clusterqueues", "", cq_name)
        if cluster_queue is None:
            return self._misconfigured(workload, f"ClusterQueue {cq_name} doesn't exist")
        needs = _requests(workload)
        assignment, shortfall = self._assign(cluster_queue, needs, self._usage(cq_name))
        if assignment is not None:
            self._admit(workload, cluster_queue, needs, assignment)
            return True
        victims = self._victims(workload, cluster_queue, needs)
        if victims:
            for victim in victims:
                self._preempt(victim, workload, cq_name)
            message = f"{shortfall}. Pending the preemption of {len(victims)} workload(s)"
            return self._wait(workload, "WaitingForPreemptedWorkloads", message)
        return self._wait(workload, "WaitingForQuota", shortfall)

    def _misconfigured(self, workload: Obj, message: str) -> bool:
        return self._wait(workload, "Misconfigured", message, warn=False)

    def _wait(self, workload: Obj, reason: str, message: str, *, warn: bool = True) -> bool:
        """Record why a workload waits; once per cause, as Kueue's requeue does."""
        current = _condition(workload, "QuotaReserved")
        if current is not None and (current["reason"], current["message"]) == (reason, message):
            return False
        requests = None if reason == "Misconfigured" else _resource_requests(workload)
        updated = self._write(
            workload,
            [
                ("QuotaReserved", "False", reason, message),
                ("Admitted", "False", "NoReservation", "The workload has no reservation"),
            ],
            resourceRequests=requests,
        )
        if warn:
            self._event(updated, "Warning", reason, message)
        return True

    def _usage(self, cq_name: str) -> dict[tuple[str, str], Quantity]:
        """Return the quota (flavor, resource) held by the ClusterQueue's reserving workloads."""
        used: dict[tuple[str, str], Quantity] = {}
        for workload in self.store.iter("workloads"):
            admission = (workload.get("status") or {}).get("admission")
            if not admission or admission.get("clusterQueue") != cq_name or _finished(workload):
                continue
            for podset in admission.get("podSetAssignments") or []:
                for resource, flavor in (podset.get("flavors") or {}).items():
                    amount = Quantity.parse((podset.get("resourceUsage") or {}).get(resource, 0))
                    key = (flavor, resource)
                    used[key] = used.get(key, ZERO) + amount
        return used

    def _assign(
        self, cluster_queue: Obj, needs: Resources, used: dict[tuple[str, str], Quantity]
    ) -> tuple[dict[str, str] | None, str]:
        """Return each resource's flavor, or None and Kueue's words for what is missing."""
        assignment: dict[str, str] = {}
        shortfall = ""
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
            covered = [r for r in group.get("coveredResources") or [] if r in needs]
            if not covered:
                continue
            chosen = None
            for flavor in group.get("flavors") or []:
                missing = _missing(flavor, covered, needs, used)
                if missing is None:
                    chosen = flavor["name"]
                    break
                if not shortfall:
                    resource, amount = missing
                    shortfall = (
                        f"couldn't assign flavors to pod set {PODSET}: insufficient unused quota "
                        f"for {resource} in flavor {flavor['name']}, {amount} more needed"
                    )
            if chosen is None:
                return None, shortfall
            assignment.update(dict.fromkeys(covered, chosen))
        for resource in needs:
            if resource not in assignment:
                message = (
                    f"couldn't assign flavors to pod set {PODSET}: resource {resource} "
                    "unavailable in ClusterQueue"
                )
                return None, message
        return assignment, ""

    def _victims(self, workload: Obj, cluster_queue: Obj, needs: Resources) -> list[Obj]:
        """Return the lower-priority workloads whose quota would let `workload` in."""
        preemption = (cluster_queue.get("spec") or {}).get("preemption") or {}
        if preemption.get("withinClusterQueue") not in (
            "LowerPriority",
            "LowerOrNewerEqualPriority",
        ):
            return []
        cq_name = cluster_queue["metadata"]["name"]
        priority = int(workload["spec"].get("priority") or 0)
        candidates = [
            w
            for w in self.store.iter("workloads")
            if ((w.get("status") or {}).get("admission") or {}).get("clusterQueue") == cq_name
            and not _finished(w)
            and int(w["spec"].get("priority") or 0) < priority
        ]
        if any(_is_true(w, "Evicted") for w in candidates):
            return []  # already waiting for one to give its quota back
        candidates.sort(key=lambda w: (int(w["spec"].get("priority") or 0), _created(w)))
        used = self._usage(cq_name)
        chosen: list[Obj] = []
        for victim in candidates:
            chosen.append(victim)
            for podset in victim["status"]["admission"].get("podSetAssignments") or []:
                for resource, flavor in (podset.get("flavors") or {}).items():
                    amount = Quantity.parse((podset.get("resourceUsage") or {}).get(resource, 0))
                    used[(flavor, resource)] = Quantity(
                        used[(flavor, resource)].value - amount.value
                    )
            if self._assign(cluster_queue, needs, used)[0] is not None:
                return chosen
        return []

    # ------------------------------------------------------------------ admission

    def _admit(
        self, workload: Obj, cluster_queue: Obj, needs: Resources, assignment: dict[str, str]
    ) -> None:
        cq_name = cluster_queue["metadata"]["name"]
        admission = {
            "clusterQueue": cq_name,
            "podSetAssignments": [
                {
                    "count": podset.get("count", 1),
                    "flavors": {r: f for r, f in sorted(assignment.items()) if r in usage},
                    "name": podset["name"],
                    "resourceUsage": {r: str(q) for r, q in sorted(usage.items())},
                }
                for podset in workload["spec"]["podSets"]
                for usage in [_podset_requests(podset)]
            ],
        }
        conditions = [
            ("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}"),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
        ]
        for kind in ("Evicted", "Preempted"):
            previous = _condition(workload, kind)
            if previous is not None and previous["status"] == "True":
                message = f"Previously: {previous['message']}"
                conditions.append((kind, "False", "QuotaReserved", message))
        updated = self._write(workload, conditions, admission=admission, resourceRequests=None)
        waited = round(time.time() - self._queued_at.get(workload["metadata"]["uid"], time.time()))
        self._event(
            updated,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was {waited}s",
        )
        self._event(
            updated,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
        )
        self._start_job(updated, cluster_queue, assignment)

    def _start_job(self, workload: Obj, cluster_queue: Obj, assignment: dict[str, str]) -> None:
        """Unsuspend the Job with the flavor's node labels, Kueue's labels and annotation."""
        job = self._job_of(workload)
        if job is None:
            return
        node_labels: dict[str, str] = {}
        for flavor_name in dict.fromkeys(assignment.values()):
            flavor = self.store.get("resourceflavors", "", flavor_name) or {}
            node_labels.update((flavor.get("spec") or {}).get("nodeLabels") or {})
        updated = copy_obj(job)
        for podset, template in _templates(updated):
            meta = template.setdefault("metadata", {})
            meta["labels"] = {
                **(meta.get("labels") or {}),
                _INJECTED[0]: cluster_queue["metadata"]["name"],
                _INJECTED[1]: workload["spec"].get("queueName", ""),
                _INJECTED[2]: podset,
            }
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                WORKLOAD_ANNOTATION: workload["metadata"]["name"],
            }
            if node_labels:
                pod_spec = template.setdefault("spec", {})
                pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_labels}
        updated["spec"]["suspend"] = False
        with contextlib.suppress(ApiError):
            stored = self.store.update(
                _PLURALS[job["kind"]], job["metadata"]["namespace"], updated, validate=False
            )
            message = f"Admitted by clusterQueue {cluster_queue['metadata']['name']}"
            self._job_event(stored, "Started", message)

    def _job_of(self, workload: Obj) -> Obj | None:
        for ref in workload["metadata"].get("ownerReferences") or []:
            if ref.get("kind") in _PLURALS:
                namespace = workload["metadata"]["namespace"]
                job = self.store.get(_PLURALS[ref["kind"]], namespace, ref["name"])
                if job is not None and job["metadata"]["uid"] == ref.get("uid"):
                    return job
        return None

    # ------------------------------------------------------------------ preemption

    def _preempt(self, victim: Obj, preemptor: Obj, cq_name: str) -> None:
        """Evict `victim` for `preemptor` and re-suspend its Job (its pods are then deleted)."""
        job_uid = (preemptor["metadata"].get("labels") or {}).get(JOB_UID_LABEL, "")
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, "
            f"JobUID: {job_uid}) due to prioritization in the ClusterQueue; preemptor path: "
            f"/{cq_name}; preemptee path: /{cq_name}"
        )
        stats = (victim.get("status") or {}).get("schedulingStats") or {}
        evictions = [dict(e) for e in stats.get("evictions") or []]
        for entry in evictions:
            if entry.get("reason") == "Preempted":
                entry["count"] = int(entry.get("count") or 0) + 1
                break
        else:
            evictions.append({"count": 1, "reason": "Preempted", "underlyingCause": ""})
        updated = self._write(
            victim,
            [
                ("Evicted", "True", "Preempted", message),
                ("Preempted", "True", "InClusterQueue", message),
            ],
            schedulingStats={"evictions": evictions},
        )
        high, low = (
            int(preemptor["spec"].get("priority") or 0),
            int(victim["spec"].get("priority") or 0),
        )
        priorities = (
            f"preemptor effective priority: {high} (base: {high}, boost: 0); "
            f"preemptee effective priority: {low} (base: {low}, boost: 0)"
        )
        victim_meta = victim["metadata"]
        self._event(
            preemptor,
            "Normal",
            "PreemptedWorkload",
            f"Preempted workload {victim_meta['namespace']}/{victim_meta['name']} (UID: "
            f"{victim_meta['uid']}) in ClusterQueue {cq_name}; {priorities}",
        )
        self._event(updated, "Normal", "EvictedDueToPreempted", message)
        self._event(updated, "Normal", "Preempted", f"{message}; {priorities}")
        job = self._job_of(victim)
        if job is not None:
            stopping = copy_obj(job)
            stopping["metadata"]["annotations"] = {
                **(stopping["metadata"].get("annotations") or {}),
                STOPPING_ANNOTATION: "true",
            }
            stopping["spec"]["suspend"] = True
            with contextlib.suppress(ApiError):
                plural = _PLURALS[job["kind"]]
                self.store.update(plural, job["metadata"]["namespace"], stopping, validate=False)

    def _finish_eviction(self, workload: Obj, job: Obj) -> None:
        """Once an evicted Job's pods are gone: restore its template, give the quota back."""
        restored = copy_obj(job)
        annotations = restored["metadata"].get("annotations") or {}
        annotations.pop(STOPPING_ANNOTATION, None)
        if annotations:
            restored["metadata"]["annotations"] = annotations
        else:
            restored["metadata"].pop("annotations", None)
        originals = {p["name"]: p.get("template") or {} for p in workload["spec"]["podSets"]}
        for podset, template in _templates(restored):
            _restore(template, originals.get(podset) or {})
        with contextlib.suppress(ApiError):
            plural = _PLURALS[job["kind"]]
            self.store.update(plural, job["metadata"]["namespace"], restored, validate=False)
        message = (_condition(workload, "Evicted") or {}).get("message", "")
        self._job_event(job, "Stopped", message)
        ran = _seconds_since((job.get("status") or {}).get("startTime"))
        past = int((workload.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        self._write(
            workload,
            [
                ("QuotaReserved", "False", "PendingEvaluation", message),
                ("Admitted", "False", "NoReservation", "The workload has no reservation"),
                ("Requeued", "True", "Preempted", message),
                (
                    "PodsReady",
                    "False",
                    "WaitForRecovery",
                    "At least one pod has failed, waiting for recovery",
                ),
            ],
            admission=None,
            accumulatedPastExecutionTimeSeconds=past + ran,
        )
        self._queued_at[workload["metadata"]["uid"]] = time.time()
        self._update_queues()
        self._schedule_soon()

    # ------------------------------------------------------------------ the Job's progress

    def _sync_job(self, resource: str, namespace: str, name: str) -> None:
        job = self.store.get(resource, namespace, name)
        if job is None or not _queue(job):
            return
        workload = self._workload_of(job)
        if workload is None or _finished(workload):
            return
        status = self._progress(job)
        if _job_finished(job):
            self._finish(workload, job)
        elif _is_true(workload, "Evicted") and (workload.get("status") or {}).get("admission"):
            gone = not status.get("active") and not status.get("terminating")
            if job["spec"].get("suspend") and gone:
                self._finish_eviction(workload, job)
            elif _is_true(workload, "PodsReady"):
                message = "At least one pod has failed, waiting for recovery"
                self._write(workload, [("PodsReady", "False", "WaitForRecovery", message)])
        elif (workload.get("status") or {}).get("admission") and not job["spec"].get("suspend"):
            count = sum(int(p.get("count") or 1) for p in workload["spec"]["podSets"])
            ready = int(status.get("ready") or 0) + int(status.get("succeeded") or 0)
            if ready >= count and not _is_true(workload, "PodsReady"):
                message = "All pods reached readiness and the workload is running"
                self._write(workload, [("PodsReady", "True", "Started", message)])
            elif (
                _condition(workload, "PodsReady") is None
                or (_condition(workload, "PodsReady") or {}).get("reason") == "WaitForRecovery"
            ):
                self._write(workload, [("PodsReady", "False", *_NOT_READY)])

    def _progress(self, owner: Obj) -> dict[str, int]:
        """Return a Job's pod counts, or the sums over a JobSet's Jobs."""
        if owner["kind"] == "Job":
            jobs = [owner]
        else:
            uid = owner["metadata"]["uid"]
            jobs = [
                j
                for j in self.store.iter("jobs", owner["metadata"]["namespace"])
                if any(r.get("uid") == uid for r in j["metadata"].get("ownerReferences") or [])
            ]
        keys = ("active", "terminating", "ready", "succeeded")
        return {k: sum(int((j.get("status") or {}).get(k) or 0) for j in jobs) for k in keys}

    def _finish(self, workload: Obj, job: Obj) -> None:
        failed = _job_condition(job, "Failed")
        if failed is not None:
            finished = ("Finished", "True", "Failed", failed.get("message", ""))
        else:
            finished = (
                "Finished",
                "True",
                "Succeeded",
                "Reached expected number of succeeded pods",
            )
        updated = self._write(workload, [finished])
        meta = updated["metadata"]
        self._job_event(
            job,
            "FinishedWorkload",
            f"Workload '{meta['namespace']}/{meta['name']}' is declared finished",
        )
        self._drop_finalizer(updated)
        self._update_queues()
        self._schedule_soon()

    def _drop_finalizer(self, workload: Obj) -> None:
        latest = self.store.get(
            "workloads", workload["metadata"]["namespace"], workload["metadata"]["name"]
        )
        if latest is None or FINALIZER not in (latest["metadata"].get("finalizers") or []):
            return
        updated = copy_obj(latest)
        finalizers = [f for f in updated["metadata"]["finalizers"] if f != FINALIZER]
        if finalizers:
            updated["metadata"]["finalizers"] = finalizers
        else:
            updated["metadata"].pop("finalizers", None)
        with contextlib.suppress(ApiError):
            self.store.update("workloads", latest["metadata"]["namespace"], updated, validate=False)

    def _release_deleted(self, namespace: str, name: str) -> None:
        """A Workload being deleted (its Job is gone) gives its quota back at once."""
        workload = self.store.get("workloads", namespace, name)
        if workload is not None:
            self._drop_finalizer(workload)
            self._update_queues()
            self._schedule_soon()

    # ------------------------------------------------------------------ queues

    def _init_queue(self, resource: str, namespace: str, obj: Obj) -> None:
        if resource == "clusterqueues":
            latest = self.store.get(resource, "", obj["metadata"]["name"])
            if latest is not None and FINALIZER not in (latest["metadata"].get("finalizers") or []):
                updated = copy_obj(latest)
                updated["metadata"]["finalizers"] = [
                    *(updated["metadata"].get("finalizers") or []),
                    FINALIZER,
                ]
                with contextlib.suppress(ApiError):
                    self.store.update(resource, "", updated, validate=False)
        self._update_queues()
        self._schedule_soon()

    def _update_queues(self) -> None:
        """Write each queue's status (Active, reserving/admitted/pending counts, usage)."""
        workloads = list(self.store.iter("workloads"))
        for cq in list(self.store.iter("clusterqueues")):
            name = cq["metadata"]["name"]
            mine = [w for w in workloads if _reserved_in(w) == name]
            locals_ = {
                (lq["metadata"]["namespace"], lq["metadata"]["name"])
                for lq in self.store.iter("localqueues")
                if (lq.get("spec") or {}).get("clusterQueue") == name
            }
            waiting = [w for w in workloads if _pending(w) and _queue_key(w) in locals_]
            usage = _flavor_usage(cq, mine, borrowed=True)
            status = _queue_status(mine, waiting, usage)
            status["conditions"] = [_active(cq, "Can admit new workloads")]
            self._write_queue("clusterqueues", cq, status)
        for lq in list(self.store.iter("localqueues")):
            key = (lq["metadata"]["namespace"], lq["metadata"]["name"])
            target = self.store.get(
                "clusterqueues", "", (lq.get("spec") or {}).get("clusterQueue", "")
            )
            mine = [w for w in workloads if _reserved_in(w) and _queue_key(w) == key]
            waiting = [w for w in workloads if _pending(w) and _queue_key(w) == key]
            usage = _flavor_usage(target, mine, borrowed=False) if target is not None else []
            status = _queue_status(mine, waiting, usage)
            if target is None:
                condition = _active(lq, "Can't submit new workloads to clusterQueue", False)
            else:
                condition = _active(lq, "Can submit new workloads to localQueue")
            status["conditions"] = [condition]
            self._write_queue("localqueues", lq, status)

    def _write_queue(self, resource: str, queue: Obj, status: Obj) -> None:
        old = queue.get("status") or {}
        for condition in status["conditions"]:
            for previous in old.get("conditions") or []:
                same = previous["type"] == condition["type"]
                if same and previous["status"] == condition["status"]:
                    condition["lastTransitionTime"] = previous["lastTransitionTime"]
        if old == status:
            return
        updated = dict(queue, status=status)
        namespace = queue["metadata"].get("namespace", "")
        with contextlib.suppress(ApiError):
            self.store.update(resource, namespace, updated, subresource="status", validate=False)

    # ------------------------------------------------------------------ events

    def _event(self, workload: Obj, kind: str, reason: str, message: str) -> None:
        record_event(
            self.store,
            workload,
            kind,
            reason,
            message,
            _ADMISSION,
            action=reason,
            instance=f"{_ADMISSION}-fake",
        )

    def _job_event(self, job: Obj, reason: str, message: str) -> None:
        record_event(
            self.store,
            job,
            "Normal",
            reason,
            message,
            _JOBS,
            action=reason,
            instance=f"{_JOBS}-fake",
        )


# ---------------------------------------------------------------------- pure helpers


def workload_name(job_name: str, job_uid: str, kind: str = "Job", group: str = "batch") -> str:
    """Return the name Kueue gives an owner's Workload: ``job-<name>-<5 hex of sha1>``."""
    text = f"{kind}\n{group}\n{job_name}\n{job_uid}"
    digest = hashlib.sha1(text.encode(), usedforsecurity=False)
    prefix = f"{kind.lower()}-{job_name}"[: 252 - 5]
    return f"{prefix}-{digest.hexdigest()[:5]}"


def _being_deleted(event: Event) -> bool:
    deleting = bool(event.obj["metadata"].get("deletionTimestamp"))
    return event.resource == "workloads" and event.type == "MODIFIED" and deleting


def _queue(job: Obj) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def _owner(job: Obj) -> Obj:
    return {
        "apiVersion": job["apiVersion"],
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": job["kind"],
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
    }


def _podsets(owner: Obj) -> list[Obj]:
    """Return an owner's podSets: a Job's one, or one per replicated Job of a JobSet."""
    if owner["kind"] == "Job":
        return [_podset(owner)]
    podsets = []
    for rjob in (owner.get("spec") or {}).get("replicatedJobs") or []:
        job = {"spec": copy_obj((rjob.get("template") or {}).get("spec") or {})}
        podset = _podset(job, rjob["name"])
        podset["count"] *= int(rjob.get("replicas", 1))
        podsets.append(podset)
    return podsets


def _templates(owner: Obj) -> list[tuple[str, Obj]]:
    """Return (podSet name, pod template) for each pod template of an owner, to change."""
    if owner["kind"] == "Job":
        return [(PODSET, owner["spec"]["template"])]
    return [
        (rjob["name"], rjob["template"]["spec"]["template"])
        for rjob in owner["spec"].get("replicatedJobs") or []
    ]


def _restore(template: Obj, original: Obj) -> None:
    """Take Kueue's labels, annotation and nodeSelector off a pod template."""
    meta = template.setdefault("metadata", {})
    meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _INJECTED}
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k != WORKLOAD_ANNOTATION}
    if kept:
        meta["annotations"] = kept
    else:
        meta.pop("annotations", None)
    selector = (original.get("spec") or {}).get("nodeSelector")
    if selector:
        template["spec"]["nodeSelector"] = dict(selector)
    else:
        template["spec"].pop("nodeSelector", None)


def _podset(job: Obj, name: str = PODSET) -> Obj:
    """Return the Job's one podSet: its pod template (the job controller's labels dropped)."""
    spec = job["spec"]
    template = copy_obj(spec["template"])
    meta = template.get("metadata") or {}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k not in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name")
    }
    template["metadata"] = {**{k: v for k, v in meta.items() if k != "labels"}, "labels": labels}
    count = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return {
        "count": count,
        "name": name,
        "template": template,
        "topologyRequest": {"podIndexLabel": "batch.kubernetes.io/job-completion-index"},
    }


def _podset_requests(podset: Obj) -> Resources:
    """Return what a podSet asks for in all: one pod's requests times its count."""
    per_pod, _ = pod_resources((podset.get("template") or {}).get("spec") or {})
    count = int(podset.get("count") or 1)
    return {name: Quantity(q.value * count, q.format) for name, q in per_pod.items()}


def _requests(workload: Obj) -> Resources:
    """Return what the workload asks for in all, over its podSets."""
    total: Resources = {}
    for podset in workload["spec"]["podSets"]:
        for name, q in _podset_requests(podset).items():
            total[name] = total[name] + q if name in total else q
    return total


def _resource_requests(workload: Obj) -> list[Obj]:
    found = []
    for podset in workload["spec"]["podSets"]:
        per_pod, _ = pod_resources((podset.get("template") or {}).get("spec") or {})
        resources = {k: str(v) for k, v in sorted(per_pod.items())}
        found.append({"name": podset["name"], "resources": resources})
    return found


def _missing(
    flavor: Obj, covered: list[str], needs: Resources, used: dict[tuple[str, str], Quantity]
) -> tuple[str, Quantity] | None:
    """Return the first resource this flavor lacks and by how much, or None when it fits."""
    quotas = {
        r["name"]: Quantity.parse(r.get("nominalQuota", 0)) for r in flavor.get("resources") or []
    }
    for resource in covered:
        nominal = quotas.get(resource, ZERO)
        free = nominal.value - used.get((flavor["name"], resource), ZERO).value
        need = needs[resource]
        if need.value > free:
            return resource, Quantity(need.value - max(free, Fraction(0)), need.format)
    return None


def _condition(obj: Obj, kind: str) -> Obj | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return dict(condition)
    return None


def _is_true(obj: Obj, kind: str) -> bool:
    return (_condition(obj, kind) or {}).get("status") == "True"


def _job_condition(job: Obj, kind: str) -> Obj | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind and condition["status"] == "True":
            return dict(condition)
    return None


def _job_finished(job: Obj) -> bool:
    if job["kind"] == "JobSet":
        return bool((job.get("status") or {}).get("terminalState"))
    return _job_condition(job, "Complete") is not None or _job_condition(job, "Failed") is not None


def _finished(workload: Obj) -> bool:
    return _is_true(workload, "Finished")


def _pending(workload: Obj) -> bool:
    status = workload.get("status") or {}
    return (
        not status.get("admission")
        and not _finished(workload)
        and bool(workload["spec"].get("active", True))
        and not workload["metadata"].get("deletionTimestamp")
    )


def _reserved_in(workload: Obj) -> str:
    if _finished(workload):
        return ""
    return str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")


def _queue_key(workload: Obj) -> tuple[str, str]:
    return workload["metadata"]["namespace"], workload["spec"].get("queueName", "")


def _created(workload: Obj) -> tuple[str, str]:
    meta = workload["metadata"]
    return meta.get("creationTimestamp", ""), meta.get("resourceVersion", "").rjust(20, "0")


def _rank(kind: str) -> int:
    return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)


def _set(body: Obj, kind: str, state: str, reason: str, message: str, generation: int) -> None:
    conditions = body.setdefault("conditions", [])
    now = _now()
    for condition in conditions:
        if condition["type"] == kind:
            if condition["status"] != state:
                condition["lastTransitionTime"] = now
            condition.update(
                status=state, reason=reason, message=message, observedGeneration=generation
            )
            return
    conditions.append(
        {
            "lastTransitionTime": now,
            "message": message,
            "observedGeneration": generation,
            "reason": reason,
            "status": state,
            "type": kind,
        }
    )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds_since(stamp: str | None) -> int:
    if not stamp:
        return 0
    started = _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    return max(0, int((_dt.datetime.now(_dt.UTC) - started).total_seconds()))


def _flavor_usage(cluster_queue: Obj, workloads: list[Obj], *, borrowed: bool) -> list[Obj]:
    """Return flavorsUsage as Kueue writes it: every flavor and covered resource, in order."""
    totals: dict[tuple[str, str], Quantity] = {}
    for workload in workloads:
        for podset in workload["status"]["admission"].get("podSetAssignments") or []:
            for resource, flavor in (podset.get("flavors") or {}).items():
                amount = Quantity.parse((podset.get("resourceUsage") or {}).get(resource, 0))
                key = (flavor, resource)
                totals[key] = totals[key] + amount if key in totals else amount
    usage: list[Obj] = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for resource in group.get("coveredResources") or []:
                entry: Obj = {
                    "name": resource,
                    "total": str(totals.get((flavor["name"], resource), ZERO)),
                }
                if borrowed:
                    entry = {"borrowed": "0", **entry}
                resources.append(entry)
            usage.append({"name": flavor["name"], "resources": resources})
    return usage


def _queue_status(mine: list[Obj], waiting: list[Obj], usage: list[Obj]) -> Obj:
    return {
        "admittedWorkloads": sum(1 for w in mine if _is_true(w, "Admitted")),
        "flavorsReservation": copy_obj({"u": usage})["u"],
        "flavorsUsage": usage,
        "pendingWorkloads": len(waiting),
        "reservingWorkloads": len(mine),
    }


def _active(queue: Obj, message: str, ready: bool = True) -> Obj:
    return {
        "lastTransitionTime": _now(),
        "message": message,
        "observedGeneration": queue["metadata"].get("generation", 1),
        "reason": "Ready" if ready else "ClusterQueueIsInactive",
        "status": "True" if ready else "False",
        "type": "Active",
    }
