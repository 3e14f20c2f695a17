"""Two writes per step: the Job first, then its ConfigMap (and Secret, Service) already
owned by it. Each window between the writes is held here: a driver killed with SIGKILL
between them, a Job deleted between them, an adoption that must finish a half-written
step, and the number of writes per step (counted by the fake API server).

The lost reply of each write is in test_lost_replies.py, through the same proxy.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from k8sjobs.kube import KubeClient, KubernetesBackend, load_config
from k8sjobs.render.manifests import Target, render
from k8sjobs.state import StepState
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import Fault, FaultProxy

from ..waiting import wait_until
from .kubehelpers import orphans, session, step
from .test_lost_replies import KEY, _check_created_once, _create, _mpi, _through

DRIVER = """
import asyncio, sys
from k8sjobs.session import Session
from tests.kube.kubehelpers import step
from tests.kube.test_lost_replies import _mpi

async def main():
    make = {"job": lambda n: step(n, duration=0.05), "mpi": _mpi}[sys.argv[2]]
    async with Session(study="s", kubeconfig=sys.argv[1]) as s:
        await s.submit(make(sys.argv[3]))
        print("submitted", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""

MAKERS: dict[str, Callable[[str], Step]] = {"job": step, "mpi": _mpi}


@pytest.mark.parametrize("kind", ["job", "mpi"])
async def test_a_driver_killed_between_the_job_and_its_configmap(
    cluster: FakeCluster, tmp_path: Path, kind: str
) -> None:
    make = MAKERS[kind]
    manifests = render(make("half"), Target(study="s"), ssh_key=KEY)
    async with FaultProxy(cluster.url) as proxy:
        kubeconfig = _through(cluster, proxy, tmp_path / "proxied-kubeconfig")
        # The first write after the Job never reaches the server: the driver is killed
        # while it waits for that answer, with the Job created and nothing else.
        proxy.inject(Fault("stall", "POST", "/(services|secrets|configmaps)", stall_seconds=5))
        root = await asyncio.to_thread(lambda: str(Path(__file__).resolve().parents[2]))
        driver = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            DRIVER,
            str(kubeconfig),
            kind,
            "half",
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": root},
        )
        try:
            await wait_until(
                lambda: any(m == "POST" and "/jobs" not in p for m, p, _ in proxy.log),
                "the driver sends the write after the Job",
                timeout=30,
            )
        finally:
            driver.send_signal(signal.SIGKILL)
            await driver.wait()
            cluster.faults.drop_watches()  # the dead driver's, which the proxy still relays
    job = cluster.get("jobs", manifests.name)
    assert job is not None
    for extra in manifests.objects()[:-1]:
        assert cluster.get(f"{str(extra['kind']).lower()}s", manifests.name) is None
    # Its pod waits for its volumes (never runs without its script), as on a real kubelet.
    await wait_until(
        lambda: any(e["reason"] == "FailedMount" for e in cluster.objects("events")),
        "a FailedMount event",
    )
    pods = cluster.objects("pods")
    assert pods and {p["status"]["phase"] for p in pods} == {"Pending"}
    async with session(cluster, tmp_path) as s:
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend)
        await s.attach()
        assert backend.unwritten == [manifests.name]  # attach says so, and why
        result = await (await s.submit(make("half"))).wait(30)
    assert result.state is StepState.SUCCEEDED, result
    _check_created_once(cluster, manifests)
    again = cluster.get("jobs", manifests.name)
    assert again is not None and again["metadata"]["uid"] == job["metadata"]["uid"]
    assert not orphans(cluster)


async def test_adopting_a_step_whose_pod_runs_costs_no_request(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # A pod that mounted its ConfigMap proves the step's every object exists (the ConfigMap
    # is written last), so resuming a running study sends nothing per running step.
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("long", duration=30))
        await wait_until(lambda: handle.state is StepState.RUNNING, "it runs")
    async with session(cluster, tmp_path) as s:
        await s.attach()
        cluster.requests.reset()
        adopted = await s.submit(step("long", duration=30))
        await wait_until(lambda: adopted.state is StepState.RUNNING, "it is adopted")
        assert cluster.request_count("create") == cluster.request_count("get") == 0
        await adopted.cancel()


async def test_a_job_deleted_between_the_two_writes_leaves_no_configmap(
    cluster: FakeCluster,
) -> None:
    # Someone deletes the Job just after its create: the ConfigMap is created owning a Job
    # that is gone, and the garbage collector deletes it (never an orphaned ConfigMap).
    manifests = render(step("gone"), Target(study="s"))
    loop = asyncio.get_running_loop()

    def delete_the_job(event: object) -> None:
        if getattr(event, "resource", "") == "jobs" and getattr(event, "type", "") == "ADDED":
            loop.call_soon(cluster.store.delete, "jobs", "default", manifests.name)

    cluster.store.listen(delete_the_job)
    async with KubeClient(await load_config(cluster.kubeconfig_path)) as client:
        await _create(client, manifests, replace=False)
    await wait_until(lambda: cluster.get("configmaps", manifests.name) is None, "it is collected")
    assert cluster.get("jobs", manifests.name) is None
    assert not orphans(cluster)


@pytest.mark.parametrize(("kind", "writes"), [("job", 2), ("mpi", 4)])
async def test_writes_per_step(
    cluster: FakeCluster, tmp_path: Path, kind: str, writes: int
) -> None:
    # A single-node step: its Job and its ConfigMap. A multi-node one adds its headless
    # Service and its key pair's Secret: four objects, four creates, nothing patched.
    steps = 20
    async with session(cluster, tmp_path) as s:
        cluster.requests.reset()
        handles = await s.submit_many([MAKERS[kind](f"w{i}") for i in range(steps)])
        sent = sum(cluster.request_count(v) for v in ("create", "update", "patch", "delete"))
        created = cluster.request_count("create")
        results = await s.gather(*handles, timeout=60)
    assert all(r.ok for r in results)
    assert sent / steps == writes
    assert created == sent
