"""Flux Operator steps on the fake cluster (simulated kubelet), through the backend's watches.

The published MiniCluster CRD is installed; the fake's operator emulation turns the rendered
MiniCluster into the Indexed Job and headless Service the real operator makes. The step's
state comes from that Job and its lead pod, through the study's Job and Pod watches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs import Session
from k8sjobs.render.manifests import output_reference
from k8sjobs.state import StepResult, StepState
from k8sjobs.steps.spec import Resources, Step
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import RegistryServer, registry_available, registry_process

from ..render.test_minicluster import crd
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
    from k8sjobs.render.manifests import Target, render
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


# ---- artifacts: the handoff sidecar beside the Flux runner (k8sjobs.render.minicluster) -------


@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryServer]:
    """A real docker-registry process, as the Job steps' artifact tests use."""
    if not registry_available():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    with registry_process() as server:
        yield server


def _artifact_session(fake: FakeCluster, tmp_path: Path, registry: RegistryServer) -> Session:
    return Session(
        study="flux-art",
        kubeconfig=fake.kubeconfig_path,
        log_dir=tmp_path / "logs",
        store=registry.location,
        plain_http=True,
        options={"pending_grace": 0.5},
    )


async def test_a_two_node_minicluster_step_reads_an_input_and_hands_its_output_on(
    flux_execute: FakeCluster, tmp_path: Path, registry: RegistryServer
) -> None:
    make = Step(
        name="make",
        shell="/bin/sh",
        script="echo payload-7 > data.txt\n",
        outputs={"data": "data.txt"},
    )
    # The inputs are read both ways a Job step's are: $K8SJOBS_INPUTS and ./inputs.
    mid = Step(
        name="mid",
        shell="/bin/sh",
        script=(
            'cat "$K8SJOBS_INPUTS/data/data.txt" > result.txt\n'
            'mkdir -p out && cat inputs/data/data.txt > "out/index-$JOB_COMPLETION_INDEX"\n'
        ),
        resources=Resources(nodes=2, tasks=2),
        target="minicluster",
        inputs={"data": make.output("data")},
        outputs={"result": "result.txt", "dir": "out"},
    )
    last = Step(
        name="last",
        shell="/bin/sh",
        script='cat "$K8SJOBS_INPUTS/result/result.txt"; ls "$K8SJOBS_INPUTS/dir/out"\n',
        inputs={"result": mid.output("result"), "dir": mid.output("dir")},
    )
    async with _artifact_session(flux_execute, tmp_path, registry) as s:
        handles = [await s.submit(step) for step in (make, mid, last)]
        results = await s.gather(*handles, timeout=120)
        log = await handles[2].logs()
    assert [r.state for r in results] == [StepState.SUCCEEDED] * 3, results
    assert "payload-7" in log and "index-0" in log
    assert "@sha256:" in results[1].outputs["result"]  # the sidecar's push report was read
    job = flux_execute.get("jobs", handles[1].object_name)
    assert job is not None and job["status"]["succeeded"] == 2  # the worker ended cleanly
    assert job["metadata"]["ownerReferences"][0]["kind"] == "MiniCluster"


async def _job_and_flux(
    fake: FakeCluster, tmp_path: Path, registry: RegistryServer, **fields: Any
) -> tuple[StepResult, StepResult]:
    """Return the results of the same step as a Job and as a 2-node MiniCluster."""
    job = Step(name="as-job", shell="/bin/sh", **fields)
    flux = Step(
        name="as-flux",
        shell="/bin/sh",
        resources=Resources(nodes=2, tasks=2),
        target="minicluster",
        **fields,
    )
    async with _artifact_session(fake, tmp_path, registry) as s:
        return await (await s.submit(job)).wait(120), await (await s.submit(flux)).wait(120)


def _verdict(result: StepResult) -> tuple[StepState, str, int | None]:
    return result.state, result.reason, result.exit_code


async def test_a_missing_input_fails_a_minicluster_step_as_it_fails_a_job_step(
    flux_execute: FakeCluster, tmp_path: Path, registry: RegistryServer
) -> None:
    ran = tmp_path / "ran"
    by_job, by_flux = await _job_and_flux(
        flux_execute, tmp_path, registry, script=f"touch {ran}\n", inputs={"x": "nothing/here:v1"}
    )
    assert _verdict(by_flux) == _verdict(by_job) == (StepState.FAILED, "InputPullFailed", None)
    assert "pulling the inputs failed with exit code 1" in by_flux.message
    assert not ran.exists()  # the script never ran


async def test_a_missing_output_fails_a_minicluster_step_as_it_fails_a_job_step(
    flux_execute: FakeCluster, tmp_path: Path, registry: RegistryServer
) -> None:
    by_job, by_flux = await _job_and_flux(
        flux_execute, tmp_path, registry, script="true\n", outputs={"r": "r.txt"}
    )
    assert _verdict(by_flux) == _verdict(by_job) == (StepState.FAILED, "OutputPushFailed", 0)


async def test_simulate_mode_runs_a_minicluster_step_with_artifacts(
    flux: FakeCluster, tmp_path: Path
) -> None:
    # No processes: the sidecar is one more container the simulated kubelet ends; the
    # outputs are known by tag (there is no push report to read).
    step = Step(**{**_flux_step("art").model_dump(), "outputs": {"r": "r.txt"}})
    async with Session(
        study="sim",
        kubeconfig=flux.kubeconfig_path,
        log_dir=tmp_path / "logs",
        store="registry.example:5000/art",
        options={"pending_grace": 0.5},
    ) as s:
        result = await (await s.submit(step)).wait(30)
    assert (result.state, result.exit_code) == (StepState.SUCCEEDED, 0)
    assert result.outputs == {"r": output_reference("sim", "art", "r")}
    pod = flux.objects("pods")[0]
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert names[1] == "k8sjobs-handoff" and "command" not in pod["spec"]["containers"][1]


async def test_a_minicluster_steps_log_is_its_flux_runners(
    flux_execute: FakeCluster, tmp_path: Path
) -> None:
    # The operator names the runner container after the MiniCluster, not "step": logs and
    # a failed step's saved log are read from it.
    ok = Step(
        name="talk",
        shell="/bin/sh",
        script='echo "said by $JOB_COMPLETION_INDEX"\n',
        resources=Resources(nodes=2, tasks=2),
        target="minicluster",
    )
    broken = Step(**{**ok.model_dump(), "name": "shout", "script": "echo dying >&2; exit 3\n"})
    async with session(flux_execute, tmp_path) as s:
        talk, shout = await s.submit(ok), await s.submit(broken)
        done, failed = await talk.wait(60), await shout.wait(60)
        said = await talk.logs()
    assert done.state is StepState.SUCCEEDED and "said by 0" in said
    assert (failed.state, failed.exit_code) == (StepState.FAILED, 3)
    assert failed.log_file is not None
    assert "dying" in await asyncio.to_thread(Path(failed.log_file).read_text)


async def test_a_failed_minicluster_step_pushes_its_outputs_as_failed(
    flux_execute: FakeCluster, tmp_path: Path, registry: RegistryServer
) -> None:
    # The operator's entrypoint stops at a failing command (set -e): the wrapper inside
    # the command still copies the outputs and leaves the code, so push_outputs: always works.
    step = Step(
        name="half",
        shell="/bin/sh",
        script="echo partial > r.txt; exit 3\n",
        outputs={"r": "r.txt"},
        push_outputs="always",
        resources=Resources(nodes=2, tasks=2),
        target="minicluster",
    )
    async with _artifact_session(flux_execute, tmp_path, registry) as s:
        result = await (await s.submit(step)).wait(120)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)
    pushed = result.outputs["r"]
    assert "/half-" in pushed and "/failed@sha256:" in pushed, pushed
