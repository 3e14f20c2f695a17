"""The blocking facade: a Session driven from synchronous code on a private loop thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kubehelpers import step

from k8sjobs.sync import BlockingSession
from k8sjobs.testing import FakeCluster


async def test_blocking_session_runs_steps_from_a_plain_thread(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    def script() -> list[bool]:
        options = {"study": "sync", "kubeconfig": cluster.kubeconfig_path, "log_dir": tmp_path}
        with BlockingSession(**options) as s:
            handles = [s.submit(step(f"b{i}")) for i in range(3)]
            return [s.wait(h, timeout=10).ok for h in handles]

    cluster.requests.reset()
    assert await asyncio.to_thread(script) == [True, True, True]
    assert cluster.request_count("watch") <= 2
