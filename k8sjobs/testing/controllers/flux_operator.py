"""A small Flux Operator for the fake cluster: MiniCluster -> Indexed Job + headless Service.

Active once the MiniCluster CRD (flux-framework.org) is installed. On a new MiniCluster it
creates what the real operator (flux-framework/flux-operator, controllers/flux) creates, under
the same names: an Indexed Job named after the MiniCluster (``jobLabels`` as its labels,
``pod.labels`` plus the operator's own on its pods, ``size`` completions and parallelism,
``backoffLimit`` with 0 read as 100, ``deadlineSeconds``, the pod's restart policy, default
OnFailure) and a headless Service (``network.headlessName``, default the MiniCluster's name)
selecting ``job-name``; both controlled by the MiniCluster, so deleting it deletes them (the
store's garbage collection). The pod's one container is named after the MiniCluster, as the
operator names its Flux runner.

Roles, as under Flux: index 0 (the lead broker) runs the command; the other brokers wait and
end cleanly (exit 0) once the lead pod has succeeded. In ``simulate`` mode the workers' plan
is "run until told" and the lead pod's outcome comes from the pod annotations as for any pod;
in ``execute`` mode index 0 runs the command as a local process (``flux`` itself is not
emulated: a script that calls ``flux run`` needs a ``flux`` on the PATH) and the workers
poll for a file the emulation creates when the lead pod succeeds, then exit 0. Not
emulated: the Flux view, the broker configuration, the MiniCluster's status conditions,
scaling.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from pathlib import Path
from typing import Any

from .._kubelet import Kubelet, PodPlan
from ..apiserver.errors import ApiError
from ..apiserver.store import Event, Obj, Store

GROUP = "flux-framework.org"
PLURAL = "miniclusters"
APP_NAME = "app.kubernetes.io/name"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
#: How long a waiting broker runs in simulate mode when nothing ends it (about a year).
_WAIT = 31_500_000.0
# Index 0 runs the command (its words are "$@": the operator splits it at spaces); the
# others wait until the emulation marks the lead done, then end cleanly (execute mode).
_ROLE_SCRIPT = """\
if [ "${JOB_COMPLETION_INDEX:-0}" = 0 ]; then exec "$@"; fi
while [ ! -e "$K8SJOBS_FLUX_DONE" ]; do sleep 0.1; done
"""


class FluxOperator:
    """Reconciles MiniClusters into Jobs and Services, and ends the waiting brokers."""

    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet
        kubelet.planners.append(self._plan)
        store.listen(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource == PLURAL and event.type == "ADDED":
            self._later(self.reconcile, event.namespace, event.obj["metadata"]["name"])
        elif event.resource == "pods" and event.type == "MODIFIED" and _lead_succeeded(event.obj):
            self._later(self._end_workers, event.obj)

    def _later(self, callback: Any, *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: the cluster is not running
            asyncio.get_running_loop().call_soon(callback, *args)

    def reconcile(self, namespace: str, name: str) -> None:
        """Create the MiniCluster's Service and Job if they do not exist yet."""
        cluster = self.store.get(PLURAL, namespace, name)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return
        job = _job(cluster, self._done_path(namespace, name))
        for resource, body in (("services", _service(cluster)), ("jobs", job)):
            if self.store.get(resource, namespace, body["metadata"]["name"]) is None:
                with contextlib.suppress(ApiError):
                    self.store.create(resource, namespace, body)

    def _plan(self, pod: Obj) -> PodPlan | None:
        """Keep a worker broker running until the lead has ended (simulate mode)."""
        if not _operator_pod(pod) or _index(pod) == 0:
            return None
        return PodPlan(duration=_WAIT)

    def _done_path(self, namespace: str, name: str) -> str:
        """Return the file whose existence tells a waiting broker to end (execute mode)."""
        root = self.kubelet.config.root or Path(".")
        return str(root / "flux-operator" / namespace / name / "lead-done")

    def _end_workers(self, lead: Obj) -> None:
        """End the other brokers of the lead's Job cleanly, as flux start does on shutdown."""
        job = (lead["metadata"].get("labels") or {}).get("job-name")
        namespace = lead["metadata"]["namespace"]
        if self.kubelet.config.mode == "execute":
            done = Path(self._done_path(namespace, str(job)))
            done.parent.mkdir(parents=True, exist_ok=True)
            done.touch()
            return
        for pod in list(self.store.iter("pods")):
            meta = pod["metadata"]
            same = (
                meta.get("namespace") == namespace
                and (meta.get("labels") or {}).get("job-name") == job
            )
            if same and _index(pod) != 0 and pod["status"].get("phase") == "Running":
                self.kubelet.finish(namespace, meta["name"], exit_code=0)


def _owner(cluster: Obj) -> dict[str, Any]:
    meta = cluster["metadata"]
    return {
        "apiVersion": cluster["apiVersion"],
        "kind": cluster["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _service(cluster: Obj) -> Obj:
    meta, spec = cluster["metadata"], cluster.get("spec") or {}
    name = (spec.get("network") or {}).get("headlessName") or meta["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "ownerReferences": [_owner(cluster)],
        },
        "spec": {"clusterIP": "None", "selector": {"job-name": meta["name"]}},
    }


def _job(cluster: Obj, done: str) -> Obj:
    meta, spec = cluster["metadata"], cluster.get("spec") or {}
    name, namespace = meta["name"], meta["namespace"]
    pod = spec.get("pod") or {}
    labels = {
        **(pod.get("labels") or {}),
        "namespace": namespace,
        "app": "flux-operator",
        APP_NAME: name,
        "hpa-selector": name,
    }
    size = int(spec.get("size") or 1)
    pod_spec: dict[str, Any] = {
        "subdomain": (spec.get("network") or {}).get("headlessName") or name,
        "restartPolicy": pod.get("restartPolicy") or "OnFailure",
        "automountServiceAccountToken": bool(pod.get("automountServiceAccountToken")),
        "containers": [],
        "volumes": [],
    }
    for key in ("serviceAccountName", "nodeSelector", "tolerations"):
        if pod.get(key):
            pod_spec[key] = copy.deepcopy(pod[key])
    _add_containers(pod_spec, name, spec.get("containers") or [{}], done)
    template_meta: dict[str, Any] = {"labels": labels}
    if pod.get("annotations"):
        template_meta["annotations"] = dict(pod["annotations"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(spec.get("jobLabels") or {}),
            "ownerReferences": [_owner(cluster)],
        },
        "spec": {
            "backoffLimit": int(spec.get("backoffLimit") or 100),
            "completions": size,
            "parallelism": size,
            "completionMode": "Indexed",
            "activeDeadlineSeconds": int(spec.get("deadlineSeconds") or 31_500_000),
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _add_containers(pod_spec: dict[str, Any], name: str, specs: list[Obj], done: str) -> None:
    """Add the containers and their volumes as the operator does (controllers/flux).

    A lone container runs Flux; of several, the one with ``runFlux``. Its mounts carry on
    to the containers after it (the operator appends to one list), each volume once; a
    ConfigMap's volume is named after the ConfigMap, its mount after the key; every
    emptyDir is mounted at /dev/shm.
    """
    mounts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for container in specs:
        for volume, source in (container.get("volumes") or {}).items():
            _add_volume(pod_spec, volume, source)
            if volume not in seen:
                seen.add(volume)
                mounts.append(_mount(volume, source))
        runs_flux = len(specs) == 1 or bool(container.get("runFlux"))
        made = _runner(container, name, done) if runs_flux else _other(container)
        made["volumeMounts"] = [dict(m) for m in mounts]
        made["env"] = _env(container, done if runs_flux else None)
        if container.get("workingDir"):
            made["workingDir"] = container["workingDir"]
            # A container runtime makes a missing working directory; the fake's execute
            # mode runs in a sandbox, so it gets one there (this container's alone).
            volume = f"flux-workdir-{len(pod_spec['containers'])}"
            pod_spec["volumes"].append({"name": volume, "emptyDir": {}})
            made["volumeMounts"].append({"name": volume, "mountPath": container["workingDir"]})
        for key in ("resources", "securityContext"):
            if container.get(key):
                made[key] = copy.deepcopy(container[key])
        pod_spec["containers"].append(made)
        if container.get("imagePullSecret"):
            pod_spec.setdefault("imagePullSecrets", []).append(
                {"name": container["imagePullSecret"]}
            )


def _runner(container: Obj, name: str, done: str) -> dict[str, Any]:
    """Return the Flux runner, named after the MiniCluster: index 0 runs the command."""
    return {
        "name": name,
        "image": container.get("image") or "ghcr.io/rse-ops/accounting:app-latest",
        "command": ["/bin/sh", "-c", _ROLE_SCRIPT, "flux-broker"],
        "args": str(container.get("command") or "true").split(),
    }


def _other(container: Obj) -> dict[str, Any]:
    """Return a container that does not run Flux: its image's entrypoint (noWrapEntrypoint),
    else the operator's start script, which runs its command as shell text."""
    made: dict[str, Any] = {"name": container["name"], "image": container.get("image")}
    if not container.get("noWrapEntrypoint"):
        made["command"] = ["/bin/sh", "-c", str(container.get("command") or "true")]
    return made


def _env(container: Obj, done: str | None) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": key, "value": str(value)}
        for key, value in (container.get("environment") or {}).items()
    ]
    for key, ref in (container.get("secrets") or {}).items():
        env.append({"name": key, "valueFrom": {"secretKeyRef": dict(ref)}})
    if done is not None:
        env.append({"name": "K8SJOBS_FLUX_DONE", "value": done})
    return env


def _add_volume(pod_spec: dict[str, Any], volume: str, source: Obj) -> None:
    """Add the pod volume behind a container volume (in place of one of that name)."""
    if source.get("configMapName"):
        items = [{"key": k, "path": p} for k, p in (source.get("items") or {}).items()]
        cm: dict[str, Any] = {"name": source["configMapName"]}
        if items:
            cm["items"] = items
        body: dict[str, Any] = {"name": source["configMapName"], "configMap": cm}
    elif source.get("secretName"):
        body = {"name": volume, "secret": {"secretName": source["secretName"]}}
    elif source.get("emptyDir"):
        body = {"name": volume, "emptyDir": {}}
    else:
        return
    # The operator keeps the last container's volume of a name.
    pod_spec["volumes"] = [v for v in pod_spec["volumes"] if v["name"] != body["name"]]
    pod_spec["volumes"].append(body)


def _mount(volume: str, source: Obj) -> dict[str, Any]:
    if source.get("emptyDir"):
        return {"name": volume, "mountPath": "/dev/shm"}  # where the operator mounts them
    path = source.get("path") or f"/{volume}"
    return {"name": volume, "mountPath": path, "readOnly": bool(source.get("readOnly"))}


def _operator_pod(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get("app") == "flux-operator"


def _index(pod: Obj) -> int:
    text = (pod["metadata"].get("labels") or {}).get(INDEX_KEY, "0")
    return int(text) if str(text).isdigit() else 0


def _lead_succeeded(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return _operator_pod(pod) and _index(pod) == 0 and phase == "Succeeded"
