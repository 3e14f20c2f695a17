"""pytest fixtures for the fake cluster: `fake_cluster` (simulated pods) and
`fake_cluster_execute` (pods run as local processes).

Registered as the `k8sjobs` pytest11 entry point, so any project that installs k8sjobs gets
them. The module stays import-light: the cluster is imported when a fixture is first used.
Both fixtures use fast controller timings (50 ms status batching, 0.2 s pod-recreation
backoff) so tests do not wait the real cluster's seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest_asyncio

if TYPE_CHECKING:
    from . import FakeCluster


def _fast_cluster(kubelet: str, directory: Path) -> FakeCluster:
    from . import ControllerConfig, FakeCluster

    timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
    return FakeCluster(kubelet, directory=directory, controller=timings)


@pytest_asyncio.fixture
async def fake_cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a started FakeCluster whose kubelet simulates pods; its kubeconfig is
    `fake_cluster.kubeconfig_path`."""
    async with _fast_cluster("simulate", tmp_path) as cluster:
        yield cluster


@pytest_asyncio.fixture
async def fake_cluster_execute(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a started FakeCluster whose kubelet runs pods as local processes."""
    async with _fast_cluster("execute", tmp_path) as cluster:
        yield cluster
