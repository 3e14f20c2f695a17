"""Run a Kubernetes Pod as local processes, and report its status as a kubelet would.

One runner serves both the LocalBackend (no cluster at all) and the fake cluster's kubelet, so
the very pod a real cluster would receive is what runs in every test.

A pod becomes a sandbox ``root/<namespace>/<pod name>/`` holding ``volumes/<volume>/``,
``home/`` (HOME and the default working directory), ``tmp/`` (TMPDIR) and
``logs/<container>.log``. Init containers run one after another, then all containers at once.
``PodRunner`` is the front; each part of a run has its module:

- ``_sources``: ConfigMaps, Secrets and the downward API, a missing one a ``ConfigError``;
- ``_volumes``: the volumes in the sandbox, and the path translation rule;
- ``_env``: the container's environment and ``$(VAR)`` expansion;
- ``_process``: starting the program, its memory limit, killing what it leaves;
- ``_podstatus``: the PodStatus a kubelet would write;
- ``_handoff``: k8sjobs' own handoff containers, run in-process when the runner is given one;
- ``_exec``: another process in a running container's environment (pods/exec).

A missing ConfigMap, Secret or key leaves the container waiting with reason
``CreateContainerConfigError`` and the pod Pending; where a kubelet would retry forever, ``run``
reports that status and returns it. Cancelling the task that awaits ``run`` stops every running
container (SIGTERM, SIGKILL after ``kill_grace`` seconds), reports the final status (exit code
143 or 137, reason Error, phase Failed) and re-raises the cancellation. ``on_status`` receives
a fresh PodStatus dict each time it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ..steps.quantity import parse_bytes
from . import agent
from ._env import base_env, declared_env, expand
from ._exec import ExecProcesses, start_exec
from ._faults import kill_point
from ._gpusample import GpuSampler, sampler_for
from ._handoff import HandoffCall, InProcessHandoff, recognise
from ._podstatus import PodStatus, StatusSink, now
from ._probes import probed, run_readiness
from ._process import (
    EPOCH,
    START_ERROR_EXIT,
    Launch,
    MemoryMonitor,
    StartError,
    Supervisor,
    program,
    spawn,
)
from ._sources import ConfigError, ConfigMapSource, SecretSource, Sources
from ._usage import USAGE_MODE, measured_message
from ._volumedirs import VolumeDirs
from ._volumes import (
    PathMap,
    link_nested_mounts,
    materialise,
    plan_volume,
    volumes_with_access,
)
from .agent import TERMINATION_LOG, termination_message

__all__ = ["ConfigMapSource", "PodRunner", "SecretSource", "StatusSink", "VolumeDirs"]


class PodRunner:
    """Runs Kubernetes Pod objects as local processes in per-pod sandboxes under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        kill_grace: float = 5.0,
        handoff: InProcessHandoff | None = None,
        volume_dirs: VolumeDirs | None = None,
    ) -> None:
        self.root = Path(root)
        self.kill_grace = kill_grace
        self.handoff = handoff  # None: the handoff containers run as processes too
        # Claims and NFS shares: under root/../claims unless the owner maps them elsewhere.
        self.volume_dirs = volume_dirs or VolumeDirs(self.root.parent / "claims")
        # log_path is asked by pod name alone; pod names are unique in practice across
        # namespaces here (the job controller adds a random suffix), so remember each pod's.
        self._namespaces: dict[str, str] = {}
        self._memory = MemoryMonitor()
        self._runs: dict[tuple[str, str], _PodRun] = {}  # the pods running now, for exec

    def sandbox(self, namespace: str, pod_name: str) -> Path:
        """Return the directory that holds a pod's volumes, home, tmp and logs."""
        return self.root / namespace / pod_name

    def log_path(self, pod_name: str, container: str, *, namespace: str | None = None) -> Path:
        """Return the file a container's stdout and stderr go to (it may not exist yet)."""
        namespace = namespace or self._namespaces.get(pod_name, "default")
        return self.sandbox(namespace, pod_name) / "logs" / f"{container}.log"

    async def run(
        self,
        pod: Mapping[str, Any],
        *,
        configmap: ConfigMapSource,
        secret: SecretSource,
        on_status: StatusSink,
        extra_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run the pod to completion; returns the final Pod ``status`` (Kubernetes PodStatus shape).

        The phase is Succeeded or Failed, or Pending when a ConfigMap, Secret or key it needs is
        missing (the containers then wait with reason CreateContainerConfigError).
        """
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        self._namespaces[meta["name"]] = namespace
        pod_run = _PodRun(
            pod=pod,
            sandbox=self.sandbox(namespace, meta["name"]),
            sources=Sources(configmap, secret, namespace),
            status=PodStatus(pod, on_status),
            extra_env=dict(extra_env or {}),
            kill_grace=self.kill_grace,
            memory=self._memory,
            handoff=self.handoff,
            volume_dirs=self.volume_dirs,
        )
        key = (namespace, meta["name"])
        self._runs[key] = pod_run
        try:
            return await pod_run.run()
        finally:
            if self._runs.get(key) is pod_run:
                del self._runs[key]

    def exec_running(self, namespace: str, pod_name: str, container: str) -> bool:
        """Return whether ``container`` of the pod runs now (an exec can join it)."""
        pod_run = self._runs.get((namespace, pod_name))
        return pod_run is not None and container in pod_run.running

    async def exec(
        self,
        namespace: str,
        pod_name: str,
        container: str,
        command: Sequence[str],
        *,
        stdin: bool = True,
        stdout: bool = True,
        stderr: bool = True,
    ) -> asyncio.subprocess.Process:
        """Start ``command`` in a running container's environment (``_exec``): its env,
        working directory, PATH and volume paths; killed when the pod's containers end.

        Raises ``LookupError`` when the container does not run now, ``StartError`` with the
        runtime's words when the program cannot be started.
        """
        key = (namespace, pod_name)
        pod_run = self._runs.get(key)
        if pod_run is None or container not in pod_run.running:
            raise LookupError(f'container not found ("{container}")')
        spec = pod_run._container(container)
        launch = pod_run._prepare(spec)
        paths = PathMap.for_container(spec, pod_run.volumes, pod_run.sandbox)
        process = await start_exec(
            launch, paths, command, stdin=stdin, stdout=stdout, stderr=stderr
        )
        pod_run.execs.add(process)
        if self._runs.get(key) is not pod_run:  # the pod ended while it started
            await pod_run.execs.kill_all()
        return process

    async def finish_handoff(
        self,
        pod: Mapping[str, Any],
        container_name: str,
        *,
        configmap: ConfigMapSource,
        secret: SecretSource,
    ) -> int | None:
        """Run again, in the pod's sandbox, a handoff container that died with its driver.

        The in-process push runs inside the driver, not under a keeper: a driver killed
        after the script exited 0 leaves the outputs in the sandbox, unpushed. The driver
        that adopts the pod pushes them (reading the exit-code marker once), so the step
        is not run a second time. Returns the push's exit code, or None when the container
        is not an in-process handoff (nothing was run).
        """
        if self.handoff is None:
            return None
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        pod_run = _PodRun(
            pod=pod,
            sandbox=self.sandbox(namespace, meta["name"]),
            sources=Sources(configmap, secret, namespace),
            status=PodStatus(pod, lambda status: None),
            extra_env={"K8SJOBS_BACKEND_KIND": "local"},  # only the LocalBackend adopts
            kill_grace=self.kill_grace,
            memory=self._memory,
            handoff=self.handoff,
            volume_dirs=self.volume_dirs,
        )
        containers = (pod.get("spec") or {}).get("containers") or []
        container = next((c for c in containers if c.get("name") == container_name), None)
        if container is None:
            return None
        try:
            plans = [
                plan_volume(v, ro, pod, pod_run.sandbox, pod_run.sources, self.volume_dirs)
                for v, ro in volumes_with_access(pod_run.spec)
            ]
            pod_run.volumes = {plan.name: plan.path for plan in plans}
            launch = pod_run._prepare(container)
        except ConfigError:
            return None
        call = pod_run._handoff_call(launch)
        if call is None:
            return None
        log = pod_run.sandbox / "logs" / f"{container_name}.log"
        return await self.handoff.run(call, launch.env, log, None)


@dataclass
class _PodRun:
    """The state of one pod while it runs: its sandbox, its sources and its status."""

    pod: Mapping[str, Any]
    sandbox: Path
    sources: Sources
    status: PodStatus
    extra_env: dict[str, str]
    kill_grace: float
    memory: MemoryMonitor
    handoff: InProcessHandoff | None = None
    volume_dirs: VolumeDirs | None = None
    volumes: dict[str, Path] = field(default_factory=dict)
    agent_env: dict[str, str] = field(default_factory=dict)
    #: The containers whose process runs now, and the exec processes started in them.
    running: set[str] = field(default_factory=set)
    execs: ExecProcesses = field(default_factory=ExecProcesses)

    @property
    def spec(self) -> Mapping[str, Any]:
        """Return the pod's spec."""
        return self.pod.get("spec") or {}

    async def run(self) -> dict[str, Any]:
        """Run the pod; returns its final status, and reports it Failed when cancelled."""
        self.status.report()
        try:
            return await self._run()
        except asyncio.CancelledError:
            self.status.finish(succeeded=False)
            self.status.report()
            raise
        finally:
            # As a runtime ends a stopped container's exec processes (a second
            # cancellation cannot leave them behind: the kill is shielded).
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.execs.kill_all())

    async def _run(self) -> dict[str, Any]:
        """Materialise the volumes, run the init containers, then the containers."""
        inits = list(self.spec.get("initContainers") or [])
        containers = list(self.spec.get("containers") or [])
        try:
            plans = [
                plan_volume(
                    volume, read_only, self.pod, self.sandbox, self.sources, self.volume_dirs
                )
                for volume, read_only in volumes_with_access(self.spec)
            ]
        except ConfigError as error:
            self.status.config_error([c["name"] for c in (inits or containers)], str(error))
            return self.status.report()
        await anyio.to_thread.run_sync(materialise, self.sandbox, plans)
        # A multi-node step's index: its remote shell is the local agent (k8sjobs.local.agent).
        self.agent_env = await anyio.to_thread.run_sync(agent.pod_env, self.pod, self.sandbox)
        self.volumes = {plan.name: plan.path for plan in plans}
        await anyio.to_thread.run_sync(link_nested_mounts, self.spec, self.volumes, self.sandbox)
        self.status.sandbox_ready = True
        self.status.report()
        for container in inits:
            exit_code = await self._run_init(container)
            if exit_code is None:
                return self.status.report()
            if exit_code != 0:
                self.status.finish(succeeded=False)
                return self.status.report()
        return await self._run_containers(containers)

    async def _run_init(self, container: Mapping[str, Any]) -> int | None:
        """Return an init container's exit code, or None when its config is missing."""
        try:
            launch = self._prepare(container)
        except ConfigError as error:
            self.status.config_error([container["name"]], str(error))
            return None
        call = self._handoff_call(launch)
        if call is not None:
            return await self._run_handoff(launch, call)
        return await self._run_container(launch)

    async def _run_containers(self, containers: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Run the containers at once (none if any one's config is missing); returns the status."""
        launches: dict[str, Launch] = {}
        errors: dict[str, str] = {}
        for container in containers:
            try:
                launches[container["name"]] = self._prepare(container)
            except ConfigError as error:
                errors[container["name"]] = str(error)
        if errors:
            for name, message in errors.items():
                self.status.config_error([name], message)
            return self.status.report()
        calls = {name: self._handoff_call(launch) for name, launch in launches.items()}
        async with asyncio.TaskGroup() as group:
            tasks = {
                name: group.create_task(self._run_container(launch))
                for name, launch in launches.items()
                if calls[name] is None
            }
            main = set(tasks.values())
            for name, call in calls.items():
                if call is not None:  # an in-process push starts when the others have ended
                    after = functools.partial(asyncio.wait, main) if main else None
                    tasks[name] = group.create_task(self._run_handoff(launches[name], call, after))
        self.status.finish(succeeded=all(task.result() == 0 for task in tasks.values()))
        return self.status.report()

    def _prepare(self, container: Mapping[str, Any]) -> Launch:
        """Return how to start a container: argv, env and cwd, translated to the sandbox."""
        paths = PathMap.for_container(container, self.volumes, self.sandbox)
        declared = declared_env(container, self.pod, self.sources)
        argv = [
            paths.translate(expand(arg, declared))
            for arg in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        env = {
            **base_env(self.pod, self.sandbox),
            **{name: paths.translate(value) for name, value in declared.items()},
            **self.agent_env,
            **self.extra_env,
            USAGE_MODE: "keeper",  # the wrapper leaves the cgroup alone: the keeper measures
        }
        if self.agent_env or str(container["name"]).startswith("k8sjobs-"):
            # The role wrapper's termination message (multinode.py), the handoff's error.
            env[TERMINATION_LOG] = str(self._termination_log(container["name"]))
        working_dir = container.get("workingDir")
        cwd = paths.translate(working_dir) if working_dir else str(self.sandbox / "home")
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        return Launch(
            name=container["name"],
            image=str(container.get("image", "")),
            has_command=bool(container.get("command")),
            argv=argv,
            env=env,
            cwd=cwd,
            memory_limit=parse_bytes(limit) if limit is not None else None,
        )

    def _container(self, name: str) -> Mapping[str, Any]:
        return next((c for c in self.spec.get("containers") or [] if c["name"] == name), {})

    def _start_probe(
        self, container: Mapping[str, Any], launch: Launch
    ) -> asyncio.Task[None] | None:
        """Start the container's readiness probe (``_probes``), or return None if it has none."""
        if not probed(container):
            return None
        paths = PathMap.for_container(container, self.volumes, self.sandbox)
        declared = declared_env(container, self.pod, self.sources)

        def argv(words: Sequence[str]) -> list[str]:
            return [paths.translate(expand(word, declared)) for word in words]

        def set_ready(ready: bool) -> None:
            self.status.ready(launch.name, ready)
            self.status.report()

        return asyncio.ensure_future(
            run_readiness(container, launch.env, launch.cwd, argv, set_ready)
        )

    def _termination_log(self, container: str) -> Path:
        """Return where a container writes its termination message (terminationMessagePath)."""
        return self.sandbox / "logs" / f"{container}.termination-log"

    def _handoff_call(self, launch: Launch) -> HandoffCall | None:
        """Return the in-process handoff a container is, or None to run it as a process."""
        if self.handoff is None:
            return None
        return recognise(launch.name, launch.argv, launch.env)

    async def _run_handoff(
        self,
        launch: Launch,
        call: HandoffCall,
        main_ended: Callable[[], Awaitable[object]] | None = None,
    ) -> int:
        """Run a handoff container in-process (``_handoff``) and record it; returns its exit
        code (143 when cancelled, as SIGTERM ends the process)."""
        assert self.handoff is not None
        started = now()
        self.status.running(launch.name, None, started)
        self.status.report()
        exit_code = 143
        try:
            log = self.sandbox / "logs" / f"{launch.name}.log"
            exit_code = await self.handoff.run(call, launch.env, log, main_ended)
        finally:
            reason = "Completed" if exit_code == 0 else "Error"
            message = termination_message(self._termination_log(launch.name))
            self.status.terminated(launch.name, exit_code, reason, message, started)
            self.status.report()
        return exit_code

    async def _run_container(self, launch: Launch) -> int:
        """Run one container to its end and record it; returns its exit code."""
        name = launch.name
        try:
            process, pid = await spawn(launch, program(launch), self.sandbox, self.kill_grace)
        except StartError as error:
            self.status.terminated(name, START_ERROR_EXIT, "StartError", str(error), EPOCH)
            self.status.report()
            return START_ERROR_EXIT
        except asyncio.CancelledError:
            # Cancelled while its keeper was starting it: spawn stopped the whole tree, so it
            # ended as a container killed by SIGTERM does (without this it stayed "running").
            self.status.terminated(name, 143, "Error", None, now())
            self.status.report()
            raise
        kill_point("container-started")  # before the record says it runs: adopted all the same
        started = now()
        self.running.add(name)
        container = self._container(name)
        self.status.running(name, pid, started, probed=probed(container))
        self.status.report()
        readiness = self._start_probe(container, launch)
        supervisor = Supervisor(process, pid, launch.memory_limit, self.kill_grace, self.memory)
        own = not name.startswith("k8sjobs-")  # the step's own containers, not the handoff's
        sampler = sampler_for(pid, launch.env) if own else None
        if isinstance(sampler, GpuSampler):
            sampler.start()
        try:
            await supervisor.wait()
            kill_point("container-exited")  # ended unseen: adopted from its exit file
        finally:
            self.running.discard(name)
            if readiness is not None:
                readiness.cancel()
            exit_code, reason = supervisor.outcome()
            message = termination_message(self._termination_log(name))
            if own:
                state = self.sandbox / "run" / name
                gpu = sampler.stop() if isinstance(sampler, GpuSampler) else sampler
                figures = None if gpu is None else gpu.values()
                message = measured_message(
                    message, state, supervisor.resident_peak, launch.env, figures
                )
            self.status.terminated(name, exit_code, reason, message, started, pid)
            self.status.report()
        return exit_code
