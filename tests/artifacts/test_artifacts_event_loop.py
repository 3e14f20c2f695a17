"""Hashing, tar work and file I/O stay off the event loop: it never stalls during transfers."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from k8sjobs.artifacts import OCILayout, Registry

from .artifact_helpers import make_tree


async def _max_lag(stop: asyncio.Event) -> float:
    worst = 0.0
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        worst = max(worst, time.perf_counter() - start - 0.005)
    return worst


async def _watch(work: object) -> float:
    stop = asyncio.Event()
    watcher = asyncio.create_task(_max_lag(stop))
    await work  # type: ignore[misc]
    stop.set()
    return await watcher


async def test_registry_transfers_do_not_block_the_loop(registry: Registry, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 * 1024 * 1024))
    tree = make_tree(tmp_path / "tree")
    async with registry:
        push_lag = await _watch(registry.push("lag/x:v1", [big, tree]))
        pull_lag = await _watch(registry.pull("lag/x:v1", tmp_path / "out"))
    assert push_lag < 0.1 and pull_lag < 0.1, (push_lag, pull_lag)


async def test_layout_transfers_do_not_block_the_loop(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 * 1024 * 1024))
    store = OCILayout(tmp_path / "layout")
    push_lag = await _watch(store.push("lag/x:v1", [big]))
    pull_lag = await _watch(store.pull("lag/x:v1", tmp_path / "out"))
    assert push_lag < 0.1 and pull_lag < 0.1, (push_lag, pull_lag)
