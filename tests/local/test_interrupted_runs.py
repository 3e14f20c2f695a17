"""Local runs interrupted the hard way: real `k8sjobs run` drivers, killed or run twice at once.

Every test waits for a condition with a bound (files the steps write, processes seen in /proc),
never for a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from k8sjobs.local._faults import FAULT_KILL
from k8sjobs.steps.names import label_value

from ..waiting import wait_until_sync
from .processes import alive, with_word


class Drivers:
    """Starts `k8sjobs run` processes in a folder; kills whatever is left at the end."""

    def __init__(self, folder: Path, word: str) -> None:
        self.folder = folder
        self.word = word
        self.started: list[subprocess.Popen[str]] = []

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "k8sjobs.cli", "run", "study.yaml", "--plain", *args],
            cwd=self.folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.started.append(process)
        return process

    def cleanup(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=10)
        for pid in with_word(self.word):  # never leave a step's process behind
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def drivers(tmp_path: Path) -> Iterator[Drivers]:
    found = Drivers(tmp_path, f"k8sjobs-interrupted-{os.getpid()}-{tmp_path.name}")
    try:
        yield found
    finally:
        found.cleanup()


def study(folder: Path, script: str, name: str = "held") -> None:
    steps = "\n".join(f"      {line}" for line in script.strip().splitlines())
    (folder / "study.yaml").write_text(
        f"name: {name}\nsteps:\n  - name: step\n    script: |\n{steps}\n"
    )


# --- one driver per study -----------------------------------------------------------------


def test_a_second_driver_of_the_same_study_fails_fast_naming_the_first(
    tmp_path: Path, drivers: Drivers
) -> None:
    release = tmp_path / "release"
    study(
        tmp_path, f"echo started >> {tmp_path}/starts\nuntil [ -e {release} ]; do sleep 0.05; done"
    )
    first = drivers.run()
    wait_until_sync(lambda: (tmp_path / "starts").exists(), "the first run's step")
    second = drivers.run()
    out, err = second.communicate(timeout=60)  # before the fix: it waited forever
    assert second.returncode == 2, out + err
    assert f"another driver (pid {first.pid})" in err
    assert "k8sjobs status --study held" in err and "k8sjobs cancel --study held" in err
    release.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert (tmp_path / "starts").read_text() == "started\n"


def hold(lock: Path) -> subprocess.Popen[str]:
    """Start a process that holds ``lock`` as a driver holds its study's; return it once held."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time\n"
            f"fd=os.open({str(lock)!r},os.O_RDWR|os.O_CREAT)\nfcntl.flock(fd,fcntl.LOCK_EX)\n"
            "print('held',flush=True)\ntime.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_refused_second_driver_changes_nothing_of_the_run_records(
    tmp_path: Path, drivers: Drivers
) -> None:
    """Refused while the first driver's run goes (its journal held): the live journal is not
    truncated or removed and no all-CANCELLED record is written in its place."""
    release, runs = tmp_path / "release", tmp_path / ".k8sjobs" / "runs"
    study(
        tmp_path, f"echo started >> {tmp_path}/starts\nuntil [ -e {release} ]; do sleep 0.05; done"
    )
    first = drivers.run()
    journal = runs / f"{label_value('held')}.jsonl"
    wait_until_sync(
        lambda: journal.exists() and '"state":"RUNNING"' in journal.read_text(),
        "the first run's journal to say its step runs",
    )
    before = journal.read_bytes()
    second = drivers.run()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 2, out + err
    assert f"another driver (pid {first.pid})" in err
    assert "cancelled" not in out, out
    assert sorted(_files(runs)) == [journal.name]  # no runs/held.json of a false run
    assert journal.read_bytes().startswith(before)  # the live journal, whole
    release.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    record = json.loads((runs / f"{label_value('held')}.json").read_text())
    assert [s["state"] for s in record["steps"]] == ["SUCCEEDED"], record


def test_a_run_refused_by_the_study_lock_writes_no_run_record(
    tmp_path: Path, drivers: Drivers
) -> None:
    """Refused at its first submit (the study's lock held by a driver that keeps no journal,
    a Python session): the refused run leaves nothing under runs/."""
    study(tmp_path, f"echo started >> {tmp_path}/starts")
    lock = tmp_path / ".k8sjobs" / "steps" / label_value("held") / ".lock"
    lock.parent.mkdir(parents=True)
    (tmp_path / ".k8sjobs" / "runs").mkdir()
    earlier = tmp_path / ".k8sjobs" / "runs" / f"{label_value('held')}.json"
    earlier.write_text('{"study": "held", "steps": []}')
    holder = hold(lock)
    try:
        before = _files(tmp_path / ".k8sjobs" / "runs")
        busy = drivers.run()
        out, err = busy.communicate(timeout=60)
        assert busy.returncode == 2 and "another driver" in err, out + err
        assert _files(tmp_path / ".k8sjobs" / "runs") == before
        assert not (tmp_path / "starts").exists()
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_the_lock_of_a_killed_driver_is_never_stale(tmp_path: Path, drivers: Drivers) -> None:
    study(tmp_path, f"echo started >> {tmp_path}/starts")
    lock = tmp_path / ".k8sjobs" / "steps" / label_value("held") / ".lock"
    lock.parent.mkdir(parents=True)
    holder = hold(lock)  # holds the study's lock as a driver does, then is killed
    busy = drivers.run()
    assert busy.communicate(timeout=60)[1].count("another driver") == 1
    holder.kill()
    holder.wait(timeout=10)
    after = drivers.run()
    out, err = after.communicate(timeout=60)
    assert after.returncode == 0, out + err


# --- a driver killed while its step runs --------------------------------------------------


def test_a_step_left_running_by_a_killed_driver_is_adopted_never_run_twice(
    tmp_path: Path, drivers: Drivers
) -> None:
    release, starts, daemon = tmp_path / "release", tmp_path / "starts", tmp_path / "daemon"
    study(
        tmp_path,
        f"""
        echo started >> {starts}
        setsid bash -c 'echo $$ > {daemon}; sleep 1000; true' {drivers.word} &
        until [ -e {release} ]; do sleep 0.05; done
        echo finished
        exit 3
        """,
    )
    first = drivers.run()
    wait_until_sync(lambda: daemon.exists() and daemon.read_text().strip(), "the step's daemon")
    first.kill()  # kill -9: no chance to stop its step
    first.communicate(timeout=10)
    assert alive(int(daemon.read_text())), "the step outlives its driver, contained by its keeper"
    second = drivers.run()
    # The second driver follows the living step (no second start), then sees its real end.
    said = second.stdout
    assert said is not None
    wait_until_sync(lambda: "step: RUNNING" in said.readline(), "the adopted step")
    release.touch()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 1, out + err
    assert "step: FAILED" in out and "exited with code 3" in out, out
    assert starts.read_text() == "started\n"
    assert not alive(int(daemon.read_text()))
    assert with_word(drivers.word) == []


def test_a_step_left_running_by_a_killed_driver_shows_running_and_can_be_cancelled(
    tmp_path: Path, drivers: Drivers
) -> None:
    daemon = tmp_path / "daemon"
    study(
        tmp_path,
        f"""
        trap '' TERM
        echo $$ > {tmp_path}/shell
        setsid bash -c 'echo $$ > {daemon}; sleep 1000; true' {drivers.word} &
        sleep 1000
        """,
    )
    first = drivers.run()
    wait_until_sync(lambda: daemon.exists() and daemon.read_text().strip(), "the step's daemon")
    first.kill()
    first.communicate(timeout=10)
    cli = [sys.executable, "-m", "k8sjobs.cli"]
    status = subprocess.run(
        [*cli, "status", "--study", "held"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "RUNNING" in status.stdout and "its driver exited" in status.stdout, status.stdout
    cancel = subprocess.run(
        [*cli, "cancel", "--study", "held"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (cancel.returncode, cancel.stdout) == (0, "step: cancelled\n"), cancel.stderr
    # cancel returns once the tree is gone, the daemon and the step's TERM-proof shell too.
    assert not alive(int(daemon.read_text()))
    assert with_word(drivers.word) == []
    assert not alive(int((tmp_path / "shell").read_text()))


# --- a driver killed at each point of starting a step, exactly (fault points) -------------

# Where the driver dies (k8sjobs.local._faults), and whether the step's program had started.
KILL_POINTS = [
    "pod-recorded",  # the pod recorded, no keeper asked yet: nothing runs
    "keeper-claimed",  # the keeper named in .asked, not yet given its request: nothing runs
    "container-started",  # the program runs, the record does not say so yet
    "container-exited",  # the program ended (its .exit written), its end not recorded
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_driver_killed_at_any_point_of_a_start_never_runs_the_step_twice(
    tmp_path: Path, drivers: Drivers, point: str, request: pytest.FixtureRequest
) -> None:
    release, starts = tmp_path / "release", tmp_path / "starts"
    study(
        tmp_path,
        f"""
        echo started >> {starts}
        until [ -e {release} ]; do sleep 0.05; done
        echo finished {drivers.word}
        exit 3
        """,
    )
    if point == "container-exited":
        release.touch()  # the program ends on its own, while its driver is being killed
    # Its command line does not hold drivers.word: only the release ends it if the test fails.
    request.addfinalizer(release.touch)
    first = drivers.run(env={**os.environ, FAULT_KILL: point})
    out, err = first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL, f"not killed at {point}:\n{out}{err}"
    release.touch()
    second = drivers.run()
    out, err = second.communicate(timeout=120)
    # Whether the second driver adopted the step or ran it, it ran once, and its end is true.
    assert second.returncode == 1, out + err
    assert "step: FAILED" in out and "exited with code 3" in out, out
    assert starts.read_text() == "started\n"
    assert with_word(drivers.word) == []


# --- an adopted step's times are the backend's, not the re-attach's ------------------------


def _recorded_result(folder: Path) -> dict[str, object]:
    (path,) = (folder / ".k8sjobs" / "steps").rglob("*.json")
    return dict(json.loads(path.read_text())["result"])


@pytest.mark.parametrize(("code", "ended"), [(0, "SUCCEEDED"), (3, "FAILED")])
@pytest.mark.parametrize("unwatched", [True, False], ids=["ended-unwatched", "still-running"])
def test_an_adopted_step_is_reported_with_the_times_its_processes_really_had(
    tmp_path: Path, drivers: Drivers, code: int, ended: str, unwatched: bool
) -> None:
    """Issue 34 item 14: after a kill -9 of its driver, the next run said an adopted step
    ``SUCCEEDED in 1m 07s`` (its end was the re-attach time) and printed PENDING/RUNNING
    lines for a step that had already ended. Its end is the keeper's record of the exit, and
    a step that ended while no driver watched is said once, ended."""
    release, pid = tmp_path / "release", tmp_path / "pid"
    study(
        tmp_path,
        f"""
        echo $$ > {pid}
        until [ -e {release} ]; do sleep 0.05; done
        exit {code}
        """,
    )
    before = datetime.now(UTC)
    first = drivers.run()
    wait_until_sync(lambda: pid.exists() and pid.read_text().strip(), "the step's program")
    first.kill()
    first.communicate(timeout=10)
    if unwatched:
        release.touch()
        exits = lambda: list(tmp_path.rglob("run/step.exit"))  # noqa: E731
        wait_until_sync(exits, "the keeper's record of the program's end")
    seen_ended = datetime.now(UTC)  # the program ended before this (or had not started to)
    second = drivers.run()
    if not unwatched:
        said = second.stdout
        assert said is not None
        wait_until_sync(lambda: "step: RUNNING" in said.readline(), "the adopted step")
        release.touch()
    out, err = second.communicate(timeout=120)
    assert second.returncode == (0 if code == 0 else 1), out + err
    result = _recorded_result(tmp_path)
    started = datetime.fromisoformat(str(result["started_at"]))
    finished = datetime.fromisoformat(str(result["finished_at"]))
    assert before.replace(microsecond=0) <= started <= finished
    if unwatched:
        assert finished <= seen_ended, f"its end is the re-attach time: {result}"
    lines = [line for line in out.splitlines() if "] step: " in line]
    assert len([line for line in lines if ended in line]) == 1, out
    assert "adopted from an earlier run" in lines[-1], out
    if unwatched:
        assert len(lines) == 1, f"a step that had ended is said once, ended:\n{out}"
