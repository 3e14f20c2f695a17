"""Submit throughput, waiting cost and completion latency of k8sjobs against the fake cluster.

    python benchmarks/bench_submit.py            # full run (1,000-step latency, 10,000 steps)
    python benchmarks/bench_submit.py --steps 200 --scale 1000   # quick run

The fake cluster runs in its own process (so the driver's CPU and RSS are its own); each
row gets a fresh server process, so no row pays for the Jobs an earlier row left running.
Latency runs from the moment the fake server stores a Job's terminal condition to the
moment the driver's handle ends (both wall-clock times on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from k8sjobs.handle import StepHandle
from k8sjobs.kube import KubeClient, load_config
from k8sjobs.names import label_value
from k8sjobs.render import Target, render
from k8sjobs.session import Session
from k8sjobs.spec import Step

SERVER = """
import asyncio, json, sys, time
from k8sjobs.testing import ControllerConfig, FakeCluster, NodeConfig
TERMINAL = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")

async def main():
    timings = ControllerConfig(batch_period=0.01, backoff_base=0.1)
    node = NodeConfig(cpu="100000", memory="1000Ti")  # room for every step at once
    async with FakeCluster("simulate", controller=timings, node=node, validation="off") as c:
        terminal = {}  # Job name -> wall time its first terminal condition was stored

        def on_write(event):
            if event.resource != "jobs" or event.obj["metadata"]["name"] in terminal:
                return
            conds = (event.obj.get("status") or {}).get("conditions") or []
            if any(x["type"] in TERMINAL and x["status"] == "True" for x in conds):
                terminal[event.obj["metadata"]["name"]] = time.time()

        c.store.listen(on_write)
        print(json.dumps({"kubeconfig": str(c.kubeconfig_path)}), flush=True)
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if line == "reset":
                c.requests.reset(); print("{}", flush=True)
            elif line == "terminal":
                print(json.dumps(terminal), flush=True)
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

    async def ask(self, command: str) -> dict[str, Any]:
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


async def raw_loop(
    kubeconfig: str, n: int, study: str, *, patch: bool, watch: bool = False
) -> float:
    """Return steps/s for a bare aiohttp loop (64 in flight): POST ConfigMap, POST Job, and
    with ``patch`` the same ownerReference PATCH k8sjobs sends; with ``watch`` it also reads
    (and drops) a Job watch and a Pod watch of the study, as k8sjobs tracks its steps, so
    the server does the same work for both."""
    config = await load_config(kubeconfig)
    bodies = [render(s, Target(study=study)) for s in steps("raw", n)]
    headers = {"Content-Type": "application/json"}
    if config.authorization:
        headers["Authorization"] = config.authorization
    merge = {**headers, "Content-Type": "application/merge-patch+json"}
    gate = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=config.ssl)
    ) as http:

        async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            url = f"{config.host}{path}/namespaces/default/{body['kind'].lower()}s"
            async with http.post(url, data=json.dumps(body), headers=headers) as r:
                return dict(await r.json())

        async def one(m: Any) -> None:
            async with gate:
                await post("/api/v1", m.configmap)
                job = await post("/apis/batch/v1", m.job)
                if patch:
                    owner = {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": m.name,
                        "uid": job["metadata"]["uid"],
                    }
                    body = {"metadata": {"ownerReferences": [owner]}}
                    url = f"{config.host}/api/v1/namespaces/default/configmaps/{m.name}"
                    async with http.patch(url, data=json.dumps(body), headers=merge) as r:
                        await r.read()

        async def drain(path: str) -> None:
            selector = f"k8sjobs.io/study={label_value(study)}"
            params = {"watch": "1", "labelSelector": selector}
            async with http.get(config.host + path, params=params, headers=headers) as r:
                async for _ in r.content:
                    pass

        watches = [
            asyncio.create_task(drain(f"{prefix}/namespaces/default/{plural}"))
            for prefix, plural in (("/apis/batch/v1", "jobs"), ("/api/v1", "pods"))
            if watch
        ]
        await asyncio.sleep(0.2 if watch else 0)
        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in bodies))
        rate = n / (time.perf_counter() - started)
        for task in watches:
            task.cancel()
    return rate


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


async def k8sjobs_submit(kubeconfig: str, n: int, study: str) -> float:
    """Return steps/s through Session.submit_many (ConfigMap, Job, ownerReference patch)."""
    s = Session(study=study, kubeconfig=kubeconfig, options={"qps": 0})
    await s.start()
    await s.attach()  # start the watch before timing: it is set up once per study
    batch = steps("k", n)  # the raw loops get their Steps (and manifests) before timing too
    started = time.perf_counter()
    await s.submit_many(batch, limit=64)
    rate = n / (time.perf_counter() - started)
    await s.aclose()
    return rate


async def latency(kubeconfig: str, server: Server, n: int, start: float) -> dict[str, float]:
    """Return p50/p99 ms from a Job's terminal condition being stored to its handle ending.

    Both ends are wall-clock times on this machine: the fake server records when it stores
    each Job's first terminal condition, the driver when the handle ends. Steps run for
    ``start`` to ``start + 2`` seconds, so completions arrive as a stream: with a short
    ``start`` they overlap the submission of the later steps (the driver is busy), with a
    long one the driver is only waiting.
    """
    s = Session(study="lat", kubeconfig=kubeconfig, options={"qps": 0})
    await s.start()
    noticed: dict[str, float] = {}

    def on_change(h: StepHandle) -> None:
        if h.done:
            noticed.setdefault(h.object_name, time.time())

    batch = [
        Step(
            name=f"l{i}",
            script="true",
            annotations={"fake.k8sjobs.io/duration": f"{start + (i % 100) / 50:.2f}"},
        )
        for i in range(n)
    ]
    gate = asyncio.Semaphore(64)

    async def submit(step: Step) -> StepHandle:
        async with gate:
            handle = await s.submit(step)
        handle.add_listener(on_change)  # before the step can end: it runs for a second or more
        return handle

    handles = await asyncio.gather(*(submit(step) for step in batch))
    await server.ask("reset")
    await s.gather(*handles, timeout=600)
    counts = await server.ask("counts")
    stored = await server.ask("terminal")
    await s.aclose()
    delays = sorted((noticed[k] - stored[k]) * 1000 for k in noticed if k in stored)
    reads = sum(v for k, v in counts.items() if k.startswith(("get jobs", "list", "get pods ")))
    return {
        "p50": statistics.median(delays),
        "p99": delays[max(int(len(delays) * 0.99) - 1, 0)],
        "reads_per_step": reads / n,
        "watches": counts.get("watch jobs", 0) + counts.get("watch pods", 0),
    }


async def polling(kubeconfig: str, server: Server, n: int, interval: float) -> dict[str, float]:
    """Return requests/step and detection delay for per-job polling (Airflow/snakemake)."""
    manifests = [render(s, Target(study="poll")) for s in steps("p", n, duration=5.0)]
    from k8sjobs.kube.client import CONFIGMAPS, JOBS, ClientOptions

    # No client-side rate limit, as for k8sjobs' rows: the pollers' own cost is what shows.
    async with KubeClient(await load_config(kubeconfig), ClientOptions(qps=0)) as c:
        detected: dict[str, float] = {}

        async def poll(name: str) -> None:
            while True:
                job = await c.get(JOBS, "default", name)
                if any(
                    x["type"] in ("Complete", "Failed")
                    for x in (job.get("status") or {}).get("conditions") or []
                ):
                    detected[name] = time.time()
                    return
                await asyncio.sleep(interval)

        async def submit_and_poll(m: Any) -> None:  # as a per-job trigger does
            await c.create(CONFIGMAPS, "default", m.configmap)
            await c.create(JOBS, "default", m.job)
            await poll(m.name)

        await asyncio.gather(*(submit_and_poll(m) for m in manifests))
    counts = await server.ask("counts")
    stored = await server.ask("terminal")
    delays = sorted((detected[k] - stored[k]) * 1000 for k in detected if k in stored)
    return {
        "reads_per_step": counts.get("get jobs", 0) / n,
        "p50": statistics.median(delays),
        "p99": delays[max(int(len(delays) * 0.99) - 1, 0)],
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


@contextlib.asynccontextmanager
async def fresh_server() -> AsyncIterator[tuple[Server, str]]:
    """Yield a new fake cluster process, so no phase pays for the Jobs of the one before."""
    server = Server()
    kubeconfig = await server.start()
    try:
        yield server, kubeconfig
    finally:
        await server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000, help="steps for throughput/latency")
    parser.add_argument("--scale", type=int, default=10000, help="concurrent steps for RSS/CPU")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument(
        "--wait-start", type=float, default=15.0, help="seconds before the first step ends"
    )
    args = parser.parse_args()
    n = args.steps
    rates: dict[str, float] = {}
    for label, measure in (
        ("raw2", lambda k: raw_loop(k, n, "raw", patch=False)),
        ("raw3", lambda k: raw_loop(k, n, "raw", patch=True)),
        ("raw3w", lambda k: raw_loop(k, n, "raw", patch=True, watch=True)),
        ("typed", lambda k: typed_pairs(k, n, "typed")),
        ("ours", lambda k: k8sjobs_submit(k, n, "ours")),
    ):
        async with fresh_server() as (_, kubeconfig):
            rates[label] = await measure(kubeconfig)
    raw2, raw3, same = rates["raw2"], rates["raw3"], rates["raw3w"]
    ours = rates["ours"]
    print(f"| measure (fake cluster, {n} steps, a fresh server per row) | value |")
    print("|---|---|")
    print(f"| raw aiohttp loop: POST ConfigMap + POST Job, steps/s | {raw2:.0f} |")
    print(f"| raw loop + the ownerReference PATCH k8sjobs sends, steps/s | {raw3:.0f} |")
    print(
        "| raw loop + PATCH, while reading a Job and a Pod watch as k8sjobs does (the same "
        f"work for the server), steps/s | {same:.0f} |"
    )
    print(
        f"| kubernetes_asyncio typed API, 2 POSTs, steps/s | {rates['typed']:.0f} "
        f"({rates['typed'] / raw2:.0%} of the 2-request raw loop) |"
    )
    print(
        f"| k8sjobs submit_many (validated, rendered, tracked), steps/s | {ours:.0f}: "
        f"{ours / same:.0%} of the raw loop doing the same work (floor 90%), "
        f"{ours / raw3:.0%} of the raw loop without watches, {ours / raw2:.0%} of the "
        "2-request loop |"
    )
    async with fresh_server() as (server, kubeconfig):
        busy = await latency(kubeconfig, server, n, start=1.0)
    async with fresh_server() as (server, kubeconfig):
        lat = await latency(kubeconfig, server, n, start=args.wait_start)
    print(
        "| waiting: reads per step / watch (re)connections opened while waiting | "
        f"{lat['reads_per_step']:.2f} / {lat['watches']:.0f} |"
    )
    print(
        f"| completion noticed after the terminal condition is stored, {n} steps ending over "
        f"2 s while the driver only waits: p50 / p99 ms | {lat['p50']:.1f} / {lat['p99']:.1f} "
        "(floor p99 <= 100) |"
    )
    print(
        "| the same, steps ending while the driver still submits the later ones: p50 / p99 ms "
        f"| {busy['p50']:.1f} / {busy['p99']:.1f} |"
    )
    async with fresh_server() as (server, kubeconfig):
        poll = await polling(kubeconfig, server, min(n, 500), args.poll_interval)
    print(
        f"| per-job polling every {args.poll_interval:g}s: reads per step | "
        f"{poll['reads_per_step']:.2f} |"
    )
    print(f"| per-job polling: detection p50 / p99 ms | {poll['p50']:.0f} / {poll['p99']:.0f} |")
    async with fresh_server() as (server, kubeconfig):
        big = await scale(kubeconfig, args.scale)
    print(f"| {args.scale} concurrent steps: terminal | {big['terminal']:.0f} |")
    print(f"| driver peak RSS MB (floor < 500) | {big['rss_mb']:.0f} |")
    print(f"| driver CPU s per 1,000 steps | {big['cpu_per_1000']:.2f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    asyncio.run(main())
