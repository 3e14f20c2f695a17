"""Starting a container's process and watching it: exit, memory limit, cancellation.

Programs
--------
``command`` + ``args`` are executed directly (never through a shell string built here). A
container without ``command`` cannot run: the image's entrypoint is unknown locally. argv[0]
named ``python`` or ``python3`` (bare or at any path) is the driver's interpreter
(``sys.executable``), so packages installed for the driver, k8sjobs included, are there. Any other
absolute argv[0] is used when it exists here, else its base name is looked up on PATH (an
image's ``/usr/local/bin/bash`` is this machine's bash). A program that cannot be started
terminates the container as containerd reports it: exit code 128, reason ``StartError``,
``startedAt`` at the epoch. Each container is its own process session, led by its program and
held by its keeper (``_keeper``, started by ``_keepers``: a child subreaper, outside the
session, that holds the container's whole process tree), with stdout and stderr written
straight into one log file.

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
When a container's main process exits, its keeper kills whatever the process left, as the
container runtime does; daemons that started their own session or process group included, since
as subreaper the keeper inherits every orphan of the tree. Cancelling the wait sends SIGTERM to
the keeper, which passes it to the tree and sends SIGKILL after ``kill_grace`` seconds; the wait
returns once the keeper has reaped every process, so nothing is left when ``cancel`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from ._keepers import Kept, request, start_keeper

__all__ = [
    "EPOCH",
    "START_ERROR_EXIT",
    "Launch",
    "MemoryMonitor",
    "StartError",
    "Supervisor",
    "kill_session",
    "program",
    "spawn",
]

_MEMORY_POLL_SECONDS = 0.5
START_ERROR_EXIT = 128
EPOCH = "1970-01-01T00:00:00Z"
_PYTHON_NAMES = frozenset({"python", "python3"})
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# How long after its own grace a keeper may take to kill and reap its tree before it is killed.
_KEEPER_MARGIN = 5.0


class StartError(Exception):
    """The container's program cannot be started: containerd's StartError."""


async def spawn(launch: Launch, program: str, sandbox: Path, kill_grace: float) -> tuple[Kept, int]:
    """Start a container's program under its keeper, in its own session, output to its log.

    Returns the keeper (``_keeper``, started by ``_keepers``), which holds the program's whole
    tree, and the program's pid, which is also its session's id.
    """
    cwd = _working_dir(launch, sandbox)
    log = sandbox / "logs" / f"{launch.name}.log"  # appended to by the program, unbuffered
    state = sandbox / "run" / launch.name
    state.parent.mkdir(exist_ok=True)
    try:
        asked = request(state, kill_grace, log, cwd, program, launch.argv[1:], launch.env)
        keeper, said = await start_keeper(asked, state)
    except (OSError, ValueError) as error:
        why = getattr(error, "strerror", None) or error
        raise StartError(f'exec: "{launch.argv[0]}": {why}') from None
    word, _, rest = said.partition(" ")
    if word != "started":
        code = await keeper.wait()
        why = rest or f"the keeper exited with {code}"
        raise StartError(f'exec: "{launch.argv[0]}": {why}')
    return keeper, int(rest)


def _working_dir(launch: Launch, sandbox: Path) -> Path:
    """Return the container's working directory, created if it lies in the sandbox."""
    cwd = Path(launch.cwd)
    if not cwd.is_dir():
        if not cwd.is_relative_to(sandbox):
            raise StartError(
                f'container "{launch.name}": workingDir "{launch.cwd}" does not exist on '
                "this machine and is not under a volume mount"
            )
        cwd.mkdir(parents=True, exist_ok=True)  # as a container runtime creates it
    return cwd


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one container's process."""

    name: str
    image: str
    has_command: bool
    argv: list[str]
    env: dict[str, str]
    cwd: str
    memory_limit: int | None


def program(launch: Launch) -> str:
    """Return the executable to start for a container's argv[0], or raise StartError."""
    if not launch.has_command or not launch.argv:
        raise StartError(
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
        raise StartError(f'exec: "{argv0}": executable file not found in $PATH')
    return found


class Supervisor:
    """Waits for a container's process, enforcing its memory limit and cleaning up its session."""

    def __init__(
        self,
        process: Kept,
        pid: int,
        memory_limit: int | None,
        kill_grace: float,
        memory: MemoryMonitor,
    ) -> None:
        self.process = process  # the keeper
        self.pid = pid  # the program: its session's id
        self.memory_limit = memory_limit
        self.kill_grace = kill_grace
        self.memory = memory
        self.oom_killed = False
        self.resident_peak = 0  # the tree's summed resident bytes, highest sampled (with a limit)

    async def wait(self) -> None:
        """Return once the process has ended and nothing is left of its session."""
        try:
            await self._wait_within_limit()
        except asyncio.CancelledError:
            await self._stop()
            raise
        if self.process.returncode is not None and self.process.returncode < 0:
            # The keeper was killed before it could: kill what the program left, as a runtime.
            await kill_session(self.pid)

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
                resident = await self.memory.resident(self.pid)
                self.resident_peak = max(self.resident_peak, resident)
                if resident > self.memory_limit:
                    self.oom_killed = True
                    _signal(self.process.pid, signal.SIGUSR1)  # the keeper kills the tree
                    await waiting
        finally:
            waiting.cancel()

    async def _stop(self) -> None:
        """Stop the tree and wait until it is gone: cancel returns only when nothing is left.

        SIGTERM to the keeper, which passes it to the whole tree and kills what is left after
        ``kill_grace``; the keeper exits once every process is reaped. Only a keeper that
        does not exit in time is killed, with whatever its session still holds.
        """
        _signal(self.process.pid, signal.SIGTERM)
        # A second cancellation only shortens the wait.
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(self.kill_grace + _KEEPER_MARGIN):
                await asyncio.shield(self.process.wait())
        if self.process.returncode is None:  # its pid is its own until it has ended
            _signal_group(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.CancelledError):
            if await asyncio.shield(self.process.wait()) < 0:
                await kill_session(self.pid)


class MemoryMonitor:
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


def _signal(pid: int, signum: int) -> None:
    """Send a signal to a process that may already be gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _signal_group(group: int, signum: int) -> None:
    """Send a signal to a process group that may already be gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


async def kill_session(session: int) -> None:
    """Kill the process group and any member of the session that left it (scan in a thread)."""
    _signal_group(session, signal.SIGKILL)
    await anyio.to_thread.run_sync(_kill_session_members, session)


def _kill_session_members(session: int) -> None:
    """Kill every live process of a session (runs in a worker thread)."""
    for pid, member_session, _ in _scan_processes():
        if member_session == session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _resident_by_session() -> dict[int, int]:
    """Return the resident bytes of each session on the machine (runs in a worker thread)."""
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
