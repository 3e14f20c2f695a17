"""A JobSet controller for the fake cluster: JobSet -> child Jobs + headless Service.

Active once the JobSet CRD (`jobset_crd()`, jobset.x-k8s.io/v1alpha2) is installed; without
it the group is not served, as on a cluster without JobSet. It plays the v0.13 controller and
its webhooks as shared/k8s-reference/jobset-*.json record them:

- defaults (the mutating webhook): successPolicy All, startupPolicy AnyOrder, each replicated
  Job's groupName ``default``, completionMode Indexed and pod restartPolicy OnFailure,
  network.enableDNSHostnames and publishNotReadyAddresses true, failurePolicy.restartStrategy
  Recreate, rule names ``failurePolicyRule<i>``; a JobSet pod gets the
  ``jobset.sigs.k8s.io/priority`` label; the validating webhook's refusal of a JobSet whose
  child Job or pod names would pass 63 characters, whose first replicated Job has dependsOn
  or whose dependsOn, successPolicy or failurePolicy names a replicated Job not before it,
  or whose failure policy rules have a bad or repeated name or an unknown Job failure reason
  (422, ``admission webhook "vjobset.kb.io" denied the request: ...``);
- per replicated Job, ``replicas`` Jobs ``<jobset>-<rj>-<i>`` with the ``jobset.sigs.k8s.io/*``
  labels and annotations on the Job and its pod template (``job-key`` is the SHA-1 of
  ``<namespace>/<job>``), the subdomain on the pods, and the JobSet as controller; a headless
  Service named after the subdomain selecting ``jobset-name``;
- ``dependsOn``: a replicated Job's Jobs are created once each one it names is Ready (every Job
  ready, failed or succeeded; a Job is ready when ready + succeeded pods reach
  min(parallelism, completions)) or Complete;
- ``status.replicatedJobsStatus`` (ordered by name, descending, as the controller sorts it),
  ``restarts``, ``restartsCountTowardsMax``, ``terminalState`` and the conditions with the
  controller's types, reasons, messages and order, and its Events (reporting component
  ``jobset``);
- successPolicy (All/Any over targetReplicatedJobs): Completed, then the still-active Jobs
  are deleted (foreground);
- failurePolicy: the first rule matching a failed Job (onJobFailureReasons,
  onJobFailureMessagePatterns, targetReplicatedJobs) applies its action (FailJobSet,
  RestartJobSet, RestartJobSetAndIgnoreMaxRestarts); none matching, RestartJobSet. A restart
  counts in ``status.restarts``, deletes every Job of the previous attempt and recreates them
  with ``restart-attempt`` one higher; past maxRestarts the JobSet fails ``ReachedMaxRestarts``.
  Without a failurePolicy a failed Job fails the JobSet (``FailedJobs``);
- ``spec.suspend``: Jobs are created suspended, running ones suspended; on resume the Jobs'
  pod templates take the replicated Job's labels, annotations, nodeSelector and tolerations
  (what Kueue changes while a JobSet waits) and are unsuspended;
- ``ttlSecondsAfterFinished``: a finished JobSet is deleted (foreground) that long after.

Not emulated: startupPolicy InOrder, coordinator, RestartJob actions and in-place restarts,
volumeClaimPolicies, exclusive placement, and of the validating
webhook its checks of those, of groupName, managedBy and the subdomain.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import re
from typing import Any

from ..apiserver import errors as _errors
from ..apiserver.errors import ApiError
from ..apiserver.events import record_event
from ..apiserver.resources import Resource, cause
from ..apiserver.store import Event, Obj, Store, now_rfc3339

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
API_VERSION = f"{GROUP}/{VERSION}"
PREFIX = "jobset.sigs.k8s.io/"
NAME_KEY = f"{PREFIX}jobset-name"
UID_KEY = f"{PREFIX}jobset-uid"
RJ_KEY = f"{PREFIX}replicatedjob-name"
RESTARTS_KEY = f"{PREFIX}restart-attempt"
PRIORITY_KEY = f"{PREFIX}priority"
CONTROLLER_NAME = f"{PREFIX}jobset-controller"
_COMPONENT = "jobset"
_FINISHED = ("Complete", "Failed")


# ---------------------------------------------------------------------- the CRD


def _strings() -> Obj:
    return {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"}


def _int32(minimum: int | None = None) -> Obj:
    schema: Obj = {"type": "integer", "format": "int32"}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


def _job_template() -> Obj:
    """The batch/v1 JobTemplateSpec: its Job is validated as a Job when the controller
    creates it, so only its outline is typed here."""
    meta = {
        "type": "object",
        "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "type": "object",
        "properties": {
            "metadata": meta,
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def _spec_schema() -> Obj:
    replicated_job = {
        "type": "object",
        "required": ["name", "template"],
        "properties": {
            "name": {"type": "string"},
            "groupName": {"type": "string", "default": "default"},
            "replicas": {**_int32(0), "default": 1},
            "template": _job_template(),
            "dependsOn": {
                "type": "array",
                "maxItems": 5,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name", "status"],
                    "properties": {
                        "name": {"type": "string"},
                        "status": {"type": "string", "enum": ["Ready", "Complete"]},
                    },
                },
            },
        },
    }
    rule = {
        "type": "object",
        "required": ["action", "name"],
        "properties": {
            "name": {"type": "string"},
            "action": {
                "type": "string",
                "enum": [
                    "FailJobSet",
                    "RestartJobSet",
                    "RestartJobSetAndIgnoreMaxRestarts",
                    "RestartJob",
                    "RestartJobAndIgnoreMaxRestarts",
                ],
            },
            "onJobFailureReasons": _strings(),
            "onJobFailureMessagePatterns": _strings(),
            "targetReplicatedJobs": _strings(),
        },
    }
    return {
        "type": "object",
        "properties": {
            "replicatedJobs": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": replicated_job,
            },
            "network": {
                "type": "object",
                "properties": {
                    "enableDNSHostnames": {"type": "boolean"},
                    "subdomain": {"type": "string"},
                    "publishNotReadyAddresses": {"type": "boolean"},
                },
            },
            "successPolicy": {
                "type": "object",
                "required": ["operator"],
                "properties": {
                    "operator": {"type": "string", "enum": ["All", "Any"]},
                    "targetReplicatedJobs": _strings(),
                },
            },
            "failurePolicy": {
                "type": "object",
                "properties": {
                    "maxRestarts": _int32(),
                    "restartStrategy": {
                        "type": "string",
                        "enum": ["Recreate", "BlockingRecreate", "InPlaceRestart"],
                        "default": "Recreate",
                    },
                    "rules": {"type": "array", "items": rule},
                },
            },
            "startupPolicy": {
                "type": "object",
                "required": ["startupPolicyOrder"],
                "properties": {
                    "startupPolicyOrder": {"type": "string", "enum": ["AnyOrder", "InOrder"]}
                },
            },
            "suspend": {"type": "boolean"},
            "managedBy": {"type": "string"},
            "ttlSecondsAfterFinished": _int32(0),
            "coordinator": {
                "type": "object",
                "required": ["replicatedJob"],
                "properties": {
                    "replicatedJob": {"type": "string"},
                    "jobIndex": {"type": "integer"},
                    "podIndex": {"type": "integer"},
                },
            },
        },
    }


def _status_schema() -> Obj:
    condition = {
        "type": "object",
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "minLength": 1, "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }
    counts = {key: _int32() for key in ("active", "failed", "ready", "succeeded", "suspended")}
    return {
        "type": "object",
        "properties": {
            "conditions": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": condition,
            },
            "restarts": _int32(),
            "restartsCountTowardsMax": _int32(),
            "terminalState": {"type": "string"},
            "replicatedJobsStatus": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["active", "failed", "name", "ready", "succeeded", "suspended"],
                    "properties": {"name": {"type": "string"}, **counts},
                },
            },
        },
    }


def jobset_crd() -> Obj:
    """Return the JobSet CustomResourceDefinition (v0.13's names, versions and printer
    columns; the schema is the subset of fields JobSet v1alpha2 defines that this fake
    emulates, each typed as in the published CRD)."""
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _spec_schema(),
            "status": _status_schema(),
        },
    }
    columns = [
        ("TerminalState", "string", ".status.terminalState", "Final state of JobSet"),
        ("Restarts", "string", ".status.restarts", "Number of restarts"),
        ("Completed", "string", '.status.conditions[?(@.type=="Completed")].status', ""),
        ("Suspended", "string", ".spec.suspend", "JobSet suspended"),
        ("Age", "date", ".metadata.creationTimestamp", "Time this JobSet was created"),
    ]
    printer = [
        {"name": n, "type": t, **({"description": d} if d else {}), "jsonPath": p}
        for n, t, p, d in columns
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "plural": PLURAL,
                "singular": "jobset",
                "kind": "JobSet",
                "listKind": "JobSetList",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer,
                }
            ],
        },
    }


# ---------------------------------------------------------------------- the webhooks


class JobSetWebhook:
    """The JobSet manager's mutating webhooks: JobSet defaults, the pods' priority label."""

    def mutate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Default a new JobSet as the webhook does; label a JobSet pod with its priority."""
        if res.group == GROUP and res.plural == PLURAL:
            _default(obj)
        elif res.plural == "pods" and not res.group:
            meta = obj.get("metadata") or {}
            spec = obj.get("spec") or {}
            notes = meta.get("annotations") or {}
            if NAME_KEY in notes and isinstance(spec.get("priority"), int):
                meta.setdefault("labels", {})[PRIORITY_KEY] = str(spec["priority"])

    def validate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Refuse a JobSet whose child Job or pod names would pass 63 characters (JobSet
        issues 132 and 302) or whose policies the controller could not follow, as the
        validating webhook (vjobset.kb.io) does."""
        if res.group != GROUP or res.plural != PLURAL:
            return
        name = str((obj.get("metadata") or {}).get("name") or "")
        spec = obj.get("spec") or {}
        causes = _name_causes(name, spec) + _policy_causes(spec)
        if causes:
            error = _errors.invalid("JobSet", name, causes, GROUP)
            message = f'admission webhook "vjobset.kb.io" denied the request: {error.message}'
            raise _errors.ApiError(error.code, error.reason, message, error.details)


_JOB_NAME_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
_POD_NAME_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)


def _name_causes(name: str, spec: Obj) -> list[dict[str, str]]:
    """Return the webhook's causes for names that would not fit a DNS-1035 label: the last
    Job ``<js>-<rj>-<replicas-1>``, and for an Indexed Job with completions the last pod
    ``<js>-<rj>-<replicas-1>-<completions-1>-abcde`` (its generated suffix)."""
    causes = []
    for i, rjob in enumerate(spec.get("replicatedJobs") or []):
        if not isinstance(rjob, dict):
            continue
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        last_job = f"{name}-{rjob.get('name', '')}-{int(rjob.get('replicas', 1)) - 1}"
        field = f"spec.replicatedJobs[{i}].name"
        invalid = f'Invalid value: "{last_job}": '
        if len(last_job) > 63:
            causes.append(cause("FieldValueInvalid", invalid + _JOB_NAME_TOO_LONG, field))
        completions = job_spec.get("completions")
        indexed = job_spec.get("completionMode") == "Indexed"
        if (
            indexed
            and isinstance(completions, int)
            and len(f"{last_job}-{completions - 1}-abcde") > 63
        ):
            causes.append(cause("FieldValueInvalid", invalid + _POD_NAME_TOO_LONG, field))
    return causes


#: A failure policy rule's name (jobset_webhook.go ``ruleNameFmt``): no '-' in it.
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
#: The Job failure reasons a rule may name (``validOnJobFailureReasons``).
_JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)


def _policy_causes(spec: Obj) -> list[dict[str, str]]:
    """Return the webhook's refusals of dependsOn, successPolicy and failurePolicy, worded
    as it words them: plain errors, which the API reports as internal errors of no field."""
    rjobs = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    errors = []
    if rjobs and rjobs[0].get("dependsOn"):
        errors.append("DependsOn can't be set for the first ReplicatedJob")
    seen: set[str] = set()
    for rjob in rjobs:
        seen.add(str(rjob.get("name")))
        for item in rjob.get("dependsOn") or []:
            if item.get("name") not in seen:
                errors.append(
                    f"replicatedJob: {rjob.get('name')} cannot depend on replicatedJob: "
                    f"{item.get('name')}"
                )
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in seen:
            errors.append(
                f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs"
            )
    errors += _rule_errors((spec.get("failurePolicy") or {}).get("rules") or [], seen)
    return [cause("InternalError", f"Internal error: {e}", "<nil>") for e in errors]


def _rule_errors(rules: list[Obj], rjobs: set[str]) -> list[str]:
    errors = []
    names: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        name = str(rule.get("name") or "")
        names.setdefault(name, []).append(index)
        if not 1 <= len(name) <= 128:
            errors.append(
                f"invalid failure policy rule name of length {len(name)}, the rule name must "
                "be at least 1 characters long and at most 128 characters long"
            )
        if not _RULE_NAME.fullmatch(name):
            errors.append(
                f"invalid failure policy rule name '{name}', a failure policy rule name must "
                "start with an alphabetic character, optionally followed by a string of "
                "alphanumeric characters or '_,:', and must end with an alphanumeric "
                "character or '_'"
            )
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in rjobs:
                errors.append(
                    f"invalid replicatedJob name '{target}' in failure policy does not "
                    "appear in .spec.ReplicatedJobs"
                )
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in _JOB_FAILURE_REASONS:
                errors.append(
                    f"invalid job failure reason '{reason}' in failure policy is not a "
                    "recognized job failure reason"
                )
    for name, indexes in names.items():
        if len(indexes) > 1:
            errors.append(
                "rule names are not unique, rules with indices "
                f"[{' '.join(map(str, indexes))}] all have the same "
                f"name '{name}'"
            )
    return errors


def _default(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        if not isinstance(rjob, dict):
            continue
        rjob.setdefault("groupName", "default")
        rjob.setdefault("replicas", 1)
        template = rjob.setdefault("template", {})
        template.setdefault("metadata", {})
        job_spec = template.setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod = job_spec.setdefault("template", {})
        pod.setdefault("metadata", {})
        pod_spec = pod.setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure")
        for container in pod_spec.get("containers") or []:
            container.setdefault("resources", {})
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    policy = spec.get("failurePolicy")
    if isinstance(policy, dict):
        policy.setdefault("restartStrategy", "Recreate")
        for i, rule in enumerate(policy.get("rules") or []):
            if isinstance(rule, dict) and not rule.get("name"):
                rule["name"] = f"failurePolicyRule{i}"


# ---------------------------------------------------------------------- the controller


class JobSetController:
    """Reconciles JobSets into Jobs and a Service, and their Jobs' outcomes into status."""

    def __init__(
        self, store: Store, instance: str = "jobset-fake", time_scale: float = 1.0
    ) -> None:
        self.store = store
        self.instance = instance
        #: multiplies ttlSecondsAfterFinished, as the Job controller's `time_scale` does.
        self.time_scale = time_scale
        self._ttl_armed: set[str] = set()  # the JobSets (uids) whose deletion is scheduled
        # The Jobs as the controller's informer has seen them, event by event: a reconcile
        # sees each status the job controller wrote, not only the latest.
        self._jobs: dict[str, dict[str, Obj]] = {}  # by the JobSet's uid, then the Job's
        store.listen(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource == PLURAL:
            self._later(self._run, (event.namespace, event.obj["metadata"]["name"]))
        elif event.resource == "jobs" and _controller_ref(event.obj) is not None:
            self._later(self._observe, event.type, event.obj)

    def _later(self, callback: Any, *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: the cluster is not running
            asyncio.get_running_loop().call_soon(callback, *args)

    def _observe(self, kind: str, job: Obj) -> None:
        """Take a Job event into the cache, then reconcile its JobSet on that view."""
        owner = _controller_ref(job)
        assert owner is not None  # only such Jobs are observed
        jobs = self._jobs.setdefault(str(owner.get("uid")), {})
        if kind == "DELETED":
            jobs.pop(job["metadata"]["uid"], None)
            if not jobs:
                del self._jobs[str(owner.get("uid"))]
        else:
            jobs[job["metadata"]["uid"]] = job
        self._run((job["metadata"]["namespace"], str(owner["name"])))

    def _run(self, key: tuple[str, str]) -> None:
        with contextlib.suppress(ApiError):  # gone meanwhile, or its namespace is
            self.reconcile(*key)

    def reconcile(self, namespace: str, name: str) -> None:
        """Bring a JobSet's Jobs, Service and status to what the JobSet controller makes."""
        js = self.store.get(PLURAL, namespace, name)
        if js is None or js["metadata"].get("deletionTimestamp"):
            return
        spec = js.get("spec") or {}
        if spec.get("managedBy") not in (None, CONTROLLER_NAME):
            return  # another controller's (MultiKueue)
        status = copy.deepcopy(js.get("status") or {})
        status.setdefault("restarts", 0)
        events: list[tuple[str, str, str]] = []
        jobs = _classify(self._owned(js), status["restarts"])
        status["replicatedJobsStatus"] = _replicated_statuses(spec, jobs)
        if _finished(status):
            self._delete(jobs["active"])
            self._arm_ttl(js)
        else:
            self._delete(jobs["previous"])
            self._progress(js, status, jobs, events)
        self._write(js, status, events)

    def _progress(
        self, js: Obj, status: Obj, jobs: dict[str, list[Obj]], events: list[Any]
    ) -> None:
        spec = js.get("spec") or {}
        suspended = bool(spec.get("suspend"))
        if not suspended and _all_ready(spec, status["replicatedJobsStatus"]):
            _restarting_false(status, "JobsReady", "all jobs are ready", events)
        if jobs["failed"]:
            _failure_policy(spec, status, jobs["failed"], events)
            return
        if jobs["successful"] and _succeeded(spec, jobs["successful"]):
            _set_condition(status, _cond("Completed", "True", *_COMPLETED), "Normal", events)
            _restarting_false(status, "JobSetCompleted", _COMPLETED[1], events)
            status["terminalState"] = "Completed"
            return
        if (spec.get("network") or {}).get("enableDNSHostnames"):
            self._service(js)
        self._create_jobs(js, status, jobs)
        if suspended:
            self._suspend(jobs["active"])
            _set_condition(
                status,
                _cond("Suspended", "True", "SuspendedJobs", "jobset is suspended"),
                "Normal",
                events,
            )
            _restarting_false(status, "JobSetSuspended", "jobset is suspended", events)
        else:
            self._resume(js, jobs["active"], status["replicatedJobsStatus"])
            _set_condition(
                status,
                _cond("Suspended", "False", "ResumeJobs", "jobset is resumed"),
                "Normal",
                events,
            )

    def _arm_ttl(self, js: Obj) -> None:
        """Delete a finished JobSet (foreground) ttlSecondsAfterFinished after it finished."""
        ttl = (js.get("spec") or {}).get("ttlSecondsAfterFinished")
        uid = js["metadata"]["uid"]
        if ttl is None or uid in self._ttl_armed:
            return
        self._ttl_armed.add(uid)
        meta = js["metadata"]
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(
                float(ttl) * self.time_scale, self._expire, meta["namespace"], meta["name"], uid
            )

    def _expire(self, namespace: str, name: str, uid: str) -> None:
        self._ttl_armed.discard(uid)
        current = self.store.get(PLURAL, namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            return
        with contextlib.suppress(ApiError):
            self.store.delete(PLURAL, namespace, name, propagation="Foreground")

    def _owned(self, js: Obj) -> list[Obj]:
        return list(self._jobs.get(js["metadata"]["uid"], {}).values())

    def _delete(self, jobs: list[Obj]) -> None:
        for job in jobs:
            meta = job["metadata"]
            current = self.store.get("jobs", meta["namespace"], meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                continue  # gone, or a new one of that name
            if current["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(ApiError):
                self.store.delete(
                    "jobs",
                    job["metadata"]["namespace"],
                    job["metadata"]["name"],
                    propagation="Foreground",
                )

    def _service(self, js: Obj) -> None:
        meta = js["metadata"]
        name = _subdomain(js)
        if self.store.get("services", meta["namespace"], name) is not None:
            return
        network = (js.get("spec") or {}).get("network") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "ownerReferences": [_owner(js)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {NAME_KEY: meta["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        try:
            self.store.create("services", meta["namespace"], body)
        except ApiError as error:
            self._event(js, "Warning", "HeadlessServiceCreationFailed", error.message)

    def _create_jobs(self, js: Obj, status: Obj, jobs: dict[str, list[Obj]]) -> None:
        spec = js.get("spec") or {}
        taken = {j["metadata"]["name"] for group in jobs.values() for j in group}
        blocking = (spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
        if blocking and jobs["previous"]:
            return
        replicas: dict[str, int] = {}
        for rjob in spec.get("replicatedJobs") or []:
            replicas[rjob["name"]] = int(rjob.get("replicas", 1))
            if not _dependencies_met(rjob, replicas, status["replicatedJobsStatus"]):
                continue
            for index in range(replicas[rjob["name"]]):
                job = _job(js, rjob, index, status["restarts"])
                name = job["metadata"]["name"]
                namespace = js["metadata"]["namespace"]
                if name in taken or self.store.get("jobs", namespace, name) is not None:
                    continue  # (the store: one created since the cache last heard)
                try:
                    self.store.create("jobs", js["metadata"]["namespace"], job)
                except ApiError as error:
                    message = f'job "{job["metadata"]["name"]}" creation failed with error: '
                    self._event(js, "Warning", "JobCreationFailed", message + error.message)
                    return

    def _suspend(self, active: list[Obj]) -> None:
        for job in active:
            if not job["spec"].get("suspend"):
                self._update_job(job, lambda j: j["spec"].__setitem__("suspend", True))

    def _resume(self, js: Obj, active: list[Obj], statuses: list[Obj]) -> None:
        spec = js.get("spec") or {}
        templates = {
            r["name"]: ((r.get("template") or {}).get("spec") or {}).get("template") or {}
            for r in spec.get("replicatedJobs") or []
        }
        replicas: dict[str, int] = {}
        for rjob in spec.get("replicatedJobs") or []:
            replicas[rjob["name"]] = int(rjob.get("replicas", 1))
            if not _dependencies_met(rjob, replicas, statuses):
                continue
            for job in active:
                if job["metadata"]["labels"].get(RJ_KEY) != rjob["name"]:
                    continue
                if job["spec"].get("suspend"):
                    self._unsuspend(job, templates[rjob["name"]])

    def _unsuspend(self, job: Obj, template: Obj) -> None:
        meta = job["metadata"]
        if (job.get("status") or {}).get("startTime"):
            cleared = copy.deepcopy(job)
            cleared["status"].pop("startTime", None)
            with contextlib.suppress(ApiError):
                self.store.update("jobs", meta["namespace"], cleared, subresource="status")

        def merge(updated: Obj) -> None:
            pod = updated["spec"].setdefault("template", {})
            pod_meta = pod.setdefault("metadata", {})
            pod_spec = pod.setdefault("spec", {})
            wanted_meta = template.get("metadata") or {}
            wanted_spec = template.get("spec") or {}
            for key in ("labels", "annotations"):
                if wanted_meta.get(key):
                    pod_meta[key] = {**(pod_meta.get(key) or {}), **wanted_meta[key]}
            if wanted_spec.get("nodeSelector"):
                pod_spec["nodeSelector"] = {
                    **(pod_spec.get("nodeSelector") or {}),
                    **wanted_spec["nodeSelector"],
                }
            for key in ("tolerations", "schedulingGates"):
                have = list(pod_spec.get(key) or [])
                have += [item for item in wanted_spec.get(key) or [] if item not in have]
                if have:
                    pod_spec[key] = have
            updated["spec"]["suspend"] = False

        self._update_job(job, merge)

    def _update_job(self, job: Obj, change: Any) -> None:
        meta = job["metadata"]
        current = self.store.get("jobs", meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        updated = copy.deepcopy(current)
        change(updated)
        with contextlib.suppress(ApiError):
            self.store.update("jobs", meta["namespace"], updated)

    def _write(self, js: Obj, status: Obj, events: list[tuple[str, str, str]]) -> None:
        if status == (js.get("status") or {}):
            return
        updated = dict(js)
        updated["status"] = _ordered(status)
        stored = self.store.update(
            PLURAL, js["metadata"]["namespace"], updated, subresource="status"
        )
        for kind, reason, message in events:
            self._event(stored, kind, reason, message)

    def _event(self, js: Obj, kind: str, reason: str, message: str) -> None:
        record_event(
            self.store,
            js,
            kind,
            reason,
            message,
            _COMPONENT,
            action="Reconciling",
            instance=self.instance,
        )


# ---------------------------------------------------------------------- pure helpers

_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
_STATUS_ORDER = (
    "conditions",
    "restarts",
    "restartsCountTowardsMax",
    "terminalState",
    "replicatedJobsStatus",
)


def _ordered(status: Obj) -> Obj:
    return {k: status[k] for k in _STATUS_ORDER if k in status} | {
        k: v for k, v in status.items() if k not in _STATUS_ORDER
    }


def _controller_ref(obj: Obj) -> Obj | None:
    """Return the object's controller reference when a JobSet is its controller."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "JobSet"
            and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
        ):
            return dict(ref)
    return None


def _owner(js: Obj) -> Obj:
    meta = js["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _subdomain(js: Obj) -> str:
    network = (js.get("spec") or {}).get("network") or {}
    return str(network.get("subdomain") or js["metadata"]["name"])


def _job_finished(job: Obj) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in _FINISHED and condition.get("status") == "True":
            return str(condition["type"])
    return ""


def _classify(jobs: list[Obj], restarts: int) -> dict[str, list[Obj]]:
    """Sort a JobSet's Jobs as the controller does: of an earlier attempt, active, failed,
    successful."""
    found: dict[str, list[Obj]] = {"previous": [], "active": [], "failed": [], "successful": []}
    for job in jobs:
        attempt = (job["metadata"].get("labels") or {}).get(RESTARTS_KEY, "0")
        if not str(attempt).isdigit() or int(attempt) < restarts:
            found["previous"].append(job)
            continue
        bucket = {"": "active", "Failed": "failed", "Complete": "successful"}[_job_finished(job)]
        found[bucket].append(job)
    return found


def _job_ready(job: Obj) -> bool:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    pods = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        pods = min(pods, int(spec["completions"]))
    return int(status.get("succeeded", 0)) + int(status.get("ready", 0)) >= pods


def _replicated_statuses(spec: Obj, jobs: dict[str, list[Obj]]) -> list[Obj]:
    counts = {
        r["name"]: dict.fromkeys(("active", "failed", "ready", "succeeded", "suspended"), 0)
        for r in spec.get("replicatedJobs") or []
    }
    for bucket, key in (("active", ""), ("failed", "failed"), ("successful", "succeeded")):
        for job in jobs[bucket]:
            row = counts.get((job["metadata"].get("labels") or {}).get(RJ_KEY, ""))
            if row is None:
                continue
            if key:
                row[key] += 1
                continue
            row["ready"] += _job_ready(job)
            row["active"] += int((job.get("status") or {}).get("active", 0)) > 0
            row["suspended"] += bool(job["spec"].get("suspend"))
    return [{"name": name, **counts[name]} for name in sorted(counts, reverse=True)]


def _find(statuses: list[Obj], name: str) -> Obj:
    return next((s for s in statuses if s["name"] == name), {})


def _dependencies_met(rjob: Obj, replicas: dict[str, int], statuses: list[Obj]) -> bool:
    for dependency in rjob.get("dependsOn") or []:
        found = _find(statuses, dependency["name"])
        want = replicas.get(dependency["name"], 0)
        if dependency.get("status") == "Complete" and found.get("succeeded", 0) != want:
            return False
        settled = found.get("failed", 0) + found.get("ready", 0) + found.get("succeeded", 0)
        if dependency.get("status") == "Ready" and settled != want:
            return False
    return True


def _all_ready(spec: Obj, statuses: list[Obj]) -> bool:
    total = sum(int(r.get("replicas", 1)) for r in spec.get("replicatedJobs") or [])
    return total == sum(int(s["ready"]) + int(s["succeeded"]) for s in statuses)


def _finished(status: Obj) -> bool:
    return any(
        c["type"] in ("Completed", "Failed") and c["status"] == "True"
        for c in status.get("conditions") or []
    )


def _succeeded(spec: Obj, successful: list[Obj]) -> bool:
    policy = spec.get("successPolicy") or {"operator": "All"}
    targets = policy.get("targetReplicatedJobs") or []
    matching = sum(
        1
        for job in successful
        if not targets or (job["metadata"].get("labels") or {}).get(RJ_KEY) in targets
    )
    if policy.get("operator") == "Any":
        return matching >= 1
    expected = sum(
        int(r.get("replicas", 1))
        for r in spec.get("replicatedJobs") or []
        if not targets or r["name"] in targets
    )
    return matching >= expected


def _cond(kind: str, status: str, reason: str, message: str) -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _set_condition(status: Obj, new: Obj, event_type: str, events: list[Any]) -> None:
    """Set a condition as the controller's updateCondition does; note its Event if it
    changed. A new condition is appended only when True; a status change moves
    lastTransitionTime, a reason or message change keeps it."""
    conditions = status.setdefault("conditions", [])
    found, changed = False, False
    for i, current in enumerate(conditions):
        if current["type"] != new["type"]:
            continue
        found = True
        if current["status"] != new["status"]:
            conditions[i] = _stamped(new, now_rfc3339())
            changed = True
        elif (current["reason"], current["message"]) != (new["reason"], new["message"]):
            conditions[i] = _stamped(new, current["lastTransitionTime"])
            changed = True
    if not found and new["status"] == "True":
        conditions.append(_stamped(new, now_rfc3339()))
        changed = True
    if not conditions:
        del status["conditions"]
    if changed:
        events.append((event_type, new["reason"], new["message"]))


def _stamped(condition: Obj, when: str) -> Obj:
    return {
        "lastTransitionTime": when,
        "message": condition["message"],
        "reason": condition["reason"],
        "status": condition["status"],
        "type": condition["type"],
    }


def _restarting_false(status: Obj, reason: str, message: str, events: list[Any]) -> None:
    _set_condition(status, _cond("RestartingJobSet", "False", reason, message), "Normal", events)


def _fail(status: Obj, reason: str, message: str, events: list[Any]) -> None:
    mark: list[Any] = []
    _set_condition(status, _cond("Failed", "True", reason, message), "Warning", mark)
    _restarting_false(status, "JobSetFailed", "jobset failed", events)
    events.extend(mark)  # the recorder delivered these two in this order
    status["terminalState"] = "Failed"


def _failure_time(job: Obj) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or "")
    return ""


def _failure(job: Obj) -> Obj:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return dict(condition)
    return {}


def _first_failed(jobs: list[Obj]) -> Obj:
    return min(jobs, key=_failure_time)


def _rule_applies(rule: Obj, job: Obj) -> bool:
    failure = _failure(job)
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and failure.get("reason") not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    message = str(failure.get("message") or "")
    if patterns and not any(_matches(p, message) for p in patterns):
        return False
    targets = rule.get("targetReplicatedJobs") or []
    parent = (job["metadata"].get("labels") or {}).get(RJ_KEY)
    return bool(parent) and (not targets or parent in targets)


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def _failure_policy(spec: Obj, status: Obj, failed: list[Obj], events: list[Any]) -> None:
    """Apply the failure policy to the first failed Job, as executeFailurePolicy does."""
    policy = spec.get("failurePolicy")
    if policy is None:
        name = _first_failed(failed)["metadata"]["name"]
        _fail(status, "FailedJobs", _first(_FAILED_JOBS, name), events)
        return
    rule, job = None, _first_failed(failed)
    for candidate in policy.get("rules") or []:
        matching = [j for j in failed if _failure(j) and _rule_applies(candidate, j)]
        if matching:
            rule, job = candidate, _first_failed(matching)
            break
    action = rule["action"] if rule else "RestartJobSet"
    name = job["metadata"]["name"]
    if action == "FailJobSet":
        message = _first("applying FailJobSet failure policy action", name)
        _fail(status, "FailJobSetFailurePolicyAction", message, events)
        return
    counts = action != "RestartJobSetAndIgnoreMaxRestarts"
    if counts and status.get("restartsCountTowardsMax", 0) >= int(policy.get("maxRestarts", 0)):
        _fail(status, "ReachedMaxRestarts", _first(_MAX_RESTARTS, name), events)
        return
    if action not in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
        return  # RestartJob needs a feature gate the recorded controller runs without
    message = _first(f"applying {action} failure policy action", name)
    reason = f"FailurePolicy_{rule['name']}" if rule else "DefaultFailurePolicy"
    status["restarts"] += 1
    if counts:
        status["restartsCountTowardsMax"] = status.get("restartsCountTowardsMax", 0) + 1
    events.append(("Warning", f"{action}FailurePolicyAction", message))
    _set_condition(status, _cond("RestartingJobSet", "True", reason, message), "Warning", events)


_FAILED_JOBS = "jobset failed due to one or more job failures"
_MAX_RESTARTS = "jobset failed due to reaching max number of restarts"


def _first(message: str, job: str) -> str:
    return f"{message} (first failed job: {job})"


def _job_key(namespace: str, job: str) -> str:
    return hashlib.sha1(f"{namespace}/{job}".encode()).hexdigest()


def _labels(js: Obj, rjob: Obj, index: int, restarts: int) -> dict[str, str]:
    """Return the labels (and, the same, annotations) the controller puts on a child Job
    and its pod template."""
    spec = js.get("spec") or {}
    rjobs = spec.get("replicatedJobs") or []
    group = str(rjob.get("groupName") or "default")
    name = f"{js['metadata']['name']}-{rjob['name']}-{index}"
    before = 0
    for other in rjobs:
        if other["name"] == rjob["name"]:
            break
        before += int(other.get("replicas", 1))
    in_group = [r for r in rjobs if str(r.get("groupName") or "default") == group]
    group_before = 0
    for other in in_group:
        if other["name"] == rjob["name"]:
            break
        group_before += int(other.get("replicas", 1))
    return {
        NAME_KEY: js["metadata"]["name"],
        UID_KEY: js["metadata"]["uid"],
        RJ_KEY: rjob["name"],
        RESTARTS_KEY: str(restarts),
        f"{PREFIX}replicatedjob-replicas": str(int(rjob.get("replicas", 1))),
        f"{PREFIX}global-replicas": str(sum(int(r.get("replicas", 1)) for r in rjobs)),
        f"{PREFIX}job-index": str(index),
        f"{PREFIX}job-key": _job_key(js["metadata"]["namespace"], name),
        f"{PREFIX}job-global-index": str(before + index),
        f"{PREFIX}group-name": group,
        f"{PREFIX}group-replicas": str(sum(int(r.get("replicas", 1)) for r in in_group)),
        f"{PREFIX}job-group-index": str(group_before + index),
    }


def _job(js: Obj, rjob: Obj, index: int, restarts: int) -> Obj:
    """Return the child Job ``<jobset>-<rj>-<index>`` as constructJob builds it."""
    template = copy.deepcopy(rjob.get("template") or {})
    meta = template.get("metadata") or {}
    job_spec = template.get("spec") or {}
    ours = _labels(js, rjob, index, restarts)
    pod = job_spec.setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **ours}
    if (js.get("spec") or {}).get("network", {}).get("enableDNSHostnames"):
        pod.setdefault("spec", {})["subdomain"] = _subdomain(js)
    job_spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{js['metadata']['name']}-{rjob['name']}-{index}",
            "namespace": js["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **ours},
            "annotations": {**(meta.get("annotations") or {}), **ours},
            "ownerReferences": [_owner(js)],
        },
        "spec": job_spec,
    }
