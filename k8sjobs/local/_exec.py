"""Another process in a running container's environment: what pods/exec starts.

A container runtime's exec joins the container: same environment, same mounts, the
container's working directory, its PATH to find the program. Locally a container is a
process session in the pod's sandbox (``_process``), so an exec is a process started with
the container's ``Launch`` (its env and cwd, as ``PodRunner`` prepared them), the command
words passed through the container's path translation rule (``/work/x`` is the sandbox's
volume), the program resolved as a container's is (``program``: a missing one is the
runtime's ``executable file not found in $PATH``).

Each exec is a session of its own, so that ending it (the stream closed, the pod gone)
kills everything it started and nothing of the container's own tree; the pod's run keeps
the set of its execs and kills them when its containers end, as the runtime kills the exec
processes of a stopped container.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from ._process import Launch, StartError, kill_session, program
from ._volumes import PathMap

__all__ = ["ExecProcesses", "start_exec"]


async def start_exec(
    launch: Launch,
    paths: PathMap,
    command: Sequence[str],
    *,
    stdin: bool,
    stdout: bool,
    stderr: bool,
) -> asyncio.subprocess.Process:
    """Start ``command`` in the environment of the container ``launch`` describes.

    Raises ``StartError`` with the runtime's words when the program cannot be started.
    """
    argv = [paths.translate(word) for word in command]
    exec_launch = dataclasses.replace(launch, argv=argv, has_command=True)
    try:
        executable = program(exec_launch)
    except StartError as error:  # in the container's words: its path, not the sandbox's
        raise StartError(str(error).replace(f'"{argv[0]}"', f'"{command[0]}"')) from None
    pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
    try:
        return await asyncio.create_subprocess_exec(
            executable,
            *argv[1:],
            stdin=pipe if stdin else null,
            stdout=pipe if stdout else null,
            stderr=pipe if stderr else null,
            env=launch.env,
            cwd=launch.cwd,
            start_new_session=True,  # its own session: killed alone, and wholly
        )
    except OSError as error:  # not executable, a working directory gone: runc's words
        why = (error.strerror or str(error)).lower()
        raise StartError(f'exec: "{command[0]}": {why}') from None


class ExecProcesses:
    """The exec processes of one pod, killed together when its containers end."""

    def __init__(self) -> None:
        self._processes: set[asyncio.subprocess.Process] = set()

    def add(self, process: asyncio.subprocess.Process) -> None:
        """Keep ``process`` until it ends (it is forgotten then)."""
        self._processes.add(process)
        waiter = asyncio.ensure_future(process.wait())
        waiter.add_done_callback(lambda _: self._processes.discard(process))

    async def kill_all(self) -> None:
        """Kill every exec process of the pod and all they started."""
        for process in list(self._processes):
            await kill(process)


async def kill(process: asyncio.subprocess.Process) -> None:
    """Kill an exec process's whole session (nothing if it has ended and been reaped)."""
    if process.returncode is None:
        await kill_session(process.pid)
