"""The artifact handoff of target: minicluster steps, piece by piece: the rendered sidecar
(validated against the operator's CRD, pinned by a golden file), the Flux runner's wrapper
run by a real /bin/sh, and the handoff image's argument-less entrypoint run as a process.
The whole, on the fake cluster with a real registry: tests/kube/test_minicluster_kube.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.render import minicluster
from k8sjobs.render.manifests import HANDOFF_IMAGE, Target, render
from k8sjobs.steps.spec import Resources, Step

from .render.test_minicluster import mpi_step, validator

GOLDEN = Path(__file__).parent / "golden" / "minicluster-handoff.yaml"
TARGET = Target(study="flux", namespace="hpc", store="registry.example:5000/art")


def handoff_step(**fields: Any) -> Step:
    return mpi_step(
        inputs={"mesh": "registry.example:5000/meshes:v1"},
        outputs={"log": "log.lammps", "dumps": "dumps"},
        **fields,
    )


def test_golden_minicluster_with_artifacts() -> None:
    text = render(handoff_step(), TARGET).to_yaml()
    if os.environ.get("K8SJOBS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "rerun with K8SJOBS_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize("secret", [None, "regcred"])
@pytest.mark.parametrize("flux_in_image", [False, True])
def test_the_sidecar_minicluster_validates_against_the_crd_schema(
    flux_in_image: bool, secret: str | None
) -> None:
    target = Target(study="flux", store="r.example/a", registry_secret=secret)
    body = render(handoff_step(flux_in_image=flux_in_image), target).job
    validator().validate(body)
    runner, sidecar = body["spec"]["containers"]
    # Two containers: the operator needs the Flux runner named, the other one named.
    assert runner["runFlux"] is True and "runFlux" not in sidecar
    assert sidecar["name"] == minicluster.HANDOFF_CONTAINER
    assert sidecar["image"] == HANDOFF_IMAGE
    # The image's own entrypoint, arguments by environment: the API has no args.
    assert sidecar["noWrapEntrypoint"] is True and "command" not in sidecar
    assert sidecar["environment"]["K8SJOBS_HANDOFF_ARGS"] == "sidecar"
    assert sidecar["environment"]["K8SJOBS_HANDOFF_CONFIG"] == "/k8sjobs/entrypoint/handoff.json"
    assert ("DOCKER_CONFIG" in sidecar["environment"]) is (secret is not None)
    # One emptyDir in both (the operator mounts it at /dev/shm), the ConfigMap in both.
    shared = minicluster.HANDOFF_VOLUME
    assert runner["volumes"][shared] == sidecar["volumes"][shared] == {"emptyDir": True}
    assert runner["command"].startswith("/bin/sh /k8sjobs/entrypoint/flux-run ")


@pytest.mark.parametrize("artifacts", [False, True])
def test_the_configmap_volume_is_keyed_by_the_configmaps_name(artifacts: bool) -> None:
    # The operator names the pod volume after configMapName and the mount after the key:
    # any other key leaves the mount without its volume, and the API server refuses the pod.
    manifests = render(handoff_step() if artifacts else mpi_step(), TARGET)
    for container in manifests.job["spec"]["containers"]:
        for key, volume in container["volumes"].items():
            if "configMapName" in volume:
                assert key == volume["configMapName"] == manifests.name
    data = manifests.configmap["data"]
    assert (minicluster.RUN_KEY in data) is artifacts and "run" not in data
    assert ("handoff.json" in data) is artifacts


def test_inputs_only_still_waits_for_the_pull() -> None:
    step = mpi_step(inputs={"mesh": "registry.example:5000/meshes:v1"})
    manifests = render(step, TARGET)
    assert len(manifests.job["spec"]["containers"]) == 2
    assert manifests.configmap["data"][minicluster.RUN_KEY] == minicluster.RUN_WRAPPER


# ---- the Flux runner's wrapper, run by a real /bin/sh ----------------------------------


def _wrapper(
    tmp_path: Path, script: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    shared, work = tmp_path / "shm" / "k8sjobs", tmp_path / "work"
    (shared / "status" / "paths").mkdir(parents=True, exist_ok=True)
    (shared / "inputs" / "mesh").mkdir(parents=True)
    (shared / "inputs" / "mesh" / "m.txt").write_text("mesh-data")
    work.mkdir()
    wrapper = tmp_path / "flux-run"
    wrapper.write_text(minicluster.RUN_WRAPPER)
    variables = {
        "PATH": os.environ["PATH"],
        "K8SJOBS_HANDOFF_DIR": str(shared),
        "K8SJOBS_STATUS_DIR": str(shared / "status"),
        "K8SJOBS_WORKDIR": str(work),
        "K8SJOBS_INPUTS": str(work / "inputs"),
        "K8SJOBS_TERMINATION_LOG": str(tmp_path / "termination-log"),
        **env,
    }
    done = subprocess.run(
        ["/bin/sh", str(wrapper), "/bin/sh", "-c", script],
        cwd=work,
        env=variables,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, shared


def test_the_wrapper_reports_a_failed_pull_and_never_runs_the_script(tmp_path: Path) -> None:
    (tmp_path / "shm" / "k8sjobs" / "status").mkdir(parents=True)
    (tmp_path / "shm" / "k8sjobs" / "status" / "pull-failed").write_text("1")
    done, shared = _wrapper(tmp_path, f"touch {tmp_path / 'ran'}")
    assert done.returncode == 1
    said = (tmp_path / "termination-log").read_text()
    assert said == "InputPullFailed: pulling the inputs failed with exit code 1\n"
    assert not (tmp_path / "ran").exists()
    assert not (shared / "status" / "exitcode").exists()


def test_the_wrapper_gives_up_waiting_at_its_bound(tmp_path: Path) -> None:
    done, _ = _wrapper(tmp_path, "true", K8SJOBS_HANDOFF_WAIT="0")
    assert done.returncode == 1
    assert "pulled nothing in 0 s" in (tmp_path / "termination-log").read_text()


@pytest.mark.parametrize("code", [0, 3])
def test_the_wrapper_hands_the_outputs_and_exit_code_to_the_sidecar(
    tmp_path: Path, code: int
) -> None:
    status = tmp_path / "shm" / "k8sjobs" / "status"
    status.mkdir(parents=True)
    (status / "ready").write_text("")
    paths = {"log": "log file.txt", "dumps": "out/dumps", "never": "not-made"}
    (status / "paths").mkdir()
    for name, path in paths.items():
        (status / "paths" / name).write_text(path)
    script = (
        "cat inputs/mesh/m.txt > 'log file.txt'; mkdir -p out/dumps/d; "
        f"echo 1 > out/dumps/d/a; exit {code}"
    )
    done, shared = _wrapper(tmp_path, script)
    assert done.returncode == code, done.stderr
    assert (shared / "status" / "exitcode").read_text() == f"{code}\n"
    assert (shared / "work" / "log file.txt").read_text() == "mesh-data"
    assert (shared / "work" / "out" / "dumps" / "d" / "a").read_text() == "1\n"
    assert not (shared / "work" / "not-made").exists()  # the sidecar reports it missing


# ---- the handoff image's entrypoint without arguments ----------------------------------


def _entrypoint(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the handoff image's entrypoint, without arguments, as the operator starts it."""
    command = [sys.executable, "-m", "k8sjobs.handoff"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_the_entrypoint_takes_its_arguments_from_the_environment(tmp_path: Path) -> None:
    status = tmp_path / "status"
    env = {
        **os.environ,
        "K8SJOBS_HANDOFF_ARGS": "sidecar",
        "K8SJOBS_HANDOFF_CONFIG": str(tmp_path / "missing.json"),
        "K8SJOBS_STATUS_DIR": str(status),
        "JOB_COMPLETION_INDEX": "0",
    }
    done = _entrypoint(env)
    assert done.returncode == 1
    assert "k8sjobs handoff sidecar:" in done.stderr and "missing.json" in done.stderr
    # The Flux runner waits for the pull: it is told at once, not at its bound.
    assert (status / "pull-failed").read_text() == "1"


def test_a_worker_pods_sidecar_ends_at_once(tmp_path: Path) -> None:
    config = tmp_path / "handoff.json"
    config.write_text('{"store": "oci:/nowhere", "inputs": {}, "outputs": {}}')
    env = {
        **os.environ,
        "K8SJOBS_HANDOFF_ARGS": "sidecar",
        "K8SJOBS_HANDOFF_CONFIG": str(config),
        "JOB_COMPLETION_INDEX": "1",
    }
    done = _entrypoint(env)
    assert done.returncode == 0 and "index 1" in done.stderr


def test_resources_reach_the_sidecar_unchanged() -> None:
    # The pull's limits the step raises go to the sidecar, as to a Job step's pull.
    step = handoff_step(
        env={"K8SJOBS_PULL_MAX_BYTES": "1000"}, resources=Resources(nodes=2, tasks=4)
    )
    (_, sidecar) = render(step, TARGET).job["spec"]["containers"]
    assert sidecar["environment"]["K8SJOBS_PULL_MAX_BYTES"] == "1000"
