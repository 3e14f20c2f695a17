"""The study run's record: journaled change by change, compacted at the end, read either way."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs import Session
from k8sjobs.local import LocalBackend
from k8sjobs.runrecord import RunJournal, read_run, read_runs, record_paths
from k8sjobs.study import StepRecord, StudyRun, parse_study

STUDY = """
name: rec
steps:
  - name: first
    script: echo one
  - name: gate
    depends: [first]
    script: while [ ! -e {release} ]; do sleep 0.05; done
  - name: last
    depends: [gate]
    script: echo three
"""


async def test_the_record_is_readable_while_the_run_goes_and_compacted_at_the_end(
    tmp_path: Path,
) -> None:
    """While a step blocks, the record on disk already holds the steps that ended; the end
    leaves one JSON equal to the timeline, and no journal."""
    release = tmp_path / "release"
    text = textwrap.dedent(STUDY.format(release=release))
    study = parse_study(text, base_dir=tmp_path)
    runs = tmp_path / "runs"
    seen: list[dict[str, Any] | None] = []

    def on_change(record: StepRecord) -> None:
        if record.result.name == "gate" and record.result.state.value == "RUNNING":
            seen.append(read_run(runs, "rec"))  # the gate is running: look at the disk
            release.touch()

    backend = LocalBackend(state_dir=tmp_path / "state")
    async with Session(study="rec", backend=backend) as session:
        run = StudyRun(study, session, on_change=on_change)
        run.record_to(runs)
        await run.run()
        saved = run.save(runs)
    during = seen[0]
    assert during is not None
    states = {s["name"]: s["state"] for s in during["steps"]}
    assert states == {"first": "SUCCEEDED", "gate": "RUNNING", "last": "PENDING"}
    json_path, journal = record_paths(runs, "rec")
    assert saved == json_path and not journal.exists()
    assert read_run(runs, "rec") == json.loads(json.dumps(run.timeline()))


def test_a_record_written_before_the_journal_is_still_read(tmp_path: Path) -> None:
    old = {"study": "old", "started": 1.0, "steps": [{"name": "a", "state": "SUCCEEDED"}]}
    record_paths(tmp_path, "old")[0].write_text(json.dumps(old))
    assert read_run(tmp_path, "old") == old
    assert read_run(tmp_path, "never-ran") is None


step_json = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c[X=1]"]), "state": st.sampled_from(["PENDING", "OK"])}
)


@settings(max_examples=50, deadline=None)
@given(changes=st.lists(step_json, max_size=30), torn=st.integers(min_value=0, max_value=40))
def test_a_journal_replays_to_the_last_state_of_each_step(
    tmp_path_factory: Any, changes: list[dict[str, Any]], torn: int
) -> None:
    """Whatever the changes, the replay holds each step once, in first-seen order, with
    its last state; a driver killed mid-line (a torn tail) loses that line only."""
    directory = tmp_path_factory.mktemp("runs")
    journal = RunJournal(directory, "s", 2.0)
    for change in changes:
        journal.append(change)
    journal.close()
    with journal.journal.open("a") as f:
        f.write('{"step":{"name":"a","sta'[:torn])  # a partial last line
    expected: dict[str, dict[str, Any]] = {}
    for change in changes:
        expected[change["name"]] = change
    run = read_run(directory, "s")
    assert run is not None and run.pop("driver")["alive"] is False  # closed: the driver is gone
    assert run == {"study": "s", "started": 2.0, "steps": list(expected.values())}


def test_each_change_appends_one_line_and_rewrites_nothing(tmp_path: Path) -> None:
    """Recording a change costs one line whatever the number before it: the journal's
    size is the sum of its lines, and earlier lines are never rewritten."""
    journal = RunJournal(tmp_path, "s", 0.0)
    sizes = []
    for i in range(200):
        journal.append({"name": f"step-{i}", "state": "RUNNING"})
        sizes.append(journal.journal.stat().st_size)
    head = journal.journal.read_text().splitlines()[:2]
    for i in range(200, 400):
        journal.append({"name": f"step-{i}", "state": "RUNNING"})
    assert journal.journal.read_text().splitlines()[:2] == head
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    assert max(steps) <= len('{"step":{"name":"step-199","state":"RUNNING"}}\n')
    journal.compact({"study": "s", "started": 0.0, "steps": []})
    assert not journal.journal.exists()


def test_a_journal_says_whether_its_driver_still_runs(tmp_path: Path) -> None:
    journal = RunJournal(tmp_path, "s", 1.0)
    journal.append({"name": "a", "state": "RUNNING"})
    run = read_run(tmp_path, "s")
    assert run is not None
    assert run["driver"] == {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "alive": True,
        "last_change": journal.journal.stat().st_mtime,
    }
    journal.close()
    assert read_run(tmp_path, "s")["driver"]["alive"] is False  # type: ignore[index]


def test_a_driver_killed_by_sigkill_leaves_a_journal_that_says_it_died(tmp_path: Path) -> None:
    """The lock is the kernel's: a driver killed with no chance to clean up loses it."""
    code = (
        "import sys, time; from pathlib import Path; from k8sjobs.runrecord import RunJournal\n"
        "j = RunJournal(Path(sys.argv[1]), 's', 1.0); j.append({'name': 'a', 'state': 'RUNNING'})\n"
        "print('ready', flush=True); time.sleep(600)"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert driver.stdout is not None and driver.stdout.readline() == "ready\n"
    assert read_run(tmp_path, "s")["driver"]["alive"] is True  # type: ignore[index]
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    run = read_run(tmp_path, "s")
    assert run is not None and run["driver"]["alive"] is False
    assert run["driver"]["pid"] == driver.pid
    assert run["steps"] == [{"name": "a", "state": "RUNNING"}]


def test_a_journal_comes_before_the_last_complete_run_and_replaces_nothing(
    tmp_path: Path,
) -> None:
    complete = RunJournal(tmp_path, "s", 1.0)
    complete.compact({"study": "s", "started": 1.0, "steps": [{"name": "a", "state": "OK"}]})
    broken = RunJournal(tmp_path, "s", 2.0)
    broken.append({"name": "a", "state": "RUNNING"})
    broken.close()
    newest, last_complete = read_runs(tmp_path, "s")
    assert (newest["started"], newest["driver"]["alive"]) == (2.0, False)
    assert last_complete == {"study": "s", "started": 1.0, "steps": [{"name": "a", "state": "OK"}]}


async def test_a_rerun_marks_adopted_steps_with_their_earlier_run(tmp_path: Path) -> None:
    """A second run adopts the first's success: its record says so, with the first run's
    times, and draws no run of its own; a step that runs again is not adopted."""
    text = "name: again\nsteps:\n  - {name: ok, script: 'true'}\n  - {name: bad, script: exit 3}\n"
    study = parse_study(text, base_dir=tmp_path)
    timelines = []
    for _ in range(2):
        async with Session(study="again", backend=LocalBackend(state_dir=tmp_path)) as session:
            run = StudyRun(study, session)
            await run.run()
            timelines.append({s["name"]: s for s in run.timeline()["steps"]})
    first, second = timelines
    assert first["ok"]["adopted"] is False and first["ok"]["started"] is not None
    assert second["ok"]["adopted"] is True and second["ok"]["started"] is None
    assert second["ok"]["ran"] == first["ok"]["ran"]  # the first run's times
    assert second["ok"]["ran"]["started"] < second["ok"]["queued"]
    assert second["ok"]["state"] == "SUCCEEDED"
    assert second["bad"]["adopted"] is False and second["bad"]["started"] is not None
    assert second["bad"]["ran"]["started"] > second["bad"]["queued"]
    assert second["bad"]["requested"] == {"nodes": 1, "cpu": 1, "memory": None, "gpus": 0}


async def test_the_record_holds_what_each_step_used(tmp_path: Path) -> None:
    """The report draws requested against used from these fields (``usage``, ``requested``)."""
    text = "name: used\nsteps:\n  - {name: ok, shell: python, script: 'x = 1',\n"
    text += "     resources: {memory: 1Gi}}\n"
    study = parse_study(text, base_dir=tmp_path)
    async with Session(study="used", backend=LocalBackend(state_dir=tmp_path)) as session:
        run = StudyRun(study, session)
        await run.run()
        (step,) = run.timeline()["steps"]
    usage = step["usage"]
    assert usage["source"] == "rusage" and usage["memory_peak"] > 1024 * 1024
    assert usage["cpu_seconds"] > 0 and usage["wall_seconds"] > 0
    assert usage["missing"]["gpu_seconds"] == "the step asked for no GPU"
    assert step["requested"]["memory"] == 1024**3
    json.dumps(step)  # plain JSON values only
