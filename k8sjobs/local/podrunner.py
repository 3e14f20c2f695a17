"""Run a Kubernetes Pod as local processes, and report its status as a kubelet would.

One runner serves both the LocalBackend (no cluster at all) and the fake cluster's kubelet, so
the very pod a real cluster would receive is what runs in every test.

What a pod becomes here
-----------------------
- A sandbox ``root/<namespace>/<pod name>/`` holding ``volumes/<volume>/``, ``home/`` (HOME and
  the default working directory), ``tmp/`` (TMPDIR) and ``logs/<container>.log``.
- configMap, secret, projected, downwardAPI and emptyDir volumes are materialised in the
  sandbox (items, ``mode`` and ``defaultMode`` honoured; secret files keep only the owner's
  bits, so 0644 becomes 0600); hostPath volumes are the host path itself. configMap, secret,
  projected and downwardAPI volumes, and emptyDirs every mount of which is readOnly, are made
  read-only (mode bits only: root, or the owner with chmod, can still write).
- Init containers run one after another, then all containers at once, each as its own process
  session, with stdout and stderr written straight into one log file.

The path translation rule
-------------------------
Any string in a container's ``command``, ``args``, ``env`` values and ``workingDir`` that equals
a volumeMount's ``mountPath``, or starts with ``mountPath + "/"``, is rewritten to the sandbox
path of that volume (``subPath`` honoured); the longest matching mountPath wins. Nothing else is
rewritten: a script that finds its files through the environment the pod gives it runs
unchanged, and a script with hard-coded container paths elsewhere sees them as they are.
Kubernetes' own ``$(VAR)`` expansion of command, args and env values happens first, as in a
kubelet, so ``$(WORKDIR)/out`` is translated too.

Programs
--------
``command`` + ``args`` are executed directly (never through a shell string built here). A
container without ``command`` cannot run: the image's entrypoint is unknown locally. argv[0]
named ``python`` or ``python3`` (bare or at any path) is the driver's interpreter
(``sys.executable``), so packages installed for the driver, k8sjobs included, are there. Any other
absolute argv[0] is used when it exists here, else its base name is looked up on PATH (an
image's ``/usr/local/bin/bash`` is this machine's bash). A program that cannot be started
terminates the container as containerd reports it: exit code 128, reason ``StartError``,
``startedAt`` at the epoch.

Environment
-----------
The container's ``envFrom`` and ``env`` (value, configMapKeyRef, secretKeyRef, fieldRef), plus
HOME, TMPDIR, HOSTNAME, and from the driver only PATH, LANG and LC_*; then ``extra_env``. Nothing
else of the driver's environment leaks in, so no driver secret reaches a step. A missing
ConfigMap, Secret or key leaves the container waiting with reason
``CreateContainerConfigError`` and the pod Pending; where a kubelet would retry forever, ``run``
reports that status and returns it. ``configmap(name)`` and ``secret(name)`` signal a missing
object by raising ``LookupError`` (``KeyError``).

Memory limits
-------------
``resources.limits.memory`` is enforced by polling, every half second, the resident memory of
every process in the container's session (``/proc/<pid>/stat``, read in a worker thread, only
while some container has a limit, one scan shared by all of a runner's containers). Over the
limit, the whole process group gets SIGKILL and the
container ends with exit code 137, reason ``OOMKilled``. RLIMIT_AS would be cheaper but counts
address space, which Python, the JVM and CUDA reserve far beyond what they use. A spike shorter
than the poll interval goes unseen; a cluster's cgroup would catch it.

Ending
------
When a container's main process exits, whatever it left in its session is killed, as the
container runtime does. Cancelling the task that awaits ``run`` sends SIGTERM to every running
container's process group, SIGKILL to the group and to any member of its session after
``kill_grace`` seconds, waits for the processes, reports the final status (exit code 143 or
137, reason Error, phase Failed) and re-raises the cancellation. A process that starts its own
session escapes; only a cgroup could hold it.

Status
------
``on_status`` receives a fresh PodStatus dict each time it changes, in the shape a kubelet writes
(conditions in a kubelet's order: PodReadyToStartContainers, Initialized, Ready,
ContainersReady, PodScheduled), with RFC 3339 timestamps to the second and container IDs
``local://<pid>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import anyio

from k8sjobs.quantity import parse_bytes

__all__ = ["ConfigMapSource", "PodRunner", "SecretSource", "StatusSink"]

ConfigMapSource = Callable[[str], Mapping[str, str]]
SecretSource = Callable[[str], Mapping[str, bytes]]
StatusSink = Callable[[dict[str, Any]], None]

_HOST_IP = "127.0.0.1"
_MEMORY_POLL_SECONDS = 0.5
_START_ERROR_EXIT = 128
_EPOCH = "1970-01-01T00:00:00Z"
_PYTHON_NAMES = frozenset({"python", "python3"})
_CONDITION_ORDER = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
_FIELD_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")
_EXPANSION = re.compile(r"\$(\$|\(([^)]*)\))")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_T = TypeVar("_T")


class _ConfigError(Exception):
    """A ConfigMap, Secret, key or field the pod needs is missing: CreateContainerConfigError."""


class _StartError(Exception):
    """The container's program cannot be started: containerd's StartError."""


# ---------------------------------------------------------------------------------------------
# The public runner


class PodRunner:
    """Runs Kubernetes Pod objects as local processes in per-pod sandboxes under ``root``."""

    def __init__(self, root: Path, *, kill_grace: float = 5.0) -> None:
        self.root = Path(root)
        self.kill_grace = kill_grace
        # log_path is asked by pod name alone; pod names are unique in practice across
        # namespaces here (the job controller adds a random suffix), so remember each pod's.
        self._namespaces: dict[str, str] = {}
        self._memory = _MemoryMonitor()

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
            sources=_Sources(configmap, secret, namespace),
            status=_PodStatus(pod, on_status),
            extra_env=dict(extra_env or {}),
            kill_grace=self.kill_grace,
            memory=self._memory,
        )
        return await pod_run.run()


# ---------------------------------------------------------------------------------------------
# One pod's run


@dataclass
class _PodRun:
    """The state of one pod while it runs: its sandbox, its sources and its status."""

    pod: Mapping[str, Any]
    sandbox: Path
    sources: _Sources
    status: _PodStatus
    extra_env: dict[str, str]
    kill_grace: float
    memory: _MemoryMonitor
    volumes: dict[str, Path] = field(default_factory=dict)

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.pod.get("spec") or {}

    async def run(self) -> dict[str, Any]:
        self.status.report()
        try:
            return await self._run()
        except asyncio.CancelledError:
            self.status.finish(succeeded=False)
            self.status.report()
            raise

    async def _run(self) -> dict[str, Any]:
        inits = list(self.spec.get("initContainers") or [])
        containers = list(self.spec.get("containers") or [])
        try:
            plans = [
                _plan_volume(volume, read_only, self.pod, self.sandbox, self.sources)
                for volume, read_only in self._volumes()
            ]
        except _ConfigError as error:
            self.status.config_error([c["name"] for c in (inits or containers)], str(error))
            return self.status.report()
        await anyio.to_thread.run_sync(_materialise, self.sandbox, plans)
        self.volumes = {plan.name: plan.path for plan in plans}
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

    def _volumes(self) -> list[tuple[Mapping[str, Any], bool]]:
        """Return each volume with whether every mount of it is readOnly."""
        mounts = [m for c in _all_containers(self.spec) for m in c.get("volumeMounts") or []]
        volumes = []
        for volume in self.spec.get("volumes") or []:
            own = [m for m in mounts if m.get("name") == volume["name"]]
            volumes.append((volume, bool(own) and all(m.get("readOnly") for m in own)))
        return volumes

    async def _run_init(self, container: Mapping[str, Any]) -> int | None:
        try:
            launch = self._prepare(container)
        except _ConfigError as error:
            self.status.config_error([container["name"]], str(error))
            return None
        return await self._run_container(container, launch)

    async def _run_containers(self, containers: list[Mapping[str, Any]]) -> dict[str, Any]:
        launches: dict[str, _Launch] = {}
        errors: dict[str, str] = {}
        for container in containers:
            try:
                launches[container["name"]] = self._prepare(container)
            except _ConfigError as error:
                errors[container["name"]] = str(error)
        if errors:
            for name, message in errors.items():
                self.status.config_error([name], message)
            return self.status.report()
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(self._run_container(c, launches[c["name"]])) for c in containers
            ]
        self.status.finish(succeeded=all(task.result() == 0 for task in tasks))
        return self.status.report()

    def _prepare(self, container: Mapping[str, Any]) -> _Launch:
        """Return how to start a container: argv, env and cwd, translated to the sandbox."""
        paths = _PathMap.for_container(container, self.volumes, self.sandbox)
        declared = _declared_env(container, self.pod, self.sources)
        argv = [
            paths.translate(_expand(arg, declared))
            for arg in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        env = {
            **self._base_env(),
            **{name: paths.translate(value) for name, value in declared.items()},
            **self.extra_env,
        }
        working_dir = container.get("workingDir")
        cwd = paths.translate(working_dir) if working_dir else str(self.sandbox / "home")
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        return _Launch(
            name=container["name"],
            image=str(container.get("image", "")),
            has_command=bool(container.get("command")),
            argv=argv,
            env=env,
            cwd=cwd,
            memory_limit=parse_bytes(limit) if limit is not None else None,
        )

    def _base_env(self) -> dict[str, str]:
        inherited = {
            name: value
            for name, value in os.environ.items()
            if name in ("PATH", "LANG") or name.startswith("LC_")
        }
        meta = self.pod.get("metadata") or {}
        return {
            "PATH": os.defpath,
            **inherited,
            "HOME": str(self.sandbox / "home"),
            "TMPDIR": str(self.sandbox / "tmp"),
            "HOSTNAME": str(self.spec.get("hostname") or meta.get("name", "")),
        }

    async def _run_container(self, container: Mapping[str, Any], launch: _Launch) -> int:
        """Run one container to its end and record it; returns its exit code."""
        name = launch.name
        try:
            program = _program(launch)
            process = await self._spawn(launch, program)
        except _StartError as error:
            self.status.terminated(name, _START_ERROR_EXIT, "StartError", str(error), _EPOCH)
            self.status.report()
            return _START_ERROR_EXIT
        started = _now()
        self.status.running(name, process.pid, started)
        self.status.report()
        supervisor = _Supervisor(process, launch.memory_limit, self.kill_grace, self.memory)
        try:
            await supervisor.wait()
        finally:
            exit_code, reason = supervisor.outcome()
            self.status.terminated(name, exit_code, reason, None, started, process.pid)
            self.status.report()
        return exit_code

    async def _spawn(self, launch: _Launch, program: str) -> asyncio.subprocess.Process:
        cwd = _working_dir(launch, self.sandbox)
        log = _open_log(self.sandbox, launch.name)
        try:
            return await asyncio.create_subprocess_exec(
                program,
                *launch.argv[1:],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=launch.env,
                start_new_session=True,  # its own session and process group, to kill it whole
            )
        except OSError as error:
            raise _StartError(f'exec: "{launch.argv[0]}": {error.strerror or error}') from None
        finally:
            log.close()  # the child holds its own descriptor


def _working_dir(launch: _Launch, sandbox: Path) -> Path:
    """Return the container's working directory, created if it lies in the sandbox."""
    cwd = Path(launch.cwd)
    if not cwd.is_dir():
        if not cwd.is_relative_to(sandbox):
            raise _StartError(
                f'container "{launch.name}": workingDir "{launch.cwd}" does not exist on '
                "this machine and is not under a volume mount"
            )
        cwd.mkdir(parents=True, exist_ok=True)  # as a container runtime creates it
    return cwd


def _open_log(sandbox: Path, container: str) -> BinaryIO:
    # Appending: the process writes to it directly, unbuffered by us, so a reader can follow.
    return open(sandbox / "logs" / f"{container}.log", "ab")


@dataclass(frozen=True)
class _Launch:
    """Everything needed to start one container's process."""

    name: str
    image: str
    has_command: bool
    argv: list[str]
    env: dict[str, str]
    cwd: str
    memory_limit: int | None


def _program(launch: _Launch) -> str:
    """Return the executable to start for a container's argv[0], or raise _StartError."""
    if not launch.has_command or not launch.argv:
        raise _StartError(
            f'container "{launch.name}" has no command: the entrypoint of image '
            f'"{launch.image}" is unknown to the local runner; set command in the pod template'
        )
    argv0 = launch.argv[0]
    if Path(argv0).name in _PYTHON_NAMES:
        return sys.executable
    if "/" in argv0 and (Path(argv0).exists() or not Path(argv0).is_absolute()):
        return argv0
    found = shutil.which(Path(argv0).name, path=launch.env.get("PATH"))
    if found is None:
        raise _StartError(f'exec: "{argv0}": executable file not found in $PATH')
    return found


# ---------------------------------------------------------------------------------------------
# Watching a process: exit, memory limit, cancellation


class _Supervisor:
    """Waits for a container's process, enforcing its memory limit and cleaning up its session."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        memory_limit: int | None,
        kill_grace: float,
        memory: _MemoryMonitor,
    ) -> None:
        self.process = process
        self.memory_limit = memory_limit
        self.kill_grace = kill_grace
        self.memory = memory
        self.oom_killed = False

    async def wait(self) -> None:
        """Return once the process has ended and nothing is left of its session."""
        try:
            await self._wait_within_limit()
        except asyncio.CancelledError:
            await self._stop()
            raise
        # The runtime kills what the main process leaves behind in its container.
        await _kill_session(self.process.pid)

    def outcome(self) -> tuple[int, str]:
        """Return the container's exit code and reason, as a kubelet reports them."""
        code = self.process.returncode
        if code is None:  # only if supervision itself failed; the process was killed
            return 137, "Error"
        exit_code = 128 - code if code < 0 else code
        if self.oom_killed:
            return 137, "OOMKilled"
        return exit_code, "Completed" if exit_code == 0 else "Error"

    async def _wait_within_limit(self) -> None:
        if self.memory_limit is None:
            await self.process.wait()
            return
        waiting = asyncio.ensure_future(self.process.wait())
        try:
            while not (await asyncio.wait({waiting}, timeout=_MEMORY_POLL_SECONDS))[0]:
                if await self.memory.resident(self.process.pid) > self.memory_limit:
                    self.oom_killed = True
                    _signal_group(self.process.pid, signal.SIGKILL)
                    await waiting
        finally:
            waiting.cancel()

    async def _stop(self) -> None:
        """Terminate the group, kill it after the grace period, and wait for the process."""
        _signal_group(self.process.pid, signal.SIGTERM)
        # A second cancellation only shortens the grace period.
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self.process.wait()), self.kill_grace)
        _signal_group(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self.process.wait())
            await _kill_session(self.process.pid)


class _MemoryMonitor:
    """Resident memory per session, from one /proc scan shared by every container that asks.

    A scan reads every process's stat file (milliseconds), so containers polling at the same
    time share one scan instead of each paying for it.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._scanned_at = -_MEMORY_POLL_SECONDS
        self._usage: dict[int, int] = {}

    async def resident(self, session: int) -> int:
        """Return the resident bytes of every process in a session, at most a poll old."""
        async with self._lock:
            if time.monotonic() - self._scanned_at >= _MEMORY_POLL_SECONDS / 2:
                self._usage = await anyio.to_thread.run_sync(_resident_by_session)
                self._scanned_at = time.monotonic()
        return self._usage.get(session, 0)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


async def _kill_session(session: int) -> None:
    """Kill the process group and any member of the session that left it (scan in a thread)."""
    _signal_group(session, signal.SIGKILL)
    await anyio.to_thread.run_sync(_kill_session_members, session)


def _kill_session_members(session: int) -> None:
    for pid, member_session, _ in _scan_processes():
        if member_session == session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _resident_by_session() -> dict[int, int]:
    usage: dict[int, int] = {}
    for _, session, pages in _scan_processes():
        usage[session] = usage.get(session, 0) + pages * _PAGE_SIZE
    return usage


def _scan_processes() -> list[tuple[int, int, int]]:
    """Return (pid, session, resident pages) of every live process on the machine."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        # After the command name: state(0) ppid(1) pgrp(2) session(3) ... rss(21).
        if fields[0] != b"Z":
            found.append((int(entry.name), int(fields[3]), int(fields[21])))
    return found


# ---------------------------------------------------------------------------------------------
# Volumes


@dataclass(frozen=True)
class _Sources:
    """Where ConfigMaps and Secrets come from, turning a missing one into a config error."""

    configmap_source: ConfigMapSource
    secret_source: SecretSource
    namespace: str

    def configmap(self, name: str, *, optional: bool = False) -> dict[str, bytes] | None:
        data = _fetch("configmap", self.configmap_source, name, optional)
        return None if data is None else {key: value.encode() for key, value in data.items()}

    def secret(self, name: str, *, optional: bool = False) -> dict[str, bytes] | None:
        data = _fetch("secret", self.secret_source, name, optional)
        return None if data is None else dict(data)


def _fetch(
    kind: str, source: Callable[[str], Mapping[str, _T]], name: str, optional: bool
) -> Mapping[str, _T] | None:
    """Return an object's data, None for a missing optional one, or raise _ConfigError."""
    try:
        return source(name)
    except LookupError:
        if optional:
            return None
        raise _ConfigError(f'{kind} "{name}" not found') from None


@dataclass(frozen=True)
class _VolumePlan:
    """A volume as it will exist here: its directory and the files to write in it."""

    name: str
    path: Path
    files: tuple[tuple[str, bytes, int], ...] = ()
    create: bool = True
    read_only: bool = False


_DEFAULT_MODE = 0o644


def _plan_volume(
    volume: Mapping[str, Any],
    mounted_read_only: bool,
    pod: Mapping[str, Any],
    sandbox: Path,
    sources: _Sources,
) -> _VolumePlan:
    """Return how to materialise one volume, reading its data from the sources."""
    name = volume["name"]
    path = sandbox / "volumes" / name
    if "emptyDir" in volume:
        return _VolumePlan(name, path, read_only=mounted_read_only)
    if "hostPath" in volume:
        return _VolumePlan(name, Path(volume["hostPath"]["path"]), create=False)
    if "projected" in volume:
        projected = volume["projected"]
        mode = projected.get("defaultMode", _DEFAULT_MODE)
        files = [
            f for s in projected.get("sources") or [] for f in _source_files(s, mode, pod, sources)
        ]
        return _VolumePlan(name, path, tuple(files), read_only=True)
    for kind in ("configMap", "secret", "downwardAPI"):
        if kind in volume:
            mode = volume[kind].get("defaultMode", _DEFAULT_MODE)
            files = _source_files({kind: volume[kind]}, mode, pod, sources)
            return _VolumePlan(name, path, tuple(files), read_only=True)
    raise _ConfigError(
        f'volume "{name}": only emptyDir, configMap, secret, projected, downwardAPI and hostPath '
        "volumes run locally"
    )


def _source_files(
    source: Mapping[str, Any], mode: int, pod: Mapping[str, Any], sources: _Sources
) -> list[tuple[str, bytes, int]]:
    """Return the (relative path, data, mode) files one volume source projects."""
    if "configMap" in source:
        ref = source["configMap"]
        data = sources.configmap(ref["name"], optional=bool(ref.get("optional")))
        return _items(data or {}, ref.get("items"), mode, f'configmap "{ref["name"]}"')
    if "secret" in source:
        ref = source["secret"]
        name = ref.get("secretName") or ref.get("name", "")
        data = sources.secret(name, optional=bool(ref.get("optional")))
        files = _items(data or {}, ref.get("items"), mode, f'secret "{name}"')
        # Kubernetes' 0644 default is safe inside a container; on a shared machine keep
        # secrets to their owner.
        return [(path, value, file_mode & 0o700) for path, value, file_mode in files]
    if "downwardAPI" in source:
        items = source["downwardAPI"].get("items") or []
        return [
            (i["path"], _field_value(i["fieldRef"]["fieldPath"], pod).encode(), i.get("mode", mode))
            for i in items
            if "fieldRef" in i
        ]
    if "serviceAccountToken" in source:
        # No API server to authenticate to locally; an empty token keeps readers from crashing.
        return [(source["serviceAccountToken"].get("path", "token"), b"", mode)]
    return []


def _items(
    data: Mapping[str, bytes], items: Iterable[Mapping[str, Any]] | None, mode: int, what: str
) -> list[tuple[str, bytes, int]]:
    if items is None:
        return [(key, value, mode) for key, value in data.items()]
    files = []
    for item in items:
        if item["key"] not in data:
            raise _ConfigError(f"couldn't find key {item['key']} in {what}")
        files.append((item["path"], data[item["key"]], item.get("mode", mode)))
    return files


def _materialise(sandbox: Path, plans: Iterable[_VolumePlan]) -> None:
    """Create a fresh sandbox and write every volume into it (runs in a worker thread)."""
    if sandbox.exists():
        _remove_tree(sandbox)  # a new pod of the same name is a new pod
    for sub in ("volumes", "home", "tmp", "logs"):
        (sandbox / sub).mkdir(parents=True)
    for plan in plans:
        if not plan.create:
            continue
        plan.path.mkdir(parents=True, exist_ok=True)
        for relative, data, mode in plan.files:
            _write_file(plan.path, relative, data, mode)
        if plan.read_only:
            for directory in [plan.path, *(p for p in plan.path.rglob("*") if p.is_dir())]:
                directory.chmod(0o555)


def _write_file(directory: Path, relative: str, data: bytes, mode: int) -> None:
    target = directory / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ValueError(f'volume item path "{relative}" must be relative, without ".."')
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    target.chmod(mode)  # after writing, so a read-only mode does not stop the write


def _remove_tree(path: Path) -> None:
    for directory, _, _ in os.walk(path):
        os.chmod(directory, 0o700)
    shutil.rmtree(path)


# ---------------------------------------------------------------------------------------------
# Paths and environment


class _PathMap:
    """The path translation rule: container mount paths to sandbox paths, longest first."""

    def __init__(self, mounts: Iterable[tuple[str, str]]) -> None:
        self._mounts = sorted(mounts, key=lambda mount: len(mount[0]), reverse=True)

    @classmethod
    def for_container(
        cls, container: Mapping[str, Any], volumes: Mapping[str, Path], sandbox: Path
    ) -> _PathMap:
        mounts = []
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in volumes:
                raise _ConfigError(
                    f'container "{container["name"]}" mounts volume "{mount["name"]}", '
                    "which the pod does not declare"
                )
            host = volumes[mount["name"]] / mount.get("subPath", "")
            mount_path = mount["mountPath"].rstrip("/") or "/"
            mounts.append((mount_path, str(host).rstrip("/")))
        return cls(mounts)

    def translate(self, value: str) -> str:
        """Return ``value`` with a leading mount path replaced by its sandbox path."""
        for mount_path, host in self._mounts:
            prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
            if value == mount_path:
                return host
            if value.startswith(prefix):
                return host + "/" + value[len(prefix) :]
        return value


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Return ``value`` with Kubernetes' ``$(VAR)`` references expanded and ``$$`` unescaped."""

    def replace(match: re.Match[str]) -> str:
        if match[1] == "$":
            return "$"
        return env.get(match[2], match[0])

    return _EXPANSION.sub(replace, value)


def _declared_env(
    container: Mapping[str, Any], pod: Mapping[str, Any], sources: _Sources
) -> dict[str, str]:
    """Return the container's envFrom and env, resolved as a kubelet would (container paths)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for key, value in _env_source(source, sources).items():
            env[prefix + key] = value
    for item in container.get("env") or []:
        if "valueFrom" in item:
            resolved = _value_from(item["valueFrom"], pod, sources)
            if resolved is not None:
                env[item["name"]] = resolved
        else:
            env[item["name"]] = _expand(item.get("value", ""), env)
    return env


def _env_source(source: Mapping[str, Any], sources: _Sources) -> dict[str, str]:
    if "configMapRef" in source:
        ref = source["configMapRef"]
        data = sources.configmap(ref["name"], optional=bool(ref.get("optional")))
    else:
        ref = source.get("secretRef") or {}
        data = sources.secret(ref.get("name", ""), optional=bool(ref.get("optional")))
    return {key: value.decode(errors="replace") for key, value in (data or {}).items()}


def _value_from(
    value_from: Mapping[str, Any], pod: Mapping[str, Any], sources: _Sources
) -> str | None:
    """Return an env value from a fieldRef or key reference; None for a missing optional one."""
    if "fieldRef" in value_from:
        return _field_value(value_from["fieldRef"]["fieldPath"], pod)
    for kind, read in (("configMapKeyRef", sources.configmap), ("secretKeyRef", sources.secret)):
        if kind in value_from:
            ref = value_from[kind]
            optional = bool(ref.get("optional"))
            data = read(ref["name"], optional=optional)
            if data is not None and ref["key"] in data:
                return data[ref["key"]].decode(errors="replace")
            if optional:
                return None
            what = "ConfigMap" if kind == "configMapKeyRef" else "Secret"
            namespace = sources.namespace
            raise _ConfigError(
                f"couldn't find key {ref['key']} in {what} {namespace}/{ref['name']}"
            )
    raise _ConfigError(f"env valueFrom {dict(value_from)} is not supported by the local runner")


def _field_value(path: str, pod: Mapping[str, Any]) -> str:
    """Return the value of a downward API fieldPath for this pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    subscript = _FIELD_SUBSCRIPT.match(path)
    if subscript:
        return str((meta.get(subscript[1]) or {}).get(subscript[2], ""))
    if path in ("metadata.labels", "metadata.annotations"):
        pairs = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join(f'{key}="{value}"' for key, value in pairs)
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace") or "default",
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or "localhost",
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": _HOST_IP,
        "status.hostIPs": _HOST_IP,
        "status.podIP": _HOST_IP,
        "status.podIPs": _HOST_IP,
    }
    if path not in simple:
        raise _ConfigError(f'fieldRef "{path}" is not supported by the local runner')
    return str(simple[path])


def _all_containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


# ---------------------------------------------------------------------------------------------
# Status


def _now() -> str:
    """Return the time as Kubernetes writes it: RFC 3339, UTC, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _PodStatus:
    """A pod's status as a kubelet writes it; reports a copy to the sink whenever it changes."""

    def __init__(self, pod: Mapping[str, Any], sink: StatusSink) -> None:
        spec = pod.get("spec") or {}
        self._sink = sink
        self._last: dict[str, Any] | None = None
        self._transitions: dict[str, tuple[str, str]] = {}
        self._init_names = [c["name"] for c in spec.get("initContainers") or []]
        self._qos = _qos_class(_all_containers(spec))
        self.start_time = _now()
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

    def running(self, name: str, pid: int, started_at: str) -> None:
        status = self.containers[name]
        status.update(
            state={"running": {"startedAt": started_at}},
            containerID=f"local://{pid}",
            started=True,
            ready=name not in self._init_names,  # no readiness probes: running is ready
        )

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
        state.update(startedAt=started_at, finishedAt=_now())
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
            "hostIP": _HOST_IP,
            "hostIPs": [{"ip": _HOST_IP}],
        }
        if self.sandbox_ready:
            status.update(podIP=_HOST_IP, podIPs=[{"ip": _HOST_IP}])
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
            previous = (status, _now())
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
