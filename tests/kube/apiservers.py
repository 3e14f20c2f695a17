"""API servers that are not there, for the tests of a session's start and of outages.

Each is a real socket on loopback: a port nothing listens on, a server that accepts and never
answers, one that answers every request with a fixed Status; ``kubeconfig_for`` points a
kubeconfig at any of them.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import yaml
from aiohttp import web


def free_port() -> int:
    """Return a loopback port that nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def kubeconfig_for(path: Path, server: str, *, token: str = "t0ken-for-tests") -> Path:
    """Write a kubeconfig whose one context points at ``server``; return its path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "c", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


@asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """Yield the URL of a server that accepts connections and never sends a byte."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@asynccontextmanager
async def answering(status: int, reason: str, message: str) -> AsyncIterator[str]:
    """Yield the URL of a server that answers every request with this Status."""

    async def answer(request: web.Request) -> web.Response:
        body = {"kind": "Status", "status": "Failure", "message": message, "reason": reason}
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
