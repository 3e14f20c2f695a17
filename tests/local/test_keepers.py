"""Starting keepers: through the driver's keeper server, or each as its own process.

Every container runs under a keeper (k8sjobs/local/_keeper.py). The driver has them forked by
one keeper server (k8sjobs/local/_keepers.py) and falls back to one process per keeper; both
ways must give the same containers: exit codes and signals, contained trees, nothing left
by a cancel at any point of the start. And the server is never needed for long: one that died
or hangs is replaced, and it ends with its driver while the keepers live on.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8sjobs.local._keepers import SERVER
from k8sjobs.local._process import Launch, MemoryMonitor, Supervisor, program, spawn

from ..waiting import wait_until, wait_until_sync
from .processes import alive

PATHS = ["server", "own process"]


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with keepers forked by the server, then with keepers of their own."""
    monkeypatch.setattr(SERVER, "enabled", request.param == "server")
    yield request.param


def launch(sandbox: Path, script: str) -> Launch:
    (sandbox / "logs").mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"]}
    return Launch("main", "busybox", True, ["bash", "-c", script], env, str(sandbox), None)


async def run(sandbox: Path, script: str) -> tuple[int, str]:
    """Run one container to its end; return its exit code and reason."""
    started = launch(sandbox, script)
    keeper, pid = await spawn(started, program(started), sandbox, kill_grace=0.5)
    supervisor = Supervisor(keeper, pid, None, 0.5, MemoryMonitor())
    await supervisor.wait()
    return supervisor.outcome()


def children(parent: int) -> list[int]:
    """Return the live children of ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(
    ("script", "code"),
    [("true", 0), ("exit 3", 3), ("exit 255", 255), ("kill -USR2 $$", 140), ("kill -9 $$", 137)],
)
async def test_exit_codes_and_signals_are_the_programs(
    path: str, tmp_path: Path, script: str, code: int
) -> None:
    assert await run(tmp_path, script) == (code, "Completed" if code == 0 else "Error")


async def test_a_daemon_in_its_own_session_ends_with_its_container(
    path: str, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f"setsid bash -c 'echo $$ > {pids}; exec sleep 1000' & until [ -s {pids} ]; do :; done"
    assert await run(tmp_path, script) == (0, "Completed")
    assert not alive(int(pids.read_text()))


async def test_a_program_that_cannot_start_is_a_start_error(path: str, tmp_path: Path) -> None:
    from k8sjobs.local._process import StartError

    started = launch(tmp_path, "true")
    with pytest.raises(StartError, match="Permission denied"):
        await spawn(started, str(tmp_path), tmp_path, kill_grace=0.5)  # a directory


@pytest.mark.parametrize("turns", range(0, 24, 2))
async def test_a_cancel_at_any_point_of_the_start_leaves_nothing(
    path: str, tmp_path: Path, turns: int
) -> None:
    """Cancelled after ``turns`` turns of the event loop: before the keeper exists, while it
    starts, once the program runs; when the task returns, nothing it started is alive."""
    pids = tmp_path / "pids"
    task = asyncio.create_task(run(tmp_path, f"echo $$ >> {pids}; exec sleep 1000"))
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    started = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    assert not any(alive(pid) for pid in started)
    if SERVER.pid is not None:  # a keeper forked but never asked ends on its own
        server = SERVER.pid
        await wait_until(lambda: len(children(server)) <= 1, "only the server's spare is left")
    assert not pids.exists() or pids.read_text().split() == [str(p) for p in started]


async def test_a_server_that_died_is_replaced(tmp_path: Path) -> None:
    assert await run(tmp_path, "true") == (0, "Completed")
    first = SERVER.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await wait_until(lambda: not alive(first), "the server is dead")
    assert await run(tmp_path, "exit 4") == (4, "Error")
    assert SERVER.pid not in (None, first)


async def test_a_server_that_hangs_is_replaced_and_the_container_starts_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await run(tmp_path, "true") == (0, "Completed")
    hung = SERVER.pid
    assert hung is not None
    monkeypatch.setattr(SERVER, "margin", 0.2)
    os.kill(hung, signal.SIGSTOP)
    try:
        # The spare it forked ahead keeps one container; the next gets a keeper of its own,
        # and the hung server is gone for good.
        assert await run(tmp_path, "exit 5") == (5, "Error")
        assert await run(tmp_path, "exit 6") == (6, "Error")
        assert not alive(hung)
        assert await run(tmp_path, "exit 7") == (7, "Error")  # by a new server
        assert SERVER.pid not in (None, hung)
    finally:
        if alive(hung):
            os.kill(hung, signal.SIGKILL)


async def test_a_server_killed_while_its_keepers_run_does_not_touch_them(tmp_path: Path) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    task = asyncio.create_task(
        run(tmp_path, f"touch {ready}; until [ -e {go} ]; do sleep 0.01; done")
    )
    await wait_until(ready.exists, "the container runs")
    server = SERVER.pid
    assert server is not None
    os.kill(server, signal.SIGKILL)
    await wait_until(lambda: not alive(server), "the server is dead")
    go.touch()
    assert await task == (0, "Completed")


DRIVER = """
import asyncio, sys
from pathlib import Path
from k8sjobs.local._keepers import SERVER
from k8sjobs.local._process import Launch, program, spawn

async def main():
    sandbox = Path(sys.argv[1])
    (sandbox / "logs").mkdir()
    launch = Launch("main", "x", True, ["sleep", "1000"], {"PATH": "/usr/bin:/bin"},
                    str(sandbox), None)
    keeper, pid = await spawn(launch, program(launch), sandbox, 0.5)
    print(SERVER.pid, keeper.pid, pid, flush=True)
    await asyncio.sleep(1000)

asyncio.run(main())
"""


def test_the_server_ends_with_its_driver_and_the_keepers_live_on(tmp_path: Path) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert driver.stdout is not None
        server, keeper, sleeper = map(int, driver.stdout.readline().split())
        spares = [pid for pid in children(server) if pid != keeper]
        driver.kill()
        driver.wait()
        wait_until_sync(lambda: not alive(server), "the server ended with its driver")
        wait_until_sync(lambda: not any(map(alive, spares)), "its spare ended too")
        assert alive(keeper) and alive(sleeper)
        os.kill(keeper, signal.SIGTERM)  # as `k8sjobs cancel` stops an adopted container
        wait_until_sync(lambda: not alive(sleeper) and not alive(keeper), "the tree ended")
        assert (tmp_path / "run" / "main.exit").read_text() == f"{-signal.SIGTERM}\n"
    finally:
        driver.kill()
