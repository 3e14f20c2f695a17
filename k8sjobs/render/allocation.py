"""An allocation to the Kubernetes objects that hold its pods (pure: no I/O but one read).

``render_allocation`` turns an ``Allocation`` (``k8sjobs.steps.allocation``) into a
``Manifests`` the backends submit as they submit a step's: a ConfigMap holding the agent
script (key ``agent.py``, the text of ``k8sjobs/allocations/agent.py``, read as a package
resource: the one read this module does) and an Indexed Job of ``nodes`` pods, or a JobSet
of one replicated Job for ``target: jobset``. Each pod has one container, ``agent``, of the
allocation's image, running

    python3 /k8sjobs/agent/agent.py serve --dir /k8sjobs/alloc --cpu C --memory BYTES
        --gpus G --idle-timeout SECONDS --max-lifetime SECONDS

(``--memory 0``: the allocation sets none), with the ConfigMap mounted read-only at
``/k8sjobs/agent`` and an emptyDir at ``/k8sjobs/alloc``. The driver reaches each agent
through ``pods/exec`` (docs/allocations.md).

What keeps the pods honest without a driver:

- requests equal limits from the allocation's resources, as a step's main container;
- ``podFailurePolicy`` ignores a disrupted pod (evicted, preempted, node lost) and an agent
  stopped by SIGTERM (exit 143: its pod was deleted): either is replaced, not counted;
- ``backoffLimitPerIndex`` lets each pod's agent crash a few times (``AGENT_RESTARTS``)
  before that index fails, so one bad node does not end the others;
- ``activeDeadlineSeconds`` is ``max_lifetime`` + 120 s: a driver that died never leaves
  pods forever (the agent itself leaves after ``idle_timeout`` with nothing to run).

Names: ``allocation_object_name`` is ``alloc-<study>-<name>`` cut to fit, ended with a hash
of ten hex digits. Every name k8sjobs gives a step's objects ends in ``-`` and eight hex
digits (``k8sjobs.steps.names.job_name``, ``k8sjobs.render.jobset.object_name``), so an
allocation's objects can never share a step's name, whatever the step is called.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .._version import __version__
from ..steps.allocation import Allocation
from ..steps.failure import DISRUPTION_CONDITION
from ..steps.names import DNS_LABEL_MAX, JOB_NAME_MAX, label_value, slug
from ..steps.spec import CONFIGMAP_LIMIT, INT32_MAX, PRIORITY_LABEL, QUEUE_LABEL
from . import jobset
from .manifests import (
    ANNOTATION_STEP,
    ANNOTATION_STUDY,
    ANNOTATION_VERSION,
    AUTH_DIR,
    LABEL_HASH,
    LABEL_MANAGED,
    LABEL_STUDY,
    MAIN_CONTAINER,
    Manifests,
    Target,
    container_resources,
    placement_fields,
    restricted_context,
    restricted_pod_context,
)
from .podsecurity import check_restricted

__all__ = [
    "AGENT_CONTAINER",
    "AGENT_DIR",
    "AGENT_KEY",
    "AGENT_RESTARTS",
    "ALLOC_DIR",
    "LABEL_ALLOCATION",
    "REPLICATED_JOB",
    "agent_argv",
    "agent_script",
    "allocation_object_name",
    "held_pods",
    "render_allocation",
]

#: The label that names the allocation an object (ConfigMap, Job, JobSet, pod) holds.
LABEL_ALLOCATION = "k8sjobs.io/allocation"
# The agent's container has a step's name: every backend judges a Job by its main container
# (its exit code, usage, log), and an allocation is followed as a step is.
AGENT_CONTAINER = MAIN_CONTAINER
AGENT_KEY = "agent.py"
AGENT_DIR = "/k8sjobs/agent"
ALLOC_DIR = "/k8sjobs/alloc"
#: How many times each pod's agent may fail (crash, OOM) before its index is given up.
AGENT_RESTARTS = 3
#: The JobSet's one replicated Job, and so the middle of its child Job's and pods' names.
REPLICATED_JOB = "agents"
#: After max_lifetime the agent refuses new steps and stops the running ones 60 s later;
#: the Job's deadline leaves it that and a minute more before the pods are killed.
DEADLINE_GRACE = 120
#: The exit code of an agent stopped by SIGTERM (its pod deleted): replaced, not counted.
SIGTERM_EXIT = 143
_HASH_LEN = 10
_PREFIX = "alloc-"
#: The longest pod name a JobSet derives, ``-<rj>-<i>-<index>-xxxxx``, for any node count:
#: the name must not change with ``nodes`` (a restarted driver finds the old one by it).
_JOBSET_SUFFIX = len(f"-{REPLICATED_JOB}-0-{INT32_MAX - 1}-abcde")


def allocation_object_name(study: str, allocation: Allocation) -> str:
    """Return the name of ``allocation``'s ConfigMap and Job (or JobSet) in ``study``.

    A DNS label short enough for every name Kubernetes derives from it: an Indexed Job's
    pods' hostnames ``<job>-<index>`` (``JOB_NAME_MAX``, as a step's Job), a JobSet's
    ``<js>-agents-0-<index>-xxxxx``. It ends in ``-`` and ten hex digits, a hash of the
    study and allocation names as written: two allocations never share it, and no step's
    object (whose names end in eight) ever has it.
    """
    limit = JOB_NAME_MAX if allocation.target == "job" else DNS_LABEL_MAX - _JOBSET_SUFFIX
    room = limit - _HASH_LEN - 1
    name = allocation.name[: room - len(_PREFIX)].rstrip("-")
    study_room = room - len(_PREFIX) - len(name) - 1
    readable = _PREFIX + (f"{slug(study, study_room)}-" if study_room >= 3 else "") + name
    digest = hashlib.sha256(json.dumps(["allocation", study, allocation.name]).encode())
    return f"{readable}-{digest.hexdigest()[:_HASH_LEN]}"


def allocation_step_name(allocation: Allocation) -> str:
    """Return the name the allocation goes by among its study's steps ("allocation pool")."""
    return f"allocation {allocation.name}"


def held_pods(obj: Mapping[str, Any]) -> bool:
    """Return whether ``obj`` (a Job, JobSet, ConfigMap or pod) is an allocation's, not a
    step's: it carries the study's label as a step's objects do, so a study's watches and
    ``attach`` must tell them apart by ``LABEL_ALLOCATION``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return LABEL_ALLOCATION in labels


@functools.cache
def agent_script() -> str:
    """Return the agent's text (``k8sjobs/allocations/agent.py``), as the ConfigMap holds it."""
    files = importlib.resources.files("k8sjobs.allocations")
    return files.joinpath(AGENT_KEY).read_text(encoding="utf-8")


def _number(value: float) -> str:
    """Return a number as the agent's command line takes it: "300", "0.5", "2147483647".

    Never an exponent (``:g`` wrote 1e+06 for a 1,000,000-second lifetime).
    """
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _seconds(value: timedelta | None) -> str:
    """Return a duration in seconds for the agent's command line."""
    assert value is not None  # Allocation requires both durations
    return _number(value.total_seconds())


def agent_argv(
    allocation: Allocation, *, script: str = f"{AGENT_DIR}/{AGENT_KEY}", directory: str = ALLOC_DIR
) -> list[str]:
    """Return the command that serves ``allocation``'s steps in one pod (or local process).

    ``script`` and ``directory`` are where the agent and its state are; the local backend,
    which runs agents as processes, gives its own.
    """
    return [
        "python3",
        script,
        "serve",
        "--dir",
        directory,
        "--cpu",
        _number(allocation.pod_cpu),
        "--memory",
        str(allocation.pod_memory or 0),
        "--gpus",
        str(allocation.pod_gpus),
        "--idle-timeout",
        _seconds(allocation.idle_timeout),
        "--max-lifetime",
        _seconds(allocation.max_lifetime),
    ]


def render_allocation(allocation: Allocation, target: Target | None = None) -> Manifests:
    """Return the objects that hold ``allocation``'s pods for ``target`` (study, namespace).

    ``Manifests.configmap`` holds the agent, ``Manifests.job`` is the Indexed Job (a JobSet
    for ``target: jobset``); both carry the study's label, ``k8sjobs.io/allocation: <name>``
    and ``k8sjobs.io/spec-hash`` (on the pods too), a hash of what was rendered: a driver
    that finds a live allocation of the same hash adopts it, another it replaces.
    ``target`` defaults to ``Target()`` (study "default"); ``target.registry_secret`` is
    mounted read-only at ``/k8sjobs/registry-auth`` for the steps' pull and push, which run
    in the agent's container.
    """
    target = target or Target()
    name = allocation_object_name(target.study, allocation)
    namespace = allocation.namespace or target.namespace
    labels = {
        LABEL_MANAGED: "k8sjobs",
        LABEL_STUDY: label_value(target.study),
        LABEL_ALLOCATION: allocation.name,
    }
    # Named as its handle is: the backends follow it as they follow a step's Job, and
    # `k8sjobs status` lists it so (its pods' state is the allocation's).
    annotations = {
        ANNOTATION_STEP: allocation_step_name(allocation),
        ANNOTATION_STUDY: target.study,
        ANNOTATION_VERSION: __version__,
    }
    meta = {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    configmap = _configmap(allocation, meta)
    job = _job(allocation, target, meta)
    if allocation.security == "restricted":
        _check_restricted(allocation, job["spec"]["template"])
    if allocation.target == "jobset":
        job = _jobset(job)
    spec_hash = _spec_hash(configmap, job)
    configmap["metadata"]["labels"][LABEL_HASH] = spec_hash
    job["metadata"]["labels"][LABEL_HASH] = spec_hash
    for pod in _pod_templates(job):
        pod["metadata"]["labels"][LABEL_HASH] = spec_hash
    return Manifests(name, namespace, spec_hash, configmap, job)


def _copy(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {**meta, "labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])}


def _configmap(allocation: Allocation, meta: Mapping[str, Any]) -> dict[str, Any]:
    script = agent_script()
    size = len(AGENT_KEY) + len(script.encode())
    if size > CONFIGMAP_LIMIT:  # only a broken build could: the agent is ours
        raise ValueError(
            f'Allocation "{allocation.name}": the agent script takes {size} bytes, over the '
            f"{CONFIGMAP_LIMIT}-byte ConfigMap limit"
        )
    # Immutable, as a step's: a kubelet then keeps no watch on it.
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _copy(meta),
        "immutable": True,
        "data": {AGENT_KEY: script},
    }


def _container(allocation: Allocation, target: Target) -> dict[str, Any]:
    mounts = [
        {"name": "agent", "mountPath": AGENT_DIR, "readOnly": True},
        {"name": "alloc", "mountPath": ALLOC_DIR},
    ]
    if target.registry_secret:
        mounts.append({"name": "registry-auth", "mountPath": AUTH_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": AGENT_CONTAINER,
        "image": allocation.image,
        "command": agent_argv(allocation),
        "workingDir": ALLOC_DIR,
        "env": [
            {"name": "K8SJOBS_STUDY", "value": target.study.replace("$", "$$")},
            {"name": "K8SJOBS_ALLOCATION", "value": allocation.name},
            # The agent's few lines of its own reach the pod's log at once.
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "resources": container_resources(allocation.resources),
        "volumeMounts": mounts,
        # An agent that died says why in the pod's status (its last log lines).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if allocation.security == "restricted":
        container["securityContext"] = restricted_context()
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
    return container


def _pod_spec(allocation: Allocation, target: Target, name: str) -> dict[str, Any]:
    agent = {
        "name": name,
        "defaultMode": 0o444,
        "items": [{"key": AGENT_KEY, "path": AGENT_KEY, "mode": 0o444}],
    }
    volumes: list[dict[str, Any]] = [
        {"name": "agent", "configMap": agent},
        {"name": "alloc", "emptyDir": {}},
    ]
    if allocation.security == "restricted":
        volumes.append({"name": "tmp", "emptyDir": {}})
    if target.registry_secret:
        auth = {
            "secretName": target.registry_secret,
            "defaultMode": 0o444,
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
        }
        volumes.append({"name": "registry-auth", "secret": auth})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": allocation.service_account is not None,
        "containers": [_container(allocation, target)],
        "volumes": volumes,
    }
    spec |= placement_fields(
        allocation.service_account,
        allocation.node_selector,
        allocation.tolerations,
        allocation.image_pull_secrets,
    )
    if allocation.security == "restricted":
        spec["securityContext"] = restricted_pod_context()
    return spec


def _failure_policy() -> dict[str, Any]:
    """Return the podFailurePolicy: a lost pod or a deleted one is replaced, not counted."""
    on_sigterm = {"containerName": AGENT_CONTAINER, "operator": "In", "values": [SIGTERM_EXIT]}
    return {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
            },
            {"action": "Ignore", "onExitCodes": on_sigterm},
        ]
    }


def _job(allocation: Allocation, target: Target, meta: Mapping[str, Any]) -> dict[str, Any]:
    name = str(meta["name"])
    nodes = allocation.nodes
    assert allocation.max_lifetime is not None  # Allocation requires it
    deadline = math.ceil(allocation.max_lifetime.total_seconds()) + DEADLINE_GRACE
    spec: dict[str, Any] = {
        "backoffLimitPerIndex": AGENT_RESTARTS,
        "podFailurePolicy": _failure_policy(),
        "completions": nodes,
        "parallelism": nodes,
        "completionMode": "Indexed",
        "activeDeadlineSeconds": deadline,
        "template": {
            "metadata": {"labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])},
            "spec": _pod_spec(allocation, target, name),
        },
    }
    job_meta = _copy(meta)
    if allocation.queue:  # one Workload for the whole allocation, admitted once
        job_meta["labels"][QUEUE_LABEL] = allocation.queue
        if allocation.priority is not None:
            job_meta["labels"][PRIORITY_LABEL] = allocation.priority
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": spec}


def _jobset(job: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JobSet that stands for the Job: one replicated Job of the same pods.

    The child Job replaces its lost pods itself; a restart of the whole set would kill
    every pod's running steps, so the set never restarts (``maxRestarts: 0``).
    """
    spec = dict(job["spec"])
    suspend = spec.pop("suspend", False)
    template = spec["template"]
    replicated = {
        "name": REPLICATED_JOB,
        "replicas": 1,
        "template": {"metadata": {"labels": dict(template["metadata"]["labels"])}, "spec": spec},
    }
    body: dict[str, Any] = {
        "replicatedJobs": [replicated],
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
        "failurePolicy": {"maxRestarts": 0},
    }
    if suspend:
        body["suspend"] = True
    meta = _copy(job["metadata"])
    return {"apiVersion": jobset.API_VERSION, "kind": "JobSet", "metadata": meta, "spec": body}


def _pod_templates(top: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the pod template(s) of a rendered Job or JobSet."""
    if top["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in top["spec"]["replicatedJobs"]]
    return [top["spec"]["template"]]


def _check_restricted(allocation: Allocation, template: Mapping[str, Any]) -> None:
    """Raise ValueError, before anything is sent, if a restricted allocation's pod would be
    refused by a namespace enforcing the restricted Pod Security level."""
    problems = check_restricted(template["spec"], template["metadata"].get("annotations") or {})
    if problems:
        raise ValueError(
            f'Allocation "{allocation.name}" asks for security="restricted", but its pod '
            "breaks the restricted Pod Security level: " + "; ".join(problems)
        )


def _spec_hash(*objects: Mapping[str, Any]) -> str:
    canonical = json.dumps(list(objects), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]
