"""How fast is the fake cluster? A table of what the submit benchmarks need to know.

    python benchmarks/bench_fake_cluster.py [--pairs 2000] [--jobs 10000]

- create req/s for ConfigMap+Job pairs, through raw aiohttp and through kubernetes_asyncio;
- watch fan-out: events/s delivered to N concurrent watchers;
- memory (RSS growth) holding 10,000 finished Jobs with their pods and ConfigMaps.
Runs in well under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from k8sjobs.testing import ControllerConfig, FakeCluster

CONCURRENCY = 32


def pair(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return a ConfigMap and a Job shaped like a rendered k8sjobs step."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"s{i}-script"},
        "data": {"entrypoint.sh": "echo hello\n"},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"s{i}"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["/bin/sh", "/script/entrypoint.sh"],
                            "volumeMounts": [{"name": "s", "mountPath": "/script"}],
                        }
                    ],
                    "volumes": [{"name": "s", "configMap": {"name": f"s{i}-script"}}],
                }
            },
        },
    }
    return cm, job


async def bounded(n: int, make: Any) -> float:
    """Run make(i) for i < n with CONCURRENCY in flight; return the elapsed seconds."""
    queue = iter(range(n))

    async def worker() -> None:
        for i in queue:
            await make(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.perf_counter() - started


async def create_raw(cluster: FakeCluster, n: int, offset: int) -> float:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(cluster.url, timeout=timeout) as session:

        async def make(i: int) -> None:
            cm, job = pair(offset + i)
            for path, body in (
                ("/api/v1/namespaces/default/configmaps", cm),
                ("/apis/batch/v1/namespaces/default/jobs", job),
            ):
                async with session.post(
                    path, data=json.dumps(body), headers={"Content-Type": "application/json"}
                ) as r:
                    assert r.status == 201, await r.text()

        return await bounded(n, make)


async def create_client(cluster: FakeCluster, n: int, offset: int) -> float:
    api = await config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    async with api:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

        async def make(i: int) -> None:
            cm, job = pair(offset + i)
            await core.create_namespaced_config_map("default", cm)
            await batch.create_namespaced_job("default", job)

        return await bounded(n, make)


async def fan_out(cluster: FakeCluster, watchers: int, events: int) -> float:
    """Return events/s delivered in total to `watchers` watches of configmaps."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(cluster.url, timeout=timeout) as session:
        rv = cluster.store.rv

        async def watch() -> int:
            seen = 0
            async with session.get(
                "/api/v1/namespaces/default/configmaps",
                params={"watch": "1", "resourceVersion": str(rv), "timeoutSeconds": "60"},
            ) as r:
                async for _ in r.content:
                    seen += 1
                    if seen == events:
                        return seen
            return seen

        tasks = [asyncio.create_task(watch()) for _ in range(watchers)]
        await asyncio.sleep(0.5)
        started = time.perf_counter()
        for i in range(events):
            cluster.store.create("configmaps", "default", {"metadata": {"name": f"fan{i}"}})
            if i % 100 == 0:
                await asyncio.sleep(0)
        total = sum(await asyncio.gather(*tasks))
        return total / (time.perf_counter() - started)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def hold_jobs(jobs: int) -> tuple[float, float, int]:
    """Return (MiB of RSS growth, seconds until all finished, pods held) for `jobs` Jobs."""
    before = rss_mib()
    timings = ControllerConfig(batch_period=0.5)
    async with FakeCluster(controller=timings) as cluster:
        started = time.perf_counter()
        for i in range(jobs):
            cm, job = pair(i)
            cluster.store.create("configmaps", "default", cm)
            cluster.store.create("jobs", "default", job)
            if i % 200 == 0:
                await asyncio.sleep(0)
        while (
            sum(
                1
                for j in cluster.store.iter("jobs", "default")
                if (j["status"].get("succeeded") or 0) == 1
            )
            < jobs
        ):
            await asyncio.sleep(0.5)
            if time.perf_counter() - started > 90:
                break
        elapsed = time.perf_counter() - started
        return rss_mib() - before, elapsed, cluster.store.count("pods")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--watchers", type=int, default=20)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    async with FakeCluster() as cluster:
        cluster.kubelet.pause(True)  # measure the API server alone
        seconds = await create_raw(cluster, args.pairs, 0)
        rows.append(
            (
                f"create ConfigMap+Job, raw aiohttp ({args.pairs} pairs)",
                f"{2 * args.pairs / seconds:,.0f} req/s ({args.pairs / seconds:,.0f} pairs/s)",
            )
        )
        seconds = await create_client(cluster, args.pairs, args.pairs)
        rows.append(
            (
                f"create ConfigMap+Job, kubernetes_asyncio ({args.pairs} pairs)",
                f"{2 * args.pairs / seconds:,.0f} req/s ({args.pairs / seconds:,.0f} pairs/s)",
            )
        )
    async with FakeCluster() as cluster:
        rate = await fan_out(cluster, args.watchers, args.events)
        rows.append(
            (
                f"watch fan-out ({args.watchers} watchers x {args.events} events)",
                f"{rate:,.0f} events/s",
            )
        )
    growth, elapsed, pods = await hold_jobs(args.jobs)
    rows.append(
        (
            f"hold {args.jobs} Jobs + ConfigMaps + {pods} pods (simulated to completion)",
            f"{growth:,.0f} MiB RSS growth, all finished in {elapsed:,.1f} s",
        )
    )
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    asyncio.run(main())
