"""What the live table of ``k8sjobs run`` costs per change, at 100 and at 5,000 steps.

    python benchmarks/bench_cli.py                 # 100 and 5,000 steps, median of 3
    python benchmarks/bench_cli.py --sizes 100,5000,20000 --rounds 5

Each step goes RUNNING, then SUCCEEDED (two changes a step, 40 running at a time), fed to
the display as fast as the loop takes them, on a 120x40 terminal written to memory. Rows:
the display before this change (every change rebuilt the whole table, and rich's refresh
thread drew the whole table 4 times a second: both grow with the study), the display of
``k8sjobs run`` now (at most 4 draws a second, each at most a terminal of rows, the complete
table once at the end), and the same drawing at every change (its worst case: changes
slower than 4 a second). CPU time is the process's (the refresh thread's included), per
change; the final full table is included in the row "now", as a user sees it; the other
two rows are taken on the first 400 changes (each change costs them the same).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from k8sjobs.cli.statustable import Progress, status_table
from k8sjobs.state import StepResult, StepState

OLD = "before (whole table per change)"
NOW = "now (4 draws/s, bounded rows)"
# The old display and a draw at every change cost the same at each change (the whole
# table; a terminal of rows): their first changes show it, where the whole lifecycle
# would take minutes at 5,000 steps.
SAMPLE = 400


class Display(Protocol):
    """What ``k8sjobs run`` asks of its display."""

    def __enter__(self) -> object: ...
    def __exit__(self, *exc: object) -> None: ...
    def update(self, result: StepResult) -> None: ...
    def rows(self) -> int: ...


class NewProgress(Progress):
    """``k8sjobs run``'s display, counting the rows it drew."""

    def rows(self) -> int:
        return self.view.rows_drawn


class OldProgress:
    """The live display as it was: the whole table rebuilt per change, drawn 4 times a second."""

    def __init__(self, names: list[str], console: Console) -> None:
        self.records = {n: StepResult(name=n) for n in names}
        self.rows_built = 0
        self._live = Live(self._render(), console=console, refresh_per_second=4)

    def __enter__(self) -> OldProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.update(self._render())
        self._live.__exit__(None, None, None)

    def update(self, result: StepResult) -> None:
        self.records[result.name] = result
        self._live.update(self._render())

    def rows(self) -> int:
        return self.rows_built

    def _render(self) -> Table:
        self.rows_built += len(self.records)
        return status_table(list(self.records.values()))


def lifecycle(names: list[str], window: int = 40) -> Iterator[StepResult]:
    """Each step goes RUNNING, then SUCCEEDED, ``window`` steps running at a time."""
    for i, name in enumerate([*names, *[""] * window]):
        if name:
            yield StepResult(name=name, state=StepState.RUNNING, reason="Running")
        if i >= window:
            yield StepResult(name=names[i - window], state=StepState.SUCCEEDED, reason="Completed")


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=120, height=40)


async def feed(
    display: Callable[[list[str]], Display], n: int, sample: int | None
) -> tuple[float, float]:
    """Return (CPU microseconds per change, rows drawn or built per change) for one run of
    the whole lifecycle, or of its first ``sample`` changes."""
    names = [f"step-{i}" for i in range(n)]
    changes = list(lifecycle(names))[:sample]
    started = time.process_time()
    progress = display(names)
    with progress:
        for k, result in enumerate(changes):
            progress.update(result)
            if k % 64 == 0:
                await asyncio.sleep(0)  # let due timers draw, as a running driver does
    cpu = time.process_time() - started
    return cpu / len(changes) * 1e6, progress.rows() / len(changes)


async def measure(n: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Return, per display, the medians of ``rounds`` runs at ``n`` steps."""
    displays: dict[str, Callable[[list[str]], Display]] = {
        OLD: lambda names: OldProgress(names, terminal()),
        NOW: lambda names: NewProgress(names, terminal(), live=True),
        "now, a draw at every change": lambda names: NewProgress(
            names, terminal(), live=True, rate=1e9
        ),
    }
    taken: dict[str, list[tuple[float, float]]] = {label: [] for label in displays}
    for _ in range(rounds):
        for label, display in displays.items():
            sample = None if label == NOW else SAMPLE
            taken[label].append(await feed(display, n, sample))
    return {
        label: (statistics.median(c for c, _ in runs), statistics.median(r for _, r in runs))
        for label, runs in taken.items()
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,5000", help="comma-separated study sizes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    results = {n: await measure(n, args.rounds) for n in sizes}
    one, five, fifteen = os.getloadavg()
    print(f"\n{os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}; ", end="")
    print(f"median of {args.rounds}, a 120x40 terminal\n")
    head = " | ".join(f"{n:,} steps: CPU µs / rows per change" for n in sizes)
    print(f"| live display | {head} |")
    print("|---|" + "---|" * len(sizes))
    for label in results[sizes[0]]:
        cells = " | ".join(
            f"{results[n][label][0]:.0f} / {results[n][label][1]:.1f}" for n in sizes
        )
        print(f"| {label} | {cells} |")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    asyncio.run(main())
