"""A driver killed after a step's pod ended but before the step's result was saved.

The local backend saves a pod's status as its containers change and the step's result once
the Job is judged; a ``kill -9`` between the two leaves a record whose result still says
RUNNING while every container of its pod is recorded terminated, with its exit code. That
end is the backend's: the next run must adopt it, never run the step again. The record is
written as such a driver leaves it (found by killing real drivers at each journal write).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", "run", "study.yaml", "--plain"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


@pytest.mark.parametrize(("code", "ended"), [(0, "SUCCEEDED"), (3, "FAILED")])
def test_a_pod_recorded_ended_under_a_result_not_saved_is_adopted_not_run_again(
    tmp_path: Path, code: int, ended: str
) -> None:
    starts = tmp_path / "starts"
    (tmp_path / "study.yaml").write_text(
        f"name: ended\nsteps:\n  - name: s\n    script: echo x >> {starts}; exit {code}\n"
    )
    first = _run(tmp_path)
    assert f"s: {ended}" in first.stdout, first.stdout + first.stderr
    (path,) = (tmp_path / ".k8sjobs" / "steps").rglob("*.json")
    record = json.loads(path.read_text())
    (status,) = record["pod_status"].values()
    assert status["phase"] in ("Succeeded", "Failed")  # the pod's end, as the backend saw it
    record["result"].update(state="RUNNING", reason="Running", exit_code=None, finished_at=None)
    record["driver_pid"] = _dead_pid()
    path.write_text(json.dumps(record))

    second = _run(tmp_path)

    assert starts.read_text() == "x\n", second.stdout  # ran once, by the first driver
    assert f"s: {ended}" in second.stdout, second.stdout + second.stderr
    assert "adopted" in second.stdout.splitlines()[-1], second.stdout
