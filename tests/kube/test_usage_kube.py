"""A step's usage reaches the driver in the Pod watch it already has: no request of its own.

The fake cluster's execute kubelet runs the step's real pod (the main container's wrapper
included) and carries the main container's termination message in the pod status, as a
kubelet reads terminationMessagePath.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from k8sjobs.session import Session
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster
from k8sjobs.usage import USAGE_TAG

from .conftest import FAST

MIB = 1024 * 1024
ALLOCATE = 'block = b"x" * (200 * 1024 * 1024)\nprint(len(block))\n'
SPIN = """
import time
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
"""


@pytest_asyncio.fixture
async def executing(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async with FakeCluster(
        "execute", directory=tmp_path / "fake", controller=FAST, bookmark_interval=0.5
    ) as fake:
        yield fake


async def test_usage_arrives_through_the_pod_status(executing: FakeCluster, tmp_path: Path) -> None:
    async with Session(study="use", kubeconfig=executing.kubeconfig_path) as s:
        big = await s.submit(Step(name="big", shell="python", script=ALLOCATE))
        spin = await s.submit(Step(name="spin", shell="python", script=SPIN))
        big_result, spin_result = await big.wait(120), await spin.wait(120)
    assert big_result.ok and spin_result.ok, (big_result.describe(), spin_result.describe())
    assert big_result.usage is not None and spin_result.usage is not None
    peak = big_result.usage.memory_peak
    assert peak is not None and 200 * MIB <= peak <= 220 * MIB, big_result.usage
    cpu, wall = spin_result.usage.cpu_seconds, spin_result.usage.wall_seconds
    assert cpu is not None and wall is not None and 1.0 <= cpu <= wall * 1.05, spin_result.usage
    # The figures came in the pod status the watch carried: the pod's terminated state...
    pod = executing.objects("pods", "default")[0]
    states = [c["state"]["terminated"] for c in pod["status"]["containerStatuses"]]
    assert any(USAGE_TAG in (t.get("message") or "") for t in states)
    # ...and the driver asked nothing of a pod: no GET, no log read, only its LIST and WATCH.
    assert executing.request_count("get") == 0
    assert executing.request_count("list", "pods") == 1
    assert executing.request_count("watch", "pods") >= 1
