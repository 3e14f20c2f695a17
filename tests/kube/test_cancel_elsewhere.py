"""``k8sjobs cancel`` from another shell (another Session that attached the study): the
driver running the steps ends each CANCELLED "cancelled from another process", as
docs/cli.md says, for every kind of step it may hold: a running Job, a Job queued by
Kueue (suspended, waiting for quota) and a JobSet. It said LOST, "its Job was deleted by
someone else": the deletion was all it saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8sjobs.handle import StepHandle
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .conftest import FAST
from .kubehelpers import session, step
from .test_kueue_fake import kueue  # noqa: F401 (the fixture)
from .test_minicluster_kube import _flux_step, flux  # noqa: F401 (the fixture)


async def _cancel_from_another_process(
    cluster: FakeCluster, tmp_path: Path, handle: StepHandle
) -> None:
    """Cancel ``handle``'s step from a second session that attached the study; assert the
    driver holding ``handle`` ends it CANCELLED in those words."""
    async with session(cluster, tmp_path / "other") as other:
        found = {h.name: h for h in await other.attach()}
        await found[handle.name].cancel()
    result = await handle.wait(60)
    assert (result.state, result.message) == (
        StepState.CANCELLED,
        "cancelled from another process",
    ), result


@pytest.mark.parametrize("kind", ["job", "queued", "jobset"])
async def test_a_step_cancelled_from_another_process_ends_cancelled_in_the_driver(
    kueue: FakeCluster,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    kind: str,
) -> None:
    await kueue.install_jobset()
    choices: dict[str, dict[str, Any]] = {
        "job": {},
        "queued": {"queue": "lq", "resources": {"cores_per_task": 1}},
        "jobset": {"target": "jobset"},
    }
    fields = choices[kind]
    async with session(kueue, tmp_path / "driver") as driver:
        if kind == "queued":  # holds the queue's two CPUs: the step below waits for them
            whole = {"queue": "lq", "resources": {"cores_per_task": 2}}
            await driver.submit(step("holder", duration=600, **whole))
        handle = await driver.submit(step("victim", duration=600, **fields))
        want = StepState.PENDING if kind == "queued" else StepState.RUNNING
        await wait_until(lambda: handle.state is want, f"the step is {want.value}")
        await _cancel_from_another_process(kueue, tmp_path, handle)
    assert kueue.get("jobsets" if kind == "jobset" else "jobs", handle.object_name) is None


async def test_a_step_deleted_by_hand_is_still_lost(tmp_path: Path) -> None:
    async with (
        FakeCluster("simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5) as fake,
        session(fake, tmp_path) as driver,
    ):
        handle: StepHandle = await driver.submit(step("victim", duration=600))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        fake.store.delete("jobs", "default", handle.object_name)
        result = await handle.wait(60)
        assert result.state is StepState.LOST, result


async def test_a_minicluster_cancelled_from_another_process_ends_cancelled(
    flux: FakeCluster,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    """The driver follows a MiniCluster step through the operator's Job, so the mark must be
    on that Job too: on the MiniCluster alone the driver saw a deletion and said LOST."""
    async with session(flux, tmp_path / "driver") as driver:
        handle = await driver.submit(_flux_step("victim", duration=600))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        await _cancel_from_another_process(flux, tmp_path, handle)
    assert flux.get("miniclusters", handle.object_name) is None
