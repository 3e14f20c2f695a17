"""A minimal pods/exec WebSocket server that replays the real API server's transcript.

Written from shared/k8s-reference/exec-websocket.json (kube-apiserver v1.36.2 -> kubelet),
not from the fake cluster: each recorded scenario is served as it was recorded. The request
(pod, command, container, streams) picks the scenario; the subprotocol is chosen the way the
real server chose it (v5 when offered, else v4, else none with an empty
``Sec-WebSocket-Protocol``); then the scenario's frames are played in order: a "sent" frame
is awaited from the client and compared byte for byte (a mismatch is recorded in
``mismatches``), a "recv" frame is sent byte for byte, and the end is the recorded one: the
drop without a close frame (1006, by aborting the transport once the status is on the wire)
or a close with 1000. Refusals answer before the upgrade as recorded: the Status bodies of
the plain GETs, and the Succeeded pod's 500 on the upgrade.

Client pings are answered by hand (autoping off) and counted in ``pings``, so a test sees
the heartbeat on the wire.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from multidict import MultiMapping
from yarl import URL

# A copy of shared/k8s-reference/exec-websocket.json, byte for byte.
TRANSCRIPT = Path(__file__).parent / "data" / "exec-websocket.json"
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
# The recorded 1 MiB scenario keeps its first frame and a note of the frame lengths; the
# server rebuilds the 1 MiB from those lengths (payload = length - 1), cycling through them.
_LARGE = "v5_large_stdout_1MiB"
_LARGE_SIZE = 1048576
# The Succeeded pod's 500 was recorded as text/plain, 28 bytes, its words not kept: the
# kubelet's 'container not found ("main")' is 28 bytes, and is what is sent here.
_ENDED_POD_TEXT = 'container not found ("main")'


def load_transcript() -> dict[str, Any]:
    """Return the recorded scenarios by name."""
    scenarios: dict[str, Any] = json.loads(TRANSCRIPT.read_text())["scenarios"]
    return scenarios


def frame_bytes(frame: Mapping[str, Any]) -> bytes:
    """Return the message a recorded frame is: its channel byte, then its data."""
    data = str(frame.get("data", ""))
    payload = base64.b64decode(data[7:]) if data.startswith("base64:") else data.encode()
    return bytes([int(frame["channel"])]) + payload


def _key(path: str, query: MultiMapping[str]) -> tuple[str, tuple[str, ...], frozenset[str]]:
    """Return what identifies a request: its path, its command words in order, the rest."""
    commands = tuple(query.getall("command", []))
    rest = frozenset(f"{k}={v}" for k, v in query.items() if k != "command")
    return path, commands, rest


class ReferenceExecServer:
    """Serves the recorded scenarios of exec-websocket.json on 127.0.0.1."""

    def __init__(
        self,
        *,
        token: str | None = None,
        strip_protocol: bool = False,
        cut_status: bool = False,
        answer_pings: bool = True,
    ) -> None:
        self.scenarios = load_transcript()
        self.token = token
        #: Answer without a subprotocol whatever is offered (a proxy stripping the header).
        self.strip_protocol = strip_protocol
        #: Drop the connection where the status would come (a broken stream): no channel 3.
        self.cut_status = cut_status
        #: Answer the client's pings (off: a peer that went silent, as a dead proxy).
        self.answer_pings = answer_pings
        self.pings = 0
        self.mismatches: list[str] = []
        #: The scenarios served, in order, with the subprotocol the client offered.
        self.served: list[tuple[str, list[str]]] = []
        self._by_request: dict[tuple[str, tuple[str, ...], frozenset[str]], str] = {}
        for name, scenario in self.scenarios.items():
            url = URL(scenario["request"]["path"])
            self._by_request[_key(url.path, url.query)] = name
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        """Start serving; return the base URL."""
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = getattr(server, "sockets", [])[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.token is not None and request.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            return _status(401, "Unauthorized", "Unauthorized")
        name = self._by_request.get(_key(request.path, request.query))
        if name is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        scenario = self.scenarios[name]
        offered = [
            p.strip()
            for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if p.strip()
        ]
        self.served.append((name, offered))
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        answer = scenario["response"]
        if answer["status"] != 101:
            return self._refuse(scenario, upgrade)
        if not upgrade:
            return _status(400, "BadRequest", "Upgrade request required")
        return await self._play(request, name, scenario, offered)

    def _refuse(self, scenario: Mapping[str, Any], upgrade: bool) -> web.Response:
        """Answer a recorded refusal: the Status of the plain GET, or the upgrade's 500."""
        status = scenario["response"]["status"]
        plain = scenario["plain_get"]
        if upgrade and status != plain["status"]:  # the Succeeded pod: fails on the upgrade
            return web.Response(status=status, text=_ENDED_POD_TEXT)
        return web.Response(
            status=plain["status"], body=plain["body"].encode(), content_type="application/json"
        )

    async def _play(
        self, request: web.Request, name: str, scenario: Mapping[str, Any], offered: list[str]
    ) -> web.StreamResponse:
        chosen = next((p for p in (V5, V4) if p in offered), None)
        if self.strip_protocol:
            chosen = None
        ws = web.WebSocketResponse(protocols=(chosen,) if chosen else (), autoping=False)
        if chosen is None:
            ws.headers["Sec-WebSocket-Protocol"] = ""  # the real server sends it empty
        await ws.prepare(request)
        for frame in self._frames(name, scenario, chosen):
            if "dir" not in frame:
                continue
            if self.cut_status and frame.get("channel") == 3:
                continue
            if frame["dir"] == "sent":
                await self._expect(ws, frame_bytes(frame))
            elif frame.get("type") == "binary":
                await ws.send_bytes(frame_bytes(frame))
            elif frame.get("close_code") == 1000:
                await ws.close(code=1000)
            else:  # 1006: the connection drops, no close frame
                await _drop(request)
        return ws

    def _frames(
        self, name: str, scenario: Mapping[str, Any], chosen: str | None
    ) -> list[Mapping[str, Any]]:
        """Return the frames to play; the large scenario rebuilt from its note."""
        frames: list[Mapping[str, Any]] = list(scenario["frames"])
        if chosen is None and scenario["response"]["subprotocol"] is not None:
            # No channel protocol: the server sends the bare stdout frame and closes 1000.
            return [frames[0], {"dir": "recv", "type": "8", "close_code": 1000}]
        if name != _LARGE:
            return frames
        note = next(f["note"] for f in frames if "note" in f)
        lengths = json.loads(note[note.index("[") :])
        payloads = [n - 1 for n in lengths if n > 1]
        rebuilt: list[Mapping[str, Any]] = [frames[0]]
        left, i = _LARGE_SIZE, 0
        while left:
            size = min(payloads[i % len(payloads)], left)
            rebuilt.append({"dir": "recv", "type": "binary", "channel": 1, "data": "x" * size})
            left -= size
            i += 1
        return rebuilt + [f for f in frames if f.get("channel") == 3 or f.get("type") == "8"]

    async def _expect(self, ws: web.WebSocketResponse, expected: bytes) -> None:
        """Wait for the client's next data message (answering pings) and compare it."""
        while True:
            message = await ws.receive()
            if message.type is WSMsgType.PING:
                self.pings += 1
                if self.answer_pings:
                    await ws.pong(message.data)
                continue
            if message.type is WSMsgType.BINARY:
                if message.data != expected:
                    self.mismatches.append(f"expected {expected!r}, got {message.data!r}")
                return
            self.mismatches.append(f"expected {expected!r}, got a {message.type.name} message")
            return


async def _drop(request: web.Request) -> None:
    """End the connection without a close frame, once what was sent has left."""
    transport = request.transport
    if transport is None:
        return
    for _ in range(200):  # bounded: 2 s for the kernel to take the last frames
        if transport.get_write_buffer_size() == 0:
            break
        await asyncio.sleep(0.01)
    transport.abort()


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.Response(
        status=code, body=json.dumps(body).encode(), content_type="application/json"
    )
