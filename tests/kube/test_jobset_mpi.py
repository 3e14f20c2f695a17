"""target: jobset end to end: real MPI across the fake cluster's executing kubelet, the JobSet
emulated as the real controller runs it (k8sjobs.testing.controllers.jobset).

Open MPI and MPICH on 2 and 4 pods: the launcher's Job is created only once the workers'
Job is Ready (dependsOn), every rank runs, a failing rank's exit code is in the step's
message, a restart is counted in the step's events, and a cluster without the JobSet API
refuses the step before anything is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from k8sjobs import Resources, Session, Step, StepState
from k8sjobs.testing import Event, FakeCluster, jobset_crd

from ..local import test_multinode_mpi, test_multinode_mpich
from ..local.test_multinode_mpi import ROOT_OK, ranks
from ..waiting import wait_until

# The programs the Job target's MPI tests build (Debian's Open MPI and MPICH), as fixtures here.
hello = test_multinode_mpi.hello
mpich = test_multinode_mpich.mpich

CRD = "jobsets.jobset.x-k8s.io"


def _established(fake: FakeCluster) -> bool:
    found = fake.store.get("customresourcedefinitions", "", CRD) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@contextlib.asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[tuple[FakeCluster, Session]]:
    """Yield an executing fake cluster with JobSet installed, and a session on it.

    In pytest's own tmp_path: a pod's agent socket (named after its hostname,
    ``<js>-workers-0-<i>``) then has a path past a unix address's 108 bytes, which the
    agent and the readiness probe reach through the socket's directory.
    """
    async with FakeCluster("execute", directory=tmp_path) as cluster:
        cluster.store.create("customresourcedefinitions", "", jobset_crd())
        await wait_until(lambda: _established(cluster), "the JobSet CRD is established")
        kubeconfig = cluster.kubeconfig_path
        async with Session(study="js", backend="kubernetes", kubeconfig=kubeconfig) as s:
            yield cluster, s


def _step(
    program: str, nodes: int, mpi: str, env: dict[str, str], *, then: str = "", **fields: Any
) -> Step:
    extra = "--oversubscribe " if mpi == "openmpi" else ""
    return Step(
        name=f"ring-{mpi}-{nodes}",
        image="debian:12",
        script=f"$(LAUNCHER) {extra}{program}{then}",
        target="jobset",
        mpi=mpi,
        resources=Resources(nodes=nodes, tasks=nodes),
        env={**ROOT_OK, **env},
        walltime=150,
        worker_wait=60,
        **fields,
    )


def _pods_seen(cluster: FakeCluster) -> dict[str, str | None]:
    """Return, for each pod written, when it first turned Ready (None: not yet), kept after
    the pod is gone: on success the workers' Job is deleted with its pods, on a loaded
    machine before the test could read them."""
    ready_at: dict[str, str | None] = {}

    def note(event: Event) -> None:
        if event.resource != "pods":
            return
        name = event.obj["metadata"]["name"]
        ready = [
            c["lastTransitionTime"]
            for c in (event.obj.get("status") or {}).get("conditions") or ()
            if c["type"] == "Ready" and c["status"] == "True"
        ]
        if ready_at.get(name) is None:
            ready_at[name] = ready[0] if ready else None

    cluster.store.listen(note)
    return ready_at


def _ready_before_launcher(
    cluster: FakeCluster, name: str, ready_at: dict[str, str | None]
) -> None:
    """Assert the launcher's Job was created no earlier than every worker pod was Ready."""
    launcher = cluster.get("jobs", f"{name}-launcher-0")
    assert launcher is not None
    created = launcher["metadata"]["creationTimestamp"]
    workers = {n: t for n, t in ready_at.items() if n.startswith(f"{name}-workers-0-")}
    assert workers
    for pod, ready in workers.items():
        assert ready is not None and ready <= created, (pod, ready, created)


@pytest.mark.parametrize("nodes", [2, 4])
async def test_open_mpi_across_the_jobsets_pods(tmp_path: Path, hello: Path, nodes: int) -> None:
    async with running(tmp_path) as (cluster, s):
        seen = _pods_seen(cluster)
        # The launcher waits at a gate once mpirun ended: a worker's log is read while the
        # set runs (on success JobSet deletes the workers' Job, and their pods, at once).
        gate = tmp_path / "gate"
        then = f" && while [ ! -e {gate} ]; do sleep 0.1; done"
        handle = await s.submit(_step(str(hello), nodes, "openmpi", {}, then=then))

        async def all_ranks() -> bool:
            return len(ranks(await handle.logs())) == nodes or handle.done

        await wait_until(all_ranks, "every rank's line in the launcher's log", timeout=200)
        # A worker's log is reachable by its host index (host 0 is the launcher).
        assert "rank" not in await handle.logs(index=1)
        gate.touch()
        result = await handle.wait(timeout=200)
        log = await handle.logs()
        assert result.state is StepState.SUCCEEDED, (result.describe(), log)
        found = ranks(log)
        assert [r[0] for r in found] == list(range(nodes))
        assert {r[1] for r in found} == {nodes} and {r[2] for r in found} == {nodes}
        _ready_before_launcher(cluster, handle.object_name, seen)


@pytest.mark.parametrize("nodes", [2, 4])
async def test_mpich_across_the_jobsets_pods(
    tmp_path: Path, mpich: tuple[Path, dict[str, str]], nodes: int
) -> None:
    program, path = mpich
    async with running(tmp_path) as (cluster, s):
        seen = _pods_seen(cluster)
        handle = await s.submit(_step(str(program), nodes, "mpich", path))
        result = await handle.wait(timeout=200)
        log = await handle.logs()
        assert result.state is StepState.SUCCEEDED, (result.describe(), log)
        assert [r[0] for r in ranks(log)] == list(range(nodes))
        _ready_before_launcher(cluster, handle.object_name, seen)


async def test_a_failing_rank_fails_the_step_with_its_exit_code_after_a_restart(
    tmp_path: Path, hello: Path
) -> None:
    step = _step(str(hello), 2, "openmpi", {"FAIL_RANK": "1"}, retries=1)
    async with running(tmp_path) as (_, s):
        handle = await s.submit(step)
        result = await handle.wait(timeout=300)
    assert result.state is StepState.FAILED, result.describe()
    assert result.exit_code == 3, result.describe()
    assert "replicated Job launcher (pod " in result.message, result.message
    assert "exited with code 3" in result.message and "after 1 restart" in result.message
    restarts = [e for e in handle.events if e.reason == "Restarted"]
    assert len(restarts) == 1, list(handle.events)
