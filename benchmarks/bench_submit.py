"""Submit throughput, waiting cost, completion latency and scale of k8sjobs.

    python benchmarks/bench_submit.py            # full run (1,000-step latency, 10,000 steps)
    python benchmarks/bench_submit.py --steps 200 --scale 1000   # quick run
    python benchmarks/bench_submit.py --only scale --scale 1000,10000,100000 --scale-rounds 5
    python benchmarks/bench_submit.py --only scale --scale 10000,100000 --gc-pace both
    python benchmarks/bench_submit.py --only scale --scale 2000 --observe off,traces,metrics
    git archive REV | tar -x -C /tmp/before   # the same rows, interleaved, of an older tree:
    python benchmarks/bench_submit.py --only scale --scale 2000 --observe before,off \
        --baseline-tree /tmp/before
    python benchmarks/bench_submit.py --kubeconfig ~/.kube/config --yes  # a real API server

Against the fake cluster (the default) every table is printed. With ``--kubeconfig`` the
throughput table is taken on that cluster: each row runs in a namespace of its own, created
by the benchmark and deleted after it (``--yes`` is required: the benchmark creates Jobs,
which run pods there); the latency, polling and scale rows read the fake server's own
clock and request counts, so they are printed for the fake only unless ``--scale`` is given.

The fake cluster runs in its own process (so the driver's CPU and RSS are its own); each
row gets a fresh server process, so no row pays for the Jobs an earlier row left running.
Latency runs from the moment the fake server stores a Job's terminal condition to the
moment the driver's handle ends (both wall-clock times on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from k8sjobs import _gcpace
from k8sjobs.handle import StepHandle
from k8sjobs.kube import KubeClient, load_config
from k8sjobs.render.manifests import Target, render
from k8sjobs.session import Session
from k8sjobs.steps.names import label_value
from k8sjobs.steps.spec import Step

SERVER = """
import asyncio, json, resource, sys, time
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
            elif line == "usage":  # the fake's own peak RSS and CPU seconds
                u = resource.getrusage(resource.RUSAGE_SELF)
                print(json.dumps({"rss_mb": u.ru_maxrss / 1024, "cpu_s": u.ru_utime + u.ru_stime}),
                      flush=True)
            elif line == "terminal":
                print(json.dumps(terminal), flush=True)
            elif line == "counts":
                out = {f"{k.verb} {k.resource}{'/' + k.subresource if k.subresource else ''}": n
                       for k, n in c.requests.counts.items()}
                print(json.dumps(out), flush=True)
asyncio.run(main())
"""


# Seconds the fake cluster process may take to answer or to stop: a wait on it is never silent.
SERVER_BOUND = 120


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
        try:
            async with asyncio.timeout(SERVER_BOUND):
                return (await self.proc.stdout.readline()).decode()
        except TimeoutError:
            raise RuntimeError(f"the fake cluster did not answer within {SERVER_BOUND} s") from None

    async def stop(self) -> None:
        """Close the server's stdin and wait for it to exit; kill it, loudly, if it does not."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            async with asyncio.timeout(SERVER_BOUND):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise RuntimeError(
                f"the fake cluster did not stop within {SERVER_BOUND} s of being asked (killed)"
            ) from None


def steps(prefix: str, n: int, duration: float = 0.05) -> list[Step]:
    notes = {"fake.k8sjobs.io/duration": str(duration)}
    return [Step(name=f"{prefix}{i}", script="true", annotations=notes) for i in range(n)]


async def raw_loop(
    kubeconfig: str, ns: str, n: int, study: str, *, patch: bool, watch: bool = False
) -> float:
    """Return steps/s for a bare aiohttp loop (64 in flight) sending k8sjobs' two requests:
    POST Job, then POST its ConfigMap carrying an ownerReference to the Job's uid; with
    ``patch`` the old order's three instead (POST ConfigMap, POST Job, PATCH the
    ConfigMap's ownerReference); with ``watch`` it also reads (and drops) the watches
    k8sjobs keeps (the study's Jobs and Pods, the namespace's Warning Events), so the
    server does the same work."""
    config = await load_config(kubeconfig)
    bodies = [render(s, Target(study=study, namespace=ns)) for s in steps("raw", n)]
    headers = {"Content-Type": "application/json"}
    if config.authorization:
        headers["Authorization"] = config.authorization
    merge = {**headers, "Content-Type": "application/merge-patch+json"}
    gate = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=config.ssl)
    ) as http:

        async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            url = f"{config.host}{path}/namespaces/{ns}/{body['kind'].lower()}s"
            async with http.post(url, data=json.dumps(body), headers=headers) as r:
                if r.status >= 300:  # a refusal is a broken benchmark, not a slower row
                    raise RuntimeError(f"POST {url}: HTTP {r.status} {await r.text()}")
                return dict(await r.json())

        def owner(m: Any, job: dict[str, Any]) -> dict[str, Any]:
            ref = {"apiVersion": "batch/v1", "kind": "Job", "name": m.name}
            return {"metadata": {"ownerReferences": [{**ref, "uid": job["metadata"]["uid"]}]}}

        async def one(m: Any) -> None:
            async with gate:
                if not patch:
                    job = await post("/apis/batch/v1", m.job)
                    meta = {**m.configmap["metadata"], **owner(m, job)["metadata"]}
                    await post("/api/v1", {**m.configmap, "metadata": meta})
                    return
                await post("/api/v1", m.configmap)
                job = await post("/apis/batch/v1", m.job)
                url = f"{config.host}/api/v1/namespaces/{ns}/configmaps/{m.name}"
                body = json.dumps(owner(m, job))
                async with http.patch(url, data=body, headers=merge) as r:
                    await r.read()

        async def drain(path: str, params: dict[str, str]) -> None:
            params = {"watch": "1", **params}
            async with http.get(config.host + path, params=params, headers=headers) as r:
                async for _ in r.content:
                    pass

        # k8sjobs' three watches: the study's Jobs and Pods, the namespace's Warning Events.
        study_pods = {"labelSelector": f"k8sjobs.io/study={label_value(study)}"}
        watched = (
            ("/apis/batch/v1", "jobs", study_pods),
            ("/api/v1", "pods", study_pods),
            ("/api/v1", "events", {"fieldSelector": "type=Warning"}),
        )
        watches = [
            asyncio.create_task(drain(f"{prefix}/namespaces/{ns}/{plural}", params))
            for prefix, plural, params in watched
            if watch
        ]
        await asyncio.sleep(0.2 if watch else 0)
        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in bodies))
        rate = n / (time.perf_counter() - started)
        for task in watches:
            task.cancel()
    return rate


async def typed_pairs(kubeconfig: str, ns: str, n: int, study: str) -> float:
    """Return pairs/s through kubernetes_asyncio's typed API (models deserialised)."""
    from kubernetes_asyncio import client, config

    await config.load_kube_config(kubeconfig)
    bodies = [render(s, Target(study=study, namespace=ns)) for s in steps("typed", n)]
    gate = asyncio.Semaphore(64)
    async with client.ApiClient() as api:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

        async def one(m: Any) -> None:
            async with gate:
                await core.create_namespaced_config_map(ns, m.configmap)
                await batch.create_namespaced_job(ns, m.job)

        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in bodies))
    return n / (time.perf_counter() - started)


async def k8sjobs_submit(kubeconfig: str, ns: str, n: int, study: str) -> float:
    """Return steps/s through Session.submit_many (Job, then its ConfigMap owned by it)."""
    s = Session(study=study, kubeconfig=kubeconfig, namespace=ns, options={"qps": 0})
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


def collector_clock() -> dict[str, float]:
    """Return figures that the garbage collector's own CPU seconds (and full collections)
    are added to from now on, timed with ``gc.callbacks``."""
    spent = {"gc_s": 0.0, "full_gcs": 0.0}
    started = [0.0]

    def tick(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        spent["gc_s"] += time.process_time() - started[0]
        spent["full_gcs"] += info["generation"] == 2

    gc.callbacks.append(tick)
    return spent


#: ``--baseline-tree``: an older checkout whose driver the "before" rows run.
BASELINE_TREE = Path(".")
SCRIPT = Path(__file__).name


def observing(mode: str) -> dict[str, Any]:
    """Return the Session options of an ``--observe`` mode: "off" (nothing configured),
    "traces" (an SDK tracer provider batching to an exporter that drops what it gets: the
    cost of making the spans, not of a collector), "metrics" (the Prometheus endpoint)."""
    if mode == "off":
        return {}
    if mode == "metrics":
        return {"metrics_port": 0}
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return {"tracer_provider": provider}


async def scale(
    kubeconfig: str, ns: str, n: int, pace: str, observe: str = "off"
) -> dict[str, Any]:
    """Submit ``n`` concurrent steps and wait for them all; return what the driver spent.

    Runs in a process of its own (``--scale-child``), so its peak RSS and CPU seconds
    (getrusage: user + system, not wall time, which a loaded machine stretches) are the
    driver's alone, and a larger row does not inherit a smaller row's peak. ``pace``
    "default" keeps CPython's collector thresholds (a session raises them: k8sjobs/_gcpace.py).
    """
    if pace == "default":
        _gcpace.YOUNG_THRESHOLD = gc.get_threshold()[0]  # "already at the pace": left alone
    collector = collector_clock()
    s = Session(
        study="scale",
        kubeconfig=kubeconfig,
        namespace=ns,
        options={"qps": 0},
        **observing(observe),
    )
    await s.start()
    handles = await s.submit_many(steps("x", n, duration=2.0), limit=128)
    results = await s.gather(*handles, timeout=24 * 3600)
    relists = s.watch_stats.relists  # "initial" per kind, then the 15-minute safety net's
    await s.aclose()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "terminal": sum(r.state.terminal for r in results),
        "rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "relists": ", ".join(f"{n} {why}" for why, n in sorted(relists.items())),
        **collector,
    }


async def scale_row(
    kubeconfig: str, ns: str, n: int, pace: str, observe: str = "off"
) -> dict[str, Any]:
    """Run ``scale`` for ``n`` steps in a child driver process; return its figures.

    ``observe`` "before" runs the child of ``BASELINE_TREE`` (its own code, nothing observed).
    """
    script = __file__ if observe != "before" else str(BASELINE_TREE / "benchmarks" / SCRIPT)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        script,
        "--scale-child",
        str(n),
        "--gc-pace",
        pace,
        *(("--observe", observe) if observe not in ("off", "before") else ()),
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        ns,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await child.communicate()
    if child.returncode:
        raise RuntimeError(f"the {n}-step driver exited with {child.returncode}")
    return dict(json.loads(out.decode().splitlines()[-1]))


class Cluster:
    """Where a row runs: a fresh fake cluster process, or a fresh namespace of a real one.

    ``server`` is the fake's control channel (None on a real cluster: no server clock).
    On a real cluster every row of every round gets a namespace of its own (a deleted
    namespace stays Terminating for a while, and its name is refused meanwhile), deleted
    after the row; ``finish`` waits until they are all gone.
    """

    def __init__(self, kubeconfig: str | None) -> None:
        self.kubeconfig = kubeconfig
        self.deleted: list[str] = []
        self._rows = 0

    @contextlib.asynccontextmanager
    async def row(self, label: str) -> AsyncIterator[tuple[Server | None, str, str]]:
        """Yield (server, kubeconfig, namespace) for one row, and clean up after it."""
        if self.kubeconfig is None:
            async with fresh_server() as (server, kubeconfig):
                yield server, kubeconfig, "default"
            return
        self._rows += 1
        ns = f"k8sjobs-bench-{label}-{os.getpid()}-{self._rows}"
        await namespace_request(self.kubeconfig, "POST", ns)
        try:
            yield None, self.kubeconfig, ns
        finally:
            await namespace_request(self.kubeconfig, "DELETE", ns)
            self.deleted.append(ns)

    async def finish(self, timeout: float = 600.0) -> None:
        """Wait until every namespace this benchmark deleted is gone (a watch per name)."""
        if self.kubeconfig is None or not self.deleted:
            return
        started = time.perf_counter()
        async with asyncio.timeout(timeout):
            await namespaces_gone(self.kubeconfig, set(self.deleted))
        took = time.perf_counter() - started
        print(f"\n{len(self.deleted)} namespaces deleted, all gone {took:.1f} s after the last row")
        self.deleted.clear()


async def namespaces_gone(kubeconfig: str, names: set[str]) -> None:
    """Return once none of the namespaces ``names`` exists: one list, then one watch."""
    config = await load_config(kubeconfig)
    headers = {"Authorization": config.authorization} if config.authorization else {}
    url = f"{config.host}/api/v1/namespaces"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=config.ssl)) as http:
        while True:
            async with http.get(url, headers=headers) as r:
                listed = await r.json()
            left = names & {item["metadata"]["name"] for item in listed["items"]}
            if not left:
                return
            params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"]}
            async with http.get(url, params=params, headers=headers) as r:
                async for line in r.content:
                    event = json.loads(line)
                    if event["type"] == "DELETED":
                        left.discard(event["object"]["metadata"]["name"])
                    if not left:
                        return
            # The watch ended (its timeout, a 410): list again.


async def namespace_request(kubeconfig: str, method: str, name: str) -> None:
    """Create (POST) or delete (DELETE) namespace ``name``, with the kubeconfig's TLS and auth."""
    config = await load_config(kubeconfig)
    headers = {"Content-Type": "application/json"}
    if config.authorization:
        headers["Authorization"] = config.authorization
    url = f"{config.host}/api/v1/namespaces"
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if method == "DELETE":
        url, body = f"{url}/{name}", {"kind": "DeleteOptions", "apiVersion": "v1"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=config.ssl)) as http,
        http.request(method, url, data=json.dumps(body), headers=headers, timeout=timeout) as r,
    ):
        if r.status >= 300:
            raise RuntimeError(f"{method} namespace {name}: HTTP {r.status} {await r.text()}")


async def refuse_unless_confirmed(kubeconfig: str, yes: bool) -> None:
    """Exit with a clear message unless ``--yes``: the benchmark creates objects there."""
    if yes:
        return
    config = await load_config(kubeconfig)
    sys.exit(
        f"--kubeconfig {kubeconfig} points at the cluster {config.host}: this benchmark "
        "creates namespaces, ConfigMaps and Jobs (which run pods) there and deletes the "
        "namespaces after each row. Pass --yes to go ahead."
    )


@contextlib.asynccontextmanager
async def fresh_server() -> AsyncIterator[tuple[Server, str]]:
    """Yield a new fake cluster process, so no phase pays for the Jobs of the one before."""
    server = Server()
    kubeconfig = await server.start()
    try:
        yield server, kubeconfig
    finally:
        await server.stop()


def load_line() -> str:
    """Return the machine's load average, printed beside each table (the machine is shared)."""
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}"


async def throughput(cluster: Cluster, n: int, rounds: int) -> None:
    """Print the submit-throughput table: each figure the median of ``rounds`` rounds,
    the rows interleaved within a round so that a change of load hits every row."""
    rows: dict[str, Any] = {
        "raw2": lambda k, ns: raw_loop(k, ns, n, "raw", patch=False),
        "raw2w": lambda k, ns: raw_loop(k, ns, n, "raw", patch=False, watch=True),
        "raw3": lambda k, ns: raw_loop(k, ns, n, "raw", patch=True),
        "typed": lambda k, ns: typed_pairs(k, ns, n, "typed"),
        "ours": lambda k, ns: k8sjobs_submit(k, ns, n, "ours"),
    }
    taken: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(rounds):
        for label, measure in rows.items():
            async with cluster.row(label) as (_, kubeconfig, ns):
                taken[label].append(await measure(kubeconfig, ns))
    await cluster.finish()
    rates = {label: statistics.median(values) for label, values in taken.items()}
    raw2, same, raw3 = rates["raw2"], rates["raw2w"], rates["raw3"]
    ours = rates["ours"]
    where = "fake cluster" if cluster.kubeconfig is None else "the --kubeconfig cluster"
    print(
        f"\n{load_line()}; {where}, {n} steps, median of {rounds}, a fresh "
        f"{'server' if cluster.kubeconfig is None else 'namespace'} per row and round\n"
    )
    print("| measure | steps/s |")
    print("|---|---|")
    print(
        "| raw aiohttp loop: k8sjobs' 2 requests (POST Job, POST ConfigMap owned by it) | "
        f"{raw2:.0f} |"
    )
    print(
        "| the same, while reading a Job, a Pod and a Warning Event watch as k8sjobs does "
        f"(the same work for the server) | {same:.0f} |"
    )
    print(
        "| raw loop, the old 3 requests (POST ConfigMap, POST Job, PATCH its ownerReference) | "
        f"{raw3:.0f} ({raw3 / raw2:.0%} of the 2-request loop) |"
    )
    print(
        f"| kubernetes_asyncio typed API, 2 POSTs | {rates['typed']:.0f} "
        f"({rates['typed'] / raw2:.0%} of the 2-request raw loop) |"
    )
    verdict = "ok" if ours >= 0.9 * same else "BELOW"
    print(
        f"| k8sjobs submit_many (validated, rendered, tracked) | {ours:.0f}: "
        f"{ours / same:.0%} of the 2-request raw loop doing the same work (floor 90%: "
        f"{verdict}), {ours / raw2:.0%} of it without watches, {ours / raw3:.0%} of the old "
        "3-request loop |"
    )


async def waiting(n: int, poll_interval: float, wait_start: float) -> None:
    """Print the waiting-cost and latency rows (the fake only: they read its clock)."""
    async with fresh_server() as (server, kubeconfig):
        busy = await latency(kubeconfig, server, n, start=1.0)
    async with fresh_server() as (server, kubeconfig):
        lat = await latency(kubeconfig, server, n, start=wait_start)
    print(f"\n{load_line()}; fake cluster, {n} steps\n")
    print("| measure | value |")
    print("|---|---|")
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
        poll = await polling(kubeconfig, server, min(n, 500), poll_interval)
    print(
        f"| per-job polling every {poll_interval:g}s: reads per step | "
        f"{poll['reads_per_step']:.2f} |"
    )
    print(f"| per-job polling: detection p50 / p99 ms | {poll['p50']:.0f} / {poll['p99']:.0f} |")


async def scale_figures(
    cluster: Cluster, n: int, pace: str, observe: str = "off"
) -> dict[str, Any]:
    """Run one ``n``-step row on a fresh cluster; return the driver's and the fake's figures."""
    async with cluster.row(f"scale{n}") as (server, kubeconfig, ns):
        if server is not None:
            await server.ask("reset")
            before = await server.ask("usage")
        row = await scale_row(kubeconfig, ns, n, pace, observe)
        counts = await server.ask("counts") if server is not None else {}
        fake = await server.ask("usage") if server is not None else {}
    row["per_1000"] = row["cpu_s"] / n * 1000
    row["gc_per_1000"] = row["gc_s"] / n * 1000
    if fake:
        row["fake_rss_mb"] = fake["rss_mb"]
        row["fake_per_1000"] = (fake["cpu_s"] - before["cpu_s"]) / n * 1000
    verbs = {"writes": ("create", "patch", "update"), "lists": "list", "watches": "watch"}
    if counts:
        for key, prefix in {**verbs, "reads": "get"}.items():
            row[key] = sum(v for k, v in counts.items() if k.startswith(prefix))
    return row


async def scale_table(
    cluster: Cluster,
    sizes: list[int],
    rounds: int,
    paces: list[str],
    observes: tuple[str, ...] = ("off",),
) -> None:
    """Print one row per size, pace and ``--observe`` mode: the driver's peak RSS and CPU
    (its collector's part too) per 1,000 steps, the fake's, and the API bill.

    Each figure is the median of ``rounds`` runs, the rows interleaved within a round so a
    change in the machine's load falls on every row alike. The CPU column also gives the
    lowest and highest run, and its ratio to the first row of at least 10,000 steps at the
    same pace (the floor: no higher at 100,000 than at 10,000); a row that observes (traces,
    metrics) gives its ratio to the row of the same size and pace that does not.
    """
    print(f"\n{load_line()} at the start; median of {rounds} round(s)")
    print(
        "| concurrent steps | collector pace | terminal | driver peak RSS MB (floor < 1,500) | "
        "driver CPU s per 1,000 steps (min-max) | vs the 10,000 row (observing: vs off) | of "
        "which the collector (full collections) | fake peak RSS MB | fake CPU s per 1,000 "
        "steps | writes per step | lists / watches | driver relists | reads per step |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    taken: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for pace in paces:
            for n in sizes:
                for mode in observes:
                    row = await scale_figures(cluster, n, pace, mode)
                    taken.setdefault((pace, mode, n), []).append(row)
    for pace in paces:
        base: float | None = None
        for n in sizes:
            for mode in observes:
                runs = taken[pace, mode, n]
                if base is None and n >= 10_000 and mode == observes[0]:
                    base = statistics.median(r["per_1000"] for r in runs)
                against = base
                if mode not in ("off",) and "off" in observes:
                    against = statistics.median(r["per_1000"] for r in taken[pace, "off", n])
                label = pace if mode == "off" else f"{pace}, {mode}"
                print(scale_line(n, label, runs, against))
    print(f"{load_line()} at the end")


def scale_line(n: int, pace: str, runs: list[dict[str, Any]], base: float | None) -> str:
    """Return one scale row: the median of ``runs`` (``base``: the 10,000 row's CPU)."""

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    cpu = [r["per_1000"] for r in runs]
    per_1000 = median("per_1000")
    ratio = f"{per_1000 / base:.3f}" if base else "-"
    fake = (
        f"{median('fake_rss_mb'):.0f} | {median('fake_per_1000'):.2f}"
        if "fake_rss_mb" in runs[0]
        else "- | -"
    )
    relists = runs[-1]["relists"]
    bill = (
        f"{median('writes') / n:.2f} | {median('lists'):.0f} / {median('watches'):.0f} | "
        f"{relists} | {median('reads') / n:.3f}"
        if "writes" in runs[0]
        else f"- | - | {relists} | -"
    )
    return (
        f"| {n:,} | {pace} | {median('terminal'):,.0f} | {median('rss_mb'):.0f} | "
        f"{per_1000:.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | {ratio} | "
        f"{median('gc_per_1000'):.3f} ({median('full_gcs'):.0f}) | {fake} | {bill} |"
    )


def positive(text: str) -> int:
    """Parse a count the benchmark divides by or takes a median of: at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def sizes(text: str) -> list[int]:
    """Parse ``--scale``: comma-separated step counts, each at least 1."""
    return [positive(x) for x in text.split(",") if x.strip()]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=positive, default=1000, help="steps for throughput/latency")
    parser.add_argument(
        "--scale",
        type=sizes,
        help="comma-separated concurrent steps for RSS/CPU (fake default: 10000)",
    )
    parser.add_argument("--rounds", type=positive, default=5, help="throughput rounds (median)")
    parser.add_argument(
        "--scale-rounds", type=positive, default=1, help="scale rounds (median; 5 for the table)"
    )
    parser.add_argument(
        "--gc-pace",
        choices=("paced", "default", "both"),
        default="paced",
        help="the driver's collector: as a session paces it, CPython's default, or both rows",
    )
    parser.add_argument(
        "--observe",
        type=lambda t: tuple(x for x in t.split(",") if x),
        default=("off",),
        help="scale rows per mode, comma-separated: off (nothing configured), traces (an SDK "
        "tracer provider), metrics (the Prometheus endpoint), before (--baseline-tree's own "
        "driver); e.g. off,traces",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="an older checkout (git archive REV | tar -x -C DIR) for --observe before",
    )
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument(
        "--wait-start", type=float, default=15.0, help="seconds before the first step ends"
    )
    parser.add_argument("--only", choices=("throughput", "waiting", "scale"), action="append")
    parser.add_argument("--kubeconfig", help="a real cluster to measure (default: the fake)")
    parser.add_argument("--yes", action="store_true", help="agree to create objects there")
    parser.add_argument("--namespace", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--scale-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global BASELINE_TREE
    if "before" in args.observe:
        if args.baseline_tree is None or not (args.baseline_tree / "benchmarks" / SCRIPT).exists():
            parser.error("--observe before needs --baseline-tree DIR holding benchmarks/" + SCRIPT)
        BASELINE_TREE = args.baseline_tree.resolve()
    if args.scale_child:  # one scale row's driver (see scale_row)
        child = await scale(
            args.kubeconfig, args.namespace, args.scale_child, args.gc_pace, args.observe[0]
        )
        print(json.dumps(child))
        return
    real = args.kubeconfig is not None
    if real:
        await refuse_unless_confirmed(args.kubeconfig, args.yes)
    cluster = Cluster(args.kubeconfig)
    only = set(args.only or ("throughput", "waiting", "scale"))
    if "throughput" in only:
        await throughput(cluster, args.steps, args.rounds)
    if "waiting" in only and not real:
        await waiting(args.steps, args.poll_interval, args.wait_start)
    counts = args.scale if args.scale is not None else ([] if real else [10_000])
    if "scale" in only and counts:
        paces = ["paced", "default"] if args.gc_pace == "both" else [args.gc_pace]
        await scale_table(cluster, counts, args.scale_rounds, paces, args.observe)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    asyncio.run(main())
