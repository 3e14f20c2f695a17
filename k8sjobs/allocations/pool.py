"""The driver's side of an allocation: hold its pods, stream steps into them, follow each.

``AllocationBackend`` is a Backend (the session's one seam) for the steps that name an
allocation. It holds the allocation's pods through the backend that runs pods (its ``host``:
Kubernetes, the fake cluster, or the local backend), which creates, adopts and follows the
allocation's Job like any step's; it opens one channel to each pod's agent, and sends each
step as one line: no Kubernetes write and no poll per step.

Dispatch: steps wait in one FIFO queue here, and go to the pod with the fewest in flight,
``window`` at most per pod beyond what it runs, so one step follows the previous with no
round trip. Faults: a broken channel is re-opened and the agent re-attached (running steps
go on, ended ones report once more and are acknowledged); a pod that is gone (deleted,
evicted, preempted, its node lost) loses only the steps it held, which go back to the
front of the queue as a new attempt with the reason "allocation pod lost", never as the
script's failure. A restarted driver finds the steps it sends again in the agents that hold
them (a submit is idempotent by step and spec hash), so they are adopted, not run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import SecretStr

from ..events import StepEvent
from ..handle import StepHandle
from ..render.allocation import allocation_step_name
from ..state import StepState
from ..usage import Usage
from .channel import Channel, ChannelBroken, open_channel
from .protocol import ProtocolError, decode_event, encode

if TYPE_CHECKING:
    from ..render.manifests import Manifests
    from ..steps.allocation import Allocation
    from ..steps.spec import Step

__all__ = ["AllocationBackend", "PodHost"]

_log = logging.getLogger("k8sjobs.allocations")

#: Steps sent to one pod beyond those it can run at once (its agent queues them).
WINDOW = 64
#: How often a pod whose agent is not reachable yet is tried again, at most (seconds).
RETRY_CAP = 2.0
#: How long a channel may stay silent (the agent beats every 5 s) before it is re-opened.
SILENCE = 20.0
#: How many times one step may lose its pod before it is failed (a pod that kills it?).
LOST_LIMIT = 5
#: How long a driver waits, at its start, for the agents already running to say what they
#: hold before it sends anything (so a restarted driver adopts instead of running twice).
SYNC_BOUND = 15.0


class PodHost(Protocol):
    """What an allocation needs of the backend that runs its pods."""

    kind: str

    async def submit(
        self, handle: StepHandle, manifests: Manifests, *, replace: bool, rerun: bool = False
    ) -> None: ...

    async def cancel(self, handle: StepHandle) -> None: ...

    def pods_of(self, handle: StepHandle) -> dict[str, str]:
        """Return the pods of ``handle``'s Job by name, each with its phase."""
        ...

    def on_pods(self, handle: StepHandle, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a pod of ``handle``'s Job changes."""
        ...


@dataclass(eq=False)
class _Work:
    """One step on its way through the allocation."""

    handle: StepHandle
    message: dict[str, Any]
    cpu: float
    pod: str | None = None
    lost: int = 0

    @property
    def id(self) -> str:
        return str(self.message["id"])


@dataclass(eq=False)
class _Pod:
    """One pod of the allocation, its channel and what it holds."""

    name: str
    channel: Channel | None = None
    ready: bool = False
    gone: bool = False
    draining: bool = False
    capacity: float = 1.0
    in_flight: dict[str, _Work] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    said: str = ""  # what the last failure to reach it said (shown to waiting steps)


class AllocationBackend:
    """The backend of the steps in one allocation (see the module's docstring)."""

    kind = "allocation"

    def __init__(
        self,
        allocation: Allocation,
        host: PodHost,
        manifests: Manifests,
        *,
        study: str,
        log_dir: Path,
        window: int = WINDOW,
    ) -> None:
        self.allocation = allocation
        self.host = host
        self._manifests = manifests
        self._study = study
        self._log_dir = log_dir
        self._window = window
        self.handle = StepHandle(
            name=allocation_step_name(allocation),
            study=study,
            object_name=manifests.name,
            namespace=manifests.namespace,
            backend=host,  # type: ignore[arg-type]  # the host's StepControl
        )
        self._pods: dict[str, _Pod] = {}
        self._queue: deque[_Work] = deque()
        self._works: dict[str, _Work] = {}
        # What agents hold that no handle has claimed yet: id -> (pod, exit message or None).
        self._held: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self._synced = asyncio.Event()
        self._started = False
        self._closing = False
        self._restarts = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._said = ""  # why queued steps wait, as last said to them
        # The interpreter of a step's pull and push: the image's python3 (the handoff image
        # has k8sjobs), or this very one where the pods are this machine's processes.
        self._python = sys.executable if host.kind == "local" else "python3"

    def _spawn(self, coro: Any) -> None:
        """Run ``coro`` as a task kept until it ends (a dropped task may be collected)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the Backend protocol ------------------------------------------------------------

    @property
    def namespace(self) -> str | None:
        return self._manifests.namespace

    @property
    def default_store(self) -> str | None:
        return getattr(self.host, "default_store", None)  # the steps' outputs go where its own go

    async def start(self) -> None:
        """Create (or adopt) the allocation's Job through the host and follow its pods."""
        if self._started:
            return
        self._started = True
        await self.host.submit(self.handle, self._manifests, replace=False)
        self.host.on_pods(self.handle, self._pods_changed)
        self.handle.add_listener(self._allocation_changed)
        self._pods_changed()
        asyncio.get_running_loop().call_later(SYNC_BOUND, self._synced.set)
        self._check_synced()

    async def aclose(self) -> None:
        """Close every channel; the pods and their steps go on until their idle timeout."""
        self._closing = True
        for pod in self._pods.values():
            if pod.task is not None:
                pod.task.cancel()
        await asyncio.gather(
            *(p.task for p in self._pods.values() if p.task is not None), return_exceptions=True
        )
        for pod in self._pods.values():
            if pod.channel is not None:
                await pod.channel.aclose()

    async def release(self) -> None:
        """End the allocation now: its pods leave, and the steps still in them are cancelled.

        A step submitted afterwards holds the pods again (a notebook's next cell).
        """
        for work in list(self._works.values()):
            await self.cancel(work.handle)
        await self.host.cancel(self.handle)

    async def submit(
        self, handle: StepHandle, manifests: Manifests, *, replace: bool, rerun: bool = False
    ) -> None:
        """Queue the step for a pod of the allocation (adopting it where an agent holds it)."""
        step = handle.step
        assert step is not None
        message = _message(handle, manifests, self._python, self.host.kind)
        work = _Work(handle, message, step.resources.cpu_cores)
        self._works[work.id] = work
        held = self._held.pop(work.id, None)
        if held is not None:
            handle.adopted = True
            pod = self._pods.get(held[0])
            if pod is not None and not pod.gone:
                work.pod = pod.name
                pod.in_flight[work.id] = work
                if held[1] is not None:
                    self._ended(pod, held[1])
                return
        self._said = self._said or self._why()
        self._waiting(work)
        self._queue.append(work)
        if self.handle.done and not self._closing:  # released, or ended: hold the pods again
            self._restarts = 0
            self._spawn(self._restart())
        self._dispatch()

    async def attach(self, study: str, namespace: str) -> list[StepHandle]:
        """Return no handles: steps in an allocation are found by sending them again."""
        return []

    async def cancel(self, handle: StepHandle) -> None:
        work = self._works.get(handle.object_name)
        if work is None:
            return
        if work.pod is None:
            with contextlib.suppress(ValueError):
                self._queue.remove(work)
            self._finish(work, StepState.CANCELLED, "Cancelled", "cancelled before it ran")
            return
        pod = self._pods.get(work.pod)
        if pod is not None and pod.channel is not None:
            with contextlib.suppress(ChannelBroken):
                await pod.channel.send(_line({"op": "cancel", "id": work.id}))

    async def logs(
        self, handle: StepHandle, *, container: str | None, tail: int | None, index: int | None
    ) -> str:
        if handle.result.log_file:
            text = await asyncio.to_thread(Path(handle.result.log_file).read_text, "utf-8")
            return tail_lines(text, tail)
        return ""

    async def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        await handle.wait()
        for line in (
            await self.logs(handle, container=container, tail=None, index=None)
        ).splitlines():
            yield line

    # --- pods and channels ---------------------------------------------------------------

    def _pods_changed(self) -> None:
        if self._closing:
            return
        phases = self.host.pods_of(self.handle)
        for name, phase in phases.items():
            pod = self._pods.get(name)
            if pod is None:
                pod = self._pods[name] = _Pod(name)
            if phase in ("Succeeded", "Failed"):
                self._lost(pod, f"pod {name} ended ({phase})")
            elif phase == "Running" and pod.task is None and not pod.gone:
                pod.task = asyncio.create_task(self._follow(pod))
        for name, pod in self._pods.items():
            if name not in phases and not pod.gone:
                self._lost(pod, f"pod {name} was deleted")
        self._check_synced()

    def _allocation_changed(self, handle: StepHandle) -> None:
        if self._closing:
            return
        if not handle.done:  # why its pods wait (Kueue's quota, the scheduler): said on
            self._tell_waiting()
            return
        for pod in self._pods.values():
            self._lost(pod, f"the allocation's Job ended ({handle.result.reason})")
        if self._queue and self._restarts < 3:  # steps still to run: hold the pods again
            self._restarts += 1
            self._spawn(self._restart())

    async def _restart(self) -> None:
        self.handle = StepHandle(
            name=allocation_step_name(self.allocation),
            study=self._study,
            object_name=self._manifests.name,
            namespace=self._manifests.namespace,
            backend=self.host,  # type: ignore[arg-type]
        )
        await self.host.submit(self.handle, self._manifests, replace=True, rerun=True)
        self.host.on_pods(self.handle, self._pods_changed)
        self.handle.add_listener(self._allocation_changed)

    async def _follow(self, pod: _Pod) -> None:
        """Keep a channel open to ``pod``'s agent and read it, until the pod is gone."""
        delay = 0.05
        while not pod.gone and not self._closing:
            try:
                pod.channel = await open_channel(self.host, self.handle.namespace, pod.name)
                await pod.channel.send(_line({"op": "hello", "protocol": 1}))
                delay = 0.05
                await self._read(pod, pod.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused (not up yet), broken, or gone: said, retried
                pod.said = str(exc)
                _log.debug("allocation %s: %s", self.allocation.name, exc)
            pod.ready = False
            if pod.channel is not None:
                await pod.channel.aclose()
                pod.channel = None
            self._check_synced()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)

    async def _read(self, pod: _Pod, channel: Channel) -> None:
        lines = channel.lines()
        while True:
            async with asyncio.timeout(SILENCE):
                line = await anext(lines, None)
            if line is None:
                raise ChannelBroken(f"pod {pod.name}: the agent's channel ended")
            try:
                message = decode_event(line)
            except ProtocolError as exc:  # said, and read on: one bad line loses nothing
                _log.warning("allocation %s: pod %s: %s", self.allocation.name, pod.name, exc)
                continue
            self._on_message(pod, dict(message))

    def _on_message(self, pod: _Pod, message: dict[str, Any]) -> None:
        kind = message.get("ev")
        if kind == "hello":
            self._hello(pod, message)
        elif kind == "started":
            self._started_in(pod, message)
        elif kind == "exit":
            self._ended(pod, message)
        elif kind == "refused":
            self._refused(pod, message)
        elif kind == "error":
            _log.warning(
                "allocation %s: pod %s: %s", self.allocation.name, pod.name, message.get("message")
            )

    def _hello(self, pod: _Pod, message: dict[str, Any]) -> None:
        capacity = message.get("capacity") or {}
        pod.capacity = float(capacity.get("cpu") or self.allocation.pod_cpu)
        pod.draining = bool(message.get("draining"))
        holds = {str(i) for i in (*message.get("running", ()), *message.get("queued", ()))}
        # Steps sent to it before the channel broke that it no longer holds, nor reports
        # ended in the replay that follows, are lost: checked once the replay is read.
        for step_id in holds:
            work = self._works.get(step_id)
            if work is None:
                self._held.setdefault(step_id, (pod.name, None))
            elif work.pod is None:
                with contextlib.suppress(ValueError):
                    self._queue.remove(work)
                work.pod = pod.name
                pod.in_flight[step_id] = work
        missing = [w for i, w in pod.in_flight.items() if i not in holds]
        pod.ready = True
        pod.said = ""
        if missing:
            asyncio.get_running_loop().call_later(
                1.0, self._check_missing, pod, {w.id for w in missing}
            )
        self._check_synced()
        self._dispatch()

    def _check_missing(self, pod: _Pod, ids: set[str]) -> None:
        for step_id in ids:
            work = pod.in_flight.get(step_id)
            if work is not None and not work.handle.done:
                pod.in_flight.pop(step_id, None)
                self._requeue(work, f"pod {pod.name}'s agent no longer held it")
        self._dispatch()

    def _started_in(self, pod: _Pod, message: dict[str, Any]) -> None:
        work = self._works.get(str(message.get("id")))
        if work is None:
            self._held.setdefault(str(message.get("id")), (pod.name, None))
            return
        work.pod = pod.name
        pod.in_flight[work.id] = work
        started = _time(message.get("t")) or datetime.now(UTC)
        work.handle.report(
            work.handle.result.evolve(
                state=StepState.RUNNING,
                reason="Running",
                message=f'running in pod {pod.name} of allocation "{self.allocation.name}"',
                started_at=started,
                pods=(pod.name,),
            )
        )

    def _ended(self, pod: _Pod, message: dict[str, Any]) -> None:
        step_id = str(message.get("id"))
        work = self._works.get(step_id)
        if work is None:
            self._held[step_id] = (pod.name, message)  # a later submit of it adopts this end
            return
        pod.in_flight.pop(step_id, None)
        reason = str(message.get("reason") or "")
        if reason == "Lost":
            self._requeue(work, str(message.get("message") or f"pod {pod.name} stopped it"))
        else:
            self._record_end(work, pod, message)
        self._dispatch()

    def _refused(self, pod: _Pod, message: dict[str, Any]) -> None:
        work = self._works.get(str(message.get("id")))
        reason = str(message.get("reason") or "Refused")
        if work is None:
            return
        pod.in_flight.pop(work.id, None)
        if reason == "MaxLifetime":
            pod.draining = True
            work.pod = None
            self._queue.appendleft(work)
        else:
            words = str(message.get("message") or reason)
            self._finish(
                work, StepState.FAILED, reason, f"the allocation's agent refused it: {words}"
            )
        self._dispatch()

    def _lost(self, pod: _Pod, why: str) -> None:
        if pod.gone:
            return
        pod.gone = True
        pod.ready = False
        if pod.task is not None:
            pod.task.cancel()
        for work in list(pod.in_flight.values()):
            self._requeue(work, why)
        pod.in_flight.clear()
        self._dispatch()

    def _requeue(self, work: _Work, why: str) -> None:
        if work.handle.done:
            return
        work.lost += 1
        lost_pod = work.pod or ""
        work.pod = None
        work.handle.add_event(
            StepEvent(
                time=datetime.now(UTC),
                pod=lost_pod,
                reason="AllocationPodLost",
                message=f"allocation pod lost: {why}; attempt {work.lost + 1}",
                action="Ignore",
            )
        )
        if work.lost >= LOST_LIMIT:
            self._finish(
                work,
                StepState.FAILED,
                "AllocationPodLost",
                f"lost its allocation pod {work.lost} times (last: {why})",
            )
            return
        work.handle.report(
            work.handle.result.evolve(
                state=StepState.PENDING,
                reason="AllocationPodLost",
                message=f"allocation pod lost ({why}); sent again",
                evictions=work.handle.result.evictions + 1,
            )
        )
        self._queue.appendleft(work)

    def _check_synced(self) -> None:
        if self._synced.is_set():
            return
        # A new allocation's agents hold nothing; an adopted one's may hold the very steps
        # this driver sends again: those are found (hello) before any is sent anew.
        live = [p for p in self._pods.values() if not p.gone]
        waiting = [p for p in live if not p.ready and p.task is not None]
        if not self.handle.adopted or (live and not waiting):
            self._synced.set()
            self._dispatch()

    # --- dispatch ------------------------------------------------------------------------

    def _dispatch(self) -> None:
        if not self._synced.is_set():
            return
        ready = [p for p in self._pods.values() if p.ready and not p.gone and not p.draining]
        while self._queue and ready:
            pod = min(ready, key=lambda p: len(p.in_flight) / max(p.capacity, 0.001))
            if len(pod.in_flight) >= self._window + math.ceil(pod.capacity):
                break
            work = self._queue.popleft()
            if work.handle.done:
                continue
            work.pod = pod.name
            pod.in_flight[work.id] = work
            channel = pod.channel
            assert channel is not None
            self._spawn(self._send(pod, channel, work))
        self._tell_waiting()

    def _tell_waiting(self) -> None:
        why = self._why()
        if why != self._said:  # said anew to every waiting step only when it changes
            self._said = why
            for work in self._queue:
                self._waiting(work)

    async def _send(self, pod: _Pod, channel: Channel, work: _Work) -> None:
        # A broken channel: the reader sees it too; re-attach says whether the agent has it.
        with contextlib.suppress(ChannelBroken):
            await channel.send(_line({"op": "submit", **work.message}))

    def _why(self) -> str:
        """Return why a queued step waits, in the pods' (or the API server's) words."""
        if any(p.ready for p in self._pods.values()):
            return f'waiting for a slot in allocation "{self.allocation.name}"'
        said = "; ".join(f"pod {p.name}: {p.said}" for p in self._pods.values() if p.said)
        why = said or self.handle.result.message or "starting"
        return f'waiting for the pods of allocation "{self.allocation.name}" ({why})'

    def _waiting(self, work: _Work) -> None:
        if work.handle.result.state is StepState.PENDING:
            work.handle.report(
                work.handle.result.evolve(reason="AllocationWait", message=self._said)
            )

    # --- ends ----------------------------------------------------------------------------

    def _record_end(self, work: _Work, pod: _Pod, message: dict[str, Any]) -> None:
        code = message.get("code")
        reason = str(message.get("reason") or "Completed")
        usage = _usage(message.get("usage"))
        log_file = self._keep_log(work, str(message.get("log") or ""))
        state = StepState.SUCCEEDED if reason == "Completed" and code == 0 else StepState.FAILED
        step = work.handle.step
        retries = step.retries if step is not None else 0
        attempts = int(work.message.get("attempt", 1))
        if state is StepState.FAILED and reason != "Cancelled" and attempts <= retries:
            work.message["attempt"] = attempts + 1
            work.handle.add_event(
                StepEvent(
                    time=datetime.now(UTC),
                    pod=pod.name,
                    reason="ExitCode" if reason == "Error" else reason,
                    message=f"attempt {attempts} ended: {message.get('message') or reason}",
                    action="Count",
                )
            )
            work.pod = None
            self._queue.append(work)
            self._send_ack(pod, work.id)
            return
        if reason == "Cancelled":
            state = StepState.CANCELLED
        words = str(message.get("message") or "")
        if state is StepState.FAILED and reason in ("Error", "Completed"):
            reason = "ExitCode"
            words = words or f"the script exited {code}"
        result = work.handle.result.evolve(
            state=state,
            reason="Completed" if state is StepState.SUCCEEDED else reason,
            message=words,
            exit_code=code if isinstance(code, int) else None,
            started_at=_time(message.get("started")) or work.handle.result.started_at,
            finished_at=_time(message.get("finished")) or datetime.now(UTC),
            pods=(pod.name,),
            usage=usage,
            log_file=log_file,
            outputs=dict(message.get("pushed") or {}) or work.handle.result.outputs,
        )
        self._works.pop(work.id, None)
        work.handle.report(result)
        self._send_ack(pod, work.id)

    def _send_ack(self, pod: _Pod, step_id: str) -> None:
        if pod.channel is not None:
            self._spawn(self._send_line(pod.channel, {"op": "ack", "id": step_id}))

    @staticmethod
    async def _send_line(channel: Channel, message: Mapping[str, Any]) -> None:
        with contextlib.suppress(ChannelBroken):
            await channel.send(_line(message))

    def _finish(self, work: _Work, state: StepState, reason: str, message: str) -> None:
        self._works.pop(work.id, None)
        work.handle.report(
            work.handle.result.evolve(
                state=state, reason=reason, message=message, finished_at=datetime.now(UTC)
            )
        )

    def _keep_log(self, work: _Work, text: str) -> str | None:
        if not text:  # nothing to keep: most short steps print nothing
            return None
        path = self._log_dir / self._study / f"{work.handle.object_name}.log"
        try:  # small (the agent sends 64 KiB at most): written here rather than in a thread
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")
        except OSError as exc:
            _log.warning(
                "step %s: its log could not be kept at %s: %s", work.handle.name, path, exc
            )
            return None
        return str(path)


def _message(
    handle: StepHandle,
    manifests: Manifests,
    python: str = "python3",
    backend_kind: str = "kubernetes",
) -> dict[str, Any]:
    """Return the submit message of ``handle``'s step (all but its ``op``)."""
    step = handle.step
    assert step is not None
    res = step.resources
    env = {
        "K8SJOBS_STUDY": handle.study,
        "K8SJOBS_STEP": step.name,
        "K8SJOBS_NODES": "1",
        "K8SJOBS_TASKS": str(res.tasks),
        "K8SJOBS_TASKS_PER_NODE": str(res.tasks_per_node),
        "K8SJOBS_CORES_PER_TASK": str(res.cores_per_task),
        "K8SJOBS_GPUS": str(res.gpus),
        "OMP_NUM_THREADS": str(res.cores_per_task),
    }
    for key, value in step.env.items():
        # A SecretStr travels in the channel only (never a ConfigMap, a log or a record).
        env[key] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    walltime = step.walltime.total_seconds() if step.walltime is not None else None
    pull, push = _handoff(step, manifests, python, backend_kind)
    return {
        "id": handle.object_name,
        "hash": manifests.spec_hash,
        "script": step.script,
        "shell": list(step.argv),
        "env": env,
        "cpu": res.cpu_cores,
        "memory": res.memory_bytes or 0,
        "gpus": res.gpus,
        "walltime": walltime,
        "pull": pull,
        "push": push,
    }


def _handoff(
    step: Step, manifests: Manifests, python: str, backend_kind: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return the pull and push commands of ``step`` (None where it has no inputs, outputs).

    The very handoff a step's own pod runs (``python -m k8sjobs.handoff``), with the same
    config (``handoff.json`` of the step's rendered ConfigMap: pinned inputs, the store,
    the lineage annotations), given in a variable: the agent writes no file for it.
    """
    config = (manifests.configmap.get("data") or {}).get("handoff.json")
    if not config:
        return None, None
    env = {"K8SJOBS_HANDOFF_CONFIG": config, "K8SJOBS_BACKEND_KIND": backend_kind}
    verb = [python, "-m", "k8sjobs.handoff"]
    where = ["--config", "env:K8SJOBS_HANDOFF_CONFIG"]
    pull = {"argv": [*verb, "pull", *where], "env": env} if step.inputs else None
    # The agent runs the push only after the script exited 0: it says so (no marker).
    push = (
        {"argv": [*verb, "push", *where, "--exit-code", "0"], "env": env} if step.outputs else None
    )
    return pull, push


def _line(message: Mapping[str, Any]) -> bytes:
    return encode(message)


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return datetime.fromtimestamp(value, UTC)
    return None


def _usage(value: Any) -> Usage | None:
    if not isinstance(value, dict):
        return None

    def number(key: str) -> float | None:
        item = value.get(key)
        return float(item) if isinstance(item, int | float) and math.isfinite(item) else None

    peak = number("max_rss")
    return Usage(
        wall_seconds=number("wall"),
        cpu_seconds=number("cpu_seconds"),
        memory_peak=int(peak) if peak is not None else None,
        source="rusage",
    )


def tail_lines(text: str, tail: int | None) -> str:
    """Return the last ``tail`` lines of ``text`` (all of it for None, none for 0)."""
    if tail is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-tail:]) if tail > 0 else ""


def _now() -> float:
    return time.time()
