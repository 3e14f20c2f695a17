"""Per-step overhead of the LocalBackend over a bare subprocess running the same script,
and what handing a file from step to step costs.

    python benchmarks/bench_local.py                      # every table, 5 rounds each
    python benchmarks/bench_local.py --steps 50 --rounds 3
    python benchmarks/bench_local.py --only handoff       # just the artifact table
    python benchmarks/bench_local.py --only keeper        # just the keeper table

Both sides run the same small bash script, measured in the same run: "bare" starts
``bash script`` with asyncio's subprocess API; "local" submits a Step with that script to a
LocalBackend (render, slot reservation, sandbox, ConfigMap volume, status records, judge) and
awaits its result. Sequential: one after another; concurrent: all submitted at once (the
backend is given as many cores as steps, so the slot scheduler does not queue them).
Target: under 50 ms of overhead per step.

The handoff table runs one script that copies a 1 KiB input file to a 1 KiB output file, five
ways, one step after another: a bare subprocess; a step without artifacts (both read a file
given by path); a step whose input is pulled from the backend's store and whose output is
pushed to it, with the handoff in-process (the default) and as processes
(``handoff="subprocess"``, what every step paid before). Then a chain of ``--chain`` steps,
each reading its predecessor's output (all submitted at once, the session orders them),
without artifacts and with the in-process handoff; ``--subprocess-chain`` adds the chain on
the subprocess path (slow: about a second per step). Floors: the in-process handoff step
costs under 60 ms more than the bare subprocess, and a 100-step chain runs in under 10 s.

The keeper table (``--only keeper``) starts and ends one container running ``true`` through
the runner's process layer (``_process.spawn`` and its ``Supervisor``), ``--steps`` times: under
a keeper forked by the driver's keeper server (the default), under a keeper started as a Python
process of its own (the fallback, and what every container paid at first), and bare.
Every figure is the median of ``--rounds`` rounds; the load average is printed beside them,
as the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from k8sjobs import Session, Step, StepHandle
from k8sjobs.artifacts import open_store
from k8sjobs.local import LocalBackend
from k8sjobs.local._keepers import SERVER
from k8sjobs.local._process import Launch, MemoryMonitor, Supervisor, program, spawn

SCRIPT = 'x=$((6 * 7)); echo "answer $x"\n'
TARGET_MS = 50.0
# The handoff script: copy the input (a path in $SRC, else the pulled input) to the output.
COPY = 'head -c 1024 "${SRC:-$K8SJOBS_INPUTS/data/in.bin}" > out.bin\n'
HANDOFF_FLOOR_MS = 60.0
CHAIN_FLOOR_S = 10.0


async def bare(script: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        "bash", str(script), stdout=asyncio.subprocess.DEVNULL
    )
    if await process.wait() != 0:
        raise RuntimeError("the bare script failed")


async def sequential(run_one: Callable[[int], Awaitable[None]], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        await run_one(i)
    return time.perf_counter() - start


async def concurrent(run_one: Callable[[int], Awaitable[None]], n: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(run_one(i) for i in range(n)))
    return time.perf_counter() - start


async def measure(n: int, rounds: int) -> list[tuple[str, float, float]]:
    """Return (mode, bare seconds, local seconds) for each mode, the median of ``rounds``."""
    with tempfile.TemporaryDirectory(prefix="k8sjobs-bench-") as folder:
        root = Path(folder)
        script = root / "script.sh"
        script.write_text(SCRIPT)
        rows = []
        for mode, runner in (("sequential", sequential), ("concurrent", concurrent)):
            bare_times, local_times = [], []
            for r in range(rounds):
                bare_times.append(await runner(lambda _i: bare(script), n))
                backend = LocalBackend(state_dir=root / f"{mode}-{r}", cpu=n, kill_grace=0.5)
                async with Session(study=f"bench-{mode}-{r}", backend=backend) as session:

                    async def local(i: int, session: Session = session) -> None:
                        step = Step(name=f"s{i}", shell="bash", script=SCRIPT)
                        result = await (await session.submit(step)).wait()
                        if not result.ok:
                            raise RuntimeError(result.describe())

                    local_times.append(await runner(local, n))
            rows.append((mode, statistics.median(bare_times), statistics.median(local_times)))
        return rows


def table(rows: list[tuple[str, float, float]], n: int) -> str:
    head = f"{'mode':<11} {'steps':>5} {'bare total':>11} {'local total':>12} "
    head += f"{'bare/step':>10} {'local/step':>11} {'overhead/step':>14}  target"
    lines = [head, "-" * len(head)]
    for mode, bare_s, local_s in rows:
        over = (local_s - bare_s) / n * 1000
        verdict = "ok" if over < TARGET_MS else "OVER"
        lines.append(
            f"{mode:<11} {n:>5} {bare_s * 1000:>9.0f}ms {local_s * 1000:>10.0f}ms "
            f"{bare_s / n * 1000:>8.1f}ms {local_s / n * 1000:>9.1f}ms {over:>12.1f}ms  "
            f"{verdict} (< {TARGET_MS:.0f} ms)"
        )
    return "\n".join(lines)


async def _bare_copy(folder: Path, source: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", COPY, cwd=folder, env={**os.environ, "SRC": str(source)}
    )
    if await process.wait() != 0:
        raise RuntimeError("the bare copy failed")


async def _steps(root: Path, kind: str, n: int) -> float:
    """Run ``n`` copy steps one after another on a fresh backend; return the seconds."""
    handoff = "subprocess" if kind == "subprocess handoff" else "in-process"
    backend = LocalBackend(state_dir=root, cpu=2, kill_grace=0.5, handoff=handoff)
    source = root.parent / "in.bin"
    async with Session(study="copy", backend=backend) as session:
        if kind != "no artifacts":  # the input, in the backend's own store
            async with open_store(backend.default_store) as store:
                pinned = (await store.push("bench/in:v1", [source])).pinned
        start = time.perf_counter()
        for i in range(n):
            if kind == "no artifacts":
                step = Step(name=f"c{i}", shell="bash", script=COPY, env={"SRC": str(source)})
            else:
                step = Step(
                    name=f"c{i}",
                    shell="bash",
                    script=COPY,
                    inputs={"data": pinned},
                    outputs={"out": "out.bin"},
                )
            result = await (await session.submit(step)).wait()
            if not result.ok:
                raise RuntimeError(result.describe())
        return time.perf_counter() - start


async def _chain(root: Path, kind: str, n: int) -> float:
    """Run a chain of ``n`` steps, each reading the previous one's output; return seconds."""
    handoff = "subprocess" if kind == "subprocess handoff" else "in-process"
    backend = LocalBackend(state_dir=root, cpu=2, kill_grace=0.5, handoff=handoff)
    steps: list[Step] = []
    for i in range(n):
        if kind == "no artifacts":
            steps.append(Step(name=f"c{i}", shell="bash", script=f"echo {i} > out.bin"))
            continue
        read = 'cat "$K8SJOBS_INPUTS/prev/out.bin" > /dev/null; ' if steps else ""
        inputs = {"prev": steps[-1].output("out")} if steps else {}
        script = f"{read}head -c 1024 /dev/urandom > out.bin"
        steps.append(
            Step(
                name=f"c{i}", shell="bash", script=script, inputs=inputs, outputs={"out": "out.bin"}
            )
        )
    start = time.perf_counter()
    async with Session(study="chain", backend=backend) as session:
        handles: list[StepHandle] = []
        for step in steps:  # each after the previous one, inputs or not
            handles.append(await session.submit(step, after=handles[-1:]))
        results = await session.gather()
    elapsed = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(failed[0].describe())
    return elapsed


HANDOFF_KINDS = ("no artifacts", "in-process handoff", "subprocess handoff")


async def measure_handoff(
    n: int, chain: int, rounds: int, subprocess_chain: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Return the median seconds per step of each kind, and of each chain (whole chain)."""
    per_step: dict[str, list[float]] = {"bare subprocess": [], **{k: [] for k in HANDOFF_KINDS}}
    chains: dict[str, list[float]] = {k: [] for k in HANDOFF_KINDS[: 3 if subprocess_chain else 2]}
    with tempfile.TemporaryDirectory(prefix="k8sjobs-bench-") as folder:
        root = Path(folder)
        (root / "in.bin").write_bytes(os.urandom(1024))
        for r in range(rounds):  # interleaved, so that a change of load hits every kind
            start = time.perf_counter()
            for _ in range(n):
                await _bare_copy(root, root / "in.bin")
            per_step["bare subprocess"].append((time.perf_counter() - start) / n)
            for kind in HANDOFF_KINDS:
                per_step[kind].append(
                    await _steps(root / f"{kind}-{r}".replace(" ", "-"), kind, n) / n
                )
            for kind in chains:
                chains[kind].append(
                    await _chain(root / f"chain-{kind}-{r}".replace(" ", "-"), kind, chain)
                )
    return (
        {k: statistics.median(v) for k, v in per_step.items()},
        {k: statistics.median(v) for k, v in chains.items()},
    )


def handoff_table(per_step: dict[str, float], chains: dict[str, float], n: int, chain: int) -> str:
    bare = per_step["bare subprocess"]
    lines = [f"{'one 1 KiB input, one 1 KiB output':<36} {'per step':>9} {'over bare':>10}  floor"]
    lines.append("-" * len(lines[0]))
    for kind, seconds in per_step.items():
        over = (seconds - bare) * 1000
        verdict = ""
        if kind == "in-process handoff":
            ok = over < HANDOFF_FLOOR_MS
            verdict = f"{'ok' if ok else 'OVER'} (< {HANDOFF_FLOOR_MS:.0f} ms over bare)"
        lines.append(f"{kind:<36} {seconds * 1000:>7.1f}ms {over:>8.1f}ms  {verdict}")
    lines.append("")
    lines.append(f"{f'chain of {chain} steps':<36} {'total':>9} {'per step':>10}  floor")
    lines.append("-" * len(lines[0]))
    for kind, seconds in chains.items():
        verdict = ""
        if kind == "in-process handoff" and chain >= 100:
            ok = seconds < CHAIN_FLOOR_S
            verdict = f"{'ok' if ok else 'OVER'} (< {CHAIN_FLOOR_S:.0f} s for 100)"
        lines.append(f"{kind:<36} {seconds:>8.2f}s {seconds / chain * 1000:>8.1f}ms  {verdict}")
    return "\n".join(lines)


KEEPER_KINDS = ("bare subprocess", "keeper server", "keeper of its own")


async def _container(kind: str, sandbox: Path, memory: MemoryMonitor) -> float:
    """Start and end one ``true`` container as ``kind``; return the seconds."""
    start = time.perf_counter()
    if kind == "bare subprocess":
        process = await asyncio.create_subprocess_exec("true", start_new_session=True)
        await process.wait()
        return time.perf_counter() - start
    SERVER.enabled = kind == "keeper server"
    launch = Launch(
        "main", "bench", True, ["true"], {"PATH": os.environ["PATH"]}, str(sandbox), None
    )
    keeper, pid = await spawn(launch, program(launch), sandbox, kill_grace=0.5)
    await Supervisor(keeper, pid, None, 0.5, memory).wait()
    return time.perf_counter() - start


async def measure_keeper(n: int, rounds: int) -> dict[str, float]:
    """Return the median seconds per container of each kind (rounds interleaved)."""
    times: dict[str, list[float]] = {kind: [] for kind in KEEPER_KINDS}
    memory = MemoryMonitor()
    with tempfile.TemporaryDirectory(prefix="k8sjobs-bench-") as folder:
        sandbox = Path(folder)
        (sandbox / "logs").mkdir()
        await _container("keeper server", sandbox, memory)  # the server's own start, once
        for _ in range(rounds):
            for kind in KEEPER_KINDS:
                runs = [await _container(kind, sandbox, memory) for _ in range(n)]
                times[kind].append(statistics.median(runs))
    SERVER.enabled = True
    return {kind: statistics.median(values) for kind, values in times.items()}


def keeper_table(per_container: dict[str, float]) -> str:
    bare = per_container["bare subprocess"]
    lines = [f"{'one container running true':<36} {'start to end':>12} {'over bare':>10}"]
    lines.append("-" * len(lines[0]))
    for kind, seconds in per_container.items():
        lines.append(f"{kind:<36} {seconds * 1000:>10.1f}ms {(seconds - bare) * 1000:>8.1f}ms")
    return "\n".join(lines)


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per mode (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, median kept (default 5)")
    parser.add_argument("--chain", type=int, default=100, help="chain length (default 100)")
    parser.add_argument(
        "--only", choices=("overhead", "handoff", "keeper"), help="run one table only"
    )
    parser.add_argument(
        "--subprocess-chain", action="store_true", help="also run the chain on the subprocess path"
    )
    args = parser.parse_args(argv)
    ok = True
    print(f"{os.cpu_count()} cores, {_load()} at the start")
    if args.only in (None, "keeper"):
        per_container = asyncio.run(measure_keeper(args.steps, args.rounds))
        print(f"median of {args.rounds} rounds of {args.steps} containers, one after another")
        print(keeper_table(per_container))
        print(_load(), "\n")
    if args.only in (None, "overhead"):
        rows = asyncio.run(measure(args.steps, args.rounds))
        print(table(rows, args.steps))
        ok = all((lo - b) / args.steps * 1000 < TARGET_MS for _, b, lo in rows)
        print(_load(), "\n")
    if args.only in (None, "handoff"):
        steps = min(args.steps, 10)  # the subprocess path costs about a second a step
        per_step, chains = asyncio.run(
            measure_handoff(steps, args.chain, args.rounds, args.subprocess_chain)
        )
        print(f"median of {args.rounds} rounds of {steps} steps, one after another")
        print(handoff_table(per_step, chains, steps, args.chain))
        print(_load())
        over = (per_step["in-process handoff"] - per_step["bare subprocess"]) * 1000
        chain_ok = args.chain < 100 or chains["in-process handoff"] < CHAIN_FLOOR_S
        ok = ok and over < HANDOFF_FLOOR_MS and chain_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
