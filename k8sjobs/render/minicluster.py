"""Flux Operator steps: a step with ``target: minicluster`` as a ``MiniCluster`` (pure: no I/O).

Where a ``launch: ssh`` step is an Indexed Job whose launcher runs ``mpirun`` over ssh
(``k8sjobs.render.multinode``), a MiniCluster step hands the pods to the Flux Operator
(flux-framework.org/v1alpha2): the operator creates an Indexed Job of ``size`` pods under
the MiniCluster's name and a headless Service, starts a Flux broker in every pod, and runs
the step's command once, on the lead broker (index 0), as the initial program of
``flux start`` (``launcher: true``: k8sjobs never wraps the script in ``flux submit``).
Inside the script ``$(LAUNCHER)`` is ``flux run -N{nodes} -n{procs}``, so Flux places the
ranks across the pods; when the command ends, the brokers end, and so does the Job.

The contract with the operator (read from its v1alpha2 API and controllers):

- ``spec.jobLabels`` become the Job's labels and ``spec.pod.labels`` its pods' labels: both
  are the step's labels, so the backend's watches (Jobs and Pods by the study label) see the
  operator's objects as they see a plain step's; the Job has the step's object name.
- ``logging.strict: true`` runs the operator's entrypoint under ``set -eEu -o pipefail``,
  so a failing command fails the lead pod with the command's exit code; with
  ``pod.restartPolicy: Never`` the container is not restarted in place.
- ``backoffLimit`` is the Job's: the operator reads 0 as "unset" (then 100), so a step with
  ``retries: 0`` gets 1, the least the API allows; documented in docs/steps.md.
- ``deadlineSeconds`` is the Job's activeDeadlineSeconds (the step's walltime; else the
  operator's default of about a year).
- The Flux view: an init container the operator adds that copies Flux into the pod
  (``flux.container``); ``flux_in_image: true`` disables it for images that have Flux.
- The container mounts the step's ConfigMap (the expanded script) through the operator's
  ``volumes``, and starts in ``workingDir`` (the step's workdir, made by the container
  runtime; the operator mounts every emptyDir at /dev/shm, so none is asked for). Secret
  env values arrive through its ``secrets`` (a secretKeyRef per variable).
- The operator names the pod's container after the MiniCluster (its Flux runner), whatever
  the name given here; ``judge()`` takes the first container that is not k8sjobs' own.

Artifacts (a step with ``inputs`` or ``outputs``): the operator's pod takes no init
containers, but ``containers`` may list more than the Flux runner (``runFlux: true``). The
second is k8sjobs' handoff image as a sidecar, ``noWrapEntrypoint: true``, so that the
operator runs the image's own entrypoint (``python -m k8sjobs.handoff``) and none of its
Flux scripts; the arguments come in ``K8SJOBS_HANDOFF_ARGS`` and ``K8SJOBS_HANDOFF_CONFIG``
(the API has no ``args``). The two share one emptyDir, which the operator mounts at
/dev/shm in both (it mounts every emptyDir there), laid out under ``HANDOFF_DIR``. On the
lead pod (index 0) the sidecar pulls the inputs into it and marks it ready; the Flux
runner's command is ``RUN_WRAPPER``, which waits for that mark (bounded; a failed pull
fails it with ``InputPullFailed``), links ``$K8SJOBS_INPUTS`` to the pulled inputs, runs
the script, copies the declared outputs into the shared volume and leaves the exit code
there; the sidecar then pushes the outputs as a Job step's push container does (to
``<step>/failed`` on failure with ``push_outputs: always``) and exits, so the pod ends.
The other pods' sidecars exit at once. The operator's entrypoint runs the command under
``set -e``, so its ``commands.post`` never runs after a failing command: the wrapper,
inside the command, is what always runs.

What the MiniCluster API cannot express, ``Step`` refuses when it is made (see
``spec.minicluster_problems``): a pod securityContext limited to fsGroup, so no restricted
mode; one image pull secret; a command the operator's entrypoint word-splits, so no spaces
inside its words; no podFailurePolicy, so no exit-code rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from ..steps.spec import SecretKeyRef, Step
from ._shell import LEAVE_USAGE, MARK_START, RUN_CHILD, leave_exit_code

__all__ = ["API_VERSION", "HANDOFF_CONTAINER", "KIND", "LAUNCHER", "PLURAL", "minicluster"]

GROUP = "flux-framework.org"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MiniCluster"
PLURAL = "miniclusters"
#: ``$(LAUNCHER)`` in a MiniCluster step: Flux places the ranks over the brokers.
LAUNCHER = "flux run -N{nodes} -n{procs}"
#: The MiniCluster's one container (the operator's pod names it after the MiniCluster).
CONTAINER = "step"
# The fields of a toleration the operator's API has (no tolerationSeconds).
_TOLERATION = ("key", "operator", "value", "effect")
#: The handoff sidecar beside the Flux runner (a step with inputs or outputs).
HANDOFF_CONTAINER = "k8sjobs-handoff"
#: The emptyDir the Flux runner and the sidecar share: the operator mounts it at /dev/shm.
HANDOFF_VOLUME = "k8sjobs-handoff"
HANDOFF_DIR = "/dev/shm/k8sjobs"
#: The ConfigMap key of ``RUN_WRAPPER``.
RUN_KEY = "flux-run"
#: How long the wrapper waits for the sidecar's inputs before failing (seconds).
INPUT_WAIT = 3600

# The lead broker's initial program when the step hands artifacts over. The step's argv
# arrives as "$@": nothing of the user's is spliced into this text; the outputs' paths are
# read from files the sidecar writes (one per output), so any path is taken as it is.
RUN_WRAPPER = (
    (
        """\
#!/bin/sh
# k8sjobs (target: minicluster): wait for the handoff sidecar's inputs, run the step, copy
# its outputs to the shared volume and leave its exit code there for the sidecar.
shared="$K8SJOBS_HANDOFF_DIR"
status="$K8SJOBS_STATUS_DIR"
fail() {
  printf '%s\\n' "$1" >&2
  printf '%s\\n' "$1" > "${K8SJOBS_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null
  exit 1
}
start=$(date +%s)
limit="${K8SJOBS_HANDOFF_WAIT:-@WAIT@}"
while [ ! -e "$status/ready" ]; do
  if [ -e "$status/pull-failed" ]; then
    code=$(cat "$status/pull-failed")
    fail "InputPullFailed: pulling the inputs failed with exit code $code"
  fi
  if [ $(( $(date +%s) - start )) -ge "$limit" ]; then
    fail "InputPullFailed: the handoff sidecar (@CONTAINER@) pulled nothing in $limit s"
  fi
  sleep 0.2 2>/dev/null || sleep 1
done
if [ ! -e "$K8SJOBS_INPUTS" ]; then
  mkdir -p "$(dirname "$K8SJOBS_INPUTS")" && ln -s "$shared/inputs" "$K8SJOBS_INPUTS"
fi
"""
        + MARK_START
        + RUN_CHILD
        + LEAVE_USAGE
        + """\
for named in "$status"/paths/*; do
  [ -f "$named" ] || continue
  path=$(cat "$named")
  from="$K8SJOBS_WORKDIR/$path"
  to="$shared/work/$path"
  [ -e "$from" ] || [ -L "$from" ] || continue
  mkdir -p "$(dirname "$to")" && cp -RPp "$from" "$to" || {
    rm -rf "$to"
    printf 'k8sjobs: copying output %s to the handoff volume failed\\n' "$path" >&2
  }
done
"""
        + leave_exit_code("$status")
    )
    .replace("@WAIT@", str(INPUT_WAIT))
    .replace("@CONTAINER@", HANDOFF_CONTAINER)
)


@dataclass(frozen=True)
class Handoff:
    """The handoff sidecar of a step with artifacts: its image, env and registry Secret."""

    image: str
    env: list[dict[str, Any]]
    config: str
    registry_secret: str | None = None
    auth_dir: str = "/k8sjobs/registry-auth"


def minicluster(
    step: Step,
    meta: Mapping[str, Any],
    env: list[dict[str, Any]],
    *,
    entrypoint_dir: str,
    resources: Mapping[str, Any],
    handoff: Handoff | None = None,
) -> dict[str, Any]:
    """Return the MiniCluster that runs ``step``; ``env`` is the step's rendered env list.

    ``meta`` is the step's object metadata (its ConfigMap has the same name and holds the
    expanded script under ``entrypoint``). ``handoff`` adds the artifact sidecar.
    """
    name = str(meta["name"])
    labels = dict(meta["labels"])
    runner = _container(step, name, env, entrypoint_dir, resources)
    containers = [runner]
    if handoff is not None:
        # Two containers: the operator needs to be told which one runs Flux.
        runner["runFlux"] = True
        runner["command"] = " ".join(
            ["/bin/sh", f"{entrypoint_dir}/{RUN_KEY}", *step.argv, f"{entrypoint_dir}/entrypoint"]
        )
        runner["environment"].update(handoff_env())
        runner["volumes"][HANDOFF_VOLUME] = {"emptyDir": True}
        containers.append(_sidecar(runner["volumes"], handoff))
    spec: dict[str, Any] = {
        "size": step.resources.nodes,
        "tasks": step.resources.tasks,
        "backoffLimit": max(step.retries, 1),
        "logging": {"strict": True},
        # Render adds the spec hash, as on every object; Kueue reads the queue from the
        # operator's Job, whose webhook suspends it until admitted.
        "jobLabels": dict(labels) | step.queue_labels,
        "pod": _pod(step, meta),
        "containers": containers,
    }
    if step.flux_in_image:
        spec["flux"] = {"container": {"disable": True}}
    if step.walltime is not None:
        spec["deadlineSeconds"] = math.ceil(step.walltime.total_seconds())
    body_meta = {**meta, "labels": labels, "annotations": dict(meta["annotations"])}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": body_meta, "spec": spec}


def _pod(step: Step, meta: Mapping[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "labels": dict(meta["labels"]),
        "annotations": dict(meta["annotations"]),
        # The operator's default is OnFailure: a failed command would rerun in place.
        "restartPolicy": "Never",
        "automountServiceAccountToken": step.service_account is not None,
    }
    if step.service_account:
        pod["serviceAccountName"] = step.service_account
    if step.node_selector:
        pod["nodeSelector"] = dict(step.node_selector)
    if step.tolerations:
        pod["tolerations"] = [
            {k: str(v) for k, v in t.model_dump().items() if v is not None and k in _TOLERATION}
            for t in step.tolerations
        ]
    return pod


def _container(
    step: Step,
    name: str,
    env: list[dict[str, Any]],
    entrypoint_dir: str,
    resources: Mapping[str, Any],
) -> dict[str, Any]:
    plain: dict[str, str] = {}
    secrets: dict[str, dict[str, str]] = {}
    for item in env:
        if "value" in item:
            # The operator makes these pod env entries: the kubelet's $(VAR) expansion
            # applies, so the values stay escaped as render made them.
            plain[item["name"]] = item["value"]
    for key, value in step.env.items():
        if isinstance(value, SecretStr):
            secrets[key] = {"name": name, "key": key}
        elif isinstance(value, SecretKeyRef):
            secrets[key] = {"name": value.secret, "key": value.key}
    items = {"entrypoint": "entrypoint"}
    if step.inputs or step.outputs:
        items |= {RUN_KEY: RUN_KEY, "handoff.json": "handoff.json"}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": step.image,
        "command": " ".join([*step.argv, f"{entrypoint_dir}/entrypoint"]),
        # The script is flux start's initial program: run once, on the lead broker.
        "launcher": True,
        "workingDir": step.workdir,
        "environment": plain,
        "resources": {k: dict(v) for k, v in resources.items()},
        # Keyed by the ConfigMap's name: the operator names the pod's volume after the
        # ConfigMap and its mount after the key, which must therefore be the same.
        "volumes": {
            name: {
                "configMapName": name,
                "path": entrypoint_dir,
                "items": items,
                "readOnly": True,
            },
        },
    }
    if secrets:
        container["secrets"] = secrets
    if step.image_pull_secrets:
        container["imagePullSecret"] = step.image_pull_secrets[0]
    return container


def handoff_env() -> dict[str, str]:
    """Return the Flux runner's variables for the handoff (where the shared volume is)."""
    return {
        "K8SJOBS_HANDOFF_DIR": HANDOFF_DIR,
        "K8SJOBS_STATUS_DIR": f"{HANDOFF_DIR}/status",
    }


def sidecar_env(config: str) -> dict[str, str]:
    """Return the sidecar's own variables: its directories on the shared volume, its verb."""
    return {
        "K8SJOBS_HANDOFF_ARGS": "sidecar",
        "K8SJOBS_HANDOFF_CONFIG": config,
        "K8SJOBS_WORKDIR": f"{HANDOFF_DIR}/work",
        "K8SJOBS_INPUTS": f"{HANDOFF_DIR}/inputs",
        "K8SJOBS_STATUS_DIR": f"{HANDOFF_DIR}/status",
    }


def _sidecar(runner_volumes: Mapping[str, Any], handoff: Handoff) -> dict[str, Any]:
    """Return the handoff sidecar: the handoff image's own entrypoint, on the shared volume."""
    # The runner's volumes again, the same (the operator keeps the last of a name).
    volumes: dict[str, Any] = {key: dict(value) for key, value in runner_volumes.items()}
    environment = {e["name"]: e["value"] for e in handoff.env}
    if handoff.registry_secret:
        volumes["registry-auth"] = {
            "secretName": handoff.registry_secret,
            "path": handoff.auth_dir,
            "readOnly": True,
        }
        environment["DOCKER_CONFIG"] = handoff.auth_dir
    amounts = {"cpu": "100m", "memory": "128Mi"}
    return {
        "name": HANDOFF_CONTAINER,
        "image": handoff.image,
        # No command: the operator runs none of its scripts, the image's entrypoint
        # (python -m k8sjobs.handoff) takes its arguments from K8SJOBS_HANDOFF_ARGS.
        "noWrapEntrypoint": True,
        "environment": environment,
        "resources": {"requests": amounts, "limits": {"memory": "256Mi"}},
        "volumes": volumes,
        "securityContext": {
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
