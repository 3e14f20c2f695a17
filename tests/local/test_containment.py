"""A step's whole process tree ends with it: daemons, double forks, nohup, setsid.

Each container runs under a keeper that is a child subreaper (see k8sjobs/local/_keeper.py):
once ``wait()`` or ``cancel()`` returns, nothing the step started is left, by construction;
these tests check it at once, with real processes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from k8sjobs import Session, Step, StepState
from k8sjobs.local import LocalBackend

from ..waiting import wait_until
from .processes import alive, with_word

ESCAPES = {
    "setsid": "setsid bash -c 'echo $$ >> {pids}; sleep 1000; true' {word} &",
    "double-fork": "( ( bash -c 'echo $$ >> {pids}; sleep 1000; true' {word} & ) & )",
    "nohup": "nohup bash -c 'echo $$ >> {pids}; sleep 1000; true' {word} > /dev/null 2>&1 &",
    "double-fork-setsid": "( setsid bash -c 'echo $$ >> {pids}; sleep 1000; true' {word} & )",
    "own-group": 'python -c \'import os,time; os.setpgid(0,0); open("{pids}","a").write('
    'f"{{os.getpid()}}\\n"); time.sleep(1000)\' {word} &',
}


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5)
    try:
        async with Session(study="contained", backend=backend) as s:
            yield s
    finally:
        for pid in with_word(f"contained-{tmp_path.name}"):  # a failed test leaves no daemon
            os.kill(pid, signal.SIGKILL)


def started(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


async def until_started(pids: Path, count: int = 1) -> None:
    await wait_until(lambda: len(started(pids)) >= count, f"the step started {count} processes")


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_what_a_step_leaves_behind_ends_with_it(
    session: Session, tmp_path: Path, escape: str
) -> None:
    pids, word = tmp_path / "pids", f"contained-{tmp_path.name}"
    start = ESCAPES[escape].format(pids=pids, word=word)
    script = f"{start}\nuntil [ -s {pids} ]; do sleep 0.01; done\necho left"
    result = await (await session.submit(Step(name="leaves", script=script))).wait(timeout=60)
    assert result.ok, result.describe()
    (pid,) = started(pids)
    assert not alive(pid)
    assert with_word(word) == []


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_cancel_returns_once_the_whole_tree_is_gone(
    session: Session, tmp_path: Path, escape: str
) -> None:
    pids, word = tmp_path / "pids", f"contained-{tmp_path.name}"
    start = ESCAPES[escape].format(pids=pids, word=word)
    # The step ignores SIGTERM: only the SIGKILL after the grace ends it.
    script = f"trap '' TERM\necho $$ >> {pids}\n{start}\nsleep 1000 & wait"
    handle = await session.submit(Step(name="cancelled", script=script))
    await until_started(pids, 2)
    await handle.cancel()
    assert not any(alive(pid) for pid in started(pids))
    assert with_word(word) == []
    assert (await handle.wait(timeout=10)).state is StepState.CANCELLED
