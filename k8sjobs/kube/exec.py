"""pods/exec over WebSocket: run a command in a running container and talk to it.

The protocol is the one kube-apiserver v1.36 speaks (recorded frame by frame in
shared/k8s-reference/exec-websocket.json):

- ``GET /api/v1/namespaces/<ns>/pods/<pod>/exec?command=..&command=..&container=..
  &stdin=true&stdout=true&stderr=true``, upgraded to a WebSocket, offering the subprotocols
  ``v5.channel.k8s.io, v4.channel.k8s.io``; the server picks v5 when offered, else v4;
- every message is binary, its first byte the channel: 0 stdin, 1 stdout, 2 stderr,
  3 the error/status channel, 4 resize, and (v5 only) 255 "close stream", whose one data
  byte names the stream closed (``0xff 0x00``: end of stdin);
- the first message of each output stream is the bare channel byte (nothing in it);
  stdout comes in messages of up to 32 KiB + 1;
- the end is one channel-3 message, a ``Status``: ``Success``, or ``Failure`` with reason
  ``NonZeroExitCode`` and ``details.causes[reason=ExitCode].message`` the exit code (137 for
  a SIGKILL), or ``InternalError`` (a missing binary); then the server drops the connection
  (close code 1006, no close frame) or, after an InternalError, closes with 1000. A drop
  before the status is a broken stream (API server restart, idle proxy), not an end.
- refusals come before the upgrade as an HTTP answer with a Status body: 404 for a missing
  pod, 400 for a missing container or a pod without a node, 500 for a pod that has ended.

``open_exec`` opens one on the ``KubeClient``'s shared aiohttp session (its auth header,
TLS and server address), bounded by a connect timeout; the stream sends WebSocket pings
every ``heartbeat`` seconds, so idle proxies keep it open and a dead peer is noticed, and
may bound the silence between two output messages (``read_idle``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..errors import ApiError, K8sJobsError, api_error, scrub
from .client import Kind, KubeClient

__all__ = [
    "STDERR",
    "STDOUT",
    "V4",
    "V5",
    "ExecError",
    "ExecIdle",
    "ExecStatus",
    "ExecStream",
    "ExecStreamBroken",
    "open_exec",
]

log = logging.getLogger("k8sjobs.kube.exec")

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
POD_EXEC = Kind("/api/v1", "pods", sub="exec")
# The largest message a server may send: its stdout frames are 32 KiB + 1, a Status a few
# KiB; aiohttp's default of 4 MiB is kept as the bound.
_MAX_MESSAGE = 4 * 1024 * 1024
_CLOSE_TIMEOUT = 2.0


class ExecError(K8sJobsError):
    """An exec stream could not be used: the server spoke outside the protocol, or the
    caller asked for what the chosen subprotocol cannot do."""


class ExecStreamBroken(ExecError):
    """The exec stream ended without its status (connection lost, API server restart, idle
    proxy, missed heartbeats): the command's end is unknown, and it may still run."""


class ExecIdle(ExecError, TimeoutError):
    """No output message came for ``read_idle`` seconds (the stream itself is still open)."""


@dataclass(frozen=True)
class ExecStatus:
    """The channel-3 Status that ends an exec: how the command ended.

    ``exit_code`` is 0 for ``Success``, the ``ExitCode`` cause for ``NonZeroExitCode``, and
    None when the command never ran or its end is not an exit (``InternalError``: a missing
    binary, a runtime failure), ``message`` then the server's words.
    """

    status: str
    reason: str
    message: str
    exit_code: int | None
    body: dict[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        """Return whether the command exited 0."""
        return self.exit_code == 0

    @classmethod
    def parse(cls, data: bytes) -> ExecStatus:
        """Return the status a channel-3 message carries (v5 and v4 forms alike)."""
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise ExecError(f"the exec status (channel 3) is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ExecError("the exec status (channel 3) is not a JSON object")
        status = str(body.get("status", ""))
        reason = str(body.get("reason", ""))
        message = str(body.get("message", ""))
        exit_code: int | None = 0 if status == "Success" else None
        causes = (body.get("details") or {}).get("causes") or []
        for cause in causes:
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                try:
                    exit_code = int(cause.get("message", ""))
                except ValueError:
                    raise ExecError(
                        f"the exec status's ExitCode cause is not a number: {cause!r}"
                    ) from None
        return cls(status, reason, message, exit_code, body)


class ExecStream:
    """One open pods/exec stream: stdin to write, stdout/stderr to read, then its status.

    Read with ``read()`` or ``async for channel, data in stream`` (channel ``STDOUT`` or
    ``STDERR``); the iteration ends when the status came (``status``), and raises
    ``ExecStreamBroken`` when the connection was lost before it.
    """

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, protocol: str, what: str, read_idle: float | None
    ) -> None:
        self._ws = ws
        #: The subprotocol the server chose: ``V5`` or ``V4``.
        self.protocol = protocol
        self._what = what
        self._read_idle = read_idle
        #: The channel-3 Status, once it came (None before, and on a broken stream).
        self.status: ExecStatus | None = None
        self._ended = False
        self._failure: ExecStreamBroken | None = None  # raised again by each later read

    async def __aenter__(self) -> ExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def can_close_stdin(self) -> bool:
        """Return whether stdin can be ended alone (v5's close frame; v4 has none)."""
        return self.protocol == V5

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the command's stdin (one message on channel 0)."""
        await self._send(bytes([STDIN]) + data)

    async def close_stdin(self) -> bool:
        """End the command's stdin (it reads EOF); return False when the protocol cannot.

        v5 sends the frame ``0xff 0x00``. v4 has no such frame: nothing is sent and False
        is returned, and the caller ends the command some other way (``aclose``, or a
        command that knows when its input is done).
        """
        if not self.can_close_stdin:
            return False
        await self._send(bytes([CLOSE, STDIN]))
        return True

    async def resize(self, width: int, height: int) -> None:
        """Tell a TTY the terminal's size (channel 4)."""
        size = json.dumps({"Width": width, "Height": height}).encode()
        await self._send(bytes([RESIZE]) + size)

    async def read(self) -> tuple[int, bytes] | None:
        """Return the next (channel, data) of output, or None once the status came (or
        the stream was closed by ``aclose``).

        Empty messages (the bare channel byte each stream opens with) are skipped. Raises
        ``ExecStreamBroken`` when the connection ends without a status, ``ExecIdle`` when
        ``read_idle`` seconds pass without a message.
        """
        if self._failure is not None:
            raise self._failure
        while not self._ended:
            message = await self._receive()
            if message.type is aiohttp.WSMsgType.BINARY:
                data: bytes = message.data
                if not data:
                    continue
                channel, payload = data[0], data[1:]
                if channel == ERROR:
                    self.status = ExecStatus.parse(payload)
                    self._ended = True
                    return None
                if channel in (STDOUT, STDERR):
                    if payload:
                        return channel, payload
                    continue
                log.debug("%s: message on channel %d ignored", self._what, channel)
                continue
            if message.type is aiohttp.WSMsgType.TEXT:
                raise ExecError(f"{self._what}: a text message, where the protocol has none")
            self._ended = True
            self._failure = self._broken(message)
            raise self._failure
        return None

    def __aiter__(self) -> AsyncIterator[tuple[int, bytes]]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        while (chunk := await self.read()) is not None:
            yield chunk

    async def wait(self) -> ExecStatus:
        """Read (and drop) the output until the end; return the status."""
        while await self.read() is not None:
            pass
        if self.status is None:  # only after aclose(): the end was not waited for
            raise ExecError(f"{self._what}: the stream was closed before its status came")
        return self.status

    async def aclose(self) -> None:
        """Close the stream (the server then stops the command) and its connection."""
        self._ended = True
        if not self._ws.closed:
            try:
                async with asyncio.timeout(_CLOSE_TIMEOUT):
                    await self._ws.close()
            except (TimeoutError, aiohttp.ClientError, ConnectionError):
                pass

    async def _send(self, message: bytes) -> None:
        if self._failure is not None:
            raise self._failure
        if self._ended or self._ws.closed:
            raise ExecError(f"{self._what}: the stream has ended; nothing can be sent")
        try:
            await self._ws.send_bytes(message)
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise ExecStreamBroken(
                f"{self._what}: the connection was lost while sending ({type(exc).__name__})"
            ) from None

    async def _receive(self) -> aiohttp.WSMessage:
        if self._read_idle is None:
            return await self._ws.receive()
        try:
            async with asyncio.timeout(self._read_idle):
                return await self._ws.receive()
        except TimeoutError:
            raise ExecIdle(
                f"{self._what}: no output for {self._read_idle:g} s (read_idle); the stream "
                "is still open"
            ) from None

    def _broken(self, message: aiohttp.WSMessage) -> ExecStreamBroken:
        """The error for a stream that ended before its status."""
        code = self._ws.close_code
        if message.type is aiohttp.WSMsgType.ERROR:
            cause = type(message.data).__name__
            if isinstance(message.data, aiohttp.ServerTimeoutError):
                cause = "no answer to the heartbeat ping"
            why = f"the connection failed ({cause})"
        else:
            why = f"the connection closed (code {code})"
        return ExecStreamBroken(
            f"{self._what}: {why} before the command's status came; it may still be running"
        )


async def open_exec(
    client: KubeClient,
    namespace: str,
    pod: str,
    command: Sequence[str],
    *,
    container: str | None = None,
    stdin: bool = True,
    stdout: bool = True,
    stderr: bool = True,
    tty: bool = False,
    connect_timeout: float | None = None,
    heartbeat: float | None = 30.0,
    read_idle: float | None = None,
    protocols: Sequence[str] = (V5, V4),
) -> ExecStream:
    """Start ``command`` in a running container of ``pod`` and return its stream.

    ``container`` may be left out for a pod of one container. ``connect_timeout`` bounds
    the connect and the upgrade (default: the client's ``timeout``); ``heartbeat`` is the
    seconds between two WebSocket pings (None: none), and a ping without its pong within
    half of it breaks the stream; ``read_idle`` bounds the wait for one output message
    (None: unbounded, the heartbeat notices a dead peer). ``protocols`` are offered in
    order (``V5``, ``V4``, or both).

    Raises the ``ApiError`` the server refused with (``NotFound`` for a missing pod; 400
    for a missing container or a pod not yet on a node; ``ServerUnavailable`` for the 500
    of a pod that has ended), with the server's own message; ``ExecError`` when the server
    chose no subprotocol k8sjobs speaks; ``ServerUnavailable`` when it did not answer in
    time.
    """
    if not command:
        raise ValueError("command must name a program to run (an empty list was given)")
    unknown = [p for p in protocols if p not in (V5, V4)]
    if unknown or not protocols:
        raise ValueError(f"protocols must be {V5!r} and/or {V4!r}, not {list(protocols)!r}")
    params: list[tuple[str, str]] = [("command", word) for word in command]
    if container:
        params.append(("container", container))
    for name, wanted in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr), ("tty", tty)):
        if wanted:
            params.append((name, "true"))
    where = f' container "{container}"' if container else ""
    what = f'exec in pod "{pod}"{where} in namespace "{namespace}"'
    url = client.config.host + POD_EXEC.path(namespace, pod)
    limit = client.options.timeout if connect_timeout is None else connect_timeout
    while True:
        session = client.session()
        try:
            async with asyncio.timeout(limit):
                ws = await session.ws_connect(
                    url,
                    params=params,
                    protocols=tuple(protocols),
                    heartbeat=heartbeat,
                    autoping=True,
                    max_msg_size=_MAX_MESSAGE,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=_CLOSE_TIMEOUT),
                )
        except aiohttp.WSServerHandshakeError as exc:
            client.requests["create", str(exc.status)] += 1
            if exc.status == 401 and not client._reloaded and client.config.reload is not None:
                await client._reload()  # an expired token: fresh credentials, once
                continue
            raise await _refusal(session, url, params, tuple(protocols), exc, what, limit) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            client.requests["create", "none"] += 1
            raise api_error(
                503,
                {"message": f"no answer within {limit:g} s ({type(exc).__name__})"},
                what=what,
            ) from None
        break
    client.requests["create", "101"] += 1
    if ws.protocol not in (V5, V4):
        await ws.close()
        raise ExecError(
            f"{what}: the API server chose no channel subprotocol (offered "
            f"{', '.join(protocols)}); it is older than Kubernetes 1.4 or a proxy strips "
            "the Sec-WebSocket-Protocol header"
        )
    return ExecStream(ws, ws.protocol, what, read_idle)


async def _refusal(
    session: aiohttp.ClientSession,
    url: str,
    params: list[tuple[str, str]],
    protocols: tuple[str, ...],
    exc: aiohttp.WSServerHandshakeError,
    what: str,
    limit: float,
) -> ApiError:
    """Return the ApiError for an upgrade the server refused, with its own message.

    aiohttp's handshake drops the refusal's body, so the same upgrade request is sent once
    more as a plain request and its body read: the server refuses it alike (the checks come
    before the upgrade; a pod that ended keeps failing the upgrade).
    """
    status = exc.status
    body: dict[str, Any] = {"message": f"HTTP {status} on the upgrade"}
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "azhzam9icy1yZWZ1c2FsIQ==",
        "Sec-WebSocket-Protocol": ",".join(protocols),
    }
    try:
        async with asyncio.timeout(limit):
            async with session.get(url, params=params, headers=headers) as response:
                if response.status >= 300:
                    status = response.status
                    text = (await response.content.read(64 * 1024)).decode("utf-8", "replace")
                    body = _status_body(text, status)
    except (TimeoutError, aiohttp.ClientError, OSError):
        pass  # the first answer's status stands, without its words
    body["message"] = scrub(str(body.get("message", "")))
    return api_error(status, body, what=what)


def _status_body(text: str, status: int) -> dict[str, Any]:
    """Return a refusal's Status (a JSON Status, or the kubelet's plain text as its message)."""
    try:
        body = json.loads(text)
    except ValueError:
        return {"message": text.strip()[:300] or f"HTTP {status}"}
    return body if isinstance(body, dict) else {"message": str(body)[:300]}
