"""An allocation's objects carry the study's label, as a step's do, yet are no step: a
restarted driver's ``attach`` (``k8sjobs status``) returns no handle for them and calls
none of them an orphan; and Kueue admits a queued allocation once, as one Workload. Fake
cluster over real HTTP."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from k8sjobs.kube import KubeClient, load_config
from k8sjobs.kube.client import CONFIGMAPS
from k8sjobs.kube.create import create_step
from k8sjobs.kube.watch import _KEEP_LABELS
from k8sjobs.render.allocation import LABEL_ALLOCATION, held_pods, render_allocation
from k8sjobs.render.manifests import Target
from k8sjobs.steps.allocation import Allocation
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .conftest import FAST
from .kubehelpers import session, step
from .test_kueue_fake import kueue  # noqa: F401  (the fixture: a fake cluster with Kueue)


async def _nothing() -> None:
    raise AssertionError("nothing was there to delete")


def test_the_watches_keep_the_label_that_tells_an_allocation() -> None:
    # The informers slim what they cache to the labels they keep: without this one an
    # allocation's Job reads as a step's.
    assert LABEL_ALLOCATION in _KEEP_LABELS


async def test_attach_finds_the_steps_and_not_the_allocations(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5
    ) as cluster:
        await cluster.install_jobset()
        async with session(cluster, tmp_path) as s:
            done = await (await s.submit(step("a"))).wait(timeout=60)
            assert done.ok
        target = Target(study="s")
        job = render_allocation(Allocation(name="pool", nodes=2), target)
        jobset = render_allocation(Allocation(name="sets", target="jobset"), target)
        lone = render_allocation(Allocation(name="lone"), target)  # its Job never made
        async with KubeClient(await load_config(str(cluster.kubeconfig_path))) as client:
            for made in (job, jobset):  # none there yet: nothing to wait to be gone
                await create_step(client, made, current=None, replace=False, gone=_nothing)
            await client.create(CONFIGMAPS, "default", lone.configmap)
        await wait_until(
            lambda: (
                cluster.get("jobs", job.name) is not None
                and any(
                    j["metadata"]["name"].startswith(jobset.name)
                    for j in cluster.objects("jobs", "default")
                )
            ),
            "the allocation's Job and the JobSet's child Job",
        )
        caplog.set_level(logging.WARNING)
        async with session(cluster, tmp_path) as s:
            found = await s.attach()
        assert [h.name for h in found] == ["a"]
        said = "\n".join(r.getMessage() for r in caplog.records)
        assert "alloc-" not in said, said


async def test_a_queued_allocation_is_one_workload_admitted_once(
    kueue: FakeCluster,  # noqa: F811 (the fixture imported above)
) -> None:
    # 2 pods of one CPU in a 2-CPU ClusterQueue: one Workload of the Job, admitted whole.
    alloc = Allocation(name="pool", nodes=2, resources={"cores_per_task": 1}, queue="lq")
    made = render_allocation(alloc, Target(study="s"))
    assert made.job["spec"]["suspend"] is True
    async with KubeClient(await load_config(str(kueue.kubeconfig_path))) as client:
        await create_step(client, made, current=None, replace=False, gone=_nothing)

    def admitted() -> bool:
        job = kueue.get("jobs", made.name) or {}
        return (job.get("spec") or {}).get("suspend") is False

    await wait_until(admitted, "Kueue admits the allocation's Job")
    await wait_until(
        lambda: len([p for p in kueue.objects("pods", "default") if held_pods(p)]) == 2,
        "the allocation's two pods",
    )
    workloads = list(kueue.objects("workloads", "default"))
    assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]
    (owner,) = workloads[0]["metadata"]["ownerReferences"]
    assert owner["kind"] == "Job" and owner["name"] == made.name
