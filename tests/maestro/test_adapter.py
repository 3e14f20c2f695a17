"""KubernetesScriptAdapter in pieces: launcher forms, states, the batch block, job ids,
request counts on the fake cluster, pickling and registration with maestrowf."""

from __future__ import annotations

import asyncio
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
from maestrowf.abstracts.enums import CancelCode, JobStatusCode, State, SubmissionCode

from k8sjobs.maestro import (
    ANNOTATION_WORKSPACE,
    KubernetesScriptAdapter,
    format_job_id,
    maestro_state,
    parse_job_id,
)
from k8sjobs.maestro.adapter import _hardware_failure, load_batch
from k8sjobs.state import StepResult, StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until

with warnings.catch_warnings():
    # maestrowf 1.2 scans its adapters with the deprecated loader.load_module().
    warnings.simplefilter("ignore", DeprecationWarning)
    from maestrowf.datastructures.core.study import StudyStep


def study_step(name: str, cmd: str, **run: Any) -> StudyStep:
    """Return a maestrowf StudyStep as the ExecutionGraph hands it to an adapter."""
    step = StudyStep()
    step.name = name
    step.description = name
    step.run.update(cmd=cmd, **run)
    return step


def adapter(**batch: Any) -> KubernetesScriptAdapter:
    return KubernetesScriptAdapter(type="kubernetes", namespace="default", **batch)


# ---- launcher ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmd", "run", "expected"),
    [
        ("$(LAUNCHER) ./sim", {"procs": 4}, "mpirun -np 4 --host localhost:4 ./sim"),
        ("$(LAUNCHER)[2p] ./sim", {"procs": 4}, "mpirun -np 2 --host localhost:2 ./sim"),
        (
            "$(LAUNCHER)[2n, 8p] ./sim",
            {"nodes": 2, "procs": 8},
            'mpirun -np 8 --hostfile "$K8SJOBS_HOSTFILE" ./sim',
        ),
        (
            # One per line: maestrowf's own pattern is greedy within a line.
            "$(LAUNCHER)[1n, 3p] a\n$(LAUNCHER)[1n, 2p] b",
            {"nodes": 2, "procs": 5},
            'mpirun -np 3 --hostfile "$K8SJOBS_HOSTFILE" a\n'
            'mpirun -np 2 --hostfile "$K8SJOBS_HOSTFILE" b',
        ),
        (
            "$(LAUNCHER)[1, 2] ./sim",
            {"nodes": 1, "procs": 2},
            "mpirun -np 2 --host localhost:2 ./sim",
        ),
        ("echo no launcher", {}, "echo no launcher"),
    ],
)
def test_launcher_forms_become_mpirun(
    cmd: str, run: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    scheduled, script, restart = adapter().write_script(str(tmp_path), study_step("s", cmd, **run))
    text = Path(script).read_text()
    assert scheduled is True and restart is None
    assert text.endswith(f"\n\n{expected}\n")
    assert "srun" not in text and "flux" not in text


def test_get_parallelize_command_takes_maestro_strings_and_a_template() -> None:
    assert adapter(launch="none").get_parallelize_command("8", "2") == (
        "mpirun -np 8 --host ${KUBE_JOB_NAME}-0.${KUBE_JOB_NAME}:4,"
        "${KUBE_JOB_NAME}-1.${KUBE_JOB_NAME}:4"
    )
    hostfile = '"$K8SJOBS_HOSTFILE"'
    assert adapter().get_parallelize_command("8", "2") == f"mpirun -np 8 --hostfile {hostfile}"
    mpich = adapter(mpi="mpich").get_parallelize_command(8, 2)
    assert mpich == f"mpiexec -n 8 -f {hostfile}"
    custom = adapter(launcher="mpiexec -n {procs} -ppn {procs_per_node}")
    assert custom.get_parallelize_command(6, 3) == "mpiexec -n 6 -ppn 2"
    assert adapter().get_parallelize_command(2, None) == "mpirun -np 2 --host localhost:2"


def test_restart_script_is_written_too(tmp_path: Path) -> None:
    step = study_step("s", "$(LAUNCHER) run", procs=2, restart="$(LAUNCHER) resume")
    _, script, restart = adapter(shell="/bin/sh").write_script(str(tmp_path), step)
    assert restart is not None and Path(restart).read_text().startswith("#!/bin/sh\n")
    assert "mpirun -np 2 --host localhost:2 resume" in Path(restart).read_text()
    assert os.access(script, os.X_OK)


# ---- states -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        (StepState.SUCCEEDED, "Completed", State.FINISHED),
        (StepState.FAILED, "DeadlineExceeded", State.TIMEDOUT),
        (StepState.FAILED, "ExitCode", State.FAILED),
        (StepState.FAILED, "OOMKilled", State.FAILED),
        (StepState.FAILED, "BackoffLimitExceeded", State.FAILED),
        (StepState.FAILED, "ImagePullBackOff", State.FAILED),
        (StepState.FAILED, "Evicted", State.HWFAILURE),
        (StepState.PENDING, "Queued", State.PENDING),
        (StepState.PENDING, "Suspended", State.PENDING),
        (StepState.PENDING, "Unschedulable", State.PENDING),
        (StepState.RUNNING, "Running", State.RUNNING),
        (StepState.CANCELLED, "Cancelled", State.CANCELLED),
        (StepState.LOST, "JobDeleted", State.CANCELLED),
    ],
)
def test_state_mapping(state: StepState, reason: str, expected: State) -> None:
    result = StepResult(name="s", state=state, reason=reason)
    assert maestro_state(result) is expected
    assert adapter()._state(result) is expected


@pytest.mark.parametrize(
    ("status", "hardware"),
    [
        ({"phase": "Failed", "reason": "Evicted"}, True),
        ({"phase": "Failed", "reason": "NodeShutdown"}, True),
        (
            {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                    }
                ],
            },
            True,
        ),
        ({"phase": "Failed", "reason": "Error"}, False),
        ({"phase": "Running"}, False),
    ],
)
def test_pods_lost_to_their_node_are_hardware_failures(
    status: dict[str, Any], hardware: bool
) -> None:
    assert _hardware_failure([{"metadata": {"name": "p"}, "status": status}]) is hardware


def test_node_loss_is_a_hardware_failure() -> None:
    failed = StepResult(name="s", state=StepState.FAILED, reason="PodFailed")
    assert maestro_state(failed, hardware=True) is State.HWFAILURE
    assert adapter()._state("SUCCEEDED") is State.FINISHED


# ---- the batch block --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"imagee": "x"}, 'block: "imagee" is not a batch key; did you mean "image"?'),
        ({"steps": {"sim": {"memroy": "1Gi"}}}, 'steps.sim": "memroy" is not a batch.steps'),
        ({"retries": -1}, '"retries": Input should be greater than or equal to 0'),
        ({"launcher": "mpirun -np {ranks}"}, '"launcher": "mpirun -np {ranks}" is not a launcher'),
        ({"type": "slurm"}, "\"type\": Input should be 'kubernetes'"),
    ],
)
def test_batch_block_errors_name_the_key(batch: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="Maestro batch block") as error:
        load_batch({"type": "kubernetes", **batch})
    assert message in str(error.value)


def test_step_overrides_apply_to_every_parameter_combination(tmp_path: Path) -> None:
    chosen = adapter(
        image="base:1",
        memory="1Gi",
        env={"A": "1"},
        steps={"sim": {"image": "sim:2", "memory": "4Gi", "env": {"B": "2"}}},
    )
    script = tmp_path / "s.sh"
    script.write_text("echo hi\n")
    job = chosen.manifests(study_step("sim_SIZE.10", "x"), script.read_text(), str(tmp_path)).job
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "sim:2"
    assert container["resources"]["limits"]["memory"] == "4Gi"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["A"] == "1" and env["B"] == "2" and env["KUBE_JOB_NAME"] == job["metadata"]["name"]
    other = chosen.manifests(study_step("simple", "x"), "echo\n", str(tmp_path)).job
    assert other["spec"]["template"]["spec"]["containers"][0]["image"] == "base:1"


def test_the_failure_policy_comes_from_the_batch_block_and_step_overrides(tmp_path: Path) -> None:
    chosen = adapter(
        retries=2,
        retry_on_exit_codes=[75],
        steps={"check": {"disruptions": "count", "retry_on_exit_codes": [], "retries": 0}},
    )
    sim = chosen.manifests(study_step("sim_N.1", "x"), "echo\n", str(tmp_path)).job["spec"]
    rules = sim["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    assert rules[1]["onExitCodes"] == {"containerName": "step", "operator": "NotIn", "values": [75]}
    check = chosen.manifests(study_step("check", "x"), "echo\n", str(tmp_path)).job["spec"]
    assert "podFailurePolicy" not in check
    bad = adapter(steps={"sim": {"fail_on_exit_codes": [0]}})
    with pytest.raises(ValueError, match=r'Step "sim": fail_on_exit_codes: .*0 is success'):
        bad.manifests(study_step("sim", "x"), "echo\n", str(tmp_path))


def test_bad_step_values_fail_the_submission_with_the_field(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("echo hi\n")
    bad = adapter(steps={"sim": {"memory": "4 gigs"}})
    record = bad.submit(study_step("sim", "x"), str(script), str(tmp_path))
    assert record.submission_code is SubmissionCode.ERROR
    with pytest.raises(ValueError, match=r'Step "sim": resources.memory: "4 gigs" is not'):
        bad.manifests(study_step("sim", "x"), "echo\n", str(tmp_path))


# ---- job ids and pickling ---------------------------------------------------------------


def test_job_id_round_trip() -> None:
    job_id = format_job_id("hpc", "study-sim-1d79b2c0")
    assert job_id == "hpc/study-sim-1d79b2c0"
    assert parse_job_id(job_id) == ("hpc", "study-sim-1d79b2c0")
    assert parse_job_id(pickle.loads(pickle.dumps(job_id))) == ("hpc", "study-sim-1d79b2c0")
    for bad in ("12345", "hpc/", "/x", "HPC/x", "a/b/c", None):
        with pytest.raises(ValueError, match="is not a k8sjobs job id"):
            parse_job_id(bad)


def test_adapter_pickles_and_holds_no_connection() -> None:
    original = adapter(image="sim:1", steps={"sim": {"memory": "2Gi"}})
    copy = pickle.loads(pickle.dumps(original))
    assert copy.settings == original.settings
    assert copy.key == "kubernetes" and copy.extension == ".k8s.sh"


def test_unknown_and_malformed_ids_without_a_cluster() -> None:
    code, states = adapter().check_jobs(["not-an-id"])
    assert code is JobStatusCode.OK and states == {"not-an-id": State.NOTFOUND}
    assert adapter().check_jobs([]) == (JobStatusCode.NOJOBS, {})
    assert adapter().cancel_jobs([]).cancel_status is CancelCode.OK


# ---- against the fake cluster -----------------------------------------------------------


async def test_check_jobs_is_one_list_call_for_1000_jobs(
    simulate_cluster: FakeCluster, tmp_path: Path
) -> None:
    chosen = adapter(kubeconfig=str(simulate_cluster.kubeconfig_path))
    ids = []
    for i in range(1000):
        manifests = chosen.manifests(study_step(f"sim_N.{i}", "x"), "echo\n", str(tmp_path))
        job = manifests.job
        job["spec"]["suspend"] = True  # Pending, and no pods to simulate
        simulate_cluster.store.create("jobs", "default", job)
        ids.append(format_job_id(manifests.namespace, manifests.name))
    await asyncio.to_thread(chosen.check_jobs, ids[:1])  # connect once
    before = simulate_cluster.request_count()
    code, states = await asyncio.to_thread(chosen.check_jobs, ids)
    assert simulate_cluster.request_count() - before == 1
    assert code is JobStatusCode.OK and len(states) == 1000
    assert set(states.values()) == {State.PENDING}


async def test_batched_submit_as_mini_mummi_calls_it(
    simulate_cluster: FakeCluster, tmp_path: Path
) -> None:
    chosen = KubernetesScriptAdapter(
        type="kubernetes", kubeconfig=str(simulate_cluster.kubeconfig_path)
    )
    steps, scripts, cwds = [], [], []
    for i in range(20):
        workspace = tmp_path / f"w{i}"
        workspace.mkdir()
        step = study_step(f"sim_{i}", "echo hi")
        _, script, _ = chosen.write_script(str(workspace), step)
        steps.append(step)
        scripts.append(script)
        cwds.append(str(workspace))
    submitted = await asyncio.to_thread(chosen.submit, steps, scripts, cwds)
    assert [name for _, name in submitted] == [f"sim_{i}" for i in range(20)]
    ids = [job_id for job_id, _ in submitted]
    assert all(job_id and job_id.startswith("default/") for job_id in ids)
    job = simulate_cluster.get("jobs", parse_job_id(ids[3])[1])
    assert job is not None and job["metadata"]["annotations"][ANNOTATION_WORKSPACE] == cwds[3]

    states: dict[Any, State] = {}
    async with asyncio.timeout(20):
        while set(states.values()) != {State.FINISHED}:
            before = (
                simulate_cluster.request_count("list", "jobs"),
                simulate_cluster.request_count("list", "pods"),
            )
            _, states = await asyncio.to_thread(chosen.check_jobs, ids)
            after = (
                simulate_cluster.request_count("list", "jobs"),
                simulate_cluster.request_count("list", "pods"),
            )
            assert after[0] - before[0] == 1 and after[1] - before[1] <= 1
            await asyncio.sleep(0.1)
    assert (tmp_path / "w3" / "sim_3.out").exists()
    assert "FINISHED" in (tmp_path / "w3" / "sim_3.err").read_text()


async def test_resubmitting_an_ended_job_runs_it_again(
    simulate_cluster: FakeCluster, tmp_path: Path
) -> None:
    chosen = adapter(kubeconfig=str(simulate_cluster.kubeconfig_path))
    step = study_step("once", "echo hi")
    _, script, _ = chosen.write_script(str(tmp_path), step)
    first = await asyncio.to_thread(chosen.submit, step, script, str(tmp_path))
    job_id = first.job_identifier

    async def finished() -> bool:
        _, states = await asyncio.to_thread(chosen.check_jobs, [job_id])
        return bool(states[job_id] == State.FINISHED)

    await wait_until(finished, "the job has finished")
    uid = simulate_cluster.get("jobs", parse_job_id(job_id)[1])["metadata"]["uid"]  # type: ignore[index]
    again = await asyncio.to_thread(chosen.submit, step, script, str(tmp_path))
    assert again.job_identifier == job_id
    assert simulate_cluster.get("jobs", parse_job_id(job_id)[1])["metadata"]["uid"] != uid  # type: ignore[index]
    record = await asyncio.to_thread(chosen.cancel_jobs, [job_id])
    assert record.cancel_status is CancelCode.OK
    _, states = await asyncio.to_thread(chosen.check_jobs, [job_id])
    assert states[job_id] is State.CANCELLED


# ---- docs/maestro.md ---------------------------------------------------------------------

DOC = Path(__file__).parents[2] / "docs" / "maestro.md"
EXAMPLE = Path(__file__).parents[2] / "examples" / "maestro" / "study.yaml"


def test_docs_show_the_example_spec_that_the_e2e_test_runs() -> None:
    assert f"```yaml\n{EXAMPLE.read_text()}```" in DOC.read_text()


async def test_docs_python_example_runs(
    simulate_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = DOC.read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("KUBECONFIG", str(simulate_cluster.kubeconfig_path))
    scope: dict[str, Any] = {"__name__": "docs"}

    def run_example() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            exec(compile(code, "docs/maestro.md", "exec"), scope)

    await asyncio.to_thread(run_example)
    assert scope["name"] == "sim_1"
    assert scope["code"] is JobStatusCode.OK
    assert scope["states"][scope["job_id"]] in (State.PENDING, State.RUNNING, State.FINISHED)


# ---- multi-node steps -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "launch", "command"),
    [
        ({}, "ssh", 'mpirun -np 4 --hostfile "$K8SJOBS_HOSTFILE" ./sim'),
        ({"mpi": "intel"}, "ssh", 'mpiexec -n 4 -ppn 2 -f "$K8SJOBS_HOSTFILE" ./sim'),
        ({"steps": {"s": {"mpi": "mpich"}}}, "ssh", 'mpiexec -n 4 -f "$K8SJOBS_HOSTFILE"'),
        ({"steps": {"s": {"launch": "none"}}}, "none", "mpirun -np 4 --host ${KUBE_JOB_NAME}-0."),
    ],
)
def test_a_multi_node_maestro_step_launches_as_a_k8sjobs_step_does(
    batch: dict[str, Any], launch: str, command: str, tmp_path: Path
) -> None:
    chosen = adapter(**batch)
    step = study_step("s", "$(LAUNCHER) ./sim", nodes=2, procs=4)
    _, script, _ = chosen.write_script(str(tmp_path), step)
    assert command in Path(script).read_text()
    manifests = chosen.manifests(step, Path(script).read_text(), str(tmp_path))
    mpi = batch.get("mpi") or batch.get("steps", {}).get("s", {}).get("mpi") or "openmpi"
    job = manifests.job["spec"]
    if launch == "ssh":
        assert job["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
        assert manifests.secret is not None
        assert manifests.secret["type"] == "kubernetes.io/ssh-auth"
        assert manifests.configmap["data"]["hostfile"].count("\n") == 2
        line = manifests.configmap["data"]["hostfile"].splitlines()[0]
        assert line.endswith(" slots=2" if mpi == "openmpi" else ":2")
    else:
        assert "successPolicy" not in job and manifests.secret is None


def test_bad_launch_settings_name_the_key() -> None:
    with pytest.raises(ValueError, match='"mpi"'):
        adapter(mpi="lam")
    with pytest.raises(ValueError, match=r'"steps\.s\.launch"'):
        adapter(steps={"s": {"launch": "rsh"}})


@pytest.mark.parametrize(
    "batch",
    [{"target": "minicluster"}, {"steps": {"s": {"target": "minicluster", "flux_in_image": True}}}],
)
def test_a_maestro_step_can_be_a_flux_minicluster(batch: dict[str, Any], tmp_path: Path) -> None:
    chosen = adapter(**batch)
    step = study_step("s", "$(LAUNCHER) ./sim", nodes=2, procs=4)
    _, script, _ = chosen.write_script(str(tmp_path), step)
    assert "flux run -N2 -n4 ./sim" in Path(script).read_text()
    manifests = chosen.manifests(step, Path(script).read_text(), str(tmp_path))
    assert manifests.job["kind"] == "MiniCluster"
    assert manifests.job["spec"]["size"] == 2 and manifests.job["spec"]["tasks"] == 4
    assert ("flux" in manifests.job["spec"]) is ("steps" in batch)  # flux_in_image
    assert manifests.secret is None and manifests.service is None
