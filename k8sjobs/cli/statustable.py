"""The status table of ``k8sjobs run`` and ``k8sjobs status``, and its live view.

A live table that rebuilt every step's row on each change would cost the study's size per
change, so a study of n steps with a few changes each would cost n squared. ``LiveView``
keeps what it shows current in O(1) per change (the counts per state, the running steps,
the last steps that changed) and draws at most a terminal's height of rows when asked;
``Progress`` asks at most ``rate`` times a second, and draws the complete table once, at
the end.
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._printable import printable
from ..durations import format_duration
from ..state import StepResult, StepState
from ..study import summarize
from ..usage import summarize_usage
from .exits import closed_pipe

__all__ = ["FIELDS", "Field", "LiveView", "Progress", "status_table", "step_record"]

_STYLE = {
    StepState.PENDING: "dim",
    StepState.RUNNING: "cyan",
    StepState.PREEMPTED: "yellow",
    StepState.SUCCEEDED: "green",
    StepState.FAILED: "bold red",
    StepState.CANCELLED: "yellow",
    StepState.LOST: "magenta",
}
#: A step that waits (for a slot, a node, a mount) this many seconds says why; a shorter wait
#: is the ordinary start of a step, not news (issue 34: WaitingForResources for 0.1 s).
WAIT_NOTICE = 1.0
# Lines of a bounded view that are not step rows: the summary, the header, its rule, and
# the line the live display keeps below itself.
_CHROME = 4


@dataclass(frozen=True)
class Field:
    """One fact about a step, as ``status -o json|yaml`` writes it and a table shows it.

    ``value`` gives the JSON value (None: unknown); ``cell`` the table's text (default the
    value, blank when None); ``wide`` shows it only in ``-o wide``; a field with no
    ``header`` is in JSON and YAML only. Add a fact of StepResult here and every output
    format has it.
    """

    key: str
    value: Callable[[StepResult], Any]
    header: str = ""
    wide: bool = False
    cell: Callable[[StepResult, datetime], str | Text] | None = None

    def text(self, result: StepResult, now: datetime) -> str | Text:
        """Return the table cell of ``result`` (a running step's time: up to ``now``), its
        control characters escaped (names and reasons come from the server and stores)."""
        if self.cell is None:
            value = self.value(result)
            return "" if value is None else Text(printable(str(value)))
        cell = self.cell(result, now)
        if isinstance(cell, str):
            return printable(cell)
        return Text(printable(cell.plain), style=cell.style)


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="seconds")


FIELDS: tuple[Field, ...] = (
    # Text, not markup: step names such as "transform[SHARD=0]" look like rich tags.
    Field("name", lambda r: r.name, "step"),
    Field(
        "state",
        lambda r: str(r.state),
        "state",
        cell=lambda r, _now: Text(str(r.state), style=_STYLE[r.state]),
    ),
    Field(
        "duration",
        lambda r: r.duration,
        "duration",
        cell=lambda r, now: r.took(now),
    ),
    # What the step used (k8sjobs.usage.Usage): its figures, and why any is missing.
    Field(
        "usage",
        lambda r: None if r.usage is None else r.usage.to_json(),
        "used",
        cell=lambda r, _now: Text("" if r.usage is None else r.usage.describe()),
    ),
    Field("reason", lambda r: r.reason, "reason", cell=lambda r, _now: Text(r.message or r.reason)),
    Field("message", lambda r: r.message),
    Field("exit_code", lambda r: r.exit_code, "exit", wide=True),
    Field("started_at", lambda r: _when(r.started_at), "started", wide=True),
    Field("finished_at", lambda r: _when(r.finished_at)),
    Field(
        "pods",
        lambda r: list(r.pods),
        "pods",
        wide=True,
        cell=lambda r, _now: Text(" ".join(r.pods)),
    ),
    Field("outputs", lambda r: dict(r.outputs)),
    Field("memory_attempts", lambda r: list(r.memory_attempts)),
    Field("log_file", lambda r: r.log_file, "log", wide=True),
)


def usage_summary(
    results: Iterable[StepResult], requested: Mapping[str, Mapping[str, Any] | None]
) -> str:
    """Return the study's usage lines: CPU hours, the steps that asked for far more than
    they used ("train: mem 8Gi req, 1.2Gi peak"); "" when no step was measured."""
    ended = [(r.name, requested.get(r.name), r.usage) for r in results if r.state.terminal]
    return summarize_usage(ended).describe()


def step_record(result: StepResult) -> dict[str, Any]:
    """Return ``result`` as the mapping ``status -o json|yaml`` writes: every field."""
    return {f.key: f.value(result) for f in FIELDS}


def status_table(
    results: Iterable[StepResult], now: datetime | None = None, *, wide: bool = False
) -> Table:
    """Return a table of ``results``, one row a step: name, state, duration, reason (and,
    ``wide``, the exit code, start, pods and log file).

    A running step's duration is its time so far, up to ``now`` (default: the clock's).
    """
    now = now or datetime.now().astimezone()
    shown = [f for f in FIELDS if f.header and (wide or not f.wide)]
    table = Table(show_edge=False, header_style="bold")
    for f in shown:
        table.add_column(f.header)
    for r in results:
        table.add_row(*(f.text(r, now) for f in shown))
    return table


class LiveView:
    """What the live table shows, kept current in O(1) per change (a rich renderable).

    A study that fits the terminal is drawn whole. A larger one is drawn as a summary line
    (steps per state) above the rows that matter now: the running steps, then the steps
    that changed last, then the first steps, in study order; never more rows than the
    terminal has lines.
    ``rows_drawn`` and ``draws`` count what drawing cost, for tests and benchmarks.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.results = {name: StepResult(name=name) for name in names}
        self._order = {name: i for i, name in enumerate(names)}
        self.counts: Counter[StepState] = Counter({StepState.PENDING: len(names)})
        self._running: dict[str, None] = {}  # an ordered set: oldest start first
        self._recent: dict[str, None] = {}  # the same, by last change
        self.rows_drawn = 0
        self.draws = 0
        #: A line above the steps about the driver itself (``Progress.notice``).
        self.notice: str | None = None
        #: Steps whose wait is not news yet (shorter than ``WAIT_NOTICE``): drawn without it.
        self.unsaid: set[str] = set()

    def change(self, result: StepResult) -> None:
        """Take a step's new result (the cost does not depend on the study's size)."""
        before = self.results.get(result.name)
        if before is not None:
            self.counts[before.state] -= 1
        else:
            self._order[result.name] = len(self._order)
        self.counts[result.state] += 1
        self.results[result.name] = result
        if result.state is not StepState.PENDING:
            self.unsaid.discard(result.name)
        self._running.pop(result.name, None)
        if result.state is StepState.RUNNING:
            self._running[result.name] = None
        self._recent.pop(result.name, None)
        self._recent[result.name] = None
        if len(self._recent) > 1024:  # more than any terminal shows
            del self._recent[next(iter(self._recent))]

    def rows(self, budget: int) -> list[StepResult]:
        """Return the rows to draw in ``budget`` lines: all of them if they fit."""
        if len(self.results) <= budget:
            return list(self.results.values())
        chosen: dict[str, None] = {}
        # The running steps, then the latest changes, then the study's first steps (so a
        # run that has not started yet shows where it starts): a budget's worth at most.
        newest_first = itertools.chain(
            reversed(self._running), reversed(self._recent), itertools.islice(self.results, budget)
        )
        for name in newest_first:
            if len(chosen) >= budget:
                break
            chosen[name] = None
        return [self.results[n] for n in sorted(chosen, key=self._order.__getitem__)]

    @property
    def running(self) -> bool:
        """Return whether any step is running now (its elapsed time moves)."""
        return bool(self._running)

    def summary(self) -> str:
        """Return the counts line: how many steps are in each state (those with any)."""
        parts = [f"{self.counts[s]} {str(s).lower()}" for s in StepState if self.counts[s]]
        return f"{len(self.results)} steps: " + ", ".join(parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or console.height
        budget = max(1, height - _CHROME)
        rows = self.rows(budget)
        self.draws += 1
        self.rows_drawn += len(rows)
        if self.notice:  # the driver's own trouble (an unreachable API server), not a step's
            yield Text(self.notice, style="bold yellow")
        if len(rows) < len(self.results):
            yield Text(self.summary() + f" (showing {len(rows)}: running, then latest)")
        yield status_table(self._shown(r) for r in rows)

    def _shown(self, result: StepResult) -> StepResult:
        """Return ``result`` as drawn: a wait not news yet has no reason in its cell."""
        if result.name in self.unsaid:
            return result.evolve(reason="", message="")
        return result


class Progress:
    """Shows a run: a live table on a terminal, one line per change elsewhere.

    On a terminal each change updates a ``LiveView`` and asks for a draw; draws happen at
    most ``rate`` times a second (a change in between is drawn by a timer at the next
    slot), and the complete table is drawn once when the run ends. While a step runs the
    table is drawn once a second besides, so its elapsed time moves. ``clock`` is for tests.

    A reader of the lines that leaves (``| head``) is told to ``on_reader_left`` once and
    printed to no more (``reader_left``): the run decides what that means, not the print
    that found it, which may be a step's listener or a timer.
    """

    def __init__(
        self,
        names: Sequence[str],
        console: Console,
        *,
        live: bool,
        rate: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
        on_reader_left: Callable[[], object] = lambda: None,
    ) -> None:
        self.console = console
        self.reader_left = False
        self._on_reader_left = on_reader_left
        self.start = clock()
        self.view = LiveView(names)
        self._clock = clock
        self._gap = 1.0 / rate
        self._next_draw = self.start
        self._timer: asyncio.TimerHandle | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._waits: dict[str, asyncio.TimerHandle] = {}  # a wait not said yet, per step
        self._live = Live(self.view, console=console, auto_refresh=False) if live else None

    def __enter__(self) -> Progress:
        if self._live:
            self._live.start()
            self._draw()
        return self

    def __exit__(self, *exc: object) -> None:
        for timer in (self._timer, self._tick):
            if timer is not None:
                timer.cancel()
        self._timer = self._tick = None
        for wait in self._waits.values():
            wait.cancel()
        self._waits.clear()
        if self._live:
            # The end: every row, once, in full (rich draws past the terminal's height here).
            self._live.update(status_table(self.view.results.values()))
            self._live.stop()

    def notice(self, text: str | None) -> None:
        """Show ``text`` above the steps until it is taken back (None): "API server
        unreachable since 12:03:04, retrying". Off a terminal, each is one line."""
        if text == self.view.notice:
            return
        self.view.notice = text
        if self._live:
            self._ask_draw()
            return
        self._say(text or "the API server answers again")

    def update(self, result: StepResult) -> None:
        """Take a step's new result: ask for a draw, or print its line if its state changed."""
        before = self.view.results.get(result.name)
        self.view.change(result)
        if result.state is not StepState.PENDING and (wait := self._waits.pop(result.name, None)):
            wait.cancel()  # it went on within WAIT_NOTICE: its wait was no news
        if self._live:
            if _newly_blocked(before, result):  # drawn once the wait is real, as printed
                self.view.unsaid.add(result.name)
                self._say_wait_later(result)
            self._ask_draw()
        elif before is None or before.state is not result.state or _newly_blocked(before, result):
            # An end says how long and why; a start says only that it started; a step that
            # waits says why, once per reason (a refused pod, no node), not in silence, but
            # only once the wait is real: most steps wait a moment for a slot or a mount.
            if _newly_blocked(before, result):
                self._say_wait_later(result)
                if before is not None and before.state is result.state:
                    return
            # An end, and a preemption (Kueue says for whom), say why; a start does not.
            why = result.state.terminal or result.state is StepState.PREEMPTED
            line = result.describe() if why else f"{result.name}: {result.state}"
            self._say(line)

    def _say(self, line: str) -> None:
        if self.reader_left:
            return
        elapsed = self._clock() - self.start
        try:
            print(printable(f"[{elapsed:7.1f}s] {line}"), flush=True)
        except BrokenPipeError:
            self.reader_left = True
            closed_pipe()  # stdout to /dev/null: the interpreter's last flush must not fail
            self._on_reader_left()

    def _say_wait_later(self, result: StepResult) -> None:
        """Say why ``result`` waits if it still does in ``WAIT_NOTICE`` seconds."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on (a test's): say it now
            if self._live:
                self.view.unsaid.discard(result.name)  # the caller draws
            else:
                self._say_wait(result)
            return
        if (old := self._waits.pop(result.name, None)) is not None:
            old.cancel()
        self._waits[result.name] = loop.call_later(WAIT_NOTICE, self._say_wait, result)

    def _say_wait(self, result: StepResult) -> None:
        self._waits.pop(result.name, None)
        now = self.view.results.get(result.name)
        if self._live:
            self.view.unsaid.discard(result.name)
            self._ask_draw()
        elif now is not None and now.state is StepState.PENDING and now.reason == result.reason:
            self._say(f"{result.name}: {result.state} ({result.reason}: {result.message})")

    def _ask_draw(self) -> None:
        """Draw now if the last draw is ``1/rate`` s old, else make sure a timer will."""
        now = self._clock()
        if now >= self._next_draw:
            self._draw()
        elif self._timer is None:
            delay = self._next_draw - now
            self._timer = asyncio.get_running_loop().call_later(delay, self._draw)

    def _draw(self) -> None:
        if self._timer is not None:  # a change drew before it: it would draw the same again
            self._timer.cancel()
            self._timer = None
        self._next_draw = self._clock() + self._gap
        if self._live is not None and self._live.is_started:
            self._live.refresh()
            self._keep_ticking()

    def _keep_ticking(self) -> None:
        """While a step runs, make sure a draw comes within a second (elapsed times move)."""
        if self._tick is not None or not self.view.running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # drawn outside a loop (a test's): nothing will tick
            return
        self._tick = loop.call_later(1.0, self._ticked)

    def _ticked(self) -> None:
        self._tick = None
        self._draw()

    def summary(
        self,
        results: Sequence[StepResult],
        study: str,
        saved: Path,
        requested: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Print the run's last lines: steps per state, each failure, what the steps used
        (``requested``: each step's run-record request), where the record is; nothing once
        the reader left."""
        if self.reader_left:
            return
        counts = summarize(results)
        elapsed = self._clock() - self.start
        text = ", ".join(f"{n} {state.lower()}" for state, n in counts.items())
        took = format_duration(elapsed)
        self.console.print(f"\n{len(results)} steps in {took}: {text}", highlight=False)
        for line in failure_lines(results):
            self.console.print(line, highlight=False, markup=False)
        used = usage_summary(results, requested or {})
        if used:
            self.console.print(used, highlight=False, markup=False)
        hint = shlex.join(["k8sjobs", "report", study])  # pasted into a shell as it is
        self.console.print(f"timeline: {hint} (run data in {saved})", highlight=False, markup=False)


#: Failures told the same way, said in full this many times; the rest are named after them.
SAME_FAILURES_SHOWN = 3


def failure_lines(results: Sequence[StepResult]) -> list[str]:
    """Return the summary's lines for the steps that did not succeed, one per step in order,
    except that past ``SAME_FAILURES_SHOWN`` failures told in the same words (a cluster
    without Kueue refuses every queued step alike) the others are named in one line."""
    lines: list[str] = []
    same: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        if r.ok:
            continue
        told = (r.message or "").replace(f'"{r.name}"', '"…"')
        names = same.setdefault((r.state.value, r.reason, told), [])
        names.append(r.name)
        if len(names) <= SAME_FAILURES_SHOWN:
            where = f"; log: {r.log_file}" if r.log_file else ""
            lines.append(f"  {r.describe()}{where}")
    for names in same.values():
        rest = names[SAME_FAILURES_SHOWN:]
        if rest:
            shown = ", ".join(rest[:10]) + (f" and {len(rest) - 10} others" if rest[10:] else "")
            lines.append(printable(f"  {len(rest)} more as {names[0]}: {shown}"))
    return lines


def _newly_blocked(before: StepResult | None, result: StepResult) -> bool:
    """Return whether a PENDING step now waits for a reason the server gave in words."""
    return (
        result.state is StepState.PENDING
        and bool(result.message)
        and (before is None or before.reason != result.reason)
    )
