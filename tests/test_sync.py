"""The blocking facade: a Session driven from synchronous code on a private loop thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from k8sjobs.steps.spec import Step
from k8sjobs.sync import BlockingSession
from k8sjobs.testing import FakeCluster

# The simulated kubelet "runs" a pod for this long.
QUICK = {"fake.k8sjobs.io/duration": "0.05"}


async def test_blocking_session_runs_steps_from_a_plain_thread(
    fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    def script() -> list[bool]:
        with BlockingSession(
            study="sync", kubeconfig=fake_cluster.kubeconfig_path, log_dir=tmp_path
        ) as s:
            handles = [
                s.submit(Step(name=f"b{i}", script="echo hi", annotations=QUICK)) for i in range(3)
            ]
            return [s.wait(h, timeout=10).ok for h in handles]

    fake_cluster.requests.reset()
    assert await asyncio.to_thread(script) == [True, True, True]
    # The shared watches (Jobs, Pods, Warning Events), none per step.
    assert fake_cluster.request_count("watch") <= 3
