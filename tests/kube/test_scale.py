"""Many concurrent steps in one driver: all finish, and the API bill does not grow per step.

The 10,000-step run is in the default suite (CI runs it); the 100,000-step run is marked
``slow`` (``pytest -m slow``). The driver's peak RSS and CPU per 1,000 steps are shown by
``benchmarks/bench_submit.py --only scale``, not asserted here (no timing in tests).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from k8sjobs import Session, Step
from k8sjobs.testing import ControllerConfig, FakeCluster, NodeConfig

ROOM = NodeConfig(cpu="1000000", memory="10000Ti")  # every step runs at once


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(10_000, marks=pytest.mark.timeout(1800)),
        pytest.param(100_000, marks=[pytest.mark.slow, pytest.mark.timeout(4 * 3600)]),
    ],
)
async def test_every_step_ends_on_three_writes_and_one_list_and_watch_per_kind(
    tmp_path: Path, n: int
) -> None:
    timings = ControllerConfig(batch_period=0.05, backoff_base=0.1)
    notes = {"fake.k8sjobs.io/duration": "1"}
    batch = [Step(name=f"x{i}", script="true", annotations=notes) for i in range(n)]
    async with FakeCluster(
        "simulate", directory=tmp_path, controller=timings, node=ROOM, validation="off"
    ) as fake:
        async with Session(study="scale", kubeconfig=fake.kubeconfig_path, options={"qps": 0}) as s:
            handles = await s.submit_many(batch, limit=128)
            results = await s.gather(*handles, timeout=4 * 3600)
        counts = Counter(
            {
                f"{k.verb} {k.resource}{'/' + k.subresource if k.subresource else ''}": v
                for k, v in fake.requests.counts.items()
            }
        )
    assert sum(r.ok for r in results) == n, Counter(str(r.state) for r in results)
    writes = sum(v for k, v in counts.items() if k.startswith(("create", "patch", "update")))
    assert writes <= 3 * n, counts
    # One list per kind for the study's namespace (and the start's probe, one LIST of Jobs
    # per session) and no per-step reads; the watch of each kind may be resumed after a
    # timeout on a loaded machine, but never once per step.
    assert {k: v for k, v in counts.items() if k.startswith(("list", "get"))} == {
        "list jobs": 2,
        "list pods": 1,
        "list events": 1,
    }, counts
    assert 1 <= counts["watch jobs"] <= 10 and 1 <= counts["watch pods"] <= 10, counts


async def test_submit_many_runs_limit_senders_not_a_task_per_step(cluster: FakeCluster) -> None:
    """100,000 steps waiting their turn as tasks cost the driver ~200 MB: the tasks alive
    while submit_many runs stay near ``limit``, whatever the number of steps."""
    batch = [Step(name=f"t{i}", script="true") for i in range(300)]
    options = {"qps": 0}
    async with Session(study="tasks", kubeconfig=cluster.kubeconfig_path, options=options) as s:
        before = len(asyncio.all_tasks())
        submitting = asyncio.create_task(s.submit_many(batch, limit=4))
        most = 0
        while not submitting.done():
            most = max(most, len(asyncio.all_tasks()))
            await asyncio.sleep(0)
        handles = await submitting
        results = await s.gather(*handles, timeout=600)
    assert all(r.ok for r in results), Counter(str(r.state) for r in results)
    # The submit and its senders, the in-process fake server's connection handlers, the
    # session's watches: a few dozen at most, where a task per step made it 300 more.
    assert most - before < 60, (before, most)
