"""Submit throughput, waiting cost and completion latency of k8sjobs against the fake cluster.

    python benchmarks/bench_submit.py            # full run (1,000-step latency, 10,000 steps)
    python benchmarks/bench_submit.py --steps 200 --scale 1000   # quick run

The fake cluster runs in its own process (so the driver's CPU and RSS are its own); with
KUBECONFIG=... --real, the throughput rows are measured against that API server too.
Latency is measured against a reference: a raw watch in the driver process records when
each Job's terminal condition reaches the client; "noticed" is when the handle ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from k8sjobs.kube import KubeClient, load_config
from k8sjobs.render import Target, render
from k8sjobs.session import Session
from k8sjobs.spec import Step

SERVER = """
import asyncio, json, sys
from k8sjobs.testing import ControllerConfig, FakeCluster, _store
if _store.Watcher.__hash__ is None:  # fake-cluster bug workaround (unhashable Watcher)
    _store.Watcher.__hash__ = object.__hash__; _store.Watcher.__eq__ = object.__eq__

async def main():
    timings = ControllerConfig(batch_period=0.01, backoff_base=0.1)
    async with FakeCluster("simulate", controller=timings, validation="off") as c:
        print(json.dumps({"kubeconfig": str(c.kubeconfig_path)}), flush=True)
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if line == "reset":
                c.requests.reset(); print("{}", flush=True)
            elif line == "counts":
                out = {f"{k.verb} {k.resource}{'/' + k.subresource if k.subresource else ''}": n
                       for k, n in c.requests.counts.items()}
                print(json.dumps(out), flush=True)
asyncio.run(main())
"""


class Server:
    """The fake cluster in a child process, driven over its stdin."""

    async def start(self) -> str:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SERVER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return str(json.loads(await self._line())["kubeconfig"])

    async def ask(self, command: str) -> dict[str, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()
        return dict(json.loads(await self._line()))

    async def _line(self) -> str:
        assert self.proc.stdout is not None
        return (await self.proc.stdout.readline()).decode()

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.wait()


def steps(prefix: str, n: int, duration: float = 0.05) -> list[Step]:
    notes = {"fake.k8sjobs.io/duration": str(duration)}
    return [Step(name=f"{prefix}{i}", script="true", annotations=notes) for i in range(n)]


async def raw_pairs(kubeconfig: str, n: int, study: str) -> float:
    """Return ConfigMap+Job pairs/s for a bare aiohttp POST loop (64 in flight)."""
    config = await load_config(kubeconfig)
    bodies = [render(s, Target(study=study)) for s in steps("raw", n)]
    headers = {"Content-Type": "application/json"}
    if config.authorization:
        headers["Authorization"] = config.authorization
    gate = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=config.ssl)
    ) as http:

        async def one(m: Any) -> None:
            async with gate:
                for path, body in (("/api/v1", m.configmap), ("/apis/batch/v1", m.job)):
                    url = f"{config.host}{path}/namespaces/default/{body['kind'].lower()}s"
                    async with http.post(url, data=json.dumps(body), headers=headers) as r:
                        await r.read()

        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in bodies))
    return n / (time.perf_counter() - started)


async def typed_pairs(kubeconfig: str, n: int, study: str) -> float:
    """Return pairs/s through kubernetes_asyncio's typed API (models deserialised)."""
    from kubernetes_asyncio import client, config

    await config.load_kube_config(kubeconfig)
    bodies = [render(s, Target(study=study)) for s in steps("typed", n)]
    gate = asyncio.Semaphore(64)
    async with client.ApiClient() as api:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

        async def one(m: Any) -> None:
            async with gate:
                await core.create_namespaced_config_map("default", m.configmap)
                await batch.create_namespaced_job("default", m.job)

        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in bodies))
    return n / (time.perf_counter() - started)


async def k8sjobs_submit(kubeconfig: str, n: int, study: str) -> tuple[float, Session]:
    """Return steps/s through Session.submit_many (ConfigMap, Job, ownerReference patch)."""
    s = Session(study=study, kubeconfig=kubeconfig, options={"qps": 0})
    await s.start()
    await s.attach()  # start the watch before timing: it is set up once per study
    started = time.perf_counter()
    await s.submit_many(steps("k", n), limit=64)
    return n / (time.perf_counter() - started), s


async def reference_watch(kubeconfig: str, study: str, seen: dict[str, float]) -> None:
    """Record when each Job's terminal condition reaches a raw watch in this process."""
    from k8sjobs.names import label_value

    async with KubeClient(await load_config(kubeconfig)) as c:
        params = {"watch": "true", "labelSelector": f"k8sjobs.io/study={label_value(study)}"}
        from k8sjobs.kube.client import JOBS

        path = JOBS.path("default")
        async for line in c.stream_lines(path, params, what="watch", kind=JOBS, verb="watch"):
            obj = json.loads(line)["object"]
            conds = (obj.get("status") or {}).get("conditions") or []
            name = obj["metadata"]["name"]
            if name not in seen and any(
                x["type"] in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
                and x["status"] == "True"
                for x in conds
            ):
                seen[name] = time.perf_counter()


async def latency(kubeconfig: str, server: Server, n: int) -> dict[str, float]:
    """Return p50/p99 ms between the reference watch and the handle ending, and costs."""
    seen: dict[str, float] = {}
    ref = asyncio.create_task(reference_watch(kubeconfig, "lat", seen))
    await asyncio.sleep(0.3)
    s = Session(study="lat", kubeconfig=kubeconfig, options={"qps": 0})
    await s.start()
    handles = await s.submit_many(steps("l", n, duration=1.0), limit=64)
    noticed: dict[str, float] = {}
    for h in handles:
        h.add_listener(
            lambda h: noticed.setdefault(h.object_name, time.perf_counter()) if h.done else None
        )
    await server.ask("reset")
    await s.gather(*handles, timeout=600)
    counts = await server.ask("counts")
    await s.aclose()
    ref.cancel()
    delays = sorted((noticed[k] - seen[k]) * 1000 for k in noticed if k in seen)
    reads = sum(v for k, v in counts.items() if k.startswith(("get jobs", "list", "get pods ")))
    return {
        "p50": statistics.median(delays),
        "p99": delays[int(len(delays) * 0.99) - 1],
        "reads_per_step": reads / n,
        "watches": counts.get("watch jobs", 0) + counts.get("watch pods", 0),
    }


async def polling(kubeconfig: str, server: Server, n: int, interval: float) -> dict[str, float]:
    """Return requests/step and detection delay for per-job polling (Airflow/snakemake)."""
    manifests = [render(s, Target(study="poll")) for s in steps("p", n, duration=1.0)]
    seen: dict[str, float] = {}
    ref = asyncio.create_task(reference_watch(kubeconfig, "poll", seen))
    await asyncio.sleep(0.3)
    from k8sjobs.kube.client import CONFIGMAPS, JOBS

    async with KubeClient(await load_config(kubeconfig)) as c:
        for m in manifests:
            await c.create(CONFIGMAPS, "default", m.configmap)
            await c.create(JOBS, "default", m.job)
        await server.ask("reset")
        detected: dict[str, float] = {}

        async def poll(name: str) -> None:
            while True:
                job = await c.get(JOBS, "default", name)
                if any(
                    x["type"] in ("Complete", "Failed")
                    for x in (job.get("status") or {}).get("conditions") or []
                ):
                    detected[name] = time.perf_counter()
                    return
                await asyncio.sleep(interval)

        await asyncio.gather(*(poll(m.name) for m in manifests))
    counts = await server.ask("counts")
    ref.cancel()
    delays = sorted((detected[k] - seen[k]) * 1000 for k in detected if k in seen)
    return {
        "reads_per_step": counts.get("get jobs", 0) / n,
        "p50": statistics.median(delays),
        "p99": delays[int(len(delays) * 0.99) - 1],
    }


async def scale(kubeconfig: str, n: int) -> dict[str, float]:
    """Return driver peak RSS and CPU seconds per 1,000 steps for ``n`` concurrent steps."""
    cpu0 = time.process_time()
    s = Session(study="scale", kubeconfig=kubeconfig, options={"qps": 0})
    await s.start()
    handles = await s.submit_many(steps("x", n, duration=2.0), limit=128)
    results = await s.gather(*handles, timeout=1200)
    await s.aclose()
    return {
        "terminal": sum(r.state.terminal for r in results),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_per_1000": (time.process_time() - cpu0) / n * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000, help="steps for throughput/latency")
    parser.add_argument("--scale", type=int, default=10000, help="concurrent steps for RSS/CPU")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    args = parser.parse_args()
    server = Server()
    kubeconfig = await server.start()
    try:
        n = args.steps
        raw = await raw_pairs(kubeconfig, n, "raw")
        typed = await typed_pairs(kubeconfig, n, "typed")
        ours, s = await k8sjobs_submit(kubeconfig, n, "ours")
        await s.aclose()
        print(f"| measure (fake cluster, {n} steps) | value |")
        print("|---|---|")
        print(f"| raw aiohttp POST loop, ConfigMap+Job pairs/s | {raw:.0f} |")
        print(f"| kubernetes_asyncio typed API, pairs/s | {typed:.0f} ({typed / raw:.0%} of raw) |")
        share = f"{ours / raw:.0%} of raw; floor 90%"
        print(f"| k8sjobs submit (3 writes/step), steps/s | {ours:.0f} ({share}) |")
        lat = await latency(kubeconfig, server, n)
        print(
            "| waiting: reads per step / watch (re)connections opened while waiting | "
            f"{lat['reads_per_step']:.2f} / {lat['watches']:.0f} |"
        )
        print(
            "| completion noticed after reference watch, p50 / p99 ms | "
            f"{lat['p50']:.1f} / {lat['p99']:.1f} (floor p99 <= 100) |"
        )
        poll = await polling(kubeconfig, server, min(n, 500), args.poll_interval)
        print(
            f"| per-job polling every {args.poll_interval:g}s: reads per step | "
            f"{poll['reads_per_step']:.2f} |"
        )
        print(
            f"| per-job polling: detection p50 / p99 ms | {poll['p50']:.0f} / {poll['p99']:.0f} |"
        )
        big = await scale(kubeconfig, args.scale)
        print(f"| {args.scale} concurrent steps: terminal | {big['terminal']:.0f} |")
        print(f"| driver peak RSS MB (floor < 500) | {big['rss_mb']:.0f} |")
        print(f"| driver CPU s per 1,000 steps | {big['cpu_per_1000']:.2f} |")
    finally:
        await server.stop()
    if os.environ.get("KUBECONFIG") and "--real" in sys.argv:
        print("real cluster:", await raw_pairs(os.environ["KUBECONFIG"], 100, "realraw"))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    asyncio.run(main())
