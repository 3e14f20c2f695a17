"""Re-runs against the fake cluster: the second run of a study, against running it fresh.

    python benchmarks/bench_rerun.py                 # 1,000 steps
    python benchmarks/bench_rerun.py --steps 200     # quick run
    python benchmarks/bench_rerun.py --verify-mb 100 # the price of checking a files digest

A study of ``--steps`` steps (a binary tree: step i reads step (i - 1) // 2's output, each
writes one small file) runs on the fake cluster with its executing kubelet (real processes,
real pushes to a real docker-registry on loopback), then runs again in a new session. The
table gives the wall time of each run and their ratio, the Kubernetes requests of the second
run (in all, and writes), and the registry requests the step cache made per reused step.
The floor (docs/reruns.md): a reused step makes no Kubernetes request and at most 2 registry
requests (one read of its record, one manifest PUT per output: one output here). The fake
cluster runs in this process, so its CPU is part of both runs alike.

``--verify-mb N`` measures instead what checking a directory's files digest claim costs, on
one step of the local backend reading an N MB directory from a real docker-registry: a reuse
whose input is the recorded archive (no read) against one after a times-only re-push (the
layer is read once and its claim checked), and a pull of the directory that checks its claim
while unpacking against the same pull of a manifest without the claim. Best of 3 each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from k8sjobs import Session
from k8sjobs.artifacts import _media, open_store
from k8sjobs.artifacts._transfer import StoreFront
from k8sjobs.local import LocalBackend
from k8sjobs.reuse import CACHED
from k8sjobs.steps.spec import Step, StepOutput
from k8sjobs.testing import ControllerConfig, FakeCluster
from k8sjobs.testing.registry import registry_available, registry_process

WRITES = ("create", "update", "patch", "delete")


def tree(steps: int) -> list[Step]:
    """Return ``steps`` steps as a binary tree, each writing one small output file."""
    return [
        Step(
            name=f"s{i:04d}",
            script=f'cat "$K8SJOBS_INPUTS"/up/out.txt > out.txt 2>/dev/null; echo {i} >> out.txt',
            inputs={"up": StepOutput(step=f"s{(i - 1) // 2:04d}", output="out")} if i else {},
            outputs={"out": "out.txt"},
        )
        for i in range(steps)
    ]


async def run_once(cluster: FakeCluster, store: str, steps: list[Step]) -> tuple[float, int, int]:
    """Run the study; return (seconds, steps reused, store requests of the step cache)."""
    started = time.perf_counter()
    async with Session(
        study="bench-rerun", kubeconfig=cluster.kubeconfig_path, store=store, plain_http=True
    ) as session:
        handles = await session.submit_many(steps)
        results = await session.gather(*handles, check=True, timeout=3600)
        requests = sum(c.requests for c in session._reuse.caches.values())
    return time.perf_counter() - started, sum(r.reason == CACHED for r in results), requests


async def main(steps: int) -> None:
    if not registry_available():
        sys.exit("docker-registry is needed (apt-get install docker-registry)")
    with registry_process() as registry, tempfile.TemporaryDirectory() as tmp:
        timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
        async with FakeCluster("execute", directory=Path(tmp), controller=timings) as cluster:
            store = f"{registry.location}/bench-{int(time.time())}"
            study = tree(steps)
            fresh, reused_fresh, _ = await run_once(cluster, store, study)
            before_all, before_writes = cluster.request_count(), writes(cluster)
            second, reused, requests = await run_once(cluster, store, study)
            kube_all = cluster.request_count() - before_all
            kube_writes = writes(cluster) - before_writes
    print(f"| {steps:,}-step study on the fake cluster | seconds | ratio |")
    print("|---|---:|---:|")
    print(f"| fresh run ({reused_fresh} reused) | {fresh:.2f} | 1.00 |")
    print(f"| second run ({reused} reused) | {second:.2f} | {second / fresh:.3f} |")
    print()
    print("| second run | count | per reused step |")
    print("|---|---:|---:|")
    per = max(reused, 1)
    print(f"| Kubernetes requests (all verbs) | {kube_all} | {kube_all / per:.3f} |")
    print(f"| Kubernetes writes | {kube_writes} | {kube_writes / per:.3f} |")
    print(f"| registry requests (step cache) | {requests} | {requests / per:.2f} |")


INPUT = "in/corpus:v1"
READER = Step(
    name="reader",
    script='ls "$K8SJOBS_INPUTS"/data/corpus | wc -l > out.txt',
    inputs={"data": INPUT},
    outputs={"out": "out.txt"},
)


async def reuse_once(store: str, state: Path) -> tuple[float, str, int]:
    """Run the reader once; return (seconds, its reason, layers read to check a claim)."""
    started = time.perf_counter()
    async with Session(
        study="bench-verify", backend=LocalBackend(state_dir=state), store=store, plain_http=True
    ) as session:
        [result] = await session.gather(await session.submit(READER), check=True, timeout=600)
        checks = sum(c.verifications for c in session._reuse.caches.values())
    return time.perf_counter() - started, result.reason or "", checks


async def verify_cost(megabytes: int) -> None:
    if not registry_available():
        sys.exit("docker-registry is needed (apt-get install docker-registry)")
    with registry_process() as registry, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "corpus"
        folder.mkdir()
        for i in range(megabytes):
            (folder / f"part{i:04d}.bin").write_bytes(os.urandom(1 << 20))
        location = f"{registry.location}/bench-verify-{int(time.time())}"
        store = open_store(location, plain_http=True)
        assert isinstance(store, StoreFront)
        async with store:
            pushed = await store.push(INPUT, [folder])
            manifest, _, _ = await store.get_manifest(store._ref(pushed.pinned))
            bare = json.loads(manifest)
            del bare["layers"][0]["annotations"][_media.FILES_DIGEST]
            await store.put_manifest(
                store._ref("in/corpus:bare"), json.dumps(bare).encode(), _media.MANIFEST
            )
            await reuse_once(location, root / "state")  # runs the step: the record
            same = [await reuse_once(location, root / "state") for _ in range(3)]
            assert all(r[1:] == (CACHED, 0) for r in same), same
            checked = []
            for n in range(3):
                for path in [folder, *folder.iterdir()]:
                    os.utime(path, (1_000_000_000 + n, 1_000_000_000 + n))
                await store.push(INPUT, [folder])  # the same files, other times
                checked.append(await reuse_once(location, root / "state"))
            assert all(r[1:] == (CACHED, 1) for r in checked), checked
            pulls: dict[str, list[float]] = {"in/corpus:bare": [], INPUT: []}
            for _ in range(3):
                for reference, times in pulls.items():
                    target = root / "pulled"
                    started = time.perf_counter()
                    await store.pull(reference, target)
                    times.append(time.perf_counter() - started)
                    shutil.rmtree(target)
    plain, check = min(r[0] for r in same), min(r[0] for r in checked)
    bare_pull, claim_pull = min(pulls["in/corpus:bare"]), min(pulls[INPUT])
    print(f"| {megabytes} MB directory input (local backend, docker-registry) | seconds | ratio |")
    print("|---|---:|---:|")
    print(f"| reuse, the recorded archive (no read) | {plain:.2f} | 1.00 |")
    print(f"| reuse after a times-only re-push (layer read, claim checked) | {check:.2f} "
          f"| {check / plain:.2f} |")  # fmt: skip
    print(f"| pull, no claim on the layer | {bare_pull:.2f} | 1.00 |")
    print(f"| pull, claim checked while unpacking | {claim_pull:.2f} "
          f"| {claim_pull / bare_pull:.2f} |")  # fmt: skip


def writes(cluster: FakeCluster) -> int:
    return sum(cluster.request_count(verb) for verb in WRITES)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number of at least 1")
    return value


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=_positive, default=1000, help="steps in the study")
    parser.add_argument(
        "--verify-mb", type=_positive, help="measure checking the files digest of N MB instead"
    )
    args = parser.parse_args()
    asyncio.run(verify_cost(args.verify_mb) if args.verify_mb else main(args.steps))
