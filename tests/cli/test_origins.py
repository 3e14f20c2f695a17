"""How each step came about (ran, reused, adopted, not run, waiting): one source of truth
(``StepRecord.origin``, counted by ``count_origins``) for the run record, ``run``'s last
line, ``status`` and ``report``, whatever the cause a step did not run."""

from __future__ import annotations

import json
from pathlib import Path

from ..waiting import wait_until_sync
from .test_cli_commands import k8sjobs, start, study_file

BROKEN = """
name: orig
steps:
  - name: bad
    script: exit 3
  - name: after-bad
    depends: [bad]
    script: echo never
  - name: after-after
    depends: [after-bad]
    script: echo never
  - name: good
    script: echo ok
  - name: also-good
    depends: [good]
    script: echo ok
"""


def record(tmp_path: Path, suffix: str = ".json") -> Path:
    (path,) = (tmp_path / ".k8sjobs" / "runs").glob(f"orig*{suffix}")
    return path


def test_a_step_not_run_for_any_cause_is_counted_not_run_by_run_status_and_report(
    tmp_path: Path,
) -> None:
    study_file(tmp_path, BROKEN)
    done = k8sjobs(tmp_path, "run", "study.yaml", "--plain", check=1, timeout=120)
    assert done.stdout.splitlines()[-1] == "3 ran, 2 not run", done.stdout
    steps = {s["name"]: s for s in json.loads(record(tmp_path).read_text())["steps"]}
    origins = {name: s["origin"] for name, s in steps.items()}
    assert origins == {"bad": "ran", "after-bad": "not run", "after-after": "not run",
                       "good": "ran", "also-good": "ran"}  # fmt: skip
    assert steps["after-bad"]["reason"] == "DependencyFailed"
    status = k8sjobs(tmp_path, "status", "--study", "orig", "-o", "json", timeout=120)
    shown = {s["name"]: s.get("origin") for s in json.loads(status.stdout)["steps"]}
    assert shown == origins
    k8sjobs(tmp_path, "report", "orig", check=0, timeout=120)
    page = record(tmp_path).with_suffix(".html").read_text()
    assert "(3 ran, 2 not run)" in page


GATED = """
name: orig
steps:
  - name: gate
    script: while [ ! -e {release} ]; do sleep 0.05; done
  - name: later
    depends: [gate]
    script: echo later
"""


def test_status_of_a_live_run_says_it_is_live_and_counts_a_waiting_step_as_waiting(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    study_file(tmp_path, GATED.format(release=release))
    driver = start(tmp_path, "run", "study.yaml", "--plain")
    try:

        def gate_runs() -> bool:
            journal = list((tmp_path / ".k8sjobs" / "runs").glob("orig*.jsonl"))
            return bool(journal) and '"name":"gate","state":"RUNNING"' in journal[0].read_text()

        wait_until_sync(gate_runs, "the gate step runs")
        status = k8sjobs(tmp_path, "status", "--study", "orig", timeout=120)
        assert "a run is going (its driver: pid " in status.stdout, status.stdout
        assert "so far: 1 ran, 1 waiting" in status.stdout, status.stdout
        assert "not run" not in status.stdout
    finally:
        release.touch()
        out, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, out + err
    assert out.splitlines()[-1] == "2 ran"


def test_status_shows_every_pushed_outputs_reference_to_pull_it_by(tmp_path: Path) -> None:
    study_file(tmp_path, "name: outs\nsteps:\n  - name: make\n"
               "    script: mkdir -p out && echo 1 > out/n\n    outputs: {n: out/n}\n")  # fmt: skip
    k8sjobs(tmp_path, "run", "study.yaml", "--plain", check=0, timeout=120)
    status = k8sjobs(tmp_path, "status", "--study", "outs", check=0, timeout=120).stdout
    (line,) = [line for line in status.splitlines() if line.startswith("  make.n: ")]
    ref = line.removeprefix("  make.n: ")
    assert "@sha256:" in ref, status
    pulled = k8sjobs(tmp_path, "artifact", "pull", ref, "got", check=0, timeout=120)
    assert pulled.returncode == 0 and (tmp_path / "got").exists()
