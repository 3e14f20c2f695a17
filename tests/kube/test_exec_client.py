"""The pods/exec client against a server that replays the real API server's transcript.

Every scenario of shared/k8s-reference/exec-websocket.json (tests/kube/data holds a copy) is
played by ``exec_reference_server``, written from the protocol and not from the fake
cluster, so the client is held to what kube-apiserver v1.36 actually sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from k8sjobs.errors import ApiError, NotFound, ServerUnavailable
from k8sjobs.kube.client import ClientOptions, KubeClient
from k8sjobs.kube.config import ClusterConfig
from k8sjobs.kube.exec import (
    STDERR,
    STDOUT,
    V4,
    V5,
    ExecError,
    ExecIdle,
    ExecStream,
    ExecStreamBroken,
    open_exec,
)

from .exec_reference_server import ReferenceExecServer

TOKEN = "sekret-exec-token-0123456789"
NS, POD = "exec-rec", "held"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ReferenceExecServer]:
    """Yield the replaying server, requiring the bearer token."""
    reference = ReferenceExecServer(token=TOKEN)
    await reference.start()
    yield reference
    await reference.stop()
    assert not reference.mismatches, reference.mismatches


@pytest_asyncio.fixture
async def client(server: ReferenceExecServer) -> AsyncIterator[KubeClient]:
    """Yield a KubeClient on the replaying server."""
    config = ClusterConfig(host=server.url, authorization=f"Bearer {TOKEN}")
    async with KubeClient(config, ClientOptions(timeout=5.0)) as kube:
        yield kube


@contextlib.asynccontextmanager
async def _other_server(
    *, strip_protocol: bool = False, cut_status: bool = False, answer_pings: bool = True
) -> AsyncIterator[KubeClient]:
    """Yield a client on a reference server that departs from the transcript as told."""
    reference = ReferenceExecServer(
        strip_protocol=strip_protocol, cut_status=cut_status, answer_pings=answer_pings
    )
    await reference.start()
    try:
        async with KubeClient(ClusterConfig(host=reference.url)) as kube:
            yield kube
    finally:
        await reference.stop()


async def _drain(stream: ExecStream) -> list[tuple[int, bytes]]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in stream]


async def test_v5_stdin_echo_closes_stdin_with_ff00(
    client: KubeClient, server: ReferenceExecServer
) -> None:
    stream = await open_exec(client, NS, POD, ["cat"])
    assert stream.protocol == V5 and stream.can_close_stdin
    await stream.write(b"hello\n")
    assert await stream.close_stdin() is True
    assert await _drain(stream) == [(STDOUT, b"hello\n")]
    assert stream.status is not None and stream.status.exit_code == 0 and stream.status.ok
    assert stream.status.status == "Success"
    assert server.served == [("v5_stdin_echo_exit0", [V5, V4])]
    await stream.aclose()


async def test_v5_exit3_reads_stdout_and_stderr_and_the_exit_code(client: KubeClient) -> None:
    command = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    async with await open_exec(client, NS, POD, command, stdin=False) as stream:
        assert await _drain(stream) == [(STDOUT, b"out\n"), (STDERR, b"err\n")]
        assert stream.status is not None
        assert stream.status.exit_code == 3 and not stream.status.ok
        assert stream.status.reason == "NonZeroExitCode"


async def test_killed_by_signal_is_137(client: KubeClient) -> None:
    async with await open_exec(client, NS, POD, ["sh", "-c", "kill -9 $$"], stdin=False) as s:
        status = await s.wait()
    assert status.exit_code == 137


async def test_missing_binary_is_an_internal_error_with_the_servers_words(
    client: KubeClient,
) -> None:
    async with await open_exec(client, NS, POD, ["no-such-binary"], stdin=False) as stream:
        status = await stream.wait()  # then a close with 1000: a normal end too
    assert status.exit_code is None and not status.ok
    assert status.reason == "InternalError"
    assert 'exec: "no-such-binary": executable file not found in $PATH' in status.message


async def test_v4_when_only_v4_is_offered_and_stdin_cannot_be_closed(
    client: KubeClient, server: ReferenceExecServer
) -> None:
    command = ["sh", "-c", "echo v4; exit 3"]
    async with await open_exec(client, NS, POD, command, stdin=False, protocols=[V4]) as s:
        assert s.protocol == V4 and not s.can_close_stdin
        assert await s.close_stdin() is False
        assert await _drain(s) == [(STDOUT, b"v4\n")]
        assert s.status is not None and s.status.exit_code == 3
        assert "exit code 3" in s.status.message
    assert server.served == [("v4_only_offered_exit3", [V4])]


async def test_no_subprotocol_the_server_upgrades_with_an_empty_header(
    server: ReferenceExecServer,
) -> None:
    # The server side of the scenario, seen from a bare WebSocket client offering nothing.
    url = f"{server.url}/api/v1/namespaces/{NS}/pods/{POD}/exec"
    params = [("command", "true"), ("stdout", "true"), ("stderr", "true")]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, params=params, headers=headers) as ws,
    ):
        assert ws.protocol is None
        assert ws._response.headers["Sec-WebSocket-Protocol"] == ""
        first = await ws.receive(timeout=5)
        assert first.type is aiohttp.WSMsgType.BINARY and first.data == b"\x01"
        end = await ws.receive(timeout=5)
        assert end.type is aiohttp.WSMsgType.CLOSE and ws.close_code == 1000


async def test_a_server_that_chooses_no_subprotocol_is_refused_clearly() -> None:
    async with _other_server(strip_protocol=True) as kube:
        with pytest.raises(ExecError, match="chose no channel subprotocol"):
            await open_exec(kube, NS, POD, ["sh", "-c", "echo v4; exit 3"], stdin=False)
        with pytest.raises(ValueError, match="protocols"):
            await open_exec(kube, NS, POD, ["true"], protocols=[])


async def test_missing_container_is_a_400_with_the_servers_message(client: KubeClient) -> None:
    with pytest.raises(ApiError) as caught:
        await open_exec(client, NS, POD, ["true"], container="nope", stdin=False)
    assert caught.value.status == 400 and caught.value.reason == "BadRequest"
    assert not isinstance(caught.value, NotFound)
    assert "container nope is not valid for pod held" in str(caught.value)
    assert TOKEN not in str(caught.value)


async def test_pending_pod_is_a_400(client: KubeClient) -> None:
    with pytest.raises(ApiError) as caught:
        await open_exec(client, NS, "pending", ["true"], stdin=False)
    assert caught.value.status == 400
    assert "pod pending does not have a host assigned" in str(caught.value)


async def test_succeeded_pod_fails_the_upgrade_with_500(
    client: KubeClient, server: ReferenceExecServer
) -> None:
    with pytest.raises(ServerUnavailable) as caught:
        await open_exec(client, NS, "done", ["true"], stdin=False)
    assert caught.value.status == 500
    assert 'container not found ("main")' in str(caught.value)
    # A plain GET of the same pod is told to upgrade instead (the recorded plain_get).
    url = f"{server.url}/api/v1/namespaces/{NS}/pods/done/exec"
    params = [("command", "true"), ("stdout", "true"), ("stderr", "true")]
    async with client.session().get(url, params=params) as response:
        assert response.status == 400
        assert (await response.json())["message"] == "Upgrade request required"


async def test_missing_pod_is_not_found(client: KubeClient) -> None:
    with pytest.raises(NotFound) as caught:
        await open_exec(client, NS, "nope", ["true"], stdin=False)
    assert caught.value.status == 404 and 'pods "nope" not found' in str(caught.value)
    assert TOKEN not in str(caught.value) and TOKEN not in repr(caught.value.body)


async def test_idle_stream_is_kept_by_pings_then_takes_stdin(
    client: KubeClient, server: ReferenceExecServer
) -> None:
    command = ["sh", "-c", "read l; echo got:$l"]
    stream = await open_exec(client, NS, POD, command, heartbeat=0.2, read_idle=0.3)
    with pytest.raises(ExecIdle, match="read_idle"):
        await stream.read()  # nothing comes while the command waits for its line
    deadline = time.monotonic() + 10
    while server.pings < 3:  # the heartbeat reaches the server while the stream idles
        assert time.monotonic() < deadline, "no pings reached the server"
        await asyncio.sleep(0.05)
    await stream.write(b"late\n")
    await stream.close_stdin()
    assert await _drain(stream) == [(STDOUT, b"got:late\n")]
    assert stream.status is not None and stream.status.ok
    await stream.aclose()


async def test_large_stdout_arrives_whole_in_frames_of_at_most_32KiB(client: KubeClient) -> None:
    command = ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x"]
    async with await open_exec(client, NS, POD, command, stdin=False) as stream:
        chunks = await _drain(stream)
    assert b"".join(data for _, data in chunks) == b"x" * 1048576
    assert max(len(data) for _, data in chunks) <= 32768
    assert {channel for channel, _ in chunks} == {STDOUT}
    assert stream.status is not None and stream.status.ok


async def test_a_drop_before_the_status_is_a_broken_stream() -> None:
    async with _other_server(cut_status=True) as kube:
        command = ["sh", "-c", "echo out; echo err >&2; exit 3"]
        stream = await open_exec(kube, NS, POD, command, stdin=False)
        assert await stream.read() == (STDOUT, b"out\n")
        assert await stream.read() == (STDERR, b"err\n")
        with pytest.raises(ExecStreamBroken, match="before the command's status"):
            await stream.read()
        assert stream.status is None
        with pytest.raises(ExecStreamBroken):  # and again: never taken for an end
            await stream.read()
        with pytest.raises(ExecStreamBroken):
            await stream.write(b"more")
        await stream.aclose()


async def test_connect_timeout_bounds_a_server_that_never_answers() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads the request and never answers

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        config = ClusterConfig(host=f"http://127.0.0.1:{port}", authorization=f"Bearer {TOKEN}")
        async with KubeClient(config) as kube:
            started = time.monotonic()
            with pytest.raises(ServerUnavailable, match=r"no answer within 0\.3 s") as caught:
                await open_exec(kube, NS, POD, ["true"], connect_timeout=0.3)
            assert time.monotonic() - started < 3
            assert TOKEN not in str(caught.value)
    finally:
        listener.close()
        await listener.wait_closed()


async def test_a_peer_that_stops_answering_pings_breaks_the_stream() -> None:
    async with _other_server(answer_pings=False) as kube:
        command = ["sh", "-c", "read l; echo got:$l"]
        stream = await open_exec(kube, NS, POD, command, heartbeat=0.2)
        started = time.monotonic()
        with pytest.raises(ExecStreamBroken, match="heartbeat"):
            async with asyncio.timeout(10):
                await stream.read()
        assert time.monotonic() - started < 5
        await stream.aclose()


async def test_a_401_reloads_the_credentials_once(server: ReferenceExecServer) -> None:
    async def fresh() -> ClusterConfig:
        return ClusterConfig(host=server.url, authorization=f"Bearer {TOKEN}")

    stale = ClusterConfig(host=server.url, authorization="Bearer expired-0123456789", reload=fresh)
    async with KubeClient(stale) as kube:
        stream = await open_exec(kube, NS, POD, ["sh", "-c", "kill -9 $$"], stdin=False)
        assert (await stream.wait()).exit_code == 137
        await stream.aclose()
    async with KubeClient(
        ClusterConfig(host=server.url, authorization="Bearer wrong-01234567")
    ) as kube:
        with pytest.raises(ApiError) as caught:
            await open_exec(kube, NS, POD, ["true"], stdin=False)
        assert caught.value.status == 401
        assert "wrong-01234567" not in str(caught.value)


async def test_waiting_on_a_stream_closed_before_its_status_says_so() -> None:
    async with _other_server() as kube:
        stream = await open_exec(kube, NS, POD, ["sh", "-c", "read l; echo got:$l"])
        await stream.aclose()
        with pytest.raises(ExecError, match="closed before its status came"):
            await stream.wait()
