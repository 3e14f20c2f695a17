"""target: jobset on a cluster without the JobSet API: refused before anything is written,
naming the API group and the fix (checked once, by discovery)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs import Resources, Session, Step
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster, jobset_crd

from ..waiting import wait_until
from .conftest import FAST
from .kubehelpers import session


async def test_a_cluster_without_jobset_refuses_the_step_before_writing(tmp_path: Path) -> None:
    async with (
        FakeCluster("simulate", directory=tmp_path) as cluster,
        Session(study="js", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        step = Step(name="a", script="true", target="jobset")
        with pytest.raises(ValueError) as refused:
            await s.submit(step)
        said = str(refused.value)
        assert "serves no jobset.x-k8s.io/v1alpha2 API" in said
        assert "install JobSet" in said and "target: job" in said
        assert list(cluster.store.iter("configmaps", "default")) == []
        assert list(cluster.store.iter("jobs", "default")) == []


def _established(fake: FakeCluster) -> bool:
    found = fake.store.get("customresourcedefinitions", "", "jobsets.jobset.x-k8s.io") or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize(("nodes", "writes"), [(1, 2), (2, 3)])
async def test_writes_per_jobset_step(tmp_path: Path, nodes: int, writes: int) -> None:
    # The JobSet, then its ConfigMap (and for launch: ssh its key pair's Secret) owned by it;
    # the controller makes the child Jobs and the headless Service.
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5
    ) as cluster:
        cluster.store.create("customresourcedefinitions", "", jobset_crd())
        await wait_until(lambda: _established(cluster), "the JobSet CRD is established")
        steps = 5
        async with session(cluster, tmp_path) as s:
            cluster.requests.reset()
            made = [
                Step(
                    name=f"w{i}",
                    script="$(LAUNCHER) true\n",
                    target="jobset",
                    resources=Resources(nodes=nodes, tasks=nodes),
                )
                for i in range(steps)
            ]
            handles = await s.submit_many(made)
            verbs = ("create", "update", "patch", "delete")
            sent = sum(cluster.request_count(v) for v in verbs)
            created = cluster.request_count("create")
            results = await s.gather(*handles, timeout=120)
    assert all(r.ok for r in results), [r.describe() for r in results]
    assert sent / steps == writes and created == sent


async def test_a_jobset_deleted_under_the_driver_is_lost_naming_the_jobset(
    tmp_path: Path,
) -> None:
    # The step's object is its JobSet: saying "its Job was deleted" sent the user looking
    # for a Job the step never had.
    async with FakeCluster("simulate", directory=tmp_path, controller=FAST) as cluster:
        await cluster.install_jobset()
        async with session(cluster, tmp_path) as s:
            step = Step(
                name="lost",
                script="true",
                target="jobset",
                annotations={"fake.k8sjobs.io/duration": "3600"},
            )
            handle = await s.submit(step)
            launcher = f"{handle.object_name}-launcher-0"
            await wait_until(lambda: cluster.get("jobs", launcher) is not None, "the launcher")
            cluster.store.delete("jobsets", "default", handle.object_name)
            result = await handle.wait(timeout=120)
    assert result.state is StepState.LOST
    assert result.message == "its JobSet was deleted by someone else"


async def test_a_session_target_is_the_default_of_steps_that_name_none(tmp_path: Path) -> None:
    """Session(target="jobset"): a step naming no target runs as a JobSet; one naming
    "job" stays a Job; a bad value is refused naming it, before anything is sent."""
    with pytest.raises(ValueError, match="Session target 'jobs' is not a step target"):
        Session(target="jobs")  # type: ignore[arg-type]
    async with FakeCluster("simulate", directory=tmp_path, controller=FAST) as cluster:
        await cluster.install_jobset()
        async with Session(
            study="s",
            kubeconfig=cluster.kubeconfig_path,
            log_dir=tmp_path / "logs",
            target="jobset",
        ) as s:
            quick = {"fake.k8sjobs.io/duration": "0.05"}
            defaulted = await s.submit(Step(name="d", script="true", annotations=quick))
            own = await s.submit(Step(name="j", script="true", target="job", annotations=quick))
            assert (await defaulted.wait(timeout=120)).ok and (await own.wait(timeout=120)).ok
            oom = {"factor": 2, "max": "4Gi"}
            resources = Resources(memory="1Gi")
            with pytest.raises(ValueError, match="retry_oom is for target: job"):
                await s.submit(Step(name="r", script="true", resources=resources, retry_oom=oom))
        assert defaulted.step is not None and defaulted.step.target == "jobset"
        assert cluster.get("jobsets", defaulted.object_name) is not None
        assert cluster.get("jobsets", own.object_name) is None
        assert cluster.get("jobs", own.object_name) is not None
