"""A queued step (``queue``, or the raw queue-name label) on a cluster that serves no
kueue.x-k8s.io: refused before anything is written, naming the API group and the fix.
It was created suspended and waited forever, "suspended in queue "lq", waiting for
admission", with nothing there to admit it. A cluster whose Kueue is older (the group
served without v1beta2) still takes the step: Kueue admits it, only its reasons are lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs.session import Session
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster

from ..testing.crdhelpers import established
from ..waiting import wait_until
from .test_kueue_kube import workload_crd

QUEUED = {
    "queue": {"queue": "lq"},
    "queue-and-priority": {"queue": "lq", "priority": "high"},
    "raw-label": {"labels": {"kueue.x-k8s.io/queue-name": "lq"}},
    "jobset": {"queue": "lq", "target": "jobset"},
}


@pytest.mark.parametrize("how", sorted(QUEUED))
async def test_a_queued_step_on_a_cluster_without_kueue_is_refused_before_writing(
    tmp_path: Path, how: str
) -> None:
    async with FakeCluster("simulate", directory=tmp_path) as cluster:
        if how == "jobset":
            await cluster.install_jobset()
        async with Session(study="q", kubeconfig=cluster.kubeconfig_path) as s:
            step = Step(name="a", script="true", **QUEUED[how])  # type: ignore[arg-type]
            with pytest.raises(ValueError) as refused:
                await s.submit(step)
            again = Step(name="b", script="true", **QUEUED[how])  # type: ignore[arg-type]
            with pytest.raises(ValueError):  # asked once, refused each time
                await s.submit(again)
        said = str(refused.value)
        assert 'Step "a" has a queue' in said and "serves no kueue.x-k8s.io API" in said, said
        assert "install Kueue" in said and "drop queue" in said, said
        for kind in ("configmaps", "jobs", "jobsets", "secrets"):
            assert list(cluster.store.iter(kind, "default")) == [], kind
        assert cluster.requests.count("get", "workloads") <= 1  # the one discovery


async def test_an_older_kueue_without_v1beta2_still_takes_the_step(tmp_path: Path) -> None:
    async with FakeCluster("simulate", directory=tmp_path) as cluster:
        crd = workload_crd()
        crd["spec"]["versions"][0]["name"] = "v1beta1"
        cluster.store.create("customresourcedefinitions", "", crd)
        await wait_until(
            lambda: established(cluster, "workloads.kueue.x-k8s.io"), "the CRD is Established"
        )
        async with Session(study="q", kubeconfig=cluster.kubeconfig_path) as s:
            handle = await s.submit(Step(name="a", script="true", queue="lq"))
            assert cluster.get("jobs", handle.object_name) is not None
