"""Fixtures for the Kubernetes backend tests: a fast fake cluster and a session on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from k8sjobs.testing import ControllerConfig, FakeCluster

FAST = ControllerConfig(batch_period=0.02, backoff_base=0.05, backoff_max=0.5, time_scale=0.2)


def _work_around_unhashable_watcher() -> None:
    # Fake-cluster bug (reported): Store.watch() adds a @dataclass Watcher (unhashable,
    # eq=True) to a set, so every watch request fails with TypeError. Identity hashing is
    # what the store means; remove this once k8sjobs/testing/_store.py is fixed.
    from k8sjobs.testing import _store

    if getattr(_store, "Watcher", None) is not None and _store.Watcher.__hash__ is None:
        _store.Watcher.__hash__ = object.__hash__  # type: ignore[method-assign, assignment]
        _store.Watcher.__eq__ = object.__eq__  # type: ignore[method-assign, assignment]


_work_around_unhashable_watcher()


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a started fake cluster with fast controller timings and short bookmarks."""
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5
    ) as fake:
        yield fake
