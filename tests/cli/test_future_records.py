"""Records written by a newer k8sjobs, read by this one: unknown states and unknown fields.

A newer version may add a state (a name this one has no member for) or fields to a step's
record. ``status`` (every format), ``logs`` and ``report`` must still show what they can
read, and name the record they cannot, never die with "'X' is not a valid StepState".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("future")
    (folder / "study.yaml").write_text(
        "name: future\nsteps:\n  - name: kept\n    script: echo k\n"
        "  - name: newer\n    script: echo n\n"
    )
    done = _cli(folder, "run", "study.yaml", "--plain")
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (p for p in (folder / ".k8sjobs" / "steps").rglob("*.json") if "newer" in p.name)
    record = json.loads(path.read_text())
    record["result"].update(state="HIBERNATING", hibernated_at="2027-01-01T00:00:00Z")
    record["written_by"] = {"k8sjobs": "9.0"}
    path.write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize("output", ["table", "json", "yaml", "tsv"])
def test_a_step_record_of_a_state_this_version_does_not_know_is_named_not_fatal(
    ran: Path, output: str
) -> None:
    done = _cli(ran, "status", "study.yaml", "-o", output)
    assert done.returncode in (0, 1), done.stderr
    assert "future-newer-" in done.stderr and "cannot be read" in done.stderr, done.stderr
    assert "kept" in done.stdout and "SUCCEEDED" in done.stdout, done.stdout


def test_logs_of_the_other_steps_still_work_beside_a_record_of_an_unknown_state(
    ran: Path,
) -> None:
    done = _cli(ran, "logs", "--study", "future", "kept")
    assert done.returncode == 0, done.stderr
    assert "k" in done.stdout
