"""Flux Operator steps on the fake cluster (simulated kubelet), through the backend's watches.

The published MiniCluster CRD is installed; the fake's operator emulation turns the rendered
MiniCluster into the Indexed Job and headless Service the real operator makes. The step's
state comes from that Job and its lead pod, through the study's Job and Pod watches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from k8sjobs.spec import Resources, Step
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..test_minicluster import crd
from ..waiting import wait_until
from .conftest import FAST
from .kubehelpers import session

FAKE = "fake.k8sjobs.io/"


def _established(fake: FakeCluster) -> bool:
    found = fake.store.get("customresourcedefinitions", "", "miniclusters.flux-framework.org")
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


async def _with_operator(mode: str, tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a fake cluster (kubelet ``mode``) with the Flux Operator's CRD established."""
    async with FakeCluster(
        mode, directory=tmp_path, controller=FAST, bookmark_interval=0.5
    ) as fake:
        fake.store.create("customresourcedefinitions", "", crd())
        await wait_until(lambda: _established(fake))
        yield fake


@pytest_asyncio.fixture
async def flux(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async for fake in _with_operator("simulate", tmp_path):
        yield fake


def _flux_step(name: str = "lammps", *, exit_code: int = 0, duration: float = 0.3) -> Step:
    notes = {f"{FAKE}duration": str(duration), f"{FAKE}exit-code": str(exit_code)}
    return Step(
        name=name,
        script="$(LAUNCHER) lmp -in in.lj\n",
        resources=Resources(nodes=3, tasks=6),
        target="minicluster",
        annotations=notes,
    )


async def test_a_minicluster_step_succeeds_through_the_operators_job(
    flux: FakeCluster, tmp_path: Path
) -> None:
    async with session(flux, tmp_path) as s:
        handle = await s.submit(_flux_step())
        result = await handle.wait(30)
    assert (result.state, result.reason, result.exit_code) == (StepState.SUCCEEDED, "Completed", 0)
    name = handle.object_name
    cluster = flux.get("miniclusters", name)
    assert cluster is not None and cluster["spec"]["size"] == 3
    job = flux.get("jobs", name)
    assert job is not None
    assert job["metadata"]["ownerReferences"][0]["kind"] == "MiniCluster"
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    assert job["status"]["succeeded"] == 3  # every broker ended cleanly
    service = flux.get("services", name)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert len(result.pods) == 3


async def test_a_failing_command_fails_the_step_with_its_exit_code(
    flux: FakeCluster, tmp_path: Path
) -> None:
    async with session(flux, tmp_path) as s:
        handle = await s.submit(_flux_step("broken", exit_code=3))
        result = await handle.wait(30)
    assert (result.state, result.exit_code) == (StepState.FAILED, 3)
    assert result.reason == "ExitCode"


async def test_cancel_deletes_the_minicluster_and_what_the_operator_made(
    flux: FakeCluster, tmp_path: Path
) -> None:
    async with session(flux, tmp_path) as s:
        handle = await s.submit(_flux_step("long", duration=600))
        name = handle.object_name
        await wait_until(lambda: flux.get("jobs", name) is not None)
        await handle.cancel()
        assert (await handle.wait(30)).state is StepState.CANCELLED
    await wait_until(lambda: flux.get("miniclusters", name) is None)
    await wait_until(lambda: flux.get("jobs", name) is None and flux.get("services", name) is None)
    await wait_until(lambda: flux.get("configmaps", name) is None)


@pytest_asyncio.fixture
async def flux_execute(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async for fake in _with_operator("execute", tmp_path):
        yield fake


async def test_execute_mode_runs_the_command_on_the_lead_only(
    flux_execute: FakeCluster, tmp_path: Path
) -> None:
    # No flux here: the script runs as the lead broker's initial program, once.
    ok = Step(
        name="lead",
        script='echo "lead $JOB_COMPLETION_INDEX in $PWD"\n',
        shell="/bin/sh",
        resources=Resources(nodes=2, tasks=2),
        target="minicluster",
    )
    broken = ok.model_copy(update={"name": "broken", "script": "exit 3\n"})
    async with session(flux_execute, tmp_path) as s:
        done = await (await s.submit(ok)).wait(60)
        failed = await (await s.submit(broken)).wait(60)
    assert (done.state, done.exit_code) == (StepState.SUCCEEDED, 0)
    job = flux_execute.get("jobs", done.pods[0].rsplit("-", 2)[0])
    assert job is not None and job["status"]["succeeded"] == 2  # the worker ended cleanly
    assert (failed.state, failed.exit_code) == (StepState.FAILED, 3)


async def test_the_fake_refuses_a_minicluster_its_crd_refuses(flux: FakeCluster) -> None:
    from k8sjobs.render import Target, render
    from k8sjobs.testing import ApiError

    body = render(_flux_step(), Target()).job
    body["spec"]["size"] = "three"
    with pytest.raises(ApiError) as info:
        flux.store.create("miniclusters", "default", body)
    assert info.value.code == 422 and "spec.size" in str(info.value)


async def test_the_local_backend_refuses_a_minicluster_step(tmp_path: Path) -> None:
    from k8sjobs import Session
    from k8sjobs.local import LocalBackend

    async with Session(study="local", backend=LocalBackend(state_dir=tmp_path / "state")) as s:
        with pytest.raises(ValueError, match=r"target: minicluster.*Flux Operator"):
            await s.submit(_flux_step())
