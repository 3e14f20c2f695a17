"""Through a fault proxy: retries neither corrupt nor lose data, and give up after a bounded
number of attempts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k8sjobs.artifacts import DigestCache, Registry, RegistryUnavailable, RetryPolicy, Timeouts
from k8sjobs.testing.registry import Fault, FaultProxy

from .artifact_helpers import FAST_RETRY, CountingRetry, make_tree, same_tree


def _store(proxy: FaultProxy, tmp_path: Path, retry: RetryPolicy = FAST_RETRY) -> Registry:
    return Registry(
        proxy.location,
        plain_http=True,
        retry=retry,
        timeouts=Timeouts(connect=2, read=0.5),
        chunk_size=256 * 1024,
        monolithic_limit=64 * 1024,
        cache=DigestCache(tmp_path / "c.sqlite"),
    )


def _data(tmp_path: Path, size: int = 1024 * 1024 + 5) -> Path:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(size))
    return f


async def test_connection_dropped_mid_upload_restarts_the_blob(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    data = _data(tmp_path)
    fault = proxy.inject(
        Fault("drop", method="PATCH", path_pattern="/blobs/uploads/", after_bytes=100_000)
    )
    async with _store(proxy, tmp_path) as store:
        await store.push("faults/drop:v1", [data])
        await store.pull("faults/drop:v1", tmp_path / "out")
    assert fault.times == 0
    assert (tmp_path / "out" / "data.bin").read_bytes() == data.read_bytes()


async def test_5xx_on_reads_is_retried(proxy: FaultProxy, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    async with _store(proxy, tmp_path) as store:
        await store.push("faults/5xx:v1", [tree])
        proxy.inject(Fault("status", method="GET", path_pattern="/manifests/", status=503))
        proxy.inject(Fault("status", method="GET", path_pattern="/blobs/", status=502, times=2))
        await store.pull("faults/5xx:v1", tmp_path / "out")
    assert same_tree(tree, tmp_path / "out" / "tree")


async def test_5xx_on_upload_restarts_from_a_fresh_session(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    data = _data(tmp_path)
    proxy.inject(Fault("status", method="PUT", path_pattern="/blobs/uploads/", status=500))
    async with _store(proxy, tmp_path) as store:
        await store.push("faults/put:v1", [data])
        await store.pull("faults/put:v1", tmp_path / "out")
    assert (tmp_path / "out" / "data.bin").read_bytes() == data.read_bytes()


async def test_stalled_download_times_out_and_is_retried(proxy: FaultProxy, tmp_path: Path) -> None:
    data = _data(tmp_path)
    async with _store(proxy, tmp_path) as store:
        await store.push("faults/stall:v1", [data])
        proxy.inject(Fault("stall", method="GET", path_pattern="/blobs/sha256", stall_seconds=1.5))
        await store.pull("faults/stall:v1", tmp_path / "out")
    assert (tmp_path / "out" / "data.bin").read_bytes() == data.read_bytes()


async def test_persistent_5xx_gives_up_in_bounded_time_leaving_no_file(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    data = _data(tmp_path, 1000)
    async with _store(proxy, tmp_path) as store:
        await store.push("faults/down:v1", [data])
    retry = CountingRetry(**vars(FAST_RETRY))
    async with _store(proxy, tmp_path, retry) as store:
        proxy.inject(Fault("status", method="GET", path_pattern="/blobs/", status=503, times=100))
        seen = len(proxy.log)
        with pytest.raises(RegistryUnavailable, match=f"503.*after {retry.attempts} attempts"):
            await store.pull("faults/down:v1", tmp_path / "out")
    # Bounded by count, not by a clock: the policy's attempts, its pauses, nothing more.
    assert [m for m, path, _ in proxy.log[seen:] if "/blobs/" in path] == ["GET"] * 4
    retry.check_bounded()
    assert list((tmp_path / "out").iterdir()) == []


async def test_directory_upload_dropped_midway_is_archived_and_sent_again(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    (tree / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    fault = proxy.inject(
        Fault("drop", method="PATCH", path_pattern="/blobs/uploads/", after_bytes=500_000)
    )
    async with _store(proxy, tmp_path) as store:
        pushed = await store.push("faults/dir:v1", [tree], compression="none")
        await store.pull("faults/dir:v1", tmp_path / "out")
    assert fault.times == 0
    assert pushed.bytes_sent == pushed.layers[0].size
    assert same_tree(tree, tmp_path / "out" / "tree")
