"""The real ``maestro`` CLI (maestrowf from PyPI) running studies on a fake cluster.

The fake cluster's kubelet runs each pod as local processes, so these studies execute
their scripts for real; maestrowf finds the adapter through the installed .pth file.
"""

from __future__ import annotations

import asyncio
import csv
import re
import shutil
from datetime import datetime
from pathlib import Path

from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .conftest import MaestroCli

EXAMPLE = Path(__file__).parents[2] / "examples" / "maestro" / "study.yaml"
STUDIES = Path(__file__).parent / "studies"


def status_rows(workspace: Path) -> dict[str, dict[str, str]]:
    """Return {step name: its row} from the study's status.csv."""
    with (workspace / "status.csv").open() as handle:
        return {row["Step Name"]: row for row in csv.DictReader(handle)}


def statuses(workspace: Path) -> dict[str, str]:
    """Return {step name: Maestro state} from the study's status.csv."""
    return {name: row["State"] for name, row in status_rows(workspace).items()}


def batch_with(spec: Path, target: Path, kubeconfig: Path) -> Path:
    """Copy ``spec`` to ``target`` with the fake cluster's kubeconfig in its batch block."""
    text = spec.read_text().replace(
        "  type: kubernetes\n", f"  type: kubernetes\n  kubeconfig: {kubeconfig}\n", 1
    )
    target.write_text(text)
    return target


async def test_example_study_runs_every_step_to_finished(
    execute_cluster: FakeCluster, maestro_cli: MaestroCli, tmp_path: Path
) -> None:
    spec = batch_with(EXAMPLE, tmp_path / "study.yaml", execute_cluster.kubeconfig_path)
    workspace = tmp_path / "ws"
    code, output = await maestro_cli(
        "run", "-fg", "-y", "-s", "1", "-o", str(workspace), str(spec), cwd=tmp_path
    )
    assert code == 0, output
    assert statuses(workspace) == {
        "prepare": "FINISHED",
        "simulate_SIZE.10": "FINISHED",
        "simulate_SIZE.100": "FINISHED",
        "simulate_SIZE.1000": "FINISHED",
        "analyze": "FINISHED",
    }
    sim = workspace / "simulate" / "SIZE.100"
    assert (sim / "simulate_SIZE.100.out").read_text() == "simulate 100 direct 4950\n"
    assert "SUCCEEDED" in (sim / "simulate_SIZE.100.err").read_text()
    assert "hello from Kubernetes" in (workspace / "prepare" / "prepare.out").read_text()
    assert (workspace / "analyze" / "analyze.out").read_text() == "all 3 simulations finished\n"
    script = (sim / "simulate_SIZE.100.k8s.sh").read_text()
    assert script.startswith("#!/bin/bash\n") and "n = 100" in script
    jobs = execute_cluster.objects("jobs", "default")
    assert len(jobs) == 5
    names = {j["metadata"]["annotations"]["k8sjobs.io/step-name"] for j in jobs}
    assert "simulate_SIZE.1000" in names
    # Maestro's Start Time and Run Time are the Job's (issue 28 item 14): they were "--"
    # and "--:--:--" for a step that ran between two of Maestro's polls.
    rows = status_rows(workspace)
    for job in jobs:
        row = rows[job["metadata"]["annotations"]["k8sjobs.io/step-name"]]
        started = datetime.fromisoformat(job["status"]["startTime"]).astimezone()
        assert row["Start Time"] == str(started.replace(tzinfo=None, microsecond=0)), row
        ended = datetime.fromisoformat(job["status"]["completionTime"]).astimezone()
        assert row["End Time"] == str(ended.replace(tzinfo=None, microsecond=0)), row
        assert re.fullmatch(r"\d+d:\d\dh:\d\dm:\d\ds", row["Run Time"]), row


async def test_failure_stops_dependents_and_walltime_overrun_times_out(
    execute_cluster: FakeCluster, maestro_cli: MaestroCli, tmp_path: Path
) -> None:
    spec = batch_with(
        STUDIES / "failing.yaml", tmp_path / "failing.yaml", execute_cluster.kubeconfig_path
    )
    workspace = tmp_path / "ws"
    code, output = await maestro_cli(
        "run", "-fg", "-y", "-s", "1", "-o", str(workspace), str(spec), cwd=tmp_path
    )
    assert code == 2, output  # maestro's exit code for "finished with failures"
    states = statuses(workspace)
    assert states["setup"] == "FINISHED"
    assert states["broken"] == "FAILED"
    assert states["after-broken"] == "FAILED"  # Maestro marks the subtree failed...
    assert states["slow"] == "TIMEDOUT"
    steps = {
        j["metadata"]["annotations"]["k8sjobs.io/step-name"]
        for j in execute_cluster.objects("jobs", "default")
    }
    assert "after-broken" not in steps  # ...without ever submitting it
    broken = workspace / "broken"
    log = (broken / "broken.out").read_text()
    assert "about to fail" in log and "something went wrong" in log
    verdict = (broken / "broken.err").read_text()
    assert "exit code: 3" in verdict and "Maestro state: FAILED" in verdict
    assert "DeadlineExceeded" in (workspace / "slow" / "slow.err").read_text()


async def test_maestro_cancel_cancels_running_steps(
    execute_cluster: FakeCluster, maestro_cli: MaestroCli, tmp_path: Path
) -> None:
    spec = batch_with(
        STUDIES / "long.yaml", tmp_path / "long.yaml", execute_cluster.kubeconfig_path
    )
    workspace = tmp_path / "ws"
    running = asyncio.create_task(
        maestro_cli("run", "-fg", "-y", "-s", "1", "-o", str(workspace), str(spec), cwd=tmp_path)
    )

    def two_running() -> bool:
        assert not running.done(), running.result()
        if not (workspace / "status.csv").exists():
            return False
        return sorted(statuses(workspace).values()) == ["INITIALIZED", "RUNNING", "RUNNING"]

    await wait_until(two_running, "maestro runs both sleepers")
    code, output = await maestro_cli("cancel", "-y", str(workspace), cwd=tmp_path)
    assert code == 0, output
    code, output = await running
    assert code == 3, output  # maestro's exit code for a cancelled study
    states = statuses(workspace)
    assert states["wait_SHARD.1"] == states["wait_SHARD.2"] == "CANCELLED"
    assert states["never"] in ("INITIALIZED", "CANCELLED")  # never submitted
    assert execute_cluster.objects("jobs", "default") == []
    await wait_until(lambda: not execute_cluster.objects("pods", "default"), "the pods are gone")


def test_maestro_is_installed() -> None:
    assert shutil.which("maestro") is not None
