"""LocalBackend: run steps as processes on this machine, from the very manifests a cluster gets.

The backend plays the job controller for its own Jobs: it reserves the step's cores, memory
and GPUs from the slot scheduler (FIFO, never oversubscribing), runs the Job's pod template
through the shared ``PodRunner`` (one pod per index for ``nodes > 1``, with
``JOB_COMPLETION_INDEX``), retries failed pods up to ``backoffLimit``, enforces
``activeDeadlineSeconds``, and writes a Job status with the conditions a real controller
writes. The step's state then comes from the same ``judge`` the Kubernetes backend uses, so
a failure reads the same wherever it ran.

Each step's record (state, pods, the driver's pid) is kept as JSON under
``state_dir/steps/<study>/``, so ``k8sjobs status|logs|cancel`` from another process find it.
Local steps live as long as the driver that runs them: closing the backend cancels them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .._printable import printable
from ..artifacts.handoff import OUTPUTS_FILE, read_push_report
from ..errors import SpecMismatch
from ..events import StepEvent, pod_event
from ..handle import StepHandle
from ..observe.native import Native, native
from ..render.jobindex import format_indexes, match_success_policy
from ..render.manifests import (
    ANNOTATION_FAILED_OUTPUTS,
    ANNOTATION_STEP,
    ANNOTATION_STUDY,
    LABEL_HASH,
    MAIN_CONTAINER,
    PULL_CONTAINER,
    PUSH_CONTAINER,
)
from ..state import StepResult, StepState
from ..status import judge
from ..steps.failure import rule_action
from ..steps.names import label_value
from ..steps.quantity import parse_bytes, parse_cores
from ..steps.scheduling import ignored as ignored_scheduling
from ..usage import Usage
from ._adopt import Orphan, ended_status, find_orphans, unfinished_handoffs
from ._faults import kill_point
from ._handoff import InProcessHandoff, handoff_mode
from ._logfile import chunks, lines, tail_offset
from ._objects import LocalObjects
from ._podstatus import PodStatus
from ._studylock import StudyLock
from ._volumedirs import VolumeDirs
from .gpus import Gpu, GpuPool, device_env, discover
from .podrunner import PodRunner
from .slots import SlotScheduler

if TYPE_CHECKING:
    from ..render.manifests import Manifests

__all__ = ["LocalBackend"]

_log = logging.getLogger(__name__)

_POLL_LOG_SECONDS = 0.2
# The container whose log explains a failure, when it is not the step's own.
_LOG_OF = {"OutputPushFailed": PUSH_CONTAINER, "InputPullFailed": PULL_CONTAINER}
# The job controller's reasons and messages for a Job whose indexes failed (v1.36).
_INDEX_FAILURES = {
    "max-failed-indexes": (
        "MaxFailedIndexesExceeded",
        "Job has exceeded the specified maximal number of failed indexes",
    ),
    "failed-indexes": ("FailedIndexes", "Job has failed indexes"),
}


class LocalBackend:
    """Runs steps as local processes; artifacts go to an OCI layout directory by default.

    ``cpu``, ``memory`` (bytes) and ``gpus`` bound what runs at once (default: this
    machine's cores and memory, and the GPUs ``k8sjobs.local.gpus.discover`` finds).
    ``gpus`` may be a count (devices 0..n-1, NVIDIA's variables) or a list of ``Gpu``; each
    pod gets its own devices (``CUDA_VISIBLE_DEVICES`` and its kin), never another's.
    ``kill_grace`` is the seconds between SIGTERM and SIGKILL when a step is cancelled or
    runs over its walltime. ``handoff`` is
    "in-process" (the default, or $K8SJOBS_HANDOFF) or "subprocess": how the pods' artifact
    handoff containers run (see ``k8sjobs.local._handoff``). ``volumes`` maps a claim name, an
    NFS share ("server:/path") or a volume name to a directory (default: $K8SJOBS_LOCAL_VOLUMES;
    an unmapped claim is ``state_dir/claims/<namespace>/<claim>``). ``configmaps`` and
    ``secrets`` (name to data) stand for the cluster objects a step's volumes name.
    """

    kind = "local"

    def __init__(
        self,
        *,
        state_dir: str | os.PathLike[str] = ".k8sjobs",
        store: str | None = None,
        cpu: float | None = None,
        memory: int | None = None,
        gpus: int | Sequence[Gpu] | None = None,
        kill_grace: float = 5.0,
        pending_grace: float = 60.0,
        handoff: str | None = None,
        volumes: Mapping[str, str | os.PathLike[str]] | None = None,
        configmaps: Mapping[str, Mapping[str, str]] | None = None,
        secrets: Mapping[str, Mapping[str, str | bytes]] | None = None,
    ) -> None:
        root = Path(state_dir).absolute()
        self.namespace = "default"
        self.default_store = store or f"oci:{root / 'artifacts'}"
        self.handoff = InProcessHandoff() if handoff_mode(handoff) == "in-process" else None
        self.runner = PodRunner(
            root / "pods",
            kill_grace=kill_grace,
            handoff=self.handoff,
            volume_dirs=VolumeDirs.configured(root / "claims", volumes),
        )
        self.objects = LocalObjects.given(configmaps, secrets)
        if gpus is None:
            devices = discover()
        elif isinstance(gpus, int):
            devices = [Gpu(str(i)) for i in range(gpus)]
        else:
            devices = list(gpus)
        self.gpus = GpuPool(devices)
        self.slots = SlotScheduler(cpu=cpu, memory=memory, gpus=len(devices))
        self._records = root / "steps"
        self.pending_grace = pending_grace
        self._runs: dict[str, _JobRun] = {}
        self._locks: dict[str, StudyLock] = {}  # the studies this driver runs (one driver each)
        self._locking = asyncio.Lock()

    async def start(self) -> None:
        """Create the state directories."""
        await anyio.to_thread.run_sync(lambda: self._records.mkdir(parents=True, exist_ok=True))

    async def aclose(self) -> None:
        """Cancel the steps still running: local processes cannot outlive their driver."""
        live = [run for run in self._runs.values() if not run.handle.done]
        await asyncio.gather(*(run.cancel() for run in live), return_exceptions=True)
        # A handle ends before its final record is written: wait for those writes, or a
        # driver that exits right after wait() leaves records that still say RUNNING.
        await asyncio.gather(*(run.settle() for run in self._runs.values()))
        if self.handoff is not None:
            await self.handoff.aclose()
        for lock in self._locks.values():
            lock.release()

    async def submit(
        self, handle: StepHandle, manifests: Manifests, *, replace: bool, rerun: bool = False
    ) -> None:
        """Start the step's Job, or adopt the run or success recorded for the same spec.

        A recorded success is not adopted when ``rerun`` is true, nor when it was of another
        spec (then the step runs); a run of another spec still going raises SpecMismatch
        unless ``replace`` is true.
        """
        if manifests.job["kind"] == "JobSet":  # its controller makes the child Jobs
            raise ValueError(
                f'Step "{handle.name}" has target: jobset, which runs only where the JobSet '
                "controller runs (a Kubernetes cluster with JobSet installed); run it there, "
                "or use target: job (the same launcher and workers as one Indexed Job) to run "
                "it locally"
            )
        if manifests.job["kind"] != "Job":  # a Flux Operator MiniCluster needs its operator
            raise ValueError(
                f'Step "{handle.name}" has target: minicluster, which runs only where the Flux '
                "Operator runs (a Kubernetes cluster); run it there, or use target: job "
                "(launch: ssh) to run it locally"
            )
        await self._lock_study(handle.study)
        key = f"{manifests.namespace}/{manifests.name}"
        current = self._runs.get(key)
        record = (
            current.record() if current else await self._read_record(handle.study, manifests.name)
        )
        orphans = await self._orphans(record) if current is None and record else []
        running = record is not None and (orphans or _running(record))
        same = record is not None and record["spec_hash"] == manifests.spec_hash
        if running and not same and not replace:
            raise SpecMismatch(
                f'Step "{handle.name}" of study "{handle.study}" is still running from a '
                "different spec; wait for it to end, stop it (k8sjobs cancel), or run with "
                "--replace (replace=True) to stop it and run the new spec"
            )
        succeeded = record is not None and record["result"]["state"] == "SUCCEEDED"
        # The same handle sent again (an OOM retry, retry_oom): its ended run is not adopted,
        # though the handle, waiting between attempts, reads PENDING.
        resent = current is not None and current.handle is handle and rerun
        if same and not resent and (running or (succeeded and not rerun)):
            assert record is not None
            handle.adopted = True
            if current is not None:
                current.follow(handle)
                return
            if not orphans:
                handle.report(_result_from_json(record["result"]))
                return
        if resent:
            assert current is not None
            await current.settle()  # its end is written: the next attempt's record follows
        elif current is not None and not current.handle.done:
            await current.cancel()
        ignored = ignored_scheduling(manifests.job["spec"]["template"]["spec"])
        if ignored:  # one machine: there is no other node, class or zone to choose
            _log.debug("step %s: the local backend ignores %s", handle.name, ", ".join(ignored))
        if replace:  # never two copies at once: what a dead driver left ends first
            grace = self.runner.kill_grace
            await asyncio.gather(*(k.stop(grace) for o in orphans for k in o.keepers.values()))
            orphans = []
        run = _JobRun(self, handle, manifests, orphans)
        # Ended while no driver watched: said once, ended, never as pending or running again.
        run.quiet = bool(orphans) and await anyio.to_thread.run_sync(
            lambda: all(o.ended() for o in orphans)
        )
        self._runs[key] = run
        run.start()

    async def _lock_study(self, study: str) -> None:
        """Hold the study's lock from its first submit on: raises StudyBusy if another has it."""
        async with self._locking:  # steps submitted at once take the lock once
            if study not in self._locks:
                lock = StudyLock(self._records / label_value(study), study)
                await anyio.to_thread.run_sync(lock.acquire)
                self._locks[study] = lock

    async def _orphans(self, record: Mapping[str, Any]) -> list[Orphan]:
        """Return the pods a dead driver left running (or ended unseen) for this record."""
        if record["result"]["state"] not in ("PENDING", "RUNNING") or _alive(record):
            return []
        namespace = record["namespace"]
        return await anyio.to_thread.run_sync(
            find_orphans, record, lambda pod: self.runner.sandbox(namespace, pod)
        )

    async def attach(self, study: str, namespace: str) -> list[StepHandle]:
        """Return handles for the steps of ``study`` run here or recorded by another driver."""
        folder = self._records / label_value(study)
        paths = await anyio.to_thread.run_sync(lambda: sorted(folder.glob("*.json")))
        handles = []
        for path in paths:
            try:
                handle = await self._attach_record(path)
            except _UNREADABLE as exc:
                # Written by a newer k8sjobs (a state this one does not know) or damaged:
                # the other steps are still shown, this one is named.
                _log.warning(
                    "k8sjobs: the step record %s cannot be read (%s: %s), so it is left out; "
                    "a k8sjobs as new as the one that wrote it reads it, and the next run of "
                    "the study writes it anew",
                    path,
                    type(exc).__name__,
                    printable(str(exc))[:200],
                )
                continue
            handles.append(handle)
        return handles

    async def _attach_record(self, path: Path) -> StepHandle:
        """Return the handle of the step recorded at ``path`` (raises if it cannot be read)."""
        record = json.loads(await anyio.Path(path).read_text())
        live = self._runs.get(f"{record['namespace']}/{record['object_name']}")
        if live is not None:
            return live.handle
        handle = StepHandle(
            name=record["name"],
            study=record["study"],
            object_name=record["object_name"],
            namespace=record["namespace"],
            backend=self,
        )
        orphans = await self._orphans(record)
        living = await anyio.to_thread.run_sync(_living, orphans)
        handle.report(_attached_result(record, orphaned=living))
        for event in record.get("events", ()):
            handle.add_event(StepEvent.from_json(event))
        return handle

    async def cancel(self, handle: StepHandle) -> None:
        """Stop the step: its processes get SIGTERM, then SIGKILL after the grace time."""
        run = self._runs.get(f"{handle.namespace}/{handle.object_name}")
        if run is not None and run.handle is handle:
            await run.cancel()
            return
        record = await self._read_record(handle.study, handle.object_name)
        if record is not None:  # run by another driver: tell it, and stop the processes
            marker = anyio.Path(self._record_path(handle.study, handle.object_name))
            await marker.with_suffix(".cancel").touch()
            # Each container's keeper (checked by its start time) stops its whole tree.
            namespace = record["namespace"]
            orphans = await anyio.to_thread.run_sync(
                find_orphans, record, lambda pod: self.runner.sandbox(namespace, pod)
            )
            grace = self.runner.kill_grace
            await asyncio.gather(*(k.stop(grace) for o in orphans for k in o.keepers.values()))
            handle.report(handle.result.evolve(state=StepState.CANCELLED, reason="Cancelled"))

    async def logs(
        self,
        handle: StepHandle,
        *,
        container: str | None,
        tail: int | None,
        index: int | None = None,
    ) -> str:
        """Return the log of the step's latest pod (its script's output by default; of a
        multi-node step, the launcher's unless ``index`` names another index).

        The whole text is held in memory: for a large log, use ``log_chunks``.
        """
        chunks = self.log_chunks(handle, container=container, tail=tail, index=index)
        text = b"".join([chunk async for chunk in chunks])
        return text.decode(errors="replace")

    async def log_chunks(
        self,
        handle: StepHandle,
        *,
        container: str | None = None,
        tail: int | None = None,
        follow: bool = False,
        index: int | None = None,
    ) -> AsyncIterator[bytes]:
        """Yield the log of the step's latest pod in bounded chunks (``_logfile``).

        ``tail`` starts at the last N lines (read from the end); ``follow`` goes on with
        what is written until the step ends; ``index`` picks a multi-node step's index.
        """
        path = await self._log_path(handle, container, index)
        while path is None or not await anyio.Path(path).exists():
            if not follow or handle.done:
                return
            await asyncio.sleep(_POLL_LOG_SECONDS)
            path = await self._log_path(handle, container, index)
        offset = 0
        if tail is not None:
            offset = await anyio.to_thread.run_sync(tail_offset, path, tail)
        until = (lambda: handle.done) if follow else None
        async for chunk in chunks(path, offset, until=until):
            yield chunk

    def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        """Yield the step's log lines as they are written, until the step ends."""
        return lines(self.log_chunks(handle, container=container, follow=True))

    async def _log_path(
        self, handle: StepHandle, container: str | None, index: int | None = None
    ) -> Path | None:
        run = self._runs.get(f"{handle.namespace}/{handle.object_name}")
        record = run.record() if run else await self._read_record(handle.study, handle.object_name)
        if not record or not record["pods"]:
            return None
        pod = _index_pod(record["pods"], handle.object_name, index)
        if pod is None:
            return None
        return self.runner.log_path(pod, container or MAIN_CONTAINER, namespace=handle.namespace)

    def pods_of(self, handle: StepHandle) -> dict[str, str]:
        """Return the pods of ``handle``'s Job by name, each with its phase."""
        run = self._runs.get(f"{handle.namespace}/{handle.object_name}")
        pods = {} if run is None else run.pods
        return {n: str((p.get("status") or {}).get("phase") or "Pending") for n, p in pods.items()}

    def on_pods(self, handle: StepHandle, callback: Callable[[], None]) -> None:
        """Call ``callback`` on every change of a pod of ``handle``'s Job (an allocation's)."""
        run = self._runs.get(f"{handle.namespace}/{handle.object_name}")
        if run is not None:
            run.pod_listeners.append(callback)

    def native_of(self, handle: StepHandle) -> Native:
        """Return the step's main process id (and its Job's uid) as last seen (observers')."""
        run = self._runs.get(f"{handle.namespace}/{handle.object_name}")
        return Native() if run is None else native(run.job, list(run.pods.values()))

    def _record_path(self, study: str, object_name: str) -> Path:
        return self._records / label_value(study) / f"{object_name}.json"

    async def _read_record(self, study: str, object_name: str) -> dict[str, Any] | None:
        path = anyio.Path(self._record_path(study, object_name))
        if not await path.exists():
            return None
        record: dict[str, Any] = json.loads(await path.read_text())
        return record


class _BackoffExceeded(Exception):
    """More pods failed than the Job's backoffLimit allows."""


class _ConfigMissing(Exception):
    """A pod cannot start: a ConfigMap, Secret or key it needs does not exist here."""


class _CancelledElsewhere(Exception):
    """Another process asked for the step to stop (``k8sjobs cancel``): do not retry."""


class _IndexesFailed(Exception):
    """More indexes failed for good than the Job's maxFailedIndexes allows."""


class _SuccessPolicyMet(Exception):
    """The indexes the Job's successPolicy names succeeded: the others are not needed."""


class _FailJob(Exception):
    """A podFailurePolicy FailJob rule matched a failed pod (the message is the Job's)."""


class _JobRun:
    """One local Job: reserve, run its pods, retry, time out, and report."""

    def __init__(
        self,
        backend: LocalBackend,
        handle: StepHandle,
        manifests: Manifests,
        orphans: list[Orphan] | None = None,
    ) -> None:
        self.backend = backend
        self.handle = handle
        self.manifests = manifests
        self.followers: list[StepHandle] = []
        self.job = copy.deepcopy(manifests.job)
        self.job["status"] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.task: asyncio.Task[None] | None = None
        self.path = backend._record_path(handle.study, manifests.name)
        self.policy_message = ""
        self._last_pod: dict[int | None, str] = {}
        self._save_lock = asyncio.Lock()
        self._saving: set[asyncio.Future[None]] = set()
        self._unsaved = False  # a save failed and was said
        # Pods a killed driver left running, by completion index: followed, never restarted.
        self.orphans = {_index_of(o.name, manifests.name): o for o in orphans or []}
        # Every adopted pod had ended before this driver looked: until one runs anew, its
        # waits and starts are the past, not news (issue 34: RUNNING of a step long ended).
        self.quiet = False
        # An allocation's, told of every change of a pod (allocations/pool.py).
        self.pod_listeners: list[Callable[[], None]] = []

    def start(self) -> None:
        self.task = asyncio.create_task(self._main())

    def follow(self, handle: StepHandle) -> None:
        """Keep ``handle`` (a resubmission of the same spec) as current as the original."""
        self.followers.append(handle)
        handle.report(self.handle.result)

    async def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def settle(self) -> None:
        """Return once the run has ended and its record is written."""
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.task)
        await asyncio.gather(*self._saving, return_exceptions=True)

    def record(self) -> dict[str, Any]:
        meta = self.manifests.job["metadata"]
        return {
            "name": meta["annotations"][ANNOTATION_STEP],
            "study": meta["annotations"][ANNOTATION_STUDY],
            "object_name": self.manifests.name,
            "namespace": self.manifests.namespace,
            "spec_hash": meta["labels"][LABEL_HASH],
            "driver_pid": os.getpid(),
            "pods": list(self.pods),
            "pod_status": {name: pod.get("status", {}) for name, pod in self.pods.items()},
            "result": _result_json(self.handle.result),
            "events": [event.to_json() for event in self.handle.events],
        }

    async def _main(self) -> None:
        def prepare() -> None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.with_suffix(".cancel").unlink(missing_ok=True)  # a past run's request

        await anyio.to_thread.run_sync(prepare)
        try:
            # Recorded before any process starts, so that another driver's attach or cancel
            # never misses a step that already runs (state changes are saved in the background).
            await self._save()
            await self._reserve_and_run()
        except asyncio.CancelledError:
            self._publish(
                self.handle.result.evolve(
                    state=StepState.CANCELLED,
                    reason="Cancelled",
                    message="cancelled by the driver",
                    finished_at=datetime.now(UTC),
                )
            )
            await asyncio.shield(self._save_or_warn())
            raise
        except ValueError as exc:  # the slot scheduler: this machine can never fit the step
            self._publish(
                self.handle.result.evolve(
                    state=StepState.FAILED, reason="Unschedulable", message=str(exc)
                )
            )
        except (OSError, ExceptionGroup) as exc:  # the state dir: a full disk, a read-only one
            cause = _only_os_error(exc)
            if cause is None:
                raise
            if not self.handle.result.state.terminal:
                self._publish(self.handle.result.evolve(**self._unwritable(cause)))
        if await self._cancel_requested():
            self._publish(
                self.handle.result.evolve(
                    state=StepState.CANCELLED,
                    reason="Cancelled",
                    message="cancelled from another process",
                    finished_at=datetime.now(UTC),
                )
            )
        await self._save_or_warn()

    def _unwritable(self, exc: OSError) -> dict[str, Any]:
        """Return the FAILED result's fields for a step whose state could not be written."""
        where = exc.filename or self.path
        return {
            "state": StepState.FAILED,
            "reason": "StateNotWritable",
            "message": f"k8sjobs could not write {where} ({exc.strerror or exc}); free space "
            "there, or run with --state-dir on a disk that can be written (a process of the "
            "step that started is adopted by the next run)",
            "finished_at": datetime.now(UTC),
        }

    async def _reserve_and_run(self) -> None:
        spec = self.job["spec"]
        template = spec["template"]["spec"]
        main = next(c for c in template["containers"] if c["name"] == MAIN_CONTAINER)
        limits = main.get("resources", {}).get("limits", {})
        nodes = int(spec.get("completions", 1))
        cpu = parse_cores(limits.get("cpu", 1)) * nodes
        memory = parse_bytes(limits.get("memory", 0)) * nodes
        gpus = sum(int(v) for k, v in limits.items() if k not in ("cpu", "memory")) * nodes
        self._judge(reason="WaitingForResources")
        async with self.backend.slots.reserve(
            cpu=cpu, memory=memory, gpus=gpus, label=self.handle.name
        ):
            if await self._cancel_requested():
                return
            # Pods' whole-second stamps and the Job's finer ones: compared as times, not text.
            started = min(
                (o.status.get("startTime") or _now() for o in self.orphans.values()),
                default=_now(),
                key=datetime.fromisoformat,
            )
            self.job["status"] = {"startTime": started, "active": nodes}
            self._judge()
            deadline = spec.get("activeDeadlineSeconds")
            if deadline is not None:  # an adopted run's walltime counts from its first start
                deadline = max(0.0, deadline - _seconds_since(started))
            try:
                async with asyncio.timeout(deadline):
                    failed = await self._run_indexes(nodes, int(spec.get("backoffLimit", 6)))
            except TimeoutError:
                self._finish("DeadlineExceeded", "Job was active longer than specified deadline")
                return
            if failed == "cancelled":
                return  # _main reports CANCELLED
            if failed == "config":
                self._finish("CreateContainerConfigError", self._waiting_message())
            elif failed == "policy":
                self._finish("PodFailurePolicy", self.policy_message)
            elif failed == "backoff":
                self._finish("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            elif failed in _INDEX_FAILURES:
                self._finish(*_INDEX_FAILURES[failed])
            else:
                self._finish(None, "")

    async def _run_indexes(self, nodes: int, backoff_limit: int) -> str:
        """Run the indexes until the Job's policies call the end.

        Returns "" (success), or why not: "backoff", "max-failed-indexes", "failed-indexes",
        "config", "cancelled". With ``backoffLimitPerIndex`` each index counts its own
        failures, and an index over its limit is failed for good (``failedIndexes``); more
        failed indexes than ``maxFailedIndexes`` fail the Job at once. A ``successPolicy``
        met ends the Job as soon as its indexes succeed; the others are stopped, as
        Kubernetes stops them.
        """
        spec = self.job["spec"]
        status = self.job["status"]
        per_index = spec.get("backoffLimitPerIndex")
        max_failed = spec.get("maxFailedIndexes")
        failures = 0
        index_failures: dict[int | None, int] = {}
        succeeded: set[int] = set()
        failed: set[int] = set()

        async def run_index(index: int | None) -> None:
            nonlocal failures
            while (phase := await self._next_pod(index)) != "Succeeded":
                pod = self.pods[self._last_pod[index]]
                if phase == "Pending":  # a missing ConfigMap, Secret or key: no retry helps
                    raise _ConfigMissing
                if await self._cancel_requested():  # its pods were killed from outside
                    raise _CancelledElsewhere
                # The Job's podFailurePolicy, as the job controller applies it.
                self._note_event(pod)
                rule = rule_action(self.job, pod)
                if rule is not None and rule[1] == "FailJob":
                    raise _FailJob(rule[2])
                if rule is not None and rule[1] == "Ignore":
                    continue
                failures += 1
                status["failed"] = failures
                index_failures[index] = index_failures.get(index, 0) + 1
                if per_index is not None and index is not None:
                    if index_failures[index] > int(per_index):
                        failed.add(index)
                        status["failedIndexes"] = format_indexes(failed)
                        if max_failed is not None and len(failed) > int(max_failed):
                            await self._let_dead_pods_report()
                            self._interim("FailureTarget", *_INDEX_FAILURES["max-failed-indexes"])
                            raise _IndexesFailed  # the task group stops the other indexes
                        return
                elif failures > backoff_limit:
                    raise _BackoffExceeded  # the task group stops the other indexes
                self._judge()
            if index is None:
                return
            succeeded.add(index)
            status["succeeded"] = len(succeeded)
            status["completedIndexes"] = format_indexes(succeeded)
            matched = match_success_policy(self.job, succeeded)
            if matched:
                self._interim("SuccessCriteriaMet", "SuccessPolicy", matched)
                raise _SuccessPolicyMet  # the task group stops the other indexes

        indexes: list[int | None] = list(range(nodes)) if nodes > 1 else [None]
        outcome = ""
        try:
            async with asyncio.TaskGroup() as group:
                for index in indexes:
                    group.create_task(run_index(index))
        except* _SuccessPolicyMet:
            outcome = ""
        except* _BackoffExceeded:
            outcome = "backoff"
        except* _IndexesFailed:
            outcome = "max-failed-indexes"
        except* _ConfigMissing:
            outcome = "config"
        except* _CancelledElsewhere:
            outcome = "cancelled"
        except* _FailJob as group:
            outcome = "policy"
            self.policy_message = str(group.exceptions[0])
        if outcome == "" and failed:
            outcome = "failed-indexes"
        return outcome

    async def _let_dead_pods_report(self) -> None:
        """Wait (bounded) until every pod whose program has already died has reported it.

        A launcher's MPI exits because a worker died, so the worker's program ended first;
        but a pod reports only once its keeper has swept the rest of it, which may be after
        the launcher reported. Judging in between would blame the launcher's exit code.
        """
        pods = list(self.pods.values())
        # Its keeper kills what the program left, within kill_grace; then the pod reports.
        for _ in range(int((self.backend.runner.kill_grace + 10) / _REPORT_POLL)):
            if not await anyio.to_thread.run_sync(_any_died_unreported, pods):
                return
            await asyncio.sleep(_REPORT_POLL)

    async def _cancel_requested(self) -> bool:
        return await anyio.Path(self.path.with_suffix(".cancel")).exists()

    async def _next_pod(self, index: int | None) -> str:
        """Follow the pod a dead driver left for this index, or else run a new one."""
        orphan = self.orphans.pop(index, None)
        return await (self._adopt_pod(index, orphan) if orphan else self._run_pod(index))

    async def _adopt_pod(self, index: int | None, orphan: Orphan) -> str:
        """Follow a pod's living containers to their end; returns the pod's phase."""
        pod = self._pod(index)
        pod["metadata"]["name"] = orphan.name
        pod["status"] = orphan.status
        self.pods[orphan.name] = pod
        self._last_pod[index] = orphan.name
        self._judge()
        grace = self.backend.runner.kill_grace
        names = list(orphan.keepers)
        ended = await asyncio.gather(*(orphan.keepers[n].wait(grace) for n in names))
        codes = dict(zip(names, ended, strict=True))
        for name in unfinished_handoffs(orphan.status, codes):
            # Its script succeeded under a keeper; its push died with the driver: push now.
            code = await self.backend.runner.finish_handoff(
                pod, name, configmap=self._configmap, secret=self._secret
            )
            if code is not None:
                codes[name] = code
        ends = {n: orphan.keepers[n].ended_at() for n in names}
        pod["status"] = ended_status(orphan.status, codes, ends)
        return str(pod["status"]["phase"])

    def _gpus_per_pod(self) -> int:
        """Return the GPUs each pod of the Job asks for (the main container's limits)."""
        template = self.job["spec"]["template"]["spec"]
        main = next(c for c in template["containers"] if c["name"] == MAIN_CONTAINER)
        limits = main.get("resources", {}).get("limits", {})
        return sum(int(v) for k, v in limits.items() if k not in ("cpu", "memory"))

    async def _run_pod(self, index: int | None) -> str:
        self.quiet = False  # a new pod runs: its start is news
        pod = self._pod(index)
        name = pod["metadata"]["name"]
        pod["status"] = PodStatus(pod, _ignore).report()  # its containers waiting
        self.pods[name] = pod
        self._last_pod[index] = name  # its failure is judged by the podFailurePolicy
        # Recorded before any of its containers starts (not in the background): a driver
        # killed from now on leaves the pod's sandbox findable, and its keepers adopted.
        await self._save()
        kill_point("pod-recorded")
        extra = {"JOB_COMPLETION_INDEX": str(index)} if index is not None else {}
        extra["K8SJOBS_BACKEND_KIND"] = "local"  # for the lineage of its outputs
        pool = self.backend.gpus
        devices = pool.take(self._gpus_per_pod(), name) if pool.devices else ()
        if pool.devices:
            extra.update(device_env(devices, pool.devices))

        def on_status(status: dict[str, Any]) -> None:
            pod["status"] = status
            self._judge()

        try:
            final = await self.backend.runner.run(
                pod,
                configmap=self._configmap,
                secret=self._secret,
                on_status=on_status,
                extra_env=extra,
            )
        finally:
            pool.give_back(devices)
        pod["status"] = {**final, "phase": final.get("phase", "Failed")}
        return str(pod["status"]["phase"])

    def _note_event(self, pod: dict[str, Any]) -> None:
        """Record a failed pod in the step's events (kept in the record for other processes)."""
        event = pod_event(self.job, pod)
        if event is not None:
            for handle in (self.handle, *self.followers):
                handle.add_event(event)

    def _pod(self, index: int | None) -> dict[str, Any]:
        template = self.job["spec"]["template"]
        meta = copy.deepcopy(template.get("metadata") or {})
        job_name = self.manifests.name
        suffix = secrets.token_hex(3)[:5]
        name = f"{job_name}-{index}-{suffix}" if index is not None else f"{job_name}-{suffix}"
        meta.update(name=name, namespace=self.manifests.namespace, creationTimestamp=_now())
        meta.setdefault("labels", {})["batch.kubernetes.io/job-name"] = job_name
        spec = copy.deepcopy(template["spec"])
        if index is not None:
            meta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(
                index
            )
            spec["hostname"] = f"{job_name}-{index}"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def _waiting_message(self) -> str:
        for pod in self.pods.values():
            for status in pod.get("status", {}).get("containerStatuses", []):
                waiting = status.get("state", {}).get("waiting", {})
                if waiting.get("reason") == "CreateContainerConfigError":
                    return f"container {status['name']}: {waiting.get('message', '')}"
        return "a ConfigMap, Secret or key the step needs is missing"

    def _configmap(self, name: str) -> Mapping[str, str]:
        if name != self.manifests.configmap["metadata"]["name"]:
            return self.backend.objects.configmap(name)  # a step volume's ConfigMap
        data: dict[str, str] = self.manifests.configmap["data"]
        return data

    def _secret(self, name: str) -> Mapping[str, bytes]:
        secret = self.manifests.secret
        if secret is None or name != secret["metadata"]["name"]:
            return self.backend.objects.secret(name)
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def _interim(self, kind: str, reason: str, message: str) -> None:
        """Write the condition that decides the Job before its other pods are stopped.

        The job controller writes SuccessCriteriaMet or FailureTarget first, then stops
        what still runs, then Complete or Failed: the step's outcome is known at once.
        """
        now = _now()
        self.job["status"]["conditions"] = [_condition(kind, reason, message, now)]
        self._judge()

    def _finish(self, reason: str | None, message: str) -> None:
        status = self.job["status"]
        now = self._pods_end() if self.quiet else _now()
        status["active"] = 0
        interim = status.get("conditions") or []
        if interim:  # a success policy met, or failed indexes: the final condition follows
            first = interim[0]
            final = "Complete" if first["type"] == "SuccessCriteriaMet" else "Failed"
            if final == "Complete":
                status["completionTime"] = now
            status["conditions"] = [
                first,
                _condition(final, first["reason"], first["message"], now),
            ]
            self._judge()
            return
        if reason is None:
            status["succeeded"] = int(self.job["spec"].get("completions", 1))
            status["completionTime"] = now
            kinds = ("SuccessCriteriaMet", "Complete")
        else:
            kinds = ("FailureTarget", "Failed")
        status["conditions"] = [
            _condition(
                kind,
                reason or "CompletionsReached",
                message or "Reached expected number of succeeded pods",
                now,
            )
            for kind in kinds
        ]
        self._judge()

    def _pods_end(self) -> str:
        """Return when the last of the pods' containers ended: the end of a Job whose pods
        all ended while no driver watched (the job controller would have seen it then)."""
        ends = [
            datetime.fromisoformat(c["state"]["terminated"]["finishedAt"])
            for pod in self.pods.values()
            for c in (pod.get("status") or {}).get("containerStatuses") or ()
            if "terminated" in (c.get("state") or {})
        ]
        return max(ends).isoformat() if ends else _now()

    def _judge(self, reason: str | None = None) -> None:
        for callback in list(self.pod_listeners):
            callback()
        now = datetime.now(UTC)
        grace = self.backend.pending_grace
        result = judge(self.job, self.pods.values(), now=now, pending_grace=grace)
        result = result.evolve(name=self.handle.name)
        if reason and result.state is StepState.PENDING:
            result = result.evolve(reason=reason, message="waiting for cores, memory or GPUs")
        if result.state.terminal:
            result = self._complete(result)
        self._publish(result)

    def _complete(self, result: StepResult) -> StepResult:
        pods = list(self.pods)
        container = _LOG_OF.get(result.reason, MAIN_CONTAINER)
        job_name = self.manifests.name
        log = self.backend.runner.log_path(_log_pod(pods, job_name), container) if pods else None
        outputs = dict(self.manifests.outputs)
        failed = self.job["metadata"].get("annotations", {}).get(ANNOTATION_FAILED_OUTPUTS)
        if not result.ok and failed:  # push_outputs: always; never the success references
            outputs = json.loads(failed)
        if (result.ok or failed) and pods:
            outputs.update(self._pushed(pods))
        return result.evolve(log_file=str(log) if log else None, outputs=outputs)

    def _pushed(self, pods: list[str]) -> dict[str, str]:
        """Return the outputs the push container reported, pinned by digest."""
        index0 = _log_pod(pods, self.manifests.name)
        path = self.backend.runner.sandbox(self.manifests.namespace, index0)
        try:
            return read_push_report((path / "volumes" / "status" / OUTPUTS_FILE).read_text())
        except OSError:
            return {}

    def _publish(self, result: StepResult) -> None:
        if self.quiet and not result.state.terminal:
            return
        changed = result.state is not self.handle.result.state
        for handle in (self.handle, *self.followers):
            handle.report(result)
        if changed and not result.state.terminal:  # the final save is awaited by _main
            saving = asyncio.ensure_future(self._save_or_warn())
            self._saving.add(saving)
            saving.add_done_callback(self._saving.discard)

    async def _save(self) -> None:
        # One write at a time, each of the latest record, so the file never goes back in time.
        async with self._save_lock:
            await _write_json(self.path, self.record())

    async def _save_or_warn(self) -> None:
        """Save the record; a failure (a full disk) is said once, and the run goes on: the
        step's result is still known to this driver, and its pods' ends to their keepers."""
        try:
            await self._save()
        except OSError as exc:
            if not self._unsaved:
                self._unsaved = True
                _log.warning(
                    "k8sjobs: step %s: its record %s cannot be written (%s); status from "
                    "another process shows it as last saved until space is freed",
                    self.handle.name,
                    self.path,
                    exc.strerror or exc,
                )


_REPORT_POLL = 0.05


def _any_died_unreported(pods: list[dict[str, Any]]) -> bool:
    """Return whether a pod still shown running has a container whose process is gone."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        for container in status.get("containerStatuses") or ():
            pid = str(container.get("containerID", "")).removeprefix("local://")
            if "running" in (container.get("state") or {}) and pid.isdigit() and _gone(int(pid)):
                return True
    return False


def _gone(pid: int) -> bool:
    """Return whether a process has ended (a zombie has: only its reaping is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def _ignore(status: Mapping[str, Any]) -> None:
    """A status sink for a status only read."""


def _log_pod(pods: list[str], job_name: str) -> str:
    """Return the pod whose log tells the step: index 0's latest (the launcher), else the last."""
    launchers = [pod for pod in pods if pod.startswith(f"{job_name}-0-")]
    return (launchers or pods)[-1]


def _index_pod(pods: list[str], job_name: str, index: int | None) -> str | None:
    """Return ``_log_pod``, or with ``index`` that index's latest pod (None if it has none)."""
    if index is None:
        return _log_pod(pods, job_name)
    chosen = [pod for pod in pods if pod.startswith(f"{job_name}-{index}-")]
    return chosen[-1] if chosen else None


def _now() -> str:
    """Return the time for the Job's status: RFC 3339 to the microsecond.

    The API server writes whole seconds; this Job never reaches one, and its startTime and
    completionTime are what a step's duration is read from, so they keep what a step that
    took 0.3 s needs ("300ms", not "0s"). Pod statuses keep the API's whole seconds.
    """
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """Return a Job condition as the job controller writes it."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _seconds_since(stamp: str) -> float:
    return (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()


def _index_of(pod: str, job: str) -> int | None:
    """Return the completion index in a pod's name (``<job>-<index>-<suffix>``), if any."""
    rest = pod.removeprefix(f"{job}-").split("-")
    return int(rest[0]) if len(rest) > 1 and rest[0].isdigit() else None


def _running(record: Mapping[str, Any]) -> bool:
    """Return whether a recorded run still goes on under a live driver (this one or not)."""
    return record["result"]["state"] in ("PENDING", "RUNNING") and _alive(record)


def _alive(record: Mapping[str, Any]) -> bool:
    pid = int(record.get("driver_pid", 0))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OverflowError):
        return False
    return True


def _only_os_error(exc: BaseException) -> OSError | None:
    """Return the OSError ``exc`` is, or the first of a group made of OSErrors only."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [_only_os_error(e) for e in exc.exceptions]
        return found[0] if found and all(found) else None
    return None


# What reading a step record raises when a newer k8sjobs wrote it or it is damaged.
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError)


def _living(orphans: list[Orphan]) -> bool:
    return any(keeper.alive() for orphan in orphans for keeper in orphan.keepers.values())


def _attached_result(record: Mapping[str, Any], *, orphaned: bool = False) -> StepResult:
    result = _result_from_json(record["result"])
    if orphaned:  # its driver died, its processes did not: running, and it can be stopped
        return result.evolve(
            state=StepState.RUNNING,
            reason="DriverExited",
            message="its driver exited, its processes still run: run the study again to "
            "follow the step, or cancel it",
        )
    if not result.state.terminal and not _alive(record):
        return result.evolve(
            state=StepState.LOST,
            reason="DriverExited",
            message="the driver that ran this step exited before it ended",
        )
    return result


def _result_json(result: StepResult) -> dict[str, Any]:
    def stamp(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "name": result.name,
        "state": result.state.value,
        "reason": result.reason,
        "message": result.message,
        "exit_code": result.exit_code,
        "started_at": stamp(result.started_at),
        "finished_at": stamp(result.finished_at),
        "pods": list(result.pods),
        "outputs": dict(result.outputs),
        "log_file": result.log_file,
        "usage": None if result.usage is None else result.usage.to_json(),
    }


def _result_from_json(data: Mapping[str, Any]) -> StepResult:
    def when(value: str | None) -> datetime | None:
        return datetime.fromisoformat(value) if value else None

    return StepResult(
        name=data["name"],
        state=StepState(data["state"]),
        reason=data["reason"],
        message=data["message"],
        exit_code=data["exit_code"],
        started_at=when(data["started_at"]),
        finished_at=when(data["finished_at"]),
        pods=tuple(data["pods"]),
        outputs=dict(data["outputs"]),
        log_file=data["log_file"],
        usage=Usage.from_json(data["usage"]) if data.get("usage") else None,
    )


async def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` atomically (a reader in another process never sees half a file)."""

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, indent=1))
        temporary.replace(path)

    await anyio.to_thread.run_sync(write)
