"""Multi-node launch: ssh steps on the fake cluster (simulated kubelet): the launcher decides.

Each pod's fate is planned by its completion index: index 0 (the launcher) ends when its
script would, the workers serve for ten minutes unless told to die. The step must end when
the launcher does, or within seconds of a worker's death, never at the workers' pace.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.state import StepState
from k8sjobs.steps.spec import Resources, Step
from k8sjobs.testing import ApiError, FakeCluster, PodPlan

from .conftest import FAST
from .kubehelpers import session

INDEX = "batch.kubernetes.io/job-completion-index"
SERVING = PodPlan(duration=600)  # a worker: serves until the Job ends
PLANS: dict[int, PodPlan] = {}


def _by_index(pod: Mapping[str, Any]) -> PodPlan | None:
    index = int((pod["metadata"].get("annotations") or {}).get(INDEX, "0"))
    return PLANS.get(index, SERVING)


@pytest_asyncio.fixture
async def launched(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    PLANS.clear()
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5, rule=_by_index
    ) as fake:
        yield fake


def _mpi_step(name: str = "mpi") -> Step:
    return Step(name=name, script="$(LAUNCHER) ./a.out", resources=Resources(nodes=3, tasks=6))


async def test_launcher_success_completes_the_step_and_stops_the_workers(
    launched: FakeCluster, tmp_path: Path
) -> None:
    PLANS[0] = PodPlan(duration=0.3)
    async with session(launched, tmp_path) as s:
        handle = await s.submit(_mpi_step())
        result = await handle.wait(30)
    assert (result.state, result.reason, result.exit_code) == (StepState.SUCCEEDED, "Completed", 0)
    job = launched.get("jobs", handle.object_name)
    assert job is not None
    reasons = {c["type"]: c["reason"] for c in job["status"]["conditions"]}
    assert reasons == {"SuccessCriteriaMet": "SuccessPolicy", "Complete": "SuccessPolicy"}
    assert job["status"]["completedIndexes"] == "0"
    assert job["status"]["succeeded"] == 1
    secret = launched.get("secrets", handle.object_name)
    assert secret is not None and secret["type"] == "kubernetes.io/ssh-auth"
    private = base64.b64decode(secret["data"]["ssh-privatekey"]).decode()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    configmap = launched.get("configmaps", handle.object_name)
    assert configmap is not None and "PRIVATE KEY" not in str(configmap)


async def test_a_dead_worker_fails_the_step_at_once_naming_its_index(
    launched: FakeCluster, tmp_path: Path
) -> None:
    PLANS[0] = PodPlan(duration=600)  # the launcher would run ten minutes
    PLANS[2] = PodPlan(duration=0.3, exit_code=137)
    async with session(launched, tmp_path) as s:
        result = await (await s.submit(_mpi_step())).wait(30)
    assert (result.state, result.reason, result.exit_code) == (
        StepState.FAILED,
        "WorkerFailed",
        137,
    )
    assert result.message.startswith("worker index 2 (pod ")


async def test_a_failed_launcher_fails_the_step_with_the_scripts_exit_code(
    launched: FakeCluster, tmp_path: Path
) -> None:
    PLANS[0] = PodPlan(duration=0.3, exit_code=3)
    async with session(launched, tmp_path) as s:
        result = await (await s.submit(_mpi_step())).wait(30)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)
    assert result.message == "the script exited with code 3"


def test_the_fake_refuses_an_ssh_auth_secret_without_its_private_key(
    launched: FakeCluster,
) -> None:
    data = {"authorized_keys": base64.b64encode(b"ssh-ed25519 AAAA k").decode()}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "keys"},
        "type": "kubernetes.io/ssh-auth",
        "data": data,
    }
    with pytest.raises(ApiError) as refused:
        launched.store.create("secrets", "default", secret)
    assert (refused.value.code, refused.value.reason) == (422, "Invalid")
    assert refused.value.message == (
        'Secret "keys" is invalid: data[ssh-privatekey]: Required value'
    )
    data["ssh-privatekey"] = base64.b64encode(b"key").decode()
    created = launched.store.create("secrets", "default", secret)
    assert created["type"] == "kubernetes.io/ssh-auth"
