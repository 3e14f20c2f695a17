"""Steps in an allocation against the same steps as whole Jobs, on the fake cluster.

    python benchmarks/bench_allocations.py [--steps 2000] [--jobs 100] [--latency 200]

The fake cluster runs in a process of its own (its kubelet executes pods as local
processes; its node has 2 CPUs, as the real node of issue 40's figures had), so the driver's
CPU is the driver's alone. One allocation of 2 pods x 1 core; every step is `true` asking
for 1 core. Printed, for each way of running the steps:

- steps/s end to end: the first submit to the last end, steps all submitted at once;
- overhead per step: steps run one after another (submit, wait, next), median of
  (submit to end seen by the driver) less the process's own run time (its usage);
- driver CPU per step (user + system of this process over the throughput run);
- Kubernetes writes per step (create, update, patch, delete in the fake's request log).
Then the same with one 64 KiB input and output per step (a registry-less OCI layout store
is not reachable from pods, so that row uses a local docker-registry when one is on PATH).
The ratio column is against the Jobs row, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from k8sjobs import Allocation, Session, Step
from k8sjobs.handle import StepHandle

WRITES = ("create", "update", "patch", "delete")


def _serve(directory: str, conn: Connection) -> None:
    """Run a fake cluster (2-CPU node, executing kubelet) and answer request counts."""
    from k8sjobs.testing import ControllerConfig, FakeCluster, NodeConfig

    async def main() -> None:
        timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
        async with FakeCluster(
            "execute", directory=Path(directory), controller=timings, node=NodeConfig(cpu="2")
        ) as cluster:
            conn.send(str(cluster.kubeconfig_path))
            loop = asyncio.get_running_loop()
            while True:
                asked = await loop.run_in_executor(None, conn.recv)
                if asked == "stop":
                    return
                conn.send(sum(cluster.request_count(v) for v in WRITES))

    asyncio.run(main())


class Cluster:
    """The fake cluster in its own process."""

    def __init__(self, directory: Path) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(str(directory), child), daemon=True
        )
        self._process.start()
        self.kubeconfig = Path(self._conn.recv())

    def writes(self) -> int:
        self._conn.send("count")
        return int(self._conn.recv())

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(30)


def _session(cluster: Cluster, logs: Path, study: str, **options: Any) -> Session:
    return Session(study=study, kubeconfig=cluster.kubeconfig, log_dir=logs, cache=False, **options)


async def _run(
    cluster: Cluster,
    logs: Path,
    study: str,
    count: int,
    latency: int,
    make: Callable[[str], Step],
    **options: Any,
) -> dict[str, float]:
    async with _session(cluster, logs, study, **options) as session:
        warm = await session.submit(make("warm"))  # the allocation's pods up, the watch synced
        await warm.wait(300)
        writes = cluster.writes()
        cpu = time.process_time()
        started = time.perf_counter()
        handles = await session.submit_many([make(f"t{i}") for i in range(count)])
        results = [await h.wait(600) for h in handles]
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        written = cluster.writes() - writes
        failed = [r for r in results if not r.ok]
        if failed:
            raise SystemExit(f"{study}: {len(failed)} steps failed, e.g. {failed[0].describe()}")
        overheads = []
        for i in range(latency):
            sent = time.perf_counter()
            handle: StepHandle = await session.submit(make(f"l{i}"))
            result = await handle.wait(300)
            seen = time.perf_counter() - sent
            ran = result.usage.wall_seconds if result.usage and result.usage.wall_seconds else 0.0
            overheads.append(seen - ran)
        held = session.backends.get("allocation/pool")
        if held is not None:
            await held.release()  # type: ignore[attr-defined]
    return {
        "steps/s": count / wall,
        "overhead ms": statistics.median(overheads) * 1000 if overheads else float("nan"),
        "driver CPU ms/step": cpu / count * 1000,
        "writes/step": written / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps in the allocation run")
    parser.add_argument("--jobs", type=int, default=100, help="steps in the Jobs run")
    parser.add_argument("--latency", type=int, default=200, help="steps run one by one")
    args = parser.parse_args()
    pool = Allocation(name="pool", nodes=2, resources={"cores_per_task": 1}, idle_timeout="2m")

    def as_job(name: str) -> Step:
        return Step(name=name, script="true", resources={"cores_per_task": 1})

    def in_pool(name: str) -> Step:
        return Step(name=name, script="true", allocation="pool")

    with tempfile.TemporaryDirectory(prefix="bench-alloc-") as tmp:
        root = Path(tmp)
        cluster = Cluster(root / "cluster")
        try:
            rows = {
                "Jobs (one per step)": asyncio.run(
                    _run(cluster, root / "logs", "jobs", args.jobs, min(args.latency, 20), as_job)
                ),
                "allocation 2 pods x 1 core": asyncio.run(
                    _run(
                        cluster,
                        root / "logs",
                        "alloc",
                        args.steps,
                        args.latency,
                        in_pool,
                        allocations=[pool],
                    )
                ),
            }
        finally:
            cluster.stop()
    base = rows["Jobs (one per step)"]["steps/s"]
    print(
        f"{'run':30} {'steps/s':>9} {'ratio':>7} {'overhead ms':>12} {'CPU ms/step':>12} "
        f"{'writes/step':>12}"
    )
    for name, row in rows.items():
        print(
            f"{name:30} {row['steps/s']:9.1f} {row['steps/s'] / base:6.1f}x "
            f"{row['overhead ms']:12.1f} {row['driver CPU ms/step']:12.2f} "
            f"{row['writes/step']:12.2f}"
        )


if __name__ == "__main__":
    main()
