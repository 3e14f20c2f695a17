"""Per-step overhead of the LocalBackend over a bare subprocess running the same script.

    python benchmarks/bench_local.py            # 20 steps
    python benchmarks/bench_local.py --steps 50

Both sides run the same small bash script, measured in the same run: "bare" starts
``bash script`` with asyncio's subprocess API; "local" submits a Step with that script to a
LocalBackend (render, slot reservation, sandbox, ConfigMap volume, status records, judge) and
awaits its result. Sequential: one after another; concurrent: all submitted at once (the
backend is given as many cores as steps, so the slot scheduler does not queue them).
Target: under 50 ms of overhead per step.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from k8sjobs import Session, Step
from k8sjobs.local import LocalBackend

SCRIPT = 'x=$((6 * 7)); echo "answer $x"\n'
TARGET_MS = 50.0


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per mode (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, median kept (default 3)")
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args.steps, args.rounds))
    print(table(rows, args.steps))
    return 0 if all((lo - b) / args.steps * 1000 < TARGET_MS for _, b, lo in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
