"""The local remote shell between a step's indexes: a real worker pod, a real client.

A worker pod (hostname ``job-1``, subdomain ``job``) runs the agent server through the
PodRunner, as the role wrapper runs it; the client is started as mpirun starts ssh, with
the environment a launcher pod (``job-0``) gets.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.local import PodRunner, agent
from k8sjobs.usage import split_message

from ..waiting import wait_until
from .processes import alive

LABEL = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


def pod(index: int, command: str, *, namespace: str = "default") -> dict[str, Any]:
    """Return pod ``job-<index>`` of a two-node step, running ``command`` with /bin/sh."""
    return {
        "metadata": {"name": f"job-{index}-abcde", "namespace": namespace},
        "spec": {
            "hostname": f"job-{index}",
            "subdomain": "job",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "step",
                    "image": "debian:12",
                    "command": ["/bin/sh", "-c", command],
                    "env": [{"name": "W", "value": "/work"}],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                    "workingDir": "/work",
                }
            ],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }


class Worker:
    """A running worker pod serving the agent, and how to reach it as the launcher."""

    def __init__(self, runner: PodRunner) -> None:
        self.runner = runner
        self.statuses: list[dict[str, Any]] = []

    def launcher_env(self) -> dict[str, str]:
        """Return the environment pod ``job-0`` gets (where mpirun runs the client)."""
        sandbox = self.runner.sandbox("default", "job-0-abcde")
        return {
            "PATH": os.defpath,
            "HOME": str(sandbox / "home"),
            "HOSTNAME": "job-0",
            **agent.pod_env(pod(0, "true"), sandbox),
        }

    async def ssh(self, *argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
        """Run the client as mpirun would (``k8sjobs-rsh [options] HOST COMMAND``)."""
        env = self.launcher_env()
        process = await asyncio.create_subprocess_exec(
            env["OMPI_MCA_plm_rsh_agent"],
            *argv,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin), 60)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


@pytest.fixture(params=["short", "long"])
async def worker(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Worker]:
    # A socket's path must fit 108 bytes; a deeper state directory goes through /proc/self/fd.
    root = tmp_path / "pods" if request.param == "short" else tmp_path / ("d" * 120) / "pods"
    runner = PodRunner(root, kill_grace=1.0)
    serving = Worker(runner)
    task = asyncio.create_task(
        runner.run(
            pod(1, "exec $K8SJOBS_WORKER_SERVE"),
            configmap=lambda name: {},
            secret=lambda name: {},
            on_status=serving.statuses.append,
            extra_env={"JOB_COMPLETION_INDEX": "1"},
        )
    )
    async with asyncio.timeout(60):  # the launcher's wait, as the role wrapper does it
        while (await serving.ssh("--check", "job-1.job.default.svc"))[0] != 0:
            assert not task.done(), serving.statuses[-1:]
            await asyncio.sleep(0.1)
    yield serving
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_command_runs_in_the_worker_environment_with_its_streams_and_exit_code(
    worker: Worker,
) -> None:
    script = 'echo "$HOSTNAME $JOB_COMPLETION_INDEX"; pwd; cat; echo oops >&2; exit 7'
    options = ["-p", "2222", "-i", "/root/.ssh/id_ed25519", "-o", "StrictHostKeyChecking=no"]
    code, out, err = await worker.ssh(
        *options, "-x", "job-1.job.default.svc", script, stdin=b"from stdin\n"
    )
    home = worker.runner.sandbox("default", "job-1-abcde") / "home"
    assert (code, err) == (7, "oops\n")
    # sshd starts a command in the user's home: the worker's own, not the launcher's.
    assert out.splitlines() == ["job-1 1", str(home), "from stdin"]


async def test_paths_into_the_launcher_sandbox_become_the_worker_own(worker: Worker) -> None:
    launcher = worker.runner.sandbox("default", "job-0-abcde")
    target = worker.runner.sandbox("default", "job-1-abcde")
    # mpirun passes paths from its own environment: $W is index 0's /work, here.
    code, out, _ = await worker.ssh("-p2222", "job-1.job", f"echo {launcher}/volumes/work/x")
    assert (code, out) == (0, f"{target}/volumes/work/x\n")


async def test_only_this_user_can_reach_the_sockets(worker: Worker) -> None:
    agents = Path(worker.launcher_env()["K8SJOBS_AGENT_DIR"])
    assert [mode(agents), mode(agents / "default")] == [0o700, 0o700]


async def test_an_unknown_host_is_exit_255_as_ssh_says_it(worker: Worker) -> None:
    code, out, err = await worker.ssh("job-7.job.default.svc", "true")
    assert (code, out) == (255, "")
    assert "Could not resolve hostname job-7.job.default.svc" in err
    code, _, err = await worker.ssh("--check", "job-1.job.other.svc")
    assert code == 255 and "job-1.job.other.svc" in err  # another namespace's job-1


async def test_the_own_pod_runs_the_command_in_place(worker: Worker) -> None:
    code, out, _ = await worker.ssh("-p", "2222", "job-0.job.default.svc", "echo $HOSTNAME")
    assert (code, out) == (0, "job-0\n")


async def test_a_command_stops_when_its_client_goes(worker: Worker, tmp_path: Path) -> None:
    pid_file = tmp_path / "remote.pid"
    env = worker.launcher_env()
    client = await asyncio.create_subprocess_exec(
        env["OMPI_MCA_plm_rsh_agent"],
        "-oPort=2222",
        "job-1",
        f"echo $$ > {pid_file}; exec sleep 600",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
    )
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    remote = int(pid_file.read_text())
    assert alive(remote)
    client.kill()
    await client.wait()
    await wait_until(lambda: not alive(remote))


async def test_the_server_writes_its_pid_where_sshd_would(tmp_path: Path) -> None:
    sshd = tmp_path / "sshd"
    sshd.mkdir()
    runner = PodRunner(tmp_path / "pods", kill_grace=1.0)
    env = {"JOB_COMPLETION_INDEX": "1", "K8SJOBS_SSHD_DIR": str(sshd)}
    statuses: list[dict[str, Any]] = []
    task = asyncio.create_task(
        runner.run(
            pod(1, "exec $K8SJOBS_WORKER_SERVE"),
            configmap=lambda name: {},
            secret=lambda name: {},
            on_status=statuses.append,
            extra_env=env,
        )
    )
    await wait_until(
        lambda: (sshd / "sshd.pid").exists() and alive(int((sshd / "sshd.pid").read_text()))
    )
    pid = int((sshd / "sshd.pid").read_text())
    # The readiness probe's check: the pid file is there once the socket listens.
    assert statuses[-1]["containerStatuses"][0]["containerID"] == f"local://{pid}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(pid)


def test_pods_of_single_node_steps_get_no_agent(tmp_path: Path) -> None:
    single = pod(0, "true")
    del single["spec"]["subdomain"]
    assert agent.pod_env(single, tmp_path / "default" / "p") == {}


@given(
    host=LABEL,
    service=LABEL,
    namespace=LABEL,
    own=LABEL,
    suffix=st.sampled_from(["", ".cluster.local", "."]),
)
def test_a_host_name_resolves_to_its_pod_and_namespace(
    host: str, service: str, namespace: str, own: str, suffix: str
) -> None:
    assert agent.resolve(f"{host}.{service}.{namespace}.svc{suffix}", own) == (host, namespace)
    assert agent.resolve(f"root@{host}.{service}", own) == (host, own)
    assert agent.resolve(host, own) == (host, own)


@given(
    options=st.lists(
        st.sampled_from(
            [
                ["-p", "2222"],
                ["-p2222"],
                ["-p", "22"],
                ["-xp", "2200"],
                ["-o", "Port=2222"],
                ["-oPort=22"],
                ["-o", "Port 2201"],
                ["-x"],
                ["-q"],
                ["-o", "LogLevel=ERROR"],
                ["-i", "/k"],
                ["-T"],
            ]
        ),
        max_size=6,
    ),
    words=st.lists(
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1),
        min_size=0,
        max_size=4,
    ),
)
def test_ssh_options_are_taken_and_the_first_port_kept(
    options: list[list[str]], words: list[str]
) -> None:
    argv = [word for option in options for word in option]
    ports = [port for option in options for port in [_port_of(option)] if port is not None]
    expected = ports[0] if ports else 22  # ssh keeps the first; its default is 22
    assert agent.parse_ssh([*argv, "job-1.job", *words]) == ("job-1.job", words, expected)


def _port_of(option: list[str]) -> int | None:
    """Return the port one ssh option sets (the test's own reading of ssh(1))."""
    text = "".join(option).replace("=", "").replace(" ", "")
    for prefix in ("-xp", "-p", "-oPort"):
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            return int(text[len(prefix) :])
    return None


async def test_a_worker_is_refused_on_any_port_but_2222(worker: Worker) -> None:
    # Without -p, ssh goes to port 22, where no worker listens: the MPI was not handed
    # the step's ssh arguments, which on a cluster fails the same way.
    for options in ([], ["-p", "22"], ["-o", "Port=2200", "-p", "2222"]):
        code, out, err = await worker.ssh(*options, "job-1.job.default.svc", "echo reached")
        assert (code, out) == (255, ""), options
        assert "Connection refused" in err and "2222" in err
    code, out, _ = await worker.ssh("-o", "Port 2222", "-p", "22", "job-1.job", "echo reached")
    assert (code, out) == (0, "reached\n")


def mode(path: Path) -> int:
    """Return a file's permission bits."""
    return path.stat().st_mode & 0o777


async def test_the_role_wrapper_termination_message_is_read_back(tmp_path: Path) -> None:
    runner = PodRunner(tmp_path / "pods", kill_grace=1.0)
    message = "WorkersUnreachable: worker x did not answer"
    script = f'printf "{message}\\n" > "$K8SJOBS_TERMINATION_LOG"; exit 1'
    final = await runner.run(
        pod(0, script),
        configmap=lambda name: {},
        secret=lambda name: {},
        on_status=lambda status: None,
    )
    terminated = final["containerStatuses"][0]["state"]["terminated"]
    own, usage = split_message(terminated["message"])  # the runner adds what the step used
    assert (terminated["exitCode"], own) == (1, message)
    assert usage is not None
