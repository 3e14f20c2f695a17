"""Multi-node steps with a real Open MPI: one mpirun across the local "nodes" of a step.

The step is rendered as for a cluster (launch: ssh): index 0 runs the script, the workers
serve the local agent in place of sshd, and mpirun starts one daemon per index through it.
Every MPI run is bounded by the step's walltime and by the wait's timeout; the hello world
oversubscribes (2 nodes x 2 tasks on a 2-core machine).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from k8sjobs import Resources, Session, Step, StepHandle, StepState
from k8sjobs.local import LocalBackend
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until

HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* Each rank says who it is; the allreduce makes the ranks of both "nodes" talk. */
int main(int argc, char **argv) {
    int rank, size, one = 1, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *index = getenv("JOB_COMPLETION_INDEX");
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    printf("rank %d size %d sum %d index %s ppid %d cwd %s\n", rank, size, sum, index ? index : "-",
           (int)getppid(), cwd);
    fflush(stdout);
    const char *fail = getenv("FAIL_RANK");
    int code = fail && atoi(fail) == rank ? 3 : 0;
    if (getenv("HANG")) sleep(600);
    MPI_Finalize();
    return code;
}
"""
# Open MPI refuses to run as root unless told twice (CI runs the tests as root).
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
RANK_LINE = re.compile(
    r"^rank (\d+) size (\d+) sum (\d+) index (\d+) ppid (\d+) cwd (.*)$", re.MULTILINE
)


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a compiled MPI hello world (mpicc, from Debian's libopenmpi-dev)."""
    directory = tmp_path_factory.mktemp("mpi")
    (directory / "hello.c").write_text(HELLO_C)
    subprocess.run(["mpicc", "-o", "hello", "hello.c"], cwd=directory, check=True, timeout=120)
    return directory / "hello"


def mpi_step(hello: Path, **env: str) -> Step:
    """Return a 2 nodes x 2 tasks step that runs ``hello`` through $(LAUNCHER)."""
    return Step(
        name="hello",
        image="debian:12",
        script=f"$(LAUNCHER) --oversubscribe {hello}",
        resources=Resources(nodes=2, tasks=4),
        env={**ROOT_OK, **env},
        walltime=120,
        worker_wait=60,
    )


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    # Room for 2 pods of 2 cores each: the machine may have fewer, mpirun oversubscribes.
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=8, kill_grace=1.0)
    async with Session(study="mpi", backend=backend) as s:
        yield s


def ranks(log: str) -> list[tuple[int, ...]]:
    """Return (rank, size, allreduce sum, index) of each line the hello world printed."""
    return sorted(tuple(int(x) for x in m.groups()[:4]) for m in RANK_LINE.finditer(log))


def directories(log: str) -> dict[int, set[str]]:
    """Return the working directories the ranks of each index printed."""
    found: dict[int, set[str]] = {}
    for match in RANK_LINE.finditer(log):
        found.setdefault(int(match[4]), set()).add(match[6])
    return found


async def test_hello_world_across_two_local_nodes(session: Session, hello: Path) -> None:
    handle = await session.submit(mpi_step(hello))
    result = await handle.wait(timeout=150)
    log = await handle.logs()
    assert result.state is StepState.SUCCEEDED, (result.describe(), log)
    assert result.exit_code == 0
    found = ranks(log)
    assert [r[0] for r in found] == [0, 1, 2, 3]  # four distinct ranks
    assert {r[1] for r in found} == {4} and {r[2] for r in found} == {4}
    # Two ranks per "node", each started in its own index's environment.
    assert sorted(r[3] for r in found) == [0, 0, 1, 1]
    # mpirun sends the launcher's /work; each rank runs in its own index's, as in its pod.
    for index, cwds in directories(log).items():
        (cwd,) = cwds
        assert f"/{handle.object_name}-{index}-" in cwd and cwd.endswith("/volumes/work"), cwd


async def test_a_rank_exiting_3_fails_the_step_with_exit_code_3(
    session: Session, hello: Path
) -> None:
    handle = await session.submit(mpi_step(hello, FAIL_RANK="2"))
    result = await handle.wait(timeout=150)
    assert result.state is StepState.FAILED, result.describe()
    assert result.exit_code == 3
    assert result.reason == "ExitCode"


async def test_a_worker_killed_mid_run_fails_the_step_naming_its_index(
    session: Session, hello: Path, tmp_path: Path
) -> None:
    handle = await session.submit(mpi_step(hello, HANG="1"))
    # Wait until the ranks run on both nodes (their lines are printed before the hang).
    await until_logged(handle, lambda log: len(ranks(log)) == 4)
    worker = worker_pid(tmp_path / "state", handle)
    # mpirun's daemon for that node runs inside the worker's session (not daemonized away).
    commands = session_commands(worker)
    assert any(b"orted" in command for command in commands), commands
    os.killpg(worker, signal.SIGKILL)
    result = await handle.wait(timeout=30)
    assert result.state is StepState.FAILED
    assert result.reason == "WorkerFailed", result.describe()
    assert "worker index 1" in result.message
    # The daemons mpirun started on that worker die with it (the pod's session is swept).
    await wait_until(lambda: not session_commands(worker), "its mpirun daemons are gone")


async def until_logged(
    handle: StepHandle, condition: Callable[[str], bool], timeout: float = 120
) -> None:
    """Return once the step's log satisfies ``condition``; fail at once if the step ends first."""

    async def satisfied() -> bool:
        if condition(await handle.logs()):
            return True
        assert not handle.done, handle.result.describe()
        return False

    await wait_until(satisfied, "the step's log shows it", timeout=timeout)


def worker_pid(state: Path, handle: StepHandle) -> int:
    """Return index 1's container process (its group leader): the agent server, which
    writes its pid where sshd would, for the workers' readiness probe."""
    found = list((state / "pods").glob(f"*/{handle.object_name}-1-*/volumes/sshd/sshd.pid"))
    assert len(found) == 1, found
    return int(found[0].read_text())


async def test_hello_world_on_the_fake_cluster_in_execute_mode(tmp_path: Path, hello: Path) -> None:
    (tmp_path / "cluster").mkdir()
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster") as cluster,
        Session(study="mpi", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        handle = await s.submit(mpi_step(hello))
        result = await handle.wait(timeout=150)
        log = await handle.logs()
        # The program's output is the launcher's alone (index 0), the default.
        assert log == await handle.logs(index=0)
        assert log in await handle.logs(container="step")
    assert result.state is StepState.SUCCEEDED, (result.describe(), log)
    assert result.exit_code == 0
    found = ranks(log)
    assert [r[0] for r in found] == [0, 1, 2, 3]
    assert {r[1] for r in found} == {4} and {r[2] for r in found} == {4}
    assert sorted(r[3] for r in found) == [0, 0, 1, 1]


def session_commands(session_id: int) -> list[bytes]:
    """Return the command lines of a session's live processes (as the runner finds them)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == session_id:
                found.append((stat.parent / "cmdline").read_bytes())
        except OSError:
            continue  # it ended while we looked
    return found


async def test_a_rank_exiting_3_on_the_fake_cluster_fails_the_step_with_3(
    tmp_path: Path, hello: Path
) -> None:
    (tmp_path / "cluster").mkdir()
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster") as cluster,
        Session(study="mpi", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        handle = await s.submit(mpi_step(hello, FAIL_RANK="2"))
        result = await handle.wait(timeout=150)
    assert (result.state, result.reason, result.exit_code) == (StepState.FAILED, "ExitCode", 3)


async def test_a_worker_killed_on_the_fake_cluster_fails_the_step_naming_its_index(
    tmp_path: Path, hello: Path
) -> None:
    (tmp_path / "cluster").mkdir()
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster") as cluster,
        Session(study="mpi", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        handle = await s.submit(mpi_step(hello, HANG="1"))
        await until_logged(handle, lambda log: len(ranks(log)) == 4)
        (pid_file,) = (tmp_path / "cluster").glob(
            f"**/{handle.object_name}-1-*/volumes/sshd/sshd.pid"
        )
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        result = await handle.wait(timeout=30)
    assert (result.state, result.reason) == (StepState.FAILED, "WorkerFailed"), result.describe()
    assert "worker index 1" in result.message
