"""Large blob bodies received on threads (take_body + SocketDrain): verified, retried, bounded."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from k8sjobs.artifacts import DigestMismatch, Registry, RegistryUnavailable, Timeouts
from k8sjobs.artifacts._media import Descriptor
from k8sjobs.artifacts._reference import Reference
from k8sjobs.artifacts._registry import TAKE_OVER_FROM
from k8sjobs.artifacts._streams import VerifyingWriter
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import FAST_RETRY

BODY = os.urandom(TAKE_OVER_FROM + 3 * 1024 * 1024 + 17)
DIGEST = "sha256:" + hashlib.sha256(BODY).hexdigest()


class BlobServer:
    """Serves one blob, misbehaving as told: ``cut`` (close the connection part-way),
    ``stall`` (fall silent part-way), ``corrupt`` (one byte flipped), for ``times`` requests."""

    def __init__(self) -> None:
        self.mode, self.times, self.requests = "", 0, 0

    async def blob(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        mode = self.mode if self.times > 0 else ""
        self.times -= 1
        body = BODY
        if mode == "corrupt":
            body = BODY[:-1] + bytes([BODY[-1] ^ 1])
        resp = web.StreamResponse(headers={"Content-Length": str(len(body))})
        await resp.prepare(request)
        half = len(body) // 2
        await resp.write(body[:half])
        if mode == "cut":
            assert request.transport is not None
            request.transport.close()
            return resp
        if mode == "stall":
            await asyncio.sleep(3)
        await resp.write(body[half:])
        return resp


@pytest.fixture
async def served() -> AsyncIterator[tuple[BlobServer, str]]:
    server = BlobServer()
    app = web.Application()
    app.router.add_get("/v2/t/blob/blobs/{digest}", server.blob)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield server, f"127.0.0.1:{port}"
    await runner.cleanup()


async def _fetch(location: str, dest: Path, digest: str = DIGEST) -> list[int]:
    seen: list[int] = []
    store = Registry(location, plain_http=True, retry=FAST_RETRY, timeouts=Timeouts(read=1))
    async with store:
        desc = Descriptor("application/octet-stream", digest, len(BODY))
        sink = VerifyingWriter.factory(dest, digest, len(BODY))
        await store.fetch_blob(Reference("t/blob", "v", None, location), desc, sink, seen.append)
    return seen


async def test_large_body_is_received_whole_and_verified(
    served: tuple[BlobServer, str], tmp_path: Path
) -> None:
    _, location = served
    seen = await _fetch(location, tmp_path / "blob")
    assert (tmp_path / "blob").read_bytes() == BODY
    assert sum(seen) == len(BODY)


async def test_body_cut_midway_is_fetched_again_from_scratch(
    served: tuple[BlobServer, str], tmp_path: Path
) -> None:
    server, location = served
    server.mode, server.times = "cut", 2
    seen = await _fetch(location, tmp_path / "blob")
    assert (tmp_path / "blob").read_bytes() == BODY
    assert sum(seen) == len(BODY)
    assert server.requests == 3


async def test_silent_server_mid_body_times_out_and_is_retried(
    served: tuple[BlobServer, str], tmp_path: Path
) -> None:
    server, location = served
    server.mode, server.times = "stall", 1
    await _fetch(location, tmp_path / "blob")
    assert (tmp_path / "blob").read_bytes() == BODY
    assert server.requests == 2


async def test_corrupt_body_is_refused(served: tuple[BlobServer, str], tmp_path: Path) -> None:
    server, location = served
    server.mode, server.times = "corrupt", 1
    with pytest.raises(DigestMismatch, match="content has digest"):
        await _fetch(location, tmp_path / "blob")


async def test_body_that_never_completes_gives_up(
    served: tuple[BlobServer, str], tmp_path: Path
) -> None:
    server, location = served
    server.mode, server.times = "cut", 100
    with pytest.raises(RegistryUnavailable, match="closed the connection"):
        await _fetch(location, tmp_path / "blob")


async def test_large_file_round_trips_through_the_registry(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    data = tmp_path / "big.bin"
    data.write_bytes(BODY)
    async with Registry(plain_registry.location, plain_http=True) as store:
        await store.push("socket/big:v1", [data])
        await store.pull("socket/big:v1", tmp_path / "out")
    assert (tmp_path / "out" / "big.bin").read_bytes() == BODY


async def test_large_directory_is_extracted_while_it_downloads(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "big.bin").write_bytes(BODY)
    (tree / "small.txt").write_text("small\n")
    async with Registry(plain_registry.location, plain_http=True) as store:
        await store.push("socket/dir:v1", [tree], compression="none")
        await store.pull("socket/dir:v1", tmp_path / "out")
    assert (tmp_path / "out" / "tree" / "sub" / "big.bin").read_bytes() == BODY
    assert (tmp_path / "out" / "tree" / "small.txt").read_text() == "small\n"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["tree"]
