"""Fixtures for the Kubernetes backend tests: a fast fake cluster and a session on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from k8sjobs.testing import ControllerConfig, FakeCluster

FAST = ControllerConfig(batch_period=0.02, backoff_base=0.05, backoff_max=0.5, time_scale=0.2)


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a started fake cluster with fast controller timings and short bookmarks."""
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=FAST, bookmark_interval=0.5
    ) as fake:
        yield fake
