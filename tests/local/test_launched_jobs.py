"""The local backend as the job controller of a launched multi-node step (no MPI needed).

Index 0 runs the script once every worker answers its agent; the Job's successPolicy,
backoffLimitPerIndex and maxFailedIndexes decide the outcome, as the real controller does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from k8sjobs import Resources, Session, Step, StepState
from k8sjobs.local import LocalBackend

TWO_NODES = Resources(nodes=2, tasks=2)


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=4, kill_grace=1.0)
    async with Session(study="launch", backend=backend) as s:
        yield s


async def test_the_launcher_succeeding_ends_the_step_and_stops_the_workers(
    tmp_path: Path,
) -> None:
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=4, kill_grace=1.0)
    async with Session(study="launch", backend=backend) as session:
        handle = await session.submit(Step(name="ok", script="echo done", resources=TWO_NODES))
        result = await handle.wait(timeout=60)
        assert (result.state, result.exit_code) == (StepState.SUCCEEDED, 0)
        assert "index 0" in result.message  # the success policy decided, not every index
        assert await handle.logs() == "done\n"
    # The driver waits for the Job to settle: the worker was stopped, not waited for.
    (path,) = (tmp_path / "state" / "steps").glob(f"*/{handle.object_name}.json")
    record = json.loads(path.read_text())
    (worker,) = [name for name in record["pods"] if name.startswith(f"{handle.object_name}-1-")]
    state = record["pod_status"][worker]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 143  # SIGTERM: the controller stopped it


async def test_the_launcher_failing_fails_the_step_with_its_exit_code(session: Session) -> None:
    handle = await session.submit(Step(name="bad", script="exit 3", resources=TWO_NODES))
    result = await handle.wait(timeout=60)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)


async def test_a_failed_launcher_is_retried_on_its_own_index(
    session: Session, tmp_path: Path
) -> None:
    marker = tmp_path / "tried"
    script = f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 1; fi"
    step = Step(name="flaky", script=script, resources=TWO_NODES, retries=1)
    handle = await session.submit(step)
    result = await handle.wait(timeout=60)
    assert result.state is StepState.SUCCEEDED, result.describe()
    indexes = [pod.removeprefix(handle.object_name).split("-")[1] for pod in result.pods]
    assert sorted(indexes) == ["0", "0", "1"]  # index 0 ran again; the worker kept running
