"""``k8sjobs run --trace FILE --metrics-port N`` and ``status -o tsv`` (issue 35), run as a
user runs them: the CLI in a subprocess on the local backend."""

from __future__ import annotations

import socket
from pathlib import Path

from k8sjobs.observe.tracefile import COLUMNS

from .test_cli_commands import FAILING, k8sjobs, study_file


def rows(text: str) -> dict[str, dict[str, str]]:
    lines = text.splitlines()
    assert lines[0].split("\t") == list(COLUMNS)
    parsed = [dict(zip(COLUMNS, line.split("\t"), strict=True)) for line in lines[1:]]
    return {r["name"]: r for r in parsed}


def test_run_writes_the_trace_file_and_status_tsv_gives_the_same_rows(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    done = k8sjobs(
        tmp_path, "run", "study.yaml", "--trace", "t.tsv", "--metrics-port", "0", check=1
    )
    assert any(line.startswith("metrics: http://127.0.0.1:") for line in done.stdout.splitlines())
    traced = rows((tmp_path / "t.tsv").read_text())
    # A row per step sent: after-bad, whose upstream failed, never was (status shows it).
    assert {n: (r["state"], r["exit"], r["origin"]) for n, r in traced.items()} == {
        "good": ("SUCCEEDED", "0", "ran"),
        "bad": ("FAILED", "7", "ran"),
    }
    assert traced["good"]["native_id"].isdigit()  # the local step's pid
    status = rows(k8sjobs(tmp_path, "status", "-o", "tsv", "study.yaml", check=1).stdout)
    assert (status["after-bad"]["state"], status["after-bad"]["origin"]) == ("FAILED", "not run")
    for name in ("good", "bad"):
        for column in ("state", "exit", "start", "end", "duration_s", "cpu_s", "attempts"):
            assert status[name][column] == traced[name][column], (name, column)
        # A local step's pid is known to the driver that ran it only.
        assert status[name]["native_id"] == "-"


def test_an_unwritable_trace_file_or_a_port_in_use_is_a_clear_error_before_any_step(
    tmp_path: Path,
) -> None:
    study_file(tmp_path, FAILING)
    done = k8sjobs(tmp_path, "run", "study.yaml", "--trace", "no/such/dir/t.tsv")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "trace file 'no/such/dir/t.tsv' cannot be written" in done.stdout + done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = k8sjobs(tmp_path, "run", "study.yaml", "--metrics-port", str(port))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"metrics_port={port}: cannot listen" in done.stdout + done.stderr
    assert not (tmp_path / ".k8sjobs" / "runs").exists() or not list(
        (tmp_path / ".k8sjobs" / "runs").iterdir()
    )
