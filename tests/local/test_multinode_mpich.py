"""Multi-node steps with a real MPICH (Debian's mpich 4): one Hydra mpiexec across the "nodes".

The same hello world as the Open MPI tests (test_multinode_mpi.py), built with
``mpicc.mpich``, in a step with ``mpi: mpich``. Debian installs MPICH beside Open MPI (its
``mpiexec`` alternative stays Open MPI's), so the step's PATH starts with a directory whose
``mpiexec`` is MPICH's Hydra, as in an MPICH image. Hydra starts one ``hydra_pmi_proxy`` per
node through the remote shell (here the local agent, which, like a worker's sshd, answers
on port 2222 only: Hydra must be handed the step's ssh arguments), and the proxy forks the
ranks. Hydra passes every rank the launcher's environment and working directory (its
default, ``-genvall``), so here the ranks show where they ran by their parent, the proxy
of their node.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from k8sjobs import Resources, Session, Step, StepResult, StepState
from k8sjobs.local import LocalBackend
from k8sjobs.local._keeper import descendants
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .test_multinode_mpi import HELLO_C, RANK_LINE, until_logged, worker_pid


@pytest.fixture(scope="module")
def mpich(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Return the hello world built with MPICH, and the env that makes mpiexec MPICH's."""
    directory = tmp_path_factory.mktemp("mpich")
    (directory / "hello.c").write_text(HELLO_C)
    subprocess.run(
        ["mpicc.mpich", "-o", "hello", "hello.c"], cwd=directory, check=True, timeout=120
    )
    # A script, not a symlink: Hydra finds hydra_pmi_proxy beside the path it was run by.
    (directory / "bin").mkdir()
    mpiexec = directory / "bin" / "mpiexec"
    mpiexec.write_text('#!/bin/sh\nexec /usr/bin/mpiexec.hydra "$@"\n')
    mpiexec.chmod(0o755)
    return directory / "hello", {"PATH": f"{directory / 'bin'}:{os.environ['PATH']}"}


def mpich_step(mpich: tuple[Path, dict[str, str]], **env: str) -> Step:
    """Return a 2 nodes x 2 tasks ``mpi: mpich`` step that runs the hello world."""
    hello, path = mpich
    return Step(
        name="hello",
        image="debian:12",
        script=f"$(LAUNCHER) {hello}",
        resources=Resources(nodes=2, tasks=4),
        mpi="mpich",
        env={**path, **env},
        walltime=120,
        worker_wait=60,
    )


@pytest.fixture(params=["local", "fake cluster"])
async def where(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Where]:
    """Yield a session on the local backend, then on the fake cluster in execute mode."""
    if request.param == "local":
        backend = LocalBackend(state_dir=tmp_path / "state", cpu=8, kill_grace=1.0)
        async with Session(study="mpich", backend=backend) as s:
            yield Where(s, tmp_path / "state")
        return
    (tmp_path / "cluster").mkdir()
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster") as cluster,
        Session(study="mpich", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        yield Where(s, tmp_path / "cluster")


@dataclass
class Where:
    """A session, and the directory under which its pods' sandboxes are."""

    session: Session
    pods: Path


def by_parent(log: str) -> dict[int, list[int]]:
    """Return the ranks the hello world printed, by their parent: the node's Hydra proxy."""
    found: dict[int, list[int]] = {}
    for match in RANK_LINE.finditer(log):
        found.setdefault(int(match[5]), []).append(int(match[1]))
    return {parent: sorted(ranks) for parent, ranks in found.items()}


def assert_hello_ran(result: StepResult, log: str) -> None:
    """Assert 4 distinct ranks of size 4 ran, started 2 by 2 by two proxies (two nodes)."""
    assert result.state is StepState.SUCCEEDED, (result.describe(), log)
    assert result.exit_code == 0
    lines = [tuple(int(x) for x in m.groups()[:3]) for m in RANK_LINE.finditer(log)]
    assert sorted(lines) == [(rank, 4, 4) for rank in range(4)], log
    assert sorted(by_parent(log).values()) == [[0, 1], [2, 3]], log


def command_line(pid: int) -> bytes:
    """Return a live process's command line."""
    return Path(f"/proc/{pid}/cmdline").read_bytes()


async def test_mpich_hello_world_across_two_nodes(
    where: Where, mpich: tuple[Path, dict[str, str]]
) -> None:
    handle = await where.session.submit(mpich_step(mpich))
    result = await handle.wait(timeout=150)
    assert_hello_ran(result, await handle.logs())


async def test_an_mpich_rank_exiting_3_fails_the_step_with_exit_code_3(
    where: Where, mpich: tuple[Path, dict[str, str]]
) -> None:
    handle = await where.session.submit(mpich_step(mpich, FAIL_RANK="2"))
    result = await handle.wait(timeout=150)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)


# Local only: on the fake cluster, as on a real one, the launcher's failed pod may reach the
# API server before the killed worker's, and the job controller then deletes that worker as
# if it were still running; judge() cannot tell it died first, and blames exit code 255.
@pytest.mark.parametrize("where", ["local"], indirect=True)
async def test_a_worker_killed_under_mpich_fails_the_step_naming_its_index(
    where: Where, mpich: tuple[Path, dict[str, str]]
) -> None:
    handle = await where.session.submit(mpich_step(mpich, HANG="1"))
    await until_logged(handle, lambda log: len(RANK_LINE.findall(log)) == 4)
    worker = worker_pid(where.pods, handle)
    # Ranks 2 and 3 were started by a Hydra proxy that runs in the worker's pod.
    (proxy,) = (p for p, ranks in by_parent(await handle.logs()).items() if ranks == [2, 3])
    assert proxy in descendants(worker)
    assert b"hydra_pmi_proxy" in command_line(proxy)
    os.killpg(worker, signal.SIGKILL)
    result = await handle.wait(timeout=30)
    # mpiexec gives up within the same second: the worker, which died first, is blamed.
    assert (result.state, result.reason) == (StepState.FAILED, "WorkerFailed"), result.describe()
    assert "worker index 1" in result.message
    # The ranks left the worker's session (Hydra starts each in its own), yet the pod's
    # keeper, their subreaper, ends them with the pod.
    await wait_until(lambda: not descendants(worker) and not Path(f"/proc/{proxy}").exists())
