"""A step as one JobSet (``target: jobset``): the launcher and its workers (pure: no I/O).

``render`` first builds the step's Job as for ``target: job`` (the same pod: ConfigMap
entrypoint, Secret, handoff containers, restricted mode, usage wrapper); this module lays
that pod out as a ``jobset.x-k8s.io/v1alpha2`` JobSet, the API the JobSet controller (and
Kubeflow Trainer v2's MPI runtime) serves:

- a multi-node ``launch: ssh`` step has two replicated Jobs: ``workers`` (``nodes - 1``
  pods, each serving sshd on 2222, Ready by a TCP probe on that port) and ``launcher`` (one
  pod: it pulls the inputs, runs the script, where ``$(LAUNCHER)`` is the same mpirun line
  as for a Job, and pushes the outputs). The launcher ``dependsOn`` the workers ``Ready``:
  the controller creates it only once every worker's sshd answers, so mpirun never races
  the workers' DNS or sshd. The launcher is rank host 0; the hostfile names
  ``<js>-launcher-0-0`` then ``<js>-workers-0-<i>`` under the subdomain ``<js>``;
- ``launch: none`` is one replicated Job ``workers`` of ``nodes`` pods, each running the
  whole script with its own ``JOB_COMPLETION_INDEX``, as for a Job;
- a single-node step is one replicated Job ``launcher`` of one pod.

``successPolicy`` is ``All`` on ``launcher`` (``workers`` for ``launch: none``), so the set
completes when the script has, and the controller then deletes the still-serving workers.
Failures: each child Job keeps the step's ``podFailurePolicy`` (disruptions ignored, exit
codes that fail at once) with ``backoffLimit: 0``; the JobSet's ``failurePolicy`` restarts
the whole set at most ``retries`` times (``maxRestarts``), except a Job failed by its
``podFailurePolicy`` (a ``fail_on_exit_codes`` code, a code outside ``retry_on_exit_codes``)
or by its walltime (``DeadlineExceeded``), which fails the set at once (``FailJobSet``).
The walltime is each child Job's ``activeDeadlineSeconds``: a restart's Jobs start anew.

Names: the controller names the child Jobs ``<js>-<rj>-<i>``, the pods
``<js>-<rj>-<i>-<j>-<5 random>`` and their hostnames ``<js>-<rj>-<i>-<j>``, which must stay
DNS labels (63 characters; JobSet issues 132 and 302; the webhook checks the pod name).
``object_name`` shortens a step's name with a hash where those would not fit.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..steps.names import DNS_LABEL_MAX, digest_suffix
from ..steps.spec import Step

__all__ = [
    "API_VERSION",
    "LAUNCHER",
    "ROLE_ENV",
    "WORKERS",
    "hosts",
    "jobset",
    "object_name",
    "replicated_job_of",
]

API_VERSION = "jobset.x-k8s.io/v1alpha2"
GROUP = "jobset.x-k8s.io"
LAUNCHER = "launcher"
WORKERS = "workers"
#: Set on the workers' main container: the role wrapper serves sshd whatever the pod's index.
ROLE_ENV = "K8SJOBS_ROLE"
#: The label the controller puts on child Jobs and pods: which replicated Job they are of.
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: Why a child Job failed, as the job controller says it, for which the set fails at once.
FAIL_AT_ONCE = ("PodFailurePolicy", "DeadlineExceeded")
_HASH_LEN = 8
#: The webhook checks the last pod's name with the generated part a pod name ends with
#: (``-abcde``), not the hostname alone (jobset_webhook.go, ``podNameTooLongErrorMsg``).
_POD_SUFFIX = len("-abcde")


def _longest_suffix(nodes: int) -> int:
    """Return the longest ``-<rj>-<i>-<j>-xxxxx`` a pod name of a step on ``nodes`` gets."""
    hostname = max(len(f"-{LAUNCHER}-0-0"), len(f"-{WORKERS}-0-{max(nodes - 1, 0)}"))
    return hostname + _POD_SUFFIX


def object_name(name: str, nodes: int) -> str:
    """Return the JobSet's name for a step's object name ``name`` (its ``job_name``).

    ``name`` itself when every derived pod name (hence hostname) fits in a DNS label, as
    the validating webhook requires, else ``name`` cut and
    ended with a hash of the whole of it (two steps never share a JobSet).
    """
    room = DNS_LABEL_MAX - _longest_suffix(nodes)
    if len(name) <= room:
        return name
    return f"{name[: room - _HASH_LEN - 1].rstrip('-')}-{digest_suffix(name)}"


def hosts(name: str, namespace: str, nodes: int, launch: str) -> list[str]:
    """Return the pods' resolvable names, rank host 0 first (the subdomain is ``name``)."""
    domain = f"{name}.{namespace}.svc"
    if launch == "ssh":
        workers = [f"{name}-{WORKERS}-0-{i}.{domain}" for i in range(nodes - 1)]
        return [f"{name}-{LAUNCHER}-0-0.{domain}", *workers]
    return [f"{name}-{WORKERS}-0-{i}.{domain}" for i in range(nodes)]


def replicated_job_of(obj: Mapping[str, Any]) -> str:
    """Return the replicated Job a child Job or pod belongs to ("" if it is no JobSet's)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return str(labels.get(REPLICATED_JOB_LABEL) or "")


def jobset(step: Step, job: Mapping[str, Any], *, main: str, ssh_port: int) -> dict[str, Any]:
    """Return the JobSet that runs ``step``, from the Job ``render`` built for it.

    ``main`` names the step's own container; ``ssh_port`` is where the workers' sshd
    listens (their readiness probe). The step's ``retries`` bounds the set's restarts.
    """
    nodes = step.resources.nodes
    spec = job["spec"]
    template = spec["template"]
    if nodes == 1:
        rjobs = [_replicated(LAUNCHER, spec, _launcher_pod(template, main), 1)]
        decides = LAUNCHER
    elif step.launch_mode == "ssh":
        workers = _replicated(WORKERS, spec, _worker_pod(template, main, ssh_port), nodes - 1)
        launcher = _replicated(LAUNCHER, spec, _launcher_pod(template, main), 1)
        launcher["dependsOn"] = [{"name": WORKERS, "status": "Ready"}]
        rjobs, decides = [workers, launcher], LAUNCHER
    else:
        rjobs, decides = [_replicated(WORKERS, spec, copy.deepcopy(template), nodes)], WORKERS
    meta = copy.deepcopy(dict(job["metadata"]))
    body: dict[str, Any] = {
        "replicatedJobs": rjobs,
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [decides]},
        "failurePolicy": {
            "maxRestarts": step.retries,
            "rules": [
                {
                    "name": "failAtOnce",  # no "-": the webhook refuses one in a rule name
                    "action": "FailJobSet",
                    "onJobFailureReasons": list(FAIL_AT_ONCE),
                }
            ],
        },
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
    }
    if nodes > 1:
        body["network"] = {
            "enableDNSHostnames": True,
            "subdomain": meta["name"],
            "publishNotReadyAddresses": True,
        }
    if spec.get("suspend"):
        body["suspend"] = True
    if "ttlSecondsAfterFinished" in spec:
        body["ttlSecondsAfterFinished"] = spec["ttlSecondsAfterFinished"]
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": meta, "spec": body}


def _replicated(
    name: str, spec: Mapping[str, Any], pod: dict[str, Any], pods: int
) -> dict[str, Any]:
    """Return one replicated Job (one child Job) of ``pods`` Indexed pods from ``pod``."""
    child: dict[str, Any] = {"backoffLimit": 0}
    if "podFailurePolicy" in spec:
        child["podFailurePolicy"] = copy.deepcopy(spec["podFailurePolicy"])
    child |= {
        "completions": pods,
        "parallelism": pods,
        "completionMode": "Indexed",
        "template": pod,
    }
    if "activeDeadlineSeconds" in spec:
        child["activeDeadlineSeconds"] = spec["activeDeadlineSeconds"]
    # The step's labels on the child Job too: the study's Job and pod watches see them.
    labels = dict(pod["metadata"]["labels"])
    return {
        "name": name,
        "replicas": 1,
        "template": {"metadata": {"labels": labels}, "spec": child},
    }


def _launcher_pod(template: Mapping[str, Any], main: str) -> dict[str, Any]:
    """Return the launcher's pod: the step's own, its readiness left to nothing."""
    pod = copy.deepcopy(dict(template))
    for container in pod["spec"]["containers"]:
        if container["name"] == main:
            container.pop("readinessProbe", None)
    return pod


def _worker_pod(template: Mapping[str, Any], main: str, ssh_port: int) -> dict[str, Any]:
    """Return a worker's pod: the main container only (it serves sshd), Ready once it listens.

    It keeps the inputs' pull (ranks on every node read them); the launcher alone pushes.
    """
    pod = copy.deepcopy(dict(template))
    pod["spec"]["containers"] = [c for c in pod["spec"]["containers"] if c["name"] == main]
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": ROLE_ENV, "value": "worker"}, *container["env"]]
    container["readinessProbe"] = {
        "tcpSocket": {"port": ssh_port},
        "periodSeconds": 2,
        "failureThreshold": 1,
    }
    return pod
