"""pods/exec on the fake cluster, over real HTTP and WebSocket, run by the executing kubelet.

The client (k8sjobs.kube.exec) against the fake API server for each behaviour the real one
has (shared/k8s-reference/exec-websocket.json), plus what a pool of agents leans on: a
long-lived stream, a pod deleted under an exec, the fault that cuts streams, 100 at once.
Some checks read the raw frames with a bare aiohttp WebSocket, below the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from k8sjobs.errors import ApiError, NotFound, ServerUnavailable
from k8sjobs.kube.client import PODS, ClientOptions, KubeClient
from k8sjobs.kube.config import ClusterConfig, load_config
from k8sjobs.kube.exec import (
    STDERR,
    STDOUT,
    V4,
    V5,
    ExecStream,
    ExecStreamBroken,
    open_exec,
)
from k8sjobs.testing import FakeCluster, KubeletConfig

from .conftest import FAST, wait_until

NS = "default"


@pytest_asyncio.fixture
async def fake(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """An executing fake cluster."""
    kubelet = KubeletConfig(kill_grace=0.5, schedule_delay=0.001, start_delay=0.005)
    async with FakeCluster(
        "execute", directory=tmp_path, controller=FAST, kubelet_config=kubelet
    ) as cluster:
        yield cluster


@pytest_asyncio.fixture
async def kube(fake: FakeCluster) -> AsyncIterator[KubeClient]:
    """A KubeClient on the fake API server."""
    async with KubeClient(ClusterConfig(host=fake.url), ClientOptions(timeout=10)) as client:
        yield client


def _pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "command": command,
        "env": [{"name": "GREETING", "value": "hi from main"}],
        "workingDir": "/work",
        "volumeMounts": [{"name": "w", "mountPath": "/work"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [container],
            "volumes": [{"name": "w", "emptyDir": {}}],
            "restartPolicy": "Never",
            **spec,
        },
    }


def _phase(fake: FakeCluster, name: str) -> str:
    pod = fake.get("pods", name) or {}
    return str((pod.get("status") or {}).get("phase", ""))


def _running(fake: FakeCluster, name: str) -> bool:
    pod = fake.get("pods", name) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


async def _held(kube: KubeClient, fake: FakeCluster, name: str = "held") -> None:
    """Create a pod whose container writes /work/f and then sleeps; wait until it runs."""
    command = ["sh", "-c", "echo data > f; exec sleep 600"]
    await kube.create(PODS, NS, _pod(name, command))
    await wait_until(lambda: _running(fake, name), f"pod {name} running")
    work = fake.kubelet._runner.sandbox(NS, name)
    await wait_until(lambda: any(work.rglob("f")), f"pod {name} wrote f")


async def _drain(stream: ExecStream) -> list[tuple[int, bytes]]:
    async with asyncio.timeout(20):
        return [chunk async for chunk in stream]


def _alive(pid: int) -> bool:
    """Return whether the process runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


async def test_exec_runs_in_the_containers_environment(kube: KubeClient, fake: FakeCluster) -> None:
    await _held(kube, fake)
    before = fake.request_count("create", "pods", "exec")
    stream = await open_exec(kube, NS, "held", ["sh", "-c", "echo $GREETING; pwd"], stdin=False)
    assert stream.protocol == V5
    out = b"".join(data for _, data in await _drain(stream)).decode().splitlines()
    assert out[0] == "hi from main"
    assert out[1] != "/work" and (Path(out[1]) / "f").read_text() == "data\n"
    # The command's words go through the container's path rule: /work is its volume.
    cat = await open_exec(kube, NS, "held", ["cat", "/work/f"], container="main", stdin=False)
    assert await _drain(cat) == [(STDOUT, b"data\n")]
    assert cat.status is not None and cat.status.ok
    assert fake.request_count("create", "pods", "exec") == before + 2  # audited as writes


async def test_stdin_exit_codes_signals_missing_binary_v5_and_v4(
    kube: KubeClient, fake: FakeCluster
) -> None:
    await _held(kube, fake)
    cat = await open_exec(kube, NS, "held", ["cat"])
    await cat.write(b"hello\n")
    assert await cat.close_stdin()
    assert await _drain(cat) == [(STDOUT, b"hello\n")]
    assert cat.status is not None and cat.status.body == {"metadata": {}, "status": "Success"}

    three = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    failed = await open_exec(kube, NS, "held", three, stdin=False)
    assert sorted(await _drain(failed)) == [(STDOUT, b"out\n"), (STDERR, b"err\n")]
    assert failed.status is not None and failed.status.exit_code == 3
    assert failed.status.message == (
        "command terminated with non-zero exit code: command terminated with exit code 3"
    )

    v4 = await open_exec(
        kube, NS, "held", ["sh", "-c", "echo v4; exit 3"], stdin=False, protocols=[V4]
    )
    assert v4.protocol == V4 and not await v4.close_stdin()
    assert await _drain(v4) == [(STDOUT, b"v4\n")]
    assert v4.status is not None and v4.status.exit_code == 3
    assert v4.status.message == (
        "command terminated with non-zero exit code: error executing command "
        "[sh -c echo v4; exit 3], exit code 3"
    )
    assert "metadata" not in v4.status.body

    killed = await open_exec(kube, NS, "held", ["sh", "-c", "kill -9 $$"], stdin=False)
    assert (await killed.wait()).exit_code == 137

    missing = await open_exec(kube, NS, "held", ["no-such-binary"], stdin=False)
    status = await missing.wait()
    assert status.reason == "InternalError" and status.exit_code is None
    assert status.message.startswith("Internal error occurred: Internal error occurred: ")
    assert status.message.endswith('exec: "no-such-binary": executable file not found in $PATH')
    assert status.body["code"] == 500
    # A file that is not executable: named as the container sees it, in runc's words.
    denied = await open_exec(kube, NS, "held", ["/work/f"], stdin=False)
    status = await denied.wait()
    assert status.reason == "InternalError"
    assert status.message.endswith('exec: "/work/f": permission denied')


async def test_refusals_before_the_upgrade(kube: KubeClient, fake: FakeCluster) -> None:
    await _held(kube, fake)
    with pytest.raises(NotFound, match='pods "nope" not found'):
        await open_exec(kube, NS, "nope", ["true"])
    with pytest.raises(ApiError, match="container nope is not valid for pod held") as bad:
        await open_exec(kube, NS, "held", ["true"], container="nope")
    assert bad.value.status == 400
    pending = _pod("pending", ["true"], nodeSelector={"no-such": "node"})
    await kube.create(PODS, NS, pending)
    with pytest.raises(ApiError, match="pod pending does not have a host assigned") as early:
        await open_exec(kube, NS, "pending", ["true"])
    assert early.value.status == 400
    await kube.create(PODS, NS, _pod("done", ["true"]))
    await wait_until(lambda: _phase(fake, "done") == "Succeeded", "pod done succeeded")
    with pytest.raises(ServerUnavailable, match=r'container not found \("main"\)') as ended:
        await open_exec(kube, NS, "done", ["true"])
    assert ended.value.status == 500
    url = f"{fake.url}/api/v1/namespaces/{NS}/pods/done/exec"
    params = [("command", "true"), ("stdout", "true")]
    async with kube.session().get(url, params=params) as response:
        assert response.status == 400
        assert (await response.json())["message"] == "Upgrade request required"


async def test_raw_frames_bare_first_frame_32k_frames_and_the_1006_drop(
    kube: KubeClient, fake: FakeCluster
) -> None:
    await _held(kube, fake)
    url = f"{fake.url}/api/v1/namespaces/{NS}/pods/held/exec"
    big = [("command", "sh"), ("command", "-c"), ("command", "head -c 1048576 /dev/zero")]
    session = kube.session()
    async with session.ws_connect(url, params=[*big, ("stdout", "true")], protocols=[V5, V4]) as ws:
        assert ws.protocol == V5
        frames = []
        while (message := await ws.receive(timeout=20)).type is aiohttp.WSMsgType.BINARY:
            frames.append(message.data)
        assert message.type is aiohttp.WSMsgType.CLOSED and ws.close_code == 1006
    assert frames[0] == b"\x01"  # the bare channel byte first
    stdout = [f for f in frames if f[0] == 1]
    assert sum(len(f) - 1 for f in stdout) == 1048576
    assert max(len(f) for f in stdout) <= 32 * 1024 + 1
    assert frames[-1] == b'\x03{"metadata":{},"status":"Success"}'
    # No subprotocol offered: upgraded all the same, an empty header, then a close 1000.
    plain = [("command", "true"), ("stdout", "true"), ("stderr", "true")]
    async with session.ws_connect(url, params=plain) as ws:
        assert ws.protocol is None
        assert ws._response.headers["Sec-WebSocket-Protocol"] == ""
        assert (await ws.receive(timeout=10)).data == b"\x01"
        assert (await ws.receive(timeout=10)).type is aiohttp.WSMsgType.CLOSE
        assert ws.close_code == 1000


async def test_a_long_lived_stream_echoes_stdin_for_a_while(
    kube: KubeClient, fake: FakeCluster
) -> None:
    await _held(kube, fake)
    stream = await open_exec(kube, NS, "held", ["cat"], heartbeat=0.2, read_idle=10)
    for i in range(150):
        line = f"line {i}\n".encode()
        await stream.write(line)
        got = b""
        while len(got) < len(line):  # cat answers each line before the next is sent
            chunk = await stream.read()
            assert chunk is not None
            got += chunk[1]
        assert got == line
        await asyncio.sleep(0.01)  # pacing: the stream lives a few seconds, pinged
    await stream.close_stdin()
    assert (await stream.wait()).ok


async def test_the_command_is_killed_when_the_stream_closes_or_the_pod_goes(
    kube: KubeClient, fake: FakeCluster
) -> None:
    await _held(kube, fake)
    words = ["sh", "-c", "echo $$; exec sleep 600"]

    async def started() -> tuple[ExecStream, int]:
        stream = await open_exec(kube, NS, "held", words, stdin=False)
        chunk = await stream.read()
        assert chunk is not None and chunk[0] == STDOUT
        pid = int(chunk[1])
        assert _alive(pid)
        return stream, pid

    closed, pid = await started()
    await closed.aclose()
    await wait_until(lambda: not _alive(pid), "the exec'd sleep killed with its stream")

    running, pid = await started()
    await kube.delete(PODS, NS, "held", propagation="Background")
    status = await asyncio.wait_for(running.wait(), 20)
    assert status.exit_code == 137  # killed with the pod's containers
    assert not _alive(pid)
    await wait_until(lambda: fake.get("pods", "held") is None, "the pod gone")


async def test_the_fault_cuts_streams_without_a_status(kube: KubeClient, fake: FakeCluster) -> None:
    await _held(kube, fake, "held")
    await _held(kube, fake, "other")
    cut = [await open_exec(kube, NS, "held", ["cat"]) for _ in range(2)]
    kept = await open_exec(kube, NS, "other", ["cat"])
    assert fake.faults.cut_exec_streams(pod="held") == 2
    for stream in cut:
        with pytest.raises(ExecStreamBroken, match="before the command's status"):
            await asyncio.wait_for(stream.read(), 10)
        assert stream.status is None
    await kept.write(b"still here\n")
    assert await asyncio.wait_for(kept.read(), 10) == (STDOUT, b"still here\n")
    assert fake.faults.cut_exec_streams() == 1
    with pytest.raises(ExecStreamBroken):
        await asyncio.wait_for(kept.read(), 10)
    assert fake.get("pods", "held") is not None and _running(fake, "held")  # pods go on
    await wait_until(lambda: len(fake.server.exec_sessions) == 0, "no open exec left")


async def test_a_hundred_concurrent_execs(kube: KubeClient, fake: FakeCluster) -> None:
    await _held(kube, fake)
    before = fake.request_count("create", "pods", "exec")

    async def one(i: int) -> tuple[list[tuple[int, bytes]], int | None]:
        stream = await open_exec(
            kube, NS, "held", ["sh", "-c", f"echo {i}; exit {i % 4}"], stdin=False
        )
        chunks = await _drain(stream)
        assert stream.status is not None
        return chunks, stream.status.exit_code

    results = await asyncio.gather(*(one(i) for i in range(100)))
    assert [r for r in results] == [([(STDOUT, f"{i}\n".encode())], i % 4) for i in range(100)]
    assert fake.request_count("create", "pods", "exec") == before + 100
    assert len(fake.server.exec_sessions) == 0


async def test_a_simulating_cluster_refuses_exec_with_the_reason(tmp_path: Path) -> None:
    async with (
        FakeCluster(directory=tmp_path, controller=FAST) as sim,
        KubeClient(ClusterConfig(host=sim.url)) as kube,
    ):
        pod = _pod("sim", ["sleep", "600"])
        pod["metadata"]["annotations"] = {"fake.k8sjobs.io/duration": "600"}
        await kube.create(PODS, NS, pod)
        await wait_until(lambda: _phase(sim, "sim") == "Running", "simulated pod running")
        with pytest.raises(ServerUnavailable, match=r'FakeCluster\("execute"\)'):
            await open_exec(kube, NS, "sim", ["true"])


async def test_exec_over_tls_with_the_kubeconfigs_token(tmp_path: Path) -> None:
    async with FakeCluster("execute", directory=tmp_path, controller=FAST, tls=True) as secure:
        config = await load_config(secure.kubeconfig_path)
        assert config.host.startswith("https://") and secure.token
        async with KubeClient(config) as kube:
            await _held(kube, secure)
            stream = await open_exec(kube, NS, "held", ["echo", "over tls"], stdin=False)
            assert await _drain(stream) == [(STDOUT, b"over tls\n")]
            with pytest.raises(NotFound) as caught:
                await open_exec(kube, NS, "nope", ["true"])
            assert secure.token not in str(caught.value)
        async with KubeClient(ClusterConfig(host=config.host, ssl=config.ssl)) as anonymous:
            with pytest.raises(ApiError) as refused:
                await open_exec(anonymous, NS, "held", ["true"])
            assert refused.value.status == 401
