"""pods/exec on the fake API server: the WebSocket side, as kube-apiserver v1.36 speaks it.

What the real server does, recorded frame by frame in shared/k8s-reference/
exec-websocket.json, is what this module does:

- the subprotocol: ``v5.channel.k8s.io`` when offered, else ``v4.channel.k8s.io``, else none
  (the upgrade still happens, with an empty ``Sec-WebSocket-Protocol``, and the stream ends
  with a close 1000 and no status);
- the first message is the bare channel byte of the lowest channel the server writes
  (stdout when asked for); output goes out in messages of at most 32 KiB + 1, channel 1
  stdout, 2 stderr; channel 0 is stdin, v5's ``0xff 0x00`` its end, channel 4 (resize) is
  taken and ignored;
- the end is a channel-3 Status (v5 and v4 word it differently; the exit code is the
  ``ExitCode`` cause, 137 for a SIGKILL), then the connection drops without a close frame
  (the client sees 1006); a program that cannot be started is an ``InternalError`` status
  in the runtime's words, followed by a close 1000;
- before the upgrade: a plain request is told ``Upgrade request required`` (400), and a pod
  whose container does not run (ended, or not started) fails the upgrade with the
  kubelet's plain-text 500; the pod and container checks come first, in ``server.py``.

The command runs in the pod's container environment through ``ExecHost`` (the executing
kubelet, then ``PodRunner.exec``). It is killed when the stream closes and when the pod's
containers end (the latter then ends the stream with its status, exit code 137).
``ExecSessions`` keeps every open stream, so a fault can cut them (all, one namespace's or
one pod's) without a status, as an API server restart does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import WSMsgType, web

from . import errors as _errors
from .requests import truthy

__all__ = ["V4", "V5", "ExecCall", "ExecHost", "ExecSessions", "ExecStartError", "serve_exec"]

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
_STDIN, _STDOUT, _STDERR, _ERROR, _CLOSE = 0, 1, 2, 3, 255
# The kubelet's stream copies in 32 KiB reads: each message is the channel byte and those.
_CHUNK = 32 * 1024
# How long an abort waits for the status frame to leave the socket buffer.
_FLUSH_WAIT = 2.0
_FLUSH_POLL = 0.005


class ExecStartError(Exception):
    """The command could not be started in the container (the runtime's words)."""


@dataclass(frozen=True)
class ExecCall:
    """What one exec asks for: where, which command, which streams."""

    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool


class ExecHost(Protocol):
    """Where exec'd commands run: the kubelet."""

    def exec_refusal(self, namespace: str, pod: str, container: str) -> str | None:
        """Return why the container cannot take an exec now (the upgrade's 500), or None."""

    async def exec_start(self, call: ExecCall) -> asyncio.subprocess.Process:
        """Start the command in the container's environment, or raise ExecStartError."""

    async def exec_kill(self, process: asyncio.subprocess.Process) -> None:
        """Kill an exec'd command and all it started."""


@dataclass(eq=False)
class _Session:
    """One open exec stream."""

    call: ExecCall
    request: web.Request
    cut: bool = False
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)

    def drop(self) -> None:
        """End the connection now, with no status and no close frame."""
        self.cut = True
        transport = self.request.transport
        if transport is not None:
            transport.abort()


class ExecSessions:
    """Every open exec stream of the server, for faults and shutdown."""

    def __init__(self) -> None:
        self._open: set[_Session] = set()

    def __len__(self) -> int:
        return len(self._open)

    def add(self, session: _Session) -> None:
        """Keep an open stream."""
        self._open.add(session)

    def discard(self, session: _Session) -> None:
        """Forget an ended stream."""
        self._open.discard(session)

    def cut(self, namespace: str | None = None, pod: str | None = None) -> int:
        """Drop the open streams (of ``namespace``, of ``pod``) without a status; return
        how many. Their commands are killed, as a closed stream's are."""
        chosen = [
            s
            for s in self._open
            if namespace in (None, s.call.namespace) and pod in (None, s.call.pod)
        ]
        for session in chosen:
            session.drop()
        return len(chosen)


async def serve_exec(
    request: web.Request,
    host: ExecHost | None,
    sessions: ExecSessions,
    namespace: str,
    pod: str,
    container: str,
) -> web.StreamResponse:
    """Serve one exec of a checked pod and container (``server.py`` checked them)."""
    query = request.query
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise _errors.bad_request("Upgrade request required")
    command = query.getall("command", [])
    if not command:
        raise _errors.bad_request("you must specify at least 1 command")
    stdin, stdout, stderr = (truthy(query.get(name)) for name in ("stdin", "stdout", "stderr"))
    if not (stdin or stdout or stderr):
        raise _errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    refusal = (
        host.exec_refusal(namespace, pod, container)
        if host is not None
        else "pods/exec needs a kubelet that runs pods"
    )
    if refusal is not None or host is None:
        return web.Response(status=500, text=refusal)
    offered = [
        word.strip()
        for word in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
        if word.strip()
    ]
    chosen = next((p for p in (V5, V4) if p in offered), None)
    ws = web.WebSocketResponse(protocols=(chosen,) if chosen else ())
    if chosen is None:
        ws.headers["Sec-WebSocket-Protocol"] = ""  # as the real server answers
    await ws.prepare(request)
    session = _Session(
        ExecCall(namespace, pod, container, tuple(command), stdin, stdout, stderr), request
    )
    sessions.add(session)
    try:
        await _run(ws, session, host, chosen)
    except ConnectionError:
        pass  # the client went away while something was sent: the command is killed below
    finally:
        sessions.discard(session)
        if session.process is not None and session.process.returncode is None:
            await host.exec_kill(session.process)
    return ws


async def _run(
    ws: web.WebSocketResponse,
    session: _Session,
    host: ExecHost,
    chosen: str | None,
) -> None:
    call = session.call
    await ws.send_bytes(bytes([_STDOUT if call.stdout else _STDERR if call.stderr else _ERROR]))
    try:
        process = await host.exec_start(call)
    except ExecStartError as error:
        await ws.send_bytes(bytes([_ERROR]) + _internal_error(str(error)))
        await ws.close(code=1000)
        return
    session.process = process
    pumps = [
        asyncio.ensure_future(_pump(stream, ws, channel))
        for stream, channel in ((process.stdout, _STDOUT), (process.stderr, _STDERR))
        if stream is not None
    ]
    ended = asyncio.ensure_future(_ended(process, pumps))
    inputs = asyncio.ensure_future(_feed(ws, process, chosen))
    try:
        await asyncio.wait([ended, inputs], return_when=asyncio.FIRST_COMPLETED)
    finally:
        inputs.cancel()
        for pump in pumps:
            pump.cancel()
    if not ended.done() or session.cut or ws.closed:
        ended.cancel()
        return  # the client left or the stream was cut: no status (the command is killed)
    code = ended.result()
    if chosen is None:
        await ws.close(code=1000)
        return
    await ws.send_bytes(bytes([_ERROR]) + _exit_status(code, call.command, chosen))
    await _drop(session.request)


async def _pump(stream: asyncio.StreamReader, ws: web.WebSocketResponse, channel: int) -> None:
    """Send a stream of the command's output, in messages of at most 32 KiB + 1."""
    prefix = bytes([channel])
    while chunk := await stream.read(_CHUNK):
        await ws.send_bytes(prefix + chunk)


async def _ended(process: asyncio.subprocess.Process, pumps: Sequence[asyncio.Future[None]]) -> int:
    """Return the command's exit code once it has ended and its output has all been sent."""
    await asyncio.gather(*pumps)
    code = await process.wait()
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as runc says


async def _feed(
    ws: web.WebSocketResponse, process: asyncio.subprocess.Process, chosen: str | None
) -> None:
    """Pass the client's stdin to the command; return when the client has gone."""
    async for message in ws:
        if message.type is not WSMsgType.BINARY or not message.data:
            continue
        channel, data = message.data[0], message.data[1:]
        stdin = process.stdin
        if stdin is None:
            continue
        with contextlib.suppress(ConnectionError):
            if channel == _STDIN and data:
                stdin.write(data)
                await stdin.drain()
            elif channel == _CLOSE and chosen == V5 and data[:1] == bytes([_STDIN]):
                stdin.close()


def _exit_status(code: int, command: Sequence[str], chosen: str) -> bytes:
    """Return the channel-3 Status of a command that exited with ``code``, in v5's or v4's
    words (as recorded)."""
    if code == 0:
        return _dumps({"metadata": {}, "status": "Success"})
    causes = {"causes": [{"reason": "ExitCode", "message": str(code)}]}
    if chosen == V4:
        words = f"error executing command [{' '.join(command)}], exit code {code}"
        head: dict[str, object] = {}
    else:
        words = f"command terminated with exit code {code}"
        head = {"metadata": {}}
    return _dumps(
        {
            **head,
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: {words}",
            "reason": "NonZeroExitCode",
            "details": causes,
        }
    )


def _internal_error(why: str) -> bytes:
    """Return the Status of a command the runtime could not start (containerd's words)."""
    inner = (
        "Internal error occurred: error executing command in container: failed to exec in "
        f'container: failed to start exec "{secrets.token_hex(32)}": OCI runtime exec failed: '
        f"exec failed: unable to start container process: {why}"
    )
    return _dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {inner}",
            "reason": "InternalError",
            "details": {"causes": [{"message": inner}]},
            "code": 500,
        }
    )


async def _drop(request: web.Request) -> None:
    """End the connection without a close frame (1006), once the status has left."""
    transport = request.transport
    if transport is None:
        return
    for _ in range(int(_FLUSH_WAIT / _FLUSH_POLL)):  # bounded: a stuck client is cut anyway
        if not transport.get_write_buffer_size():
            break
        await asyncio.sleep(_FLUSH_POLL)
    transport.abort()


def _dumps(body: object) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
