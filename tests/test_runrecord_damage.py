"""A run record cut short or corrupt (a crash or a full disk while it was written, an edit
by hand): every reader names the file and the fix, and shows what can still be read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.runrecord import RunJournal, read_runs, record_paths

from .cli.test_cli_commands import k8sjobs, study_file

STEPS = [
    {"name": f"s{i}", "state": "SUCCEEDED", "origin": "ran", "queued": 10.0 + i,
     "started": 10.5 + i, "finished": 11.0 + i, "ended": 11.0 + i, "reason": "Completed"}
    for i in range(4)
]  # fmt: skip


def compacted(factory: Any) -> tuple[Path, Path, bytes]:
    """Return a fresh directory, the run record compacted into it, and its bytes."""
    directory = factory.mktemp("runs")
    journal = RunJournal(directory, "dmg", 10.0)
    path = journal.compact({"study": "dmg", "started": 10.0, "steps": STEPS})
    return directory, path, path.read_bytes()


EXAMPLES = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_names_the_file_and_the_fix(run: dict[str, Any], path: Path) -> None:
    assert str(path) in run["damaged"] and "rm " in run["damaged"], run["damaged"]
    assert all(step in STEPS for step in run["steps"])  # only whole steps, as written


@EXAMPLES
@given(st.data())
def test_a_run_record_cut_at_any_byte_reads_as_damaged_with_its_whole_steps(
    tmp_path_factory: Any, data: st.DataObject
) -> None:
    directory, path, whole = compacted(tmp_path_factory)
    cut = data.draw(st.integers(0, len(whole) - 1))
    path.write_bytes(whole[:cut])
    (run,) = read_runs(directory, "dmg")
    assert_names_the_file_and_the_fix(run, path)
    # Every step written whole before the cut is shown.
    ends = [whole.index(b"}", whole.index(f'"name": "{s["name"]}"'.encode())) for s in STEPS]
    assert len(run["steps"]) == sum(end < cut for end in ends)


@EXAMPLES
@given(st.data())
def test_a_run_record_of_any_corrupt_bytes_or_wrong_types_never_raises(
    tmp_path_factory: Any, data: st.DataObject
) -> None:
    directory, path, written = compacted(tmp_path_factory)
    whole = bytearray(written)
    kind = data.draw(st.sampled_from(["bytes", "json", "deep"]))
    if kind == "bytes":
        at = data.draw(st.integers(0, len(whole) - 1))
        whole[at : at + 4] = data.draw(st.binary(min_size=1, max_size=4))
        path.write_bytes(bytes(whole))
    elif kind == "json":
        value = data.draw(
            st.recursive(
                st.none() | st.booleans() | st.floats() | st.text(),
                lambda c: st.lists(c) | st.dictionaries(st.text(), c),
            )
        )
        field = data.draw(st.sampled_from(["study", "started", "steps", "driver", None]))
        record = json.loads(whole)
        path.write_text(json.dumps(value if field is None else {**record, field: value}))
    else:
        path.write_text('{"steps": ' + "[" * 100_000)
    journal = record_paths(directory, "dmg")[1]
    journal.write_bytes(b'{"study": 1}\n[]\n{"step": 3}\n{"step": {"name": []}}\n\xff\xfe\n')
    runs = read_runs(directory, "dmg")
    assert runs[0]["steps"] == [] and "driver" in runs[0]  # the journal's: nothing whole
    run = runs[1]
    if "damaged" in run:
        assert_names_the_file_and_the_fix(run, path)
    else:
        # A byte changed inside a string is still a run record; of the right types.
        assert isinstance(run["steps"], list) and isinstance(run.get("study", ""), str)
        assert len(run["steps"]) == len(STEPS) or kind == "json"
        assert all(isinstance(s["name"], str) for s in run["steps"])


def test_status_and_report_of_a_half_written_record_name_it_and_show_the_steps(
    tmp_path: Path,
) -> None:
    study_file(tmp_path, "name: half\nsteps:\n  - name: a\n    script: echo a\n"
               "  - name: b\n    depends: [a]\n    script: echo b\n")  # fmt: skip
    k8sjobs(tmp_path, "run", "study.yaml", "--plain", check=0, timeout=120)
    (path,) = (tmp_path / ".k8sjobs" / "runs").glob("half*.json")
    text = path.read_text()
    path.write_text(text[: text.index('"b"') + 20])  # cut inside the second step
    status = k8sjobs(tmp_path, "status", "--study", "half", timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    assert str(path.relative_to(tmp_path)) in status.stderr and "rm " in status.stderr
    assert " a " in status.stdout and " b " in status.stdout  # the steps found, all the same
    report = k8sjobs(tmp_path, "report", "half", timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    assert str(path.relative_to(tmp_path)) in report.stderr
    page = path.with_suffix(".html").read_text()
    assert "Damaged record" in page and "the 1 step record it holds whole" in page
    assert os.path.exists(path)  # reading changes nothing
