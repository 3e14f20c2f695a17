"""Finding a container still running after its driver died, and following it to its end.

Every container runs under a keeper (``_keeper``) that outlives the driver and records, next to
the pod's logs, ``run/<container>.keeper`` (its pid and start time) and, once the container has
ended and its whole tree is gone, ``run/<container>.exit`` (the exit code). A pid alone could
name another process after reuse; the start time read again from ``/proc/<pid>/stat`` must
match too. A new driver thus adopts a living container instead of starting a second copy:
it waits for the exit file (or for the keeper to be gone, which means it was killed), and can
stop it as its first driver would (SIGTERM to the keeper, which escalates after its grace).

There is no window in which a container may run unseen. The driver records a pod (with its
containers waiting) before any of them starts, and writes ``run/<container>.asked`` (the
keeper's pid and start time) before it hands the keeper its request; the keeper writes
``.keeper`` before it starts the program. So whatever the record says of a container not
recorded as ended, its sandbox names every keeper that may have started it: a keeper named
only in ``.asked`` that is alive is waited for until it either writes ``.keeper`` (it started)
or ends (it never got the whole request: nothing ran, and the step runs again).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ._keeper import start_time
from ._podstatus import now

__all__ = ["Keeper", "Orphan", "claim", "ended_status", "find_orphans", "unfinished_handoffs"]

_POLL_SECONDS = 0.1
# How long a keeper that has the request may take to write .keeper before it is followed as is.
_SETTLE_SECONDS = 30.0
_KILLED_EXIT = 137  # a keeper killed before it wrote the exit code: its tree died with SIGKILL


@dataclass(frozen=True)
class Keeper:
    """A container's keeper process, identified by pid and start time."""

    pid: int
    start_time: int
    state: Path  # the prefix of its .keeper and .exit files

    def alive(self) -> bool:
        """Return whether this very keeper (not a later process with its pid) still runs."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return False
        return fields[0] != b"Z" and int(fields[19]) == self.start_time

    def exit_code(self) -> int | None:
        """Return the container's exit code once the keeper wrote it, else None."""
        try:
            return int(Path(f"{self.state}.exit").read_text())
        except (OSError, ValueError):
            return None

    def started_at(self) -> str | None:
        """Return when the keeper started the program (it wrote ``.keeper`` just before)."""
        return _stamp(Path(f"{self.state}.keeper"))

    def ended_at(self) -> str | None:
        """Return when the container ended (the keeper wrote ``.exit`` then), else None.

        A driver that adopts a container which ended while no driver watched learns its end
        from this, not from when it looked (issue 34: an adopted step's end was re-attach).
        """
        return _stamp(Path(f"{self.state}.exit"))

    def ended(self) -> bool:
        """Return whether the container ended: its exit code written, or its keeper gone."""
        return self.exit_code() is not None or not self.alive()

    def signal(self, signum: int) -> None:
        """Signal the keeper, only if it is still the same process."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signum)

    async def wait(self, grace: float) -> int:
        """Return the container's exit code (kubelet style: 128 + n for signal n) at its end.

        Cancelled, it stops the container first (SIGTERM to the keeper, which kills the tree
        after its own grace; SIGKILL to the keeper itself well after that) and waits for it.
        """
        try:
            return await self._ended()
        except asyncio.CancelledError:
            await self.stop(grace)
            raise

    async def stop(self, grace: float) -> None:
        """Stop the container's tree as its own driver would, and wait until it is gone."""
        self.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(grace + 5.0):
                await asyncio.shield(self._ended())
        self.signal(signal.SIGKILL)

    async def _ended(self) -> int:
        while True:
            code = await anyio.to_thread.run_sync(self.exit_code)
            if code is not None:
                return code if code >= 0 else 128 - code
            if not await anyio.to_thread.run_sync(self.alive):
                code = await anyio.to_thread.run_sync(self.exit_code)  # written as it exited?
                return _KILLED_EXIT if code is None else (code if code >= 0 else 128 - code)
            await asyncio.sleep(_POLL_SECONDS)


@dataclass(frozen=True)
class Orphan:
    """A pod of a recorded run whose containers outlived their driver."""

    name: str
    status: dict[str, Any]  # its last recorded PodStatus
    keepers: dict[str, Keeper]  # container name: its keeper, living or ended with a code

    def ended(self) -> bool:
        """Return whether every adopted container of the pod has ended (blocking)."""
        return all(keeper.ended() for keeper in self.keepers.values())


def find_orphans(record: Mapping[str, Any], sandbox: Callable[[str], Path]) -> list[Orphan]:
    """Return the pods of ``record`` with a container still running or ended unseen, or with
    every container's end recorded under a result that is not (blocking).

    Every container the record does not show ended counts, whatever state it shows (its
    "running" may not have been saved before the driver died): the keeper its sandbox names
    is alive, or has written its exit code since (it ended while no driver watched).
    """
    found = []
    for pod, status in (record.get("pod_status") or {}).items():
        keepers = {}
        for container in _container_statuses(status):
            if "terminated" in (container.get("state") or {}):
                continue  # its end is recorded: nothing of it runs
            keeper = _claimed_keeper(sandbox(pod) / "run" / container["name"])
            if keeper is not None:
                keepers[container["name"]] = keeper
        if keepers:
            found.append(Orphan(pod, _adopted_status(status, keepers), keepers))
        elif _all_ended(status):
            # Its end is recorded but not the step's result (the driver died between the
            # two saves): the pod is adopted as it ended, never run again.
            found.append(Orphan(pod, copy.deepcopy(dict(status)), {}))
    return found


def _all_ended(status: Mapping[str, Any]) -> bool:
    containers = _container_statuses(status)
    return bool(containers) and all("terminated" in (c.get("state") or {}) for c in containers)


def claim(state: Path, pid: int) -> None:
    """Write ``<state>.asked``: the keeper ``pid`` is about to be asked to start the container.

    Written before the request is sent (a write reaches the page cache, which outlives a
    killed driver; a machine that crashes leaves no process to adopt), so a new driver never
    misses a keeper that may start the program (blocking).
    """
    with open(f"{state}.asked", "w") as out:
        out.write(f"{pid} {start_time(pid)}\n")


def ended_status(
    status: Mapping[str, Any], codes: Mapping[str, int], ends: Mapping[str, str | None]
) -> dict[str, Any]:
    """Return the pod's status once its adopted containers ended with ``codes`` at ``ends``
    (their keepers' records; a container with none ended when this driver saw it).

    A container the record shows running that was not adopted (run inside the dead driver,
    as the in-process handoff is) died with its driver: it ends as an error, so the pod fails
    and the Job's retry rule decides what follows. A container that never started fails too.
    """
    ended = copy.deepcopy(dict(status))
    finished = now()
    succeeded = True
    for container in _container_statuses(ended):
        state = container.get("state") or {}
        if "terminated" in state:
            succeeded = succeeded and state["terminated"].get("exitCode") == 0
            continue
        code = codes.get(container["name"])
        message = None if code is not None else "its driver exited before it ended"
        code = 137 if code is None else code
        started = (state.get("running") or {}).get("startedAt", finished)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": max(ends.get(container["name"]) or finished, started),
        }
        if message:
            terminated["message"] = message
        container.update(state={"terminated": terminated}, ready=False, started=False)
        succeeded = succeeded and code == 0
    ended["phase"] = "Succeeded" if succeeded else "Failed"
    return ended


def unfinished_handoffs(status: Mapping[str, Any], codes: Mapping[str, int]) -> list[str]:
    """Return the containers that died with their driver after every other one succeeded.

    Those ran inside the driver (the in-process push): none of them recorded an end and
    none has a keeper's exit code, while every container that did end, ended 0.
    """
    statuses = _container_statuses(status)
    ended = [c for c in statuses if "terminated" in (c.get("state") or {})]
    if any(c["state"]["terminated"].get("exitCode") != 0 for c in ended):
        return []
    if any(code != 0 for code in codes.values()):
        return []
    return [
        c["name"]
        for c in status.get("containerStatuses") or []
        if "terminated" not in (c.get("state") or {}) and c["name"] not in codes
    ]


def _container_statuses(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _claimed_keeper(state: Path) -> Keeper | None:
    """Return the keeper that started (or may still start) this container, else None.

    A keeper named in ``.keeper`` started it: it counts while alive or once it wrote the exit
    code. One named only in ``.asked`` may hold the request yet: wait until it wrote
    ``.keeper`` or ended (within milliseconds: it reads the request, or the end of its cut
    connection); ended without ``.keeper``, it started nothing.
    """
    asked = _keeper_file(state, "asked")  # written by the driver, which is gone: read once
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        keeper = _keeper_file(state, "keeper")
        if keeper is not None:
            return keeper if keeper.alive() or keeper.exit_code() is not None else None
        if asked is None or not asked.alive():
            keeper = _keeper_file(state, "keeper")  # written just before it ended?
            return keeper if keeper is not None and keeper.exit_code() is not None else None
        if time.monotonic() > deadline:
            return asked  # alive and silent this long: follow it as a started keeper
        time.sleep(_POLL_SECONDS / 10)


def _adopted_status(status: Mapping[str, Any], keepers: Mapping[str, Keeper]) -> dict[str, Any]:
    """Return the recorded status with the adopted containers running (as they were)."""
    adopted = copy.deepcopy(dict(status))
    for container in _container_statuses(adopted):
        keeper = keepers.get(container["name"])
        if keeper is not None and "running" not in (container.get("state") or {}):
            began = keeper.started_at() or now()  # its record may predate the start's save
            container.update(state={"running": {"startedAt": began}}, started=True)
    if adopted.get("phase") in (None, "Pending"):
        adopted["phase"] = "Running"
    return adopted


def _stamp(path: Path) -> str | None:
    """Return when ``path`` was last written, as Kubernetes stamps times, else None."""
    try:
        written = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(written, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _keeper_file(state: Path, kind: str) -> Keeper | None:
    try:
        pid, started = Path(f"{state}.{kind}").read_text().split()
        return Keeper(int(pid), int(started), state)
    except (OSError, ValueError):
        return None  # absent, or still being written (the keeper writes it in place)
