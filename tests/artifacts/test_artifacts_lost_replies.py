"""A request the registry applied whose reply was lost (the connection closed before the
answer came back) is retried without failing: for every request of a push, of a pull and of a
delete, through a fault proxy in front of a real docker-registry.

The client cannot tell such a request from one that never arrived, so a retry must hold in
both cases: an upload retried in a fresh session (the old one is spent), a blob checked with
HEAD before it is sent again, a DELETE whose retry finds nothing left to delete.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k8sjobs.artifacts import ArtifactNotFound, DigestCache, Registry, Timeouts
from k8sjobs.testing.registry import Fault, FaultProxy, RegistryServer

from .artifact_helpers import FAST_RETRY, make_tree, same_tree


def _store(location: str, cache: Path) -> Registry:
    # Small chunks and a small monolithic limit, so a push holds every kind of upload:
    # a monolithic PUT, chunked PATCHes with a final PUT, a streamed archive, the config.
    return Registry(
        location,
        plain_http=True,
        retry=FAST_RETRY,
        timeouts=Timeouts(connect=2, read=10),
        chunk_size=64 * 1024,
        monolithic_limit=32 * 1024,
        concurrency=1,  # one request at a time: the n-th request is the same one every run
        cache=DigestCache(cache),
    )


def _inputs(root: Path) -> list[Path]:
    small, large = root / "small.txt", root / "large.bin"
    root.mkdir()
    small.write_bytes(b"small\n")
    large.write_bytes(os.urandom(200 * 1024 + 7))
    return [small, large, make_tree(root / "tree")]


def _same_output(inputs: list[Path], out: Path) -> bool:
    return all(
        same_tree(path, out / path.name)
        if path.is_dir()
        else (out / path.name).read_bytes() == path.read_bytes()
        for path in inputs
    )


async def _count_requests(proxy: FaultProxy, operation: object) -> int:
    before = len(proxy.log)
    await operation  # type: ignore[misc]
    return len(proxy.log) - before


async def test_every_push_request_may_lose_its_reply(
    proxy: FaultProxy, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    inputs = _inputs(tmp_path / "in")
    async with _store(proxy.location, tmp_path / "clean.sqlite") as store:
        clean = await store.push("lost/push-clean:v1", inputs)
        count = len(proxy.log)
    assert count >= 10, proxy.log  # HEADs, POSTs, PATCHes, PUTs of four blobs and a manifest
    methods = {method for method, _, _ in proxy.log}
    assert {"HEAD", "POST", "PATCH", "PUT"} <= methods
    for index in range(count):
        fault = proxy.inject(Fault("lose_reply", skip=index))
        reference = f"lost/push-{index}:v1"
        async with _store(proxy.location, tmp_path / f"c{index}.sqlite") as store:
            pushed = await store.push(reference, inputs)
        assert fault.times == 0, f"request {index} never came"
        # The artifact is the clean push's, byte for byte, read straight from the registry.
        assert pushed.digest == clean.digest, index
        async with _store(plain_registry.location, tmp_path / "read.sqlite") as direct:
            assert await direct.resolve(reference) == clean.digest
            pulled = await direct.pull(reference, tmp_path / f"out{index}")
        assert pulled.digest == clean.digest
        assert _same_output(inputs, tmp_path / f"out{index}"), index


async def test_every_pull_request_may_lose_its_reply(
    proxy: FaultProxy, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    inputs = _inputs(tmp_path / "in")
    async with _store(plain_registry.location, tmp_path / "c.sqlite") as store:
        pushed = await store.push("lost/pull:v1", inputs)
    async with _store(proxy.location, tmp_path / "c.sqlite") as store:
        count = await _count_requests(proxy, store.pull("lost/pull:v1", tmp_path / "clean"))
        assert count >= 4, proxy.log  # the manifest and three layers
        for index in range(count):
            fault = proxy.inject(Fault("lose_reply", skip=index))
            pulled = await store.pull("lost/pull:v1", tmp_path / f"out{index}")
            assert fault.times == 0, f"request {index} never came"
            assert pulled.digest == pushed.digest
            assert _same_output(inputs, tmp_path / f"out{index}"), index


async def test_a_delete_whose_reply_is_lost_still_deletes(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    inputs = _inputs(tmp_path / "in")
    async with _store(proxy.location, tmp_path / "c.sqlite") as store:
        await store.push("lost/delete:v1", inputs)
        fault = proxy.inject(Fault("lose_reply", method="DELETE"))
        await store.delete("lost/delete:v1")
        assert fault.times == 0
        assert not await store.exists("lost/delete:v1")
        with pytest.raises(ArtifactNotFound):
            await store.delete("lost/delete:v1")
