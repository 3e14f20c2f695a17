"""The study run's record: journaled change by change, compacted at the end, read either way."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs import Session
from k8sjobs.local import LocalBackend
from k8sjobs.runrecord import RunJournal, read_run, record_paths
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
