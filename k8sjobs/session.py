"""Session and submit_step: the front door of k8sjobs.

A Session names a study, holds its backends (Kubernetes, local, or both) and turns Steps
into running work: it renders each step, waits for the steps whose outputs it reads, pins
those outputs by digest, and hands the manifests to a backend. Waiting costs nothing: each
backend keeps every handle current from one shared watch.

    async with Session(study="mummi", namespace="hpc") as s:
        sim = await s.submit(Step(name="sim", script="...", outputs={"traj": "traj.h5"}))
        ana = await s.submit(Step(name="ana", script="...", inputs={"t": sim.output("traj")}))
        for result in await s.gather(sim, ana):
            print(result.describe())
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from . import _gcpace
from .backend import Backend
from .errors import AllocationRefused, ClusterUnreachable, SessionClosed, StepFailed, StudyError
from .handle import StepHandle
from .oomretry import GrowingMemory
from .render.manifests import HANDOFF_IMAGE, Manifests, Target, placement, render
from .render.multinode import SshKey
from .render.sshkey import key_for
from .reuse import Reuse
from .state import StepResult, StepState
from .steps.allocation import Allocation, refusal
from .steps.spec import Step, StepOutput, StepTarget, check_dns_label

if TYPE_CHECKING:
    from .allocations.pool import AllocationBackend, PodHost
    from .kube.watch import WatchStats
    from .observe import Observer

__all__ = ["Session", "default_session", "dependency_failure", "submit_step"]

BackendName = Literal["kubernetes", "local"]


class Session:
    """A study's connection to where its steps run.

    ``backend`` is "kubernetes" (the default; ``kubeconfig``/``context`` choose the
    cluster, in-cluster config is used inside a pod), "local" (processes on this machine),
    or a Backend instance. ``store`` is the artifact store: a registry
    (``host:port/prefix``) or an OCI layout directory (``oci:/path``); the local backend
    defaults to ``oci:.k8sjobs/artifacts``. ``options`` go to the default backend's
    constructor (``KubernetesBackend(qps=...)``, ``LocalBackend(state_dir=..., cpu=...)``).
    On leaving the ``async with`` block through an
    exception (Ctrl-C included) the steps it started and that are still running are
    cancelled; on a normal exit they keep running, and ``attach`` finds them again.
    While started, it raises CPython's young-generation collection threshold (to 50,000,
    unless set higher) and puts it back when closed: a driver holding many steps otherwise
    spends more CPU per step in full collections the more steps it holds.
    ``cache`` (default true) reuses a step's recorded success with the same key instead
    of running it again, and records each success for later runs; false runs every step
    (docs/reruns.md). ``target`` is what a step that names no ``target`` of its own
    runs as ("job", "jobset" or "minicluster"; unset, each step's default, "job").
    ``allocations`` are pods held for the study, which a step naming one
    (``Step(allocation="pool")``) runs in (docs/allocations.md); ``submit`` refuses a step
    naming another, or one that cannot run in its allocation, with AllocationRefused.
    """

    def __init__(
        self,
        *,
        study: str = "default",
        namespace: str | None = None,
        backend: BackendName | Backend = "kubernetes",
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        store: str | None = None,
        plain_http: bool = False,
        registry_secret: str | None = None,
        handoff_image: str = HANDOFF_IMAGE,
        target: StepTarget | None = None,
        log_dir: str | os.PathLike[str] = ".k8sjobs/logs",
        keep_failed: bool = False,
        cache: bool = True,
        options: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        metrics_port: int | None = None,
        trace_file: str | os.PathLike[str] | None = None,
        allocations: Sequence[Allocation] = (),
    ) -> None:
        self._allocations = _by_name(allocations)
        self.study = study
        self.store = store
        self.plain_http = plain_http
        self.registry_secret = registry_secret
        self.handoff_image = handoff_image
        self.target = _check_target(target)
        self.log_dir = Path(log_dir)
        # Checked as a Step's is, before anything is written: it names directories too
        # (the local backend's sandboxes), which "../x" would leave.
        self._namespace = _check_namespace(namespace)
        self._default_kind = backend if isinstance(backend, str) else backend.kind
        self._options = dict(options or {})
        self._kube_args: dict[str, Any] = {
            "kubeconfig": kubeconfig,
            "context": context,
            "keep_failed": keep_failed,
            **(self._options if self._default_kind == "kubernetes" else {}),
        }
        self._backends: dict[str, Backend] = {}
        if not isinstance(backend, str):
            self._backends[backend.kind] = backend
        self._handles: dict[str, StepHandle] = {}
        # One key pair per multi-node step, kept so a re-render sends the same Secret.
        self._ssh_keys: dict[str, SshKey] = {}
        # What each retry_oom step was last sent with (pinned inputs, cache key).
        self._sent_with: dict[str, tuple[dict[str, str], str | None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: set[str] = set()
        self._started = False
        self._closed = False
        self._pace = _gcpace.Holder()  # the garbage collector's pace, held while started
        self._reuse = Reuse(enabled=cache, plain_http=plain_http)
        # Traces, metrics, a trace file (docs/observability.md): made at start, None when
        # nothing was asked for (then nothing of it is imported or called).
        self._observing = {
            "tracer_provider": tracer_provider,
            "meter_provider": meter_provider,
            "metrics_port": metrics_port,
            "trace_file": trace_file,
        }
        self.observer: Observer | None = None

    @property
    def namespace(self) -> str:
        """Return the namespace steps go to unless a step names its own.

        The session's ``namespace`` if given, else the default backend's (the kubeconfig
        context's namespace, or the pod's in-cluster, once the session has started), else
        "default": where ``submit`` sends steps and ``attach`` looks for them.
        """
        return self._namespace_of(self._backends.get(self._default_kind))

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        """Return the session's allocations by name (read-only)."""
        return MappingProxyType(self._allocations)

    @property
    def handles(self) -> dict[str, StepHandle]:
        """Return the handles of this session's steps, by step name."""
        return dict(self._handles)

    @property
    def watch_stats(self) -> WatchStats:
        """Return how the Kubernetes watches fared: reconnects and relists, by reason.

        Empty until the Kubernetes backend has started (and always, for the local one).
        """
        from .kube.watch import WatchStats

        stats = getattr(self._backends.get("kubernetes"), "watch_stats", None)
        return stats if isinstance(stats, WatchStats) else WatchStats()

    @property
    def backends(self) -> dict[str, Backend]:
        """Return the backends this session has made or was given, by kind."""
        return dict(self._backends)

    @property
    def closed(self) -> bool:
        """Return whether the session has been closed (it takes no more steps)."""
        return self._closed

    async def __aenter__(self) -> Session:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and not issubclass(exc_type, ClusterUnreachable):
            # (An unreachable server cannot be asked to stop them; they keep running.)
            await asyncio.shield(self.cancel_all())
        await self.aclose()

    async def start(self) -> None:
        """Start the default backend (done by ``async with``)."""
        if self._closed:
            raise SessionClosed("Cannot start a session that has been closed.")
        self._started = True
        self._pace.hold()
        try:
            self.observer = _observer(self)
            await self._backend(self._default_kind)
        except BaseException:
            self._pace.release()  # a session that did not start (even by Ctrl-C) holds nothing
            if self.observer is not None:
                self.observer.close()
            raise

    async def aclose(self) -> None:
        """Stop deferred submissions and close every backend; running steps keep running."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await self._reuse.aclose()  # the results being recorded are written first
            # An allocation first: its channels ride on its host's connections.
            for kind in sorted(self._running, key=lambda k: not k.startswith("allocation/")):
                await self._backends[kind].aclose()
        finally:
            self._pace.release()
            if self.observer is not None:
                await self.observer.aclose()

    async def submit(
        self,
        step: Step,
        *,
        after: Iterable[StepHandle] = (),
        replace: bool = False,
        backend: BackendName | None = None,
        rerun: bool = False,
    ) -> StepHandle:
        """Start ``step`` and return its handle at once.

        A step whose inputs are outputs of steps in this session (``other.output("x")``),
        or that names handles in ``after``, is sent only once those have succeeded, with
        their outputs pinned by digest; if one fails it ends FAILED ("DependencyFailed")
        without running. A step whose key has a recorded success is not run: its handle
        ends SUCCEEDED with reason "Cached" and the recorded outputs. ``rerun`` runs it
        all the same (its new result replaces the record); ``replace`` stops a still
        running copy of another spec instead of refusing with SpecMismatch. Errors from
        the backend (API refusals) are raised here.
        """
        chosen = await self._backend(backend or self._default_kind)
        self._check_allocations([step], chosen)
        if step.allocation is not None:
            chosen = await self.allocate(step.allocation, backend=backend)
        handle, upstream = self._register(step, chosen, after)
        how = _How(replace=replace, rerun=rerun)
        if upstream:
            self._defer(handle, upstream, how)
        else:
            try:
                await self._start(handle, how)
            except BaseException:
                del self._handles[step.name]
                raise
        return handle

    async def submit_many(
        self,
        steps: Sequence[Step],
        *,
        replace: bool = False,
        rerun: bool = False,
        limit: int = 64,
    ) -> list[StepHandle]:
        """Submit ``steps`` with at most ``limit`` creations in flight; return their handles.

        Unlike ``submit``, one refused step does not stop the others: its handle ends
        FAILED with reason "SubmitFailed" and the error in its message. A step its
        allocation refuses is the exception: AllocationRefused is raised before any step
        is sent, as a study refuses it when loaded (the batch is wrong as written).
        """
        chosen = await self._backend(self._default_kind)
        self._check_allocations(steps, chosen)
        names = sorted({s.allocation for s in steps if s.allocation is not None})
        held = {n: await self.allocate(n) for n in names}
        registered = [
            self._register(step, held.get(step.allocation or "", chosen), ())
            for step in _producers_first(steps)
        ]
        how = _How(replace=replace, rerun=rerun)
        ready: list[StepHandle] = []
        for handle, upstream in registered:
            if upstream:
                self._defer(handle, upstream, how)
            else:
                ready.append(handle)
        queue = iter(ready)

        async def sender() -> None:
            # ``limit`` senders share the queue, rather than a task per step waiting its turn:
            # 100,000 waiting tasks cost the driver ~200 MB while it submits.
            for handle in queue:
                await self._send(handle, how)

        await asyncio.gather(*(sender() for _ in range(max(1, min(limit, len(ready))))))
        return [self._handles[step.name] for step in steps]

    async def allocate(
        self, allocation: Allocation | str, *, backend: BackendName | None = None
    ) -> AllocationBackend:
        """Hold the pods of ``allocation`` (or of the session's allocation of that name) now.

        Returns the allocation, held once per session: steps naming it run in its pods, and
        ``release()`` ends it. A notebook holds one and streams many steps into it; a study
        need not call this (its first step that names an allocation holds it).
        """
        from .allocations.pool import AllocationBackend
        from .render.allocation import render_allocation

        self._check_open()
        if isinstance(allocation, str):
            allocation = self._allocation_named(allocation)
        elif self._allocations.setdefault(allocation.name, allocation) != allocation:
            raise StudyError(
                f'Allocation "{allocation.name}" is already defined in this session with '
                "other settings; give the new one another name"
            )
        kind = f"allocation/{allocation.name}"
        found = self._backends.get(kind)
        if isinstance(found, AllocationBackend):
            return found
        host = await self._backend(backend or self._default_kind)
        manifests = render_allocation(allocation, self._target(host))
        pods = cast("PodHost", host)  # both backends hold pods (pods_of, on_pods)
        held = AllocationBackend(
            allocation, pods, manifests, study=self.study, log_dir=self.log_dir
        )
        self._backends[kind] = held
        self._running.add(kind)
        await held.start()
        return held

    async def as_completed(self, handles: Iterable[StepHandle]) -> AsyncIterator[StepHandle]:
        """Yield each handle as its step ends, first finished first."""
        queue: asyncio.Queue[StepHandle] = asyncio.Queue()
        pending = list(handles)

        def on_change(handle: StepHandle) -> None:
            if handle.done:
                queue.put_nowait(handle)

        for handle in pending:
            handle.add_listener(on_change)
        seen: set[int] = set()
        try:
            while len(seen) < len(pending):
                handle = await queue.get()
                if id(handle) not in seen:
                    seen.add(id(handle))
                    yield handle
        finally:
            for handle in pending:
                handle.remove_listener(on_change)

    async def gather(
        self, *handles: StepHandle, check: bool = False, timeout: float | None = None
    ) -> list[StepResult]:
        """Return the results of ``handles`` (all of the session's when none are given)."""
        chosen = handles or tuple(self._handles.values())
        async with asyncio.timeout(timeout):
            results = [await h.wait() for h in chosen]
        if check:
            for result in results:
                if not result.ok:
                    raise StepFailed(result.describe(), result)
        return results

    async def attach(
        self, study: str | None = None, *, backend: BackendName | None = None
    ) -> list[StepHandle]:
        """Return handles for the existing steps of ``study`` (this session's by default).

        For a driver that restarted: the steps are found by label, and their handles are
        kept current like freshly submitted ones.
        """
        self._check_open()
        chosen = await self._backend(backend or self._default_kind)
        found = await chosen.attach(study or self.study, self._namespace_of(chosen))
        for handle in found:
            self._handles.setdefault(handle.name, handle)
        return found

    async def cancel_all(self) -> list[StepHandle]:
        """Cancel every step of this session that has not ended; return those cancelled."""
        live = [h for h in self._handles.values() if not h.done]
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(h.cancel() for h in live), return_exceptions=True)
        return live

    async def _backend(self, kind: str) -> Backend:
        if kind not in self._backends:
            self._backends[kind] = self._make_backend(kind)
        backend = self._backends[kind]
        if self._started and kind not in self._running:
            self._running.add(kind)
            await backend.start()
        return backend

    def _make_backend(self, kind: str) -> Backend:
        if kind == "kubernetes":
            from .kube import KubernetesBackend

            return KubernetesBackend(
                namespace=self._namespace, log_dir=self.log_dir, **self._kube_args
            )
        if kind == "local":
            from .local import LocalBackend

            return LocalBackend(**(self._options if kind == self._default_kind else {}))
        raise ValueError(f'backend "{kind}" is unknown; use "kubernetes" or "local"')

    def _namespace_of(self, backend: Backend | None) -> str:
        """Return the namespace of steps sent to ``backend``: the one place it is worked out."""
        return self._namespace or (backend.namespace if backend else None) or "default"

    def _target(self, backend: Backend) -> Target:
        store = self.store or backend.default_store
        return Target(
            study=self.study,
            namespace=self._namespace_of(backend),
            store=store,
            plain_http=self.plain_http,
            registry_secret=self.registry_secret,
            handoff_image=self.handoff_image,
        )

    def _check_allocations(self, steps: Iterable[Step], backend: Backend) -> None:
        """Raise AllocationRefused, before anything is sent, for the first step that names an
        allocation this session has not, or one it cannot run in (``refusal``)."""
        for step in steps:
            if step.allocation is None:
                continue
            allocation = self._allocations.get(step.allocation)
            if allocation is None:
                known = ", ".join(f'"{n}"' for n in self._allocations) or "none"
                raise AllocationRefused(
                    f'Step "{step.name}" names allocation "{step.allocation}", which this '
                    f"session does not have (its allocations: {known}); pass it in "
                    "Session(allocations=[Allocation(...)]) or drop the step's allocation",
                    step=step.name,
                    allocation=step.allocation,
                )
            # The pods go to the allocation's namespace, else the session's.
            where = allocation.namespace or self._namespace_of(backend)
            reason = refusal(step, allocation.model_copy(update={"namespace": where}))
            if reason is not None:
                raise AllocationRefused(
                    f'Step "{step.name}" cannot run in allocation "{allocation.name}": {reason}',
                    step=step.name,
                    allocation=allocation.name,
                )

    def _defaulted(self, step: Step) -> Step:
        """Return ``step`` with the session's ``target`` if the step names none itself.

        Validated anew, so a field the default's target cannot carry is refused by name,
        as if the step had said it.
        """
        if self.target is None or "target" in step.model_fields_set:
            return step
        fields = {name: getattr(step, name) for name in step.model_fields_set}
        return Step.model_validate({**fields, "target": self.target})

    def _upstream(self, step: Step, after: Iterable[StepHandle]) -> list[StepHandle]:
        upstream = list(after)
        for source in step.inputs.values():
            if isinstance(source, StepOutput) and source.step in self._handles:
                producer = self._handles[source.step]
                if producer not in upstream:
                    upstream.append(producer)
        return upstream

    def _register(
        self, step: Step, backend: Backend, after: Iterable[StepHandle]
    ) -> tuple[StepHandle, list[StepHandle]]:
        self._check_open()
        step = self._defaulted(step)
        found = self._handles.get(step.name)
        if found is not None and found.step is None:
            # Found by attach after a restart: submitting it again adopts what exists
            # (same spec hash) or creates what is missing, through the same handle.
            found.step = step
            return found, self._upstream(step, after)
        if found is not None:
            raise StudyError(f'Step "{step.name}" was already submitted in study "{self.study}"')
        object_name, namespace = placement(step, self._target(backend))
        handle = StepHandle(
            name=step.name,
            study=self.study,
            object_name=object_name,
            namespace=namespace,
            backend=backend,
            step=step,
        )
        self._handles[step.name] = handle
        if self.observer is not None:
            self.observer.watch(handle)
        memory = step.resources.memory_bytes
        if step.retry_oom is not None and memory is not None:
            handle.on_end = GrowingMemory(handle, step.retry_oom, memory, self._resend_with).on_end
        return handle, self._upstream(step, after)

    def _pinned(self, step: Step) -> dict[str, str]:
        """Return the inputs of ``step`` that are outputs of this session's steps, pinned."""
        pinned = {}
        for key, source in step.inputs.items():
            if not isinstance(source, StepOutput) or source.step not in self._handles:
                continue
            outputs = self._handles[source.step].result.outputs
            if source.output in outputs:
                pinned[key] = outputs[source.output]
        return pinned

    async def _start(self, handle: StepHandle, how: _How) -> None:
        """Reuse ``handle``'s recorded result, or render and send its step to its backend."""
        step = handle.step
        assert step is not None
        backend = self._backend_of(handle)
        target = self._target(backend)
        pinned = self._pinned(step)
        cache = self._reuse.cache_for(step, target.store)
        key = None
        if cache is not None:
            key, pinned = await self._reuse.key(cache, step, target, pinned)
            if self.observer is not None:
                self.observer.keyed(handle, key)
        reused: bool | None = False
        if key is not None and cache is not None and not how.rerun:
            reused = await self._reuse.reuse(cache, handle, key, pinned)
            if reused:
                return
        # Run anew on purpose, or opted out of the cache (cache: false, or the session's
        # cache off): an ended Job of the same spec is run again, not adopted. A step the
        # cache does not cover by default (no outputs) keeps adopting its identical Job.
        rerun = how.rerun or not self._reuse.reuses(step) or reused is None
        manifests = self._render(handle, pinned, key)
        if handle.on_end is not None:  # retry_oom: a grown attempt is rendered alike
            self._sent_with[handle.name] = pinned, key
        await backend.submit(handle, manifests, replace=how.replace, rerun=rerun)
        if key is not None and cache is not None:
            self._reuse.record_when_done(cache, handle, key, pinned)

    async def _resend_with(self, handle: StepHandle, memory: int) -> None:
        """Send ``handle``'s step again asking for ``memory`` bytes (an OOM retry)."""
        try:
            pinned, key = self._sent_with[handle.name]
            manifests = self._render(handle, pinned, key, memory=memory)
            # rerun: the ended attempt's Job (or local run) has the same spec hash.
            await self._backend_of(handle).submit(handle, manifests, replace=True, rerun=True)
        except ClusterUnreachable as exc:
            handle.abandon(exc)
        except Exception as exc:
            why = f"sending the attempt with more memory failed: {exc}"
            failed = handle.result.evolve(
                state=StepState.FAILED, reason="SubmitFailed", message=why
            )
            handle.resend_failed(failed)

    def _render(
        self,
        handle: StepHandle,
        pinned: dict[str, str],
        key: str | None = None,
        memory: int | None = None,
    ) -> Manifests:
        """Render ``handle``'s step with ``pinned`` inputs (producers' outputs by digest);
        ``memory`` is an OOM retry's (``retry_oom``)."""
        step = handle.step
        assert step is not None
        ssh_key = self._ssh_keys.get(handle.name)
        if ssh_key is None and (ssh_key := key_for(step)) is not None:
            self._ssh_keys[handle.name] = ssh_key
        target = self._target(self._backend_of(handle))
        placed = handle.object_name, handle.namespace
        return render(
            step, target, inputs=pinned, ssh_key=ssh_key, placed=placed, key=key, memory=memory
        )

    def _backend_of(self, handle: StepHandle) -> Backend:
        """Return the backend of ``handle`` (the handle itself sees only its StepControl)."""
        return next(b for b in self._backends.values() if b is handle.backend)

    def _defer(self, handle: StepHandle, upstream: list[StepHandle], how: _How) -> None:
        task = asyncio.create_task(self._submit_after(handle, upstream, how))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _submit_after(
        self, handle: StepHandle, upstream: list[StepHandle], how: _How
    ) -> None:
        failed = dependency_failure(handle.result, [await h.wait() for h in upstream])
        if failed is not None:
            handle.report(failed)
            return
        await self._send(handle, how)

    async def _send(self, handle: StepHandle, how: _How) -> None:
        """Submit, reporting a refusal on the handle (nobody awaits a deferred submission)."""
        try:
            await self._start(handle, how)
        except ClusterUnreachable as exc:  # not the step's failure: it was never refused
            handle.abandon(exc)
        except Exception as exc:
            handle.report(
                handle.result.evolve(
                    state=StepState.FAILED, reason="SubmitFailed", message=str(exc)
                )
            )

    def _allocation_named(self, name: str) -> Allocation:
        found = self._allocations.get(name)
        if found is None:
            known = ", ".join(f'"{n}"' for n in self._allocations) or "none"
            raise AllocationRefused(
                f'No allocation "{name}" in this session (its allocations: {known}); pass it '
                "in Session(allocations=[Allocation(...)]) or the study's allocations:",
                step="",
                allocation=name,
            )
        return found

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("Cannot submit to a session that has been closed.")
        if not self._started:
            raise SessionClosed("Start the session first: use `async with Session(...) as s`.")


@dataclass(frozen=True)
class _How:
    """How a submission treats what exists: ``replace`` a running copy of another spec,
    ``rerun`` a step even though its result is recorded or its identical Job ended."""

    replace: bool = False
    rerun: bool = False


def dependency_failure(result: StepResult, upstream: Iterable[StepResult]) -> StepResult | None:
    """Return ``result`` ended FAILED ("DependencyFailed") if an upstream step did not succeed.

    None when every upstream step succeeded. The message names the failed steps and states.
    """
    failed = [r for r in upstream if not r.ok]
    if not failed:
        return None
    names = ", ".join(f"{r.name} {r.state}" for r in failed)
    return result.evolve(
        state=StepState.FAILED, reason="DependencyFailed", message=f"not run: upstream {names}"
    )


def _producers_first(steps: Sequence[Step]) -> list[Step]:
    """Return ``steps`` ordered so that every producer comes before the steps reading it."""
    by_name = {s.name: s for s in steps}
    ordered: list[Step] = []
    state: dict[str, bool] = {}  # False while visiting, True once placed

    def visit(step: Step) -> None:
        if state.get(step.name) is False:
            raise StudyError(f'Step "{step.name}" depends on itself through its inputs')
        if state.get(step.name):
            return
        state[step.name] = False
        for source in step.inputs.values():
            if isinstance(source, StepOutput) and source.step in by_name:
                visit(by_name[source.step])
        state[step.name] = True
        ordered.append(step)

    for step in steps:
        visit(step)
    return ordered


_default: Session | None = None


async def default_session() -> Session:
    """Return the process-wide session used by ``submit_step``, starting it on first use.

    Its backend comes from ``K8SJOBS_BACKEND`` ("kubernetes" unless set to "local"), its
    study from ``K8SJOBS_STUDY`` and its namespace from ``K8SJOBS_NAMESPACE``.
    """
    global _default
    if _default is None or _default.closed:
        kind = os.environ.get("K8SJOBS_BACKEND", "kubernetes")
        if kind not in ("kubernetes", "local"):
            raise ValueError(f'K8SJOBS_BACKEND="{kind}" is unknown; use "kubernetes" or "local"')
        namespace = os.environ.get("K8SJOBS_NAMESPACE") or None
        try:
            check_dns_label(namespace, "namespace")
        except ValueError as exc:
            raise ValueError(f"K8SJOBS_NAMESPACE: {exc}") from None
        _default = Session(
            study=os.environ.get("K8SJOBS_STUDY", "default"),
            namespace=namespace,
            backend=kind,  # type: ignore[arg-type]
            store=os.environ.get("K8SJOBS_STORE"),
        )
        await _default.start()
    return _default


async def submit_step(step: Step, *, session: Session | None = None, **options: Any) -> StepHandle:
    """Submit ``step`` on ``session`` (the default session if none) and return its handle."""
    chosen = session or await default_session()
    return await chosen.submit(step, **options)


def _observer(session: Session) -> Observer | None:
    """Return the observer ``session`` was asked for, importing nothing when none was."""
    wanted = any(v is not None for v in session._observing.values())
    if not wanted and not any(k.startswith("OTEL_") for k in os.environ):
        return None
    from .observe import observer_for

    return observer_for(
        study=session.study,
        backend=session._default_kind,
        watch_stats=lambda: session.watch_stats,
        api_requests=lambda: getattr(
            getattr(session._backends.get("kubernetes"), "client", None), "requests", {}
        ),
        api_outages=lambda: _outages(getattr(session._backends.get("kubernetes"), "health", None)),
        **session._observing,
    )


def _outages(health: Any) -> tuple[int, float]:
    """Return the API server's outages this session and the seconds they lasted (0 locally)."""
    if health is None:
        return 0, 0.0
    return health.outages, health.unreachable_seconds()


def _by_name(allocations: Sequence[Allocation]) -> dict[str, Allocation]:
    """Return ``allocations`` by name, refusing what is not an Allocation or a name twice."""
    found: dict[str, Allocation] = {}
    for allocation in allocations:
        if not isinstance(allocation, Allocation):
            raise TypeError(
                f"allocations: {allocation!r:.80} is not an Allocation; write "
                'Allocation(name="pool", nodes=2, ...)'
            )
        if allocation.name in found:
            raise ValueError(
                f'allocations: two allocations are called "{allocation.name}"; '
                "give each its own name"
            )
        found[allocation.name] = allocation
    return found


def _check_target(target: str | None) -> StepTarget | None:
    """Return ``target`` if None or a Step's target; else raise ValueError saying the fix."""
    if target is None or target in get_args(StepTarget):
        return cast("StepTarget | None", target)
    choices = ", ".join(get_args(StepTarget))
    raise ValueError(f"Session target {target!r} is not a step target: use one of {choices}")


def _check_namespace(namespace: str | None) -> str | None:
    """Return ``namespace`` if None or a DNS label; else raise ValueError saying the fix."""
    try:
        return check_dns_label(namespace, "namespace")
    except ValueError as exc:
        raise ValueError(f"Session: {exc}") from None
