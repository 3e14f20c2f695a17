"""A pod's status as a kubelet writes it, from what the runner tells it happened.

``PodStatus`` holds the containers' states and reports a fresh PodStatus dict to its sink each
time it changes, in the shape a kubelet writes: conditions in a kubelet's order
(PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled, each
``lastTransitionTime`` moving only with its status), RFC 3339 timestamps to the second,
container IDs ``local://<pid>`` and the pod's QoS class.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ._sources import HOST_IP, all_containers

__all__ = ["PodStatus", "StatusSink", "now"]

StatusSink = Callable[[dict[str, Any]], None]

_CONDITION_ORDER = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


def now() -> str:
    """Return the time as Kubernetes writes it: RFC 3339, UTC, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodStatus:
    """A pod's status as a kubelet writes it; reports a copy to the sink whenever it changes."""

    def __init__(self, pod: Mapping[str, Any], sink: StatusSink) -> None:
        spec = pod.get("spec") or {}
        self._sink = sink
        self._last: dict[str, Any] | None = None
        self._transitions: dict[str, tuple[str, str]] = {}
        self._init_names = [c["name"] for c in spec.get("initContainers") or []]
        self._qos = _qos_class(all_containers(spec))
        self.start_time = now()
        self.sandbox_ready = False
        self.terminal_phase: str | None = None
        first = "PodInitializing" if self._init_names else "ContainerCreating"
        self.containers: dict[str, dict[str, Any]] = {}
        for container in spec.get("initContainers") or []:
            self.containers[container["name"]] = _container_status(container, "PodInitializing")
        for container in spec.get("containers") or []:
            self.containers[container["name"]] = _container_status(container, first)

    def config_error(self, names: Iterable[str], message: str) -> None:
        for name in names:
            state = {"reason": "CreateContainerConfigError", "message": message}
            self.containers[name]["state"] = {"waiting": state}

    def running(self, name: str, pid: int | None, started_at: str, *, probed: bool = False) -> None:
        """Record a container running: a process, or (pid None) an in-process handoff.

        Running is ready, unless a readiness probe decides (``probed``: see ``ready``).
        """
        status = self.containers[name]
        status.update(
            state={"running": {"startedAt": started_at}},
            containerID=f"local://{pid if pid is not None else 'in-process'}",
            started=True,
            ready=name not in self._init_names and not probed,
        )

    def ready(self, name: str, ready: bool) -> None:
        """Record a running container's readiness probe passing (or failing again)."""
        status = self.containers[name]
        if "running" in status["state"]:
            status["ready"] = ready

    def terminated(
        self,
        name: str,
        exit_code: int,
        reason: str,
        message: str | None,
        started_at: str,
        pid: int | None = None,
    ) -> None:
        state: dict[str, Any] = {"exitCode": exit_code, "reason": reason}
        if message:
            state["message"] = message
        state.update(startedAt=started_at, finishedAt=now())
        if pid is not None:
            state["containerID"] = f"local://{pid}"
        status = self.containers[name]
        # A completed init container stays ready; a finished container is not.
        ready = name in self._init_names and exit_code == 0
        status.update(state={"terminated": state}, started=False, ready=ready)

    def finish(self, *, succeeded: bool) -> None:
        self.terminal_phase = "Succeeded" if succeeded else "Failed"

    def report(self) -> dict[str, Any]:
        """Send the status to the sink if it changed since the last report; returns a copy."""
        snapshot = self.snapshot()
        if snapshot != self._last:
            self._last = snapshot
            self._sink(copy.deepcopy(snapshot))
        return copy.deepcopy(snapshot)

    def snapshot(self) -> dict[str, Any]:
        """Return the PodStatus dict as it stands."""
        status: dict[str, Any] = {
            "phase": self._phase(),
            "conditions": self._conditions(),
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
        }
        if self.sandbox_ready:
            status.update(podIP=HOST_IP, podIPs=[{"ip": HOST_IP}])
        status["startTime"] = self.start_time
        inits = [copy.deepcopy(s) for n, s in self.containers.items() if n in self._init_names]
        if inits:
            status["initContainerStatuses"] = inits
        status["containerStatuses"] = [
            copy.deepcopy(s) for n, s in self.containers.items() if n not in self._init_names
        ]
        status["qosClass"] = self._qos
        return status

    def _phase(self) -> str:
        if self.terminal_phase:
            return self.terminal_phase
        main = [s for n, s in self.containers.items() if n not in self._init_names]
        return "Running" if any("waiting" not in s["state"] for s in main) else "Pending"

    def _conditions(self) -> list[dict[str, Any]]:
        inits_unfinished = [n for n in self._init_names if _exit_code(self.containers[n]) != 0]
        main = {n: s for n, s in self.containers.items() if n not in self._init_names}
        unready = [n for n, s in main.items() if not s["ready"]]
        completed = self.terminal_phase is not None
        initialized: tuple[str, str | None, str | None] = ("True", None, None)
        if inits_unfinished:
            initialized = (
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(inits_unfinished)}]",
            )
        ready: tuple[str, str | None, str | None] = ("True", None, None)
        if completed:
            ready = ("False", "PodCompleted", None)
        elif unready:
            message = f"containers with unready status: [{' '.join(unready)}]"
            ready = ("False", "ContainersNotReady", message)
        values = {
            "PodReadyToStartContainers": ("True" if self.sandbox_ready else "False", None, None),
            "Initialized": initialized,
            "Ready": ready,
            "ContainersReady": ready,
            "PodScheduled": ("True", None, None),
        }
        return [
            self._condition(kind, *values[kind]) for kind in (*_CONDITION_ORDER, "PodScheduled")
        ]

    def _condition(
        self, kind: str, status: str, reason: str | None, message: str | None
    ) -> dict[str, Any]:
        # lastTransitionTime moves only when the condition's status does, as in Kubernetes.
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            previous = (status, now())
            self._transitions[kind] = previous
        condition: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": previous[1],
        }
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        return condition


def _container_status(container: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """Return a container's status before it starts: waiting for ``reason``."""
    return {
        "name": container["name"],
        "state": {"waiting": {"reason": reason}},
        "lastState": {},
        "ready": False,
        "restartCount": 0,
        "image": str(container.get("image", "")),
        "imageID": "",
        "started": False,
    }


def _exit_code(status: Mapping[str, Any]) -> int | None:
    """Return a container's exit code, or None while it has not terminated."""
    terminated = status["state"].get("terminated")
    return None if terminated is None else int(terminated["exitCode"])


def _qos_class(containers: Iterable[Mapping[str, Any]]) -> str:
    """Return the pod's QoS class from its containers' requests and limits."""
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits = r.get("limits") or {}
        requests = {**limits, **(r.get("requests") or {})}
        if any(limits.get(kind) is None for kind in ("cpu", "memory")):
            return "Burstable"
        if any(str(requests[kind]) != str(limits[kind]) for kind in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"
