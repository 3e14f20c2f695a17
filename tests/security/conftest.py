"""Fixtures for the security tests: a fast fake cluster, and one that enforces k8sjobs' Role."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from k8sjobs.testing import ControllerConfig, FakeCluster

from .sechelpers import Rbac

FAST = ControllerConfig(batch_period=0.02, backoff_base=0.05, backoff_max=0.5, time_scale=0.2)


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a started fake cluster (simulated pods) with fast timings."""
    (tmp_path / "cluster").mkdir()
    async with FakeCluster(
        "simulate", directory=tmp_path / "cluster", controller=FAST, bookmark_interval=0.5
    ) as fake:
        yield fake


@pytest_asyncio.fixture
async def rbac(cluster: FakeCluster) -> Rbac:
    """Make ``cluster`` refuse, with a real 403, whatever k8sjobs' Role does not grant."""
    authorizer = Rbac()
    authorizer.install(cluster)
    return authorizer
