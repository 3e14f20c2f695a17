"""The fake cluster's one node: a scheduler and a kubelet, simulating or executing pods.

`simulate` (KWOK-style) moves pods Pending -> Running -> Succeeded/Failed on timers, with
outcomes from a `SimulateRule` or from pod annotations; every transition is an event-loop
timer (`loop.call_later`), not a task per pod, so 10,000 pods cost little. `execute` runs
each pod's init containers then containers as local processes through
`k8sjobs.local.podrunner.PodRunner`, whose status reports become the pod's status.

The scheduler admits a pod only if its resource requests fit what the node has left (cpu,
memory and a GPU resource); otherwise the pod stays Pending with PodScheduled=False
(Unschedulable) and a FailedScheduling Event, and is retried whenever resources free up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..steps.quantity import parse_quantity
from .apiserver.errors import ApiError
from .apiserver.events import record_event
from .apiserver.exec import ExecCall, ExecStartError
from .apiserver.podresources import pod_resources
from .apiserver.store import Event, Obj, Store, now_rfc3339

ANNOTATION_PREFIX = "fake.k8sjobs.io/"
_MOUNT_RETRY_CAP = 122.0  # a real kubelet's longest wait between two mount tries
_TERMINAL = ("Succeeded", "Failed")
_FOREIGN_CONDITIONS = ("DisruptionTarget",)


@dataclass
class PodPlan:
    """How a simulated pod runs: how long, with which exit code, writing which log."""

    duration: float = 0.05
    exit_code: int = 0
    logs: str = ""
    oom_killed: bool = False
    exit_codes: dict[str, int] = field(default_factory=dict)


SimulateRule = Callable[[Obj], PodPlan | None]


@dataclass
class NodeConfig:
    """The node's name, labels and allocatable resources (its capacity, none reserved).

    Pods whose requests do not fit what is left, or whose nodeSelector the labels do not
    match, stay Pending (PodScheduled=False, Unschedulable) with kube-scheduler's words.
    """

    name: str = "local-node"
    cpu: str = "64"
    memory: str = "256Gi"
    gpu: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    pods: int = 1_000_000
    ephemeral_storage: str = "1Ti"
    #: Labels besides kubernetes.io/hostname and kubernetes.io/os (nodeSelector matches them).
    labels: dict[str, str] = field(default_factory=dict)

    def node_labels(self) -> dict[str, str]:
        """Return every label the node carries."""
        return {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", **self.labels}


@dataclass
class KubeletConfig:
    """How the kubelet runs pods; durations are in seconds.

    `rule` decides a simulated pod's outcome; when it returns None (or is unset) the pod's
    annotations decide: fake.k8sjobs.io/duration, /exit-code, /logs, /memory-usage (a
    quantity; above the container's memory limit the container ends OOMKilled, exit 137).
    Images matching `image_pull_failure` never pull: ErrImagePull, then ImagePullBackOff.
    """

    mode: str = "simulate"
    node: NodeConfig = field(default_factory=NodeConfig)
    rule: SimulateRule | None = None
    schedule_delay: float = 0.005
    start_delay: float = 0.02
    default_duration: float = 0.05
    image_pull_failure: str | None = r"(^|/)(does-not-exist|nonexistent)([:@/]|$)"
    image_pull_backoff: float = 0.5
    #: The first delay before a pod whose ConfigMap or Secret volume is missing tries to mount
    #: again; it doubles at each try (a real kubelet's 0.5 s, up to its 2 min 2 s).
    mount_retry: float = 0.5
    root: Path | None = None
    kill_grace: float = 2.0
    #: execute mode: "in-process" (default, or $K8SJOBS_HANDOFF) or "subprocess" handoff.
    handoff: str | None = None


class Kubelet:
    """Schedules pods onto the one node and runs them (simulated or as processes)."""

    def __init__(self, store: Store, config: KubeletConfig | None = None) -> None:
        self.store = store
        self.config = config or KubeletConfig()
        if self.config.mode not in ("simulate", "execute"):
            raise ValueError(
                f'kubelet mode must be "simulate" or "execute", not {self.config.mode!r}'
            )
        self.paused = False
        #: Rules consulted after ``config.rule``, before the annotations (emulated operators).
        self.planners: list[SimulateRule] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unscheduled: collections.OrderedDict[tuple[str, str], None] = (
            collections.OrderedDict()
        )
        self._timers: dict[str, list[asyncio.TimerHandle]] = collections.defaultdict(list)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._logs: dict[tuple[str, str, str], bytes] = {}
        self._running_logs: set[tuple[str, str, str]] = set()
        self._used: dict[str, dict[str, float]] = {}  # pod uid -> what it holds
        self._in_use: dict[str, float] = collections.defaultdict(float)  # their sum
        self._deferred: list[Event] = []
        self._runner: Any = None
        self._handoff: Any = None  # execute mode's InProcessHandoff, if any
        self._image_failure = (
            re.compile(self.config.image_pull_failure) if self.config.image_pull_failure else None
        )
        store.listen(self._on_event)

    @property
    def _host(self) -> str:
        """Return the node name the kubelet writes as its Events' source.host."""
        return self.config.node.name

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register the node and pick up pods that already exist."""
        self._loop = asyncio.get_running_loop()
        if self.config.mode == "execute":
            from ..local._handoff import InProcessHandoff, handoff_mode
            from ..local.podrunner import PodRunner

            root = self.config.root or Path.cwd() / ".fake-cluster"
            in_process = handoff_mode(self.config.handoff) == "in-process"
            self._handoff = InProcessHandoff() if in_process else None
            self._runner = PodRunner(root, kill_grace=self.config.kill_grace, handoff=self._handoff)
        self._register_node()
        for pod in self.store.iter("pods"):
            self._consider(pod)

    async def stop(self) -> None:
        """Stop every timer and running pod."""
        for handles in self._timers.values():
            for handle in handles:
                handle.cancel()
        self._timers.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        if self._handoff is not None:
            await self._handoff.aclose()

    def pause(self, paused: bool) -> None:
        """Freeze (True) or unfreeze (False) every pod transition."""
        self.paused = paused
        if not paused:
            deferred, self._deferred = self._deferred, []
            for event in deferred:
                self._handle(event)
            for pod in list(self.store.iter("pods")):
                self._consider(pod)

    def finish(self, namespace: str, pod_name: str, exit_code: int = 0) -> None:
        """End a running simulated pod now, its containers exiting with ``exit_code``."""
        pod = self.store.require("pods", namespace, pod_name)
        self._cancel_timers(pod["metadata"]["uid"])
        self._terminate(namespace, pod_name, PodPlan(exit_code=exit_code))

    def oom_kill(self, namespace: str, pod_name: str) -> None:
        """End a running simulated pod now as OOMKilled (exit code 137)."""
        pod = self.store.require("pods", namespace, pod_name)
        self._cancel_timers(pod["metadata"]["uid"])
        plan = PodPlan(exit_code=137, oom_killed=True)
        self._terminate(namespace, pod_name, plan)

    # ------------------------------------------------------------------ logs (LogSource)

    def read_log(self, namespace: str, pod: str, container: str, previous: bool) -> bytes:
        """Return a container's log so far."""
        if self._runner is not None:
            path = self._runner.log_path(pod, container, namespace=namespace)
            try:
                data: bytes = path.read_bytes()
                return data
            except FileNotFoundError:
                return b""
        return self._logs.get((namespace, pod, container), b"")

    def log_running(self, namespace: str, pod: str, container: str) -> bool:
        """Return whether the container may still write to its log."""
        obj = self.store.get("pods", namespace, pod)
        if obj is None or obj["status"].get("phase") in _TERMINAL:
            return False
        if self._runner is not None:
            return obj["metadata"]["uid"] in self._tasks
        return (namespace, pod, container) in self._running_logs

    # ------------------------------------------------------------------ exec (ExecHost)

    def exec_refusal(self, namespace: str, pod: str, container: str) -> str | None:
        """Return why ``container`` cannot take an exec now (the upgrade's 500), or None.

        The words are the kubelet's for a container that does not run (ended, or not
        started yet); a simulating kubelet runs no process to exec into.
        """
        if self._runner is None:
            return (
                "pods/exec runs commands in the executing kubelet: this fake cluster simulates "
                'its pods; start it with FakeCluster("execute")'
            )
        if not self._runner.exec_running(namespace, pod, container):
            return f'container not found ("{container}")'
        return None

    async def exec_start(self, call: ExecCall) -> asyncio.subprocess.Process:
        """Start the command in the container's environment (``PodRunner.exec``)."""
        from ..local._process import StartError
        from ..local._sources import ConfigError

        try:
            process: asyncio.subprocess.Process = await self._runner.exec(
                call.namespace,
                call.pod,
                call.container,
                call.command,
                stdin=call.stdin,
                stdout=call.stdout,
                stderr=call.stderr,
            )
        except (StartError, LookupError, ConfigError) as error:
            raise ExecStartError(str(error).strip("'\"")) from None
        return process

    async def exec_kill(self, process: asyncio.subprocess.Process) -> None:
        """Kill an exec'd command and everything it started."""
        from ..local._exec import kill

        await kill(process)

    # ------------------------------------------------------------------ events

    def _on_event(self, event: Event) -> None:
        # React after the write that caused the event has returned, never inside it, so
        # that a controller's multi-step sync is not interleaved with pod transitions.
        if event.resource == "pods" and self._loop is not None:
            self._loop.call_soon(self._handle, event)

    def _handle(self, event: Event) -> None:
        if self.paused:
            self._deferred.append(event)
            return
        if event.type == "DELETED":
            self._forget(event.obj)
            return
        self._consider(event.obj)

    def _consider(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        phase = pod.get("status", {}).get("phase")
        key = (meta["namespace"], meta["name"])
        if meta.get("deletionTimestamp"):
            self._unscheduled.pop(key, None)
            self._on_deleting(pod)
            return
        if phase in _TERMINAL:
            self._release(pod)
            return
        if not spec.get("nodeName") and key not in self._unscheduled:
            self._unscheduled[key] = None
            self._later(0.0 if self.paused else self.config.schedule_delay, self._schedule, key)

    def _later(self, delay: float, callback: Callable[..., object], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_later(delay, self._guarded, callback, *args)

    def _guarded(self, callback: Callable[..., object], *args: Any) -> None:
        if self.paused:
            return
        # The pod may have changed or gone meanwhile; its next event decides again.
        with contextlib.suppress(ApiError):
            callback(*args)

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, key: tuple[str, str]) -> bool:
        """Bind the pod at ``key`` if it fits now; else mark it Unschedulable. Return whether
        it no longer waits (bound or gone)."""
        pod = self.store.get("pods", *key)
        if pod is None or pod["spec"].get("nodeName"):
            self._unscheduled.pop(key, None)
            return True
        if not self._selector_matches(pod):
            # NodeAffinity filters before resources, and no preemption can change labels.
            reasons = ["node(s) didn't match Pod's node affinity/selector"]
            self._mark_unschedulable(pod, reasons, "Preemption is not helpful for scheduling")
            return False
        shortfall = self._shortfall(pod)
        if shortfall:
            reasons = [
                "Too many pods" if name == "pods" else f"Insufficient {name}" for name in shortfall
            ]
            self._mark_unschedulable(pod, reasons, "No preemption victims found for incoming pod")
            return False
        self._unscheduled.pop(key, None)
        self._bind(pod)
        return True

    def _schedule_all(self) -> None:
        # Oldest first, and stop at the first pod that still does not fit: freed room goes
        # to the pods waiting longest, and a release costs the pods it binds, not the queue.
        for key in list(self._unscheduled):
            pod = self.store.get("pods", *key)
            if pod is not None and not self._selector_matches(pod):
                continue  # freed resources do not change the node's labels
            if not self._schedule(key):
                return

    def _requests(self, pod: Obj) -> dict[str, float]:
        """Return what the pod takes of the node: its requests as the scheduler sums them
        (containers, the init containers' peak, RuntimeClass overhead) and one pod."""
        requests, _ = pod_resources(pod["spec"])
        totals = {name: _as_float(quantity.value) for name, quantity in requests.items()}
        totals["pods"] = 1
        return totals

    def _capacity(self) -> dict[str, float]:
        node = self.config.node
        return {
            "cpu": float(parse_quantity(node.cpu)),
            "memory": float(parse_quantity(node.memory)),
            "ephemeral-storage": float(parse_quantity(node.ephemeral_storage)),
            node.gpu_resource: float(node.gpu),
            "pods": float(node.pods),
        }

    def _selector_matches(self, pod: Obj) -> bool:
        selector = pod["spec"].get("nodeSelector") or {}
        labels = self.config.node.node_labels()
        return all(labels.get(key) == value for key, value in selector.items())

    def _shortfall(self, pod: Obj) -> list[str]:
        capacity = self._capacity()
        used = self._in_use
        return sorted(
            name
            for name, value in self._requests(pod).items()
            if (name in capacity and used[name] + value > capacity[name] + 1e-9)
            or (name not in capacity and value > 0 and "/" in name)
        )

    def _mark_unschedulable(self, pod: Obj, reasons: list[str], preemption: str) -> None:
        """Say why the pod fits no node, as kube-scheduler does: the PodScheduled condition
        (written when its message changes) and a FailedScheduling Event per attempt."""
        # FitError.Error(): a sorted histogram of the nodes' reasons, then preemption's.
        histogram = ", ".join(sorted(f"1 {reason}" for reason in reasons))
        message = (
            f"0/1 nodes are available: {histogram}. preemption: 0/1 nodes are available: "
            f"1 {preemption}."
        )
        conditions = pod["status"].get("conditions") or []
        if not any(c["type"] == "PodScheduled" and c.get("message") == message for c in conditions):
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
                "reason": "Unschedulable",
                "message": message,
            }
            self._write_status(pod, {**pod["status"], "conditions": [condition]})
        record_event(
            self.store,
            pod,
            "Warning",
            "FailedScheduling",
            message,
            "default-scheduler",
            action="Scheduling",
            instance=f"default-scheduler-{self.config.node.name}",
        )

    def _bind(self, pod: Obj) -> None:
        updated = dict(pod)
        updated["spec"] = {**pod["spec"], "nodeName": self.config.node.name}
        scheduled = {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        updated["status"] = {
            "phase": "Pending",
            "conditions": [scheduled],
            "qosClass": pod["status"].get("qosClass", "BestEffort"),
        }
        pod = self.store.update(
            "pods",
            pod["metadata"]["namespace"],
            updated,
            subresource="*",
            validate=False,
            owned=True,
        )
        usage = self._used[pod["metadata"]["uid"]] = dict(self._requests(pod))
        for name, value in usage.items():
            self._in_use[name] += value
        self._launch(pod)

    def _release(self, pod: Obj) -> None:
        usage = self._used.pop(pod["metadata"]["uid"], None)
        if usage is None:
            return
        for name, value in usage.items():
            self._in_use[name] -= value
        if self._unscheduled:
            self._later(0.0, self._schedule_all)

    def _forget(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        self._cancel_timers(uid)
        task = self._tasks.pop(uid, None)
        if task is not None:
            task.cancel()
        self._unscheduled.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
        self._release(pod)

    def _register_node(self) -> None:
        node = self.config.node
        capacity = {
            "cpu": node.cpu,
            "ephemeral-storage": node.ephemeral_storage,
            "memory": node.memory,
            "pods": str(node.pods),
        }
        if node.gpu:
            capacity[node.gpu_resource] = str(node.gpu)
        obj = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": node.name,
                "labels": node.node_labels(),
            },
            "spec": {},
        }
        if self.store.get("nodes", "", node.name) is not None:
            return
        created = self.store.create("nodes", "", obj, validate=False)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now_rfc3339(),
            "lastTransitionTime": now_rfc3339(),
        }
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [ready],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.36.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "fake://1",
            },
        }
        self.store.update(
            "nodes", "", {**created, "status": status}, subresource="status", validate=False
        )

    # ------------------------------------------------------------------ running

    def _launch(self, pod: Obj) -> None:
        failed = _failed_mount(self.store, pod)
        if failed is not None:
            self._wait_for_volume(pod, pod, failed, self.config.mount_retry)
            return
        bad_image = self._bad_image(pod)
        if bad_image is not None:
            self._later(self.config.start_delay, self._pull_failed, pod, bad_image)
            return
        if self.config.mode == "execute":
            uid = pod["metadata"]["uid"]
            assert self._loop is not None
            self._tasks[uid] = self._loop.create_task(self._execute(pod))
            return
        plan = self._plan(pod)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self._timer(pod, self.config.start_delay, self._start, ns, name, plan)

    def _timer(self, pod: Obj, delay: float, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        handle = self._loop.call_later(delay, self._guarded, callback, *args)
        self._timers[pod["metadata"]["uid"]].append(handle)

    def _cancel_timers(self, uid: str) -> None:
        for handle in self._timers.pop(uid, []):
            handle.cancel()

    def _wait_for_volume(self, bound: Obj, pod: Obj, message: str, delay: float) -> None:
        """Keep ``pod`` ContainerCreating with a FailedMount event, and try again later.

        A real kubelet does the same when a pod's ConfigMap or Secret does not exist yet
        (../shared/k8s-reference/job-configmap-created-after-job.json): the pod stays
        Pending, the one FailedMount Event's count grows at each try (it refers to the pod
        as bound, ``bound``, as the kubelet's copy does), the delay doubles, and the pod
        mounts and starts at the first try after the object exists.
        """
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        if ((statuses[0].get("state") or {}).get("waiting") or {}).get(
            "reason"
        ) != "ContainerCreating":
            self._set_waiting(pod, "ContainerCreating")
        record_event(
            self.store, bound, "Warning", "FailedMount", message, "kubelet", host=self._host
        )
        later = min(delay * 2, _MOUNT_RETRY_CAP)
        self._timer(pod, delay, self._retry_mount, bound, later)

    def _retry_mount(self, bound: Obj, delay: float) -> None:
        pod = self.store.get("pods", bound["metadata"]["namespace"], bound["metadata"]["name"])
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        failed = _failed_mount(self.store, pod)
        if failed is not None:
            self._wait_for_volume(bound, pod, failed, delay)
            return
        self._launch(pod)

    def _bad_image(self, pod: Obj) -> str | None:
        if self._image_failure is None:
            return None
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            if self._image_failure.search(str(container.get("image", ""))):
                return str(container["image"])
        return None

    def _pull_failed(self, pod: Obj, image: str) -> None:
        current = self.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        message = (
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed '
            f'to pull and unpack image "{image}": not found'
        )
        self._set_waiting(current, "ErrImagePull", message)
        record_event(self.store, current, "Warning", "Failed", message, "kubelet", host=self._host)
        self._timer(current, self.config.image_pull_backoff, self._pull_backoff, current, image)

    def _pull_backoff(self, pod: Obj, image: str) -> None:
        current = self.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        message = f'Back-off pulling image "{image}"'
        self._set_waiting(current, "ImagePullBackOff", message)
        record_event(self.store, current, "Normal", "BackOff", message, "kubelet", host=self._host)

    def _set_waiting(self, pod: Obj, reason: str, message: str | None = None) -> None:
        waiting = {"reason": reason} if message is None else {"reason": reason, "message": message}
        statuses = [
            _container_status(c, {"waiting": waiting}, ready=False, started=False)
            for c in pod["spec"]["containers"]
        ]
        conditions = _conditions(ready=False, reason="ContainersNotReady", running=False)
        status = {
            "phase": "Pending",
            "conditions": conditions,
            **_host(),
            "startTime": now_rfc3339(),
            "containerStatuses": statuses,
            "qosClass": pod["status"].get("qosClass", "BestEffort"),
        }
        self._write_status(pod, status)

    def _plan(self, pod: Obj) -> PodPlan:
        if self.config.rule is not None:
            plan = self.config.rule(pod)
            if plan is not None:
                return plan
        for planner in self.planners:  # the emulated operators' (e.g. Flux brokers that wait)
            plan = planner(pod)
            if plan is not None:
                return plan
        return _plan_from_annotations(pod, self.config.default_duration)

    def _start(self, namespace: str, name: str, plan: PodPlan) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        now = now_rfc3339()
        statuses = [
            _container_status(c, {"running": {"startedAt": now}}, ready=True, started=True, pod=pod)
            for c in pod["spec"]["containers"]
        ]
        status: Obj = {
            "phase": "Running",
            "conditions": _conditions(ready=True),
            **_host(),
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": now,
        }
        inits = [
            _container_status(
                c, _terminated(0, "Completed", now, pod), ready=True, started=False, pod=pod
            )
            for c in pod["spec"].get("initContainers", [])
        ]
        if inits:
            status["initContainerStatuses"] = inits
        status["containerStatuses"] = statuses
        status["qosClass"] = pod["status"].get("qosClass", "BestEffort")
        for container in pod["spec"]["containers"]:
            key = (namespace, name, container["name"])
            self._running_logs.add(key)
            if plan.logs and container is pod["spec"]["containers"][0]:
                self._logs[key] = plan.logs.encode()
        self._write_status(pod, status)
        self._timer(pod, plan.duration, self._terminate, namespace, name, plan)

    def _terminate(self, namespace: str, name: str, plan: PodPlan) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is None or pod["status"].get("phase") in _TERMINAL:
            return
        now = now_rfc3339()
        started = _started_at(pod) or now
        statuses = []
        for i, container in enumerate(pod["spec"]["containers"]):
            code = plan.exit_codes.get(container["name"], plan.exit_code if i == 0 else 0)
            reason = (
                "OOMKilled"
                if plan.oom_killed and i == 0
                else ("Completed" if code == 0 else "Error")
            )
            self._running_logs.discard((namespace, name, container["name"]))
            statuses.append(
                _container_status(
                    container,
                    _terminated(code, reason, started, pod, now),
                    ready=False,
                    started=False,
                    pod=pod,
                )
            )
        failed = any(s["state"]["terminated"]["exitCode"] != 0 for s in statuses)
        status = {
            **pod["status"],
            "phase": "Failed" if failed else "Succeeded",
            "conditions": _conditions(ready=False, reason="PodCompleted"),
            "containerStatuses": statuses,
        }
        status["qosClass"] = status.pop("qosClass", "BestEffort")
        self._write_status(pod, status)

    def _on_deleting(self, pod: Obj) -> None:
        """Kill a pod being deleted, then remove it for good (a grace-0 delete)."""
        uid = pod["metadata"]["uid"]
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self._cancel_timers(uid)
        task = self._tasks.get(uid)
        if task is not None:
            task.cancel()
            return  # _execute writes the final status and finishes the deletion
        if pod["status"].get("phase") == "Running":
            self._terminate(ns, name, PodPlan(exit_code=143))
            return
        if pod["status"].get("phase") not in _TERMINAL:
            # Never started: the kubelet (the pod GC when unscheduled) marks it Failed, so
            # that a Job under podReplacementPolicy Failed replaces it. The event may be
            # stale (the pod changed or went since, e.g. garbage-collected with its Job's
            # owner): the newer event is considered in its turn.
            with contextlib.suppress(ApiError):
                self._write_status(pod, {**pod["status"], "phase": "Failed"})
            return
        self._release(pod)
        if pod["metadata"].get("deletionGracePeriodSeconds", 0) > 0:
            self._later(0.0, self._finish_delete, ns, name)

    def _finish_delete(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete("pods", namespace, name, grace_seconds=0)

    async def _execute(self, pod: Obj) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        uid = pod["metadata"]["uid"]
        extra: dict[str, str] = {}
        annotations = pod["metadata"].get("annotations") or {}
        if "batch.kubernetes.io/job-completion-index" in annotations:
            extra["JOB_COMPLETION_INDEX"] = annotations["batch.kubernetes.io/job-completion-index"]
        try:
            final = await self._runner.run(
                _with_entrypoints(pod),
                configmap=lambda n: self._configmap(ns, n),
                secret=lambda n: self._secret(ns, n),
                on_status=lambda status: self._report(ns, name, status),
                extra_env=extra,
            )
            self._report(ns, name, final)
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.pop(uid, None)
        current = self.store.get("pods", ns, name)
        if current is not None and current["metadata"].get("deletionTimestamp"):
            self._finish_delete(ns, name)

    def _report(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            return
        status = dict(status)
        conditions = status.get("conditions") or []
        status["conditions"] = [
            {
                k: c[k]
                for k in (
                    "type",
                    "status",
                    "lastProbeTime",
                    "lastTransitionTime",
                    "reason",
                    "message",
                )
                if k in c
            }
            for c in conditions
        ]
        with contextlib.suppress(ApiError):
            self._write_status(pod, status)

    def _configmap(self, namespace: str, name: str) -> dict[str, str]:
        obj = self.store.get("configmaps", namespace, name)
        if obj is None:
            raise KeyError(name)
        return dict(obj.get("data") or {})

    def _secret(self, namespace: str, name: str) -> dict[str, bytes]:
        import base64

        obj = self.store.get("secrets", namespace, name)
        if obj is None:
            raise KeyError(name)
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        return data

    def _write_status(self, pod: Obj, status: Obj) -> None:
        # Conditions the kubelet does not own (DisruptionTarget, set by an eviction) stay.
        foreign = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") in _FOREIGN_CONDITIONS
        ]
        if foreign:
            types = {c["type"] for c in foreign}
            mine = [c for c in status.get("conditions") or [] if c.get("type") not in types]
            status = dict(status, conditions=mine + foreign)
        updated = dict(pod)
        updated["status"] = status
        self.store.update(
            "pods",
            pod["metadata"]["namespace"],
            updated,
            subresource="status",
            validate=False,
            owned=True,
        )


# ---------------------------------------------------------------------- helpers


def _as_float(value: Fraction) -> float:
    """Return a request as a float; one beyond a float ("1e400" CPUs) is infinite, so it
    fits no node (float() of it raised, and the pod was never scheduled nor refused)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _with_entrypoints(pod: Obj) -> Obj:
    """Return ``pod`` with the entrypoint of k8sjobs' handoff image as the command of a
    container that gives none (a Flux Operator sidecar), as a container runtime reads it
    from the image; other images' entrypoints are unknown here (the runner says so)."""
    from ..artifacts.image import ENTRYPOINT
    from ..render.manifests import HANDOFF_IMAGE

    containers = (pod.get("spec") or {}).get("containers") or []
    if all(c.get("command") or c.get("image") != HANDOFF_IMAGE for c in containers):
        return pod
    filled = [
        c
        if c.get("command") or c.get("image") != HANDOFF_IMAGE
        else {**c, "command": list(ENTRYPOINT)}
        for c in containers
    ]
    return {**pod, "spec": {**pod["spec"], "containers": filled}}


def _failed_mount(store: Store, pod: Obj) -> str | None:
    """Return the kubelet's FailedMount message for the first ConfigMap or Secret volume of
    ``pod`` that does not exist (and is not optional), or None when every one can mount."""
    namespace = pod["metadata"]["namespace"]
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        for field_name, resource, key in (
            ("configMap", "configmaps", "name"),
            ("secret", "secrets", "secretName"),
        ):
            source = volume.get(field_name)
            if source is None or source.get("optional"):
                continue
            wanted = str(source.get(key) or "")
            if store.get(resource, namespace, wanted) is None:
                kind = resource[:-1]
                return (
                    f'MountVolume.SetUp failed for volume "{volume.get("name")}" : '
                    f'{kind} "{wanted}" not found'
                )
    return None


def _plan_from_annotations(pod: Obj, default_duration: float) -> PodPlan:
    annotations = pod["metadata"].get("annotations") or {}
    plan = PodPlan(
        duration=float(annotations.get(ANNOTATION_PREFIX + "duration", default_duration))
    )
    plan.logs = annotations.get(ANNOTATION_PREFIX + "logs", "")
    raw = annotations.get(ANNOTATION_PREFIX + "exit-code", "0")
    if "=" in raw:
        plan.exit_codes = {
            k.strip(): int(v) for k, v in (part.split("=", 1) for part in raw.split(","))
        }
    else:
        plan.exit_code = int(raw)
    usage = annotations.get(ANNOTATION_PREFIX + "memory-usage")
    limit = ((pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get(
        "memory"
    )
    if usage and limit and parse_quantity(usage) > parse_quantity(limit):
        plan.exit_code, plan.oom_killed = 137, True
    return plan


def _host() -> Obj:
    return {"hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}]}


def _conditions(*, ready: bool, reason: str | None = None, running: bool = True) -> list[Obj]:
    now = now_rfc3339()

    def condition(kind: str, status: bool, why: str | None = None) -> Obj:
        cond: Obj = {
            "type": kind,
            "status": "True" if status else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if why:
            cond["reason"] = why
        return cond

    return [
        condition("PodReadyToStartContainers", running),
        condition("Initialized", True),
        condition("ContainersReady", ready, reason),
        condition("Ready", ready, reason),
        condition("PodScheduled", True),
    ]


def _container_id(pod: Obj | None) -> str:
    return f"fake://{pod['metadata']['uid'][:8]}/1" if pod else ""


def _container_status(
    container: Obj, state: Obj, *, ready: bool, started: bool, pod: Obj | None = None
) -> Obj:
    status: Obj = {
        "name": container["name"],
        "state": state,
        "lastState": {},
        "ready": ready,
        "restartCount": 0,
        "image": container.get("image", ""),
        "imageID": "",
    }
    if pod is not None:
        status["containerID"] = _container_id(pod)
    status["started"] = started
    return status


def _terminated(code: int, reason: str, started: str, pod: Obj, finished: str | None = None) -> Obj:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": finished or started,
            "containerID": _container_id(pod),
        }
    }


def _started_at(pod: Obj) -> str | None:
    for status in pod["status"].get("containerStatuses", []):
        running = status.get("state", {}).get("running")
        if running:
            return str(running["startedAt"])
    return None
