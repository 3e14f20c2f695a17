"""The live table of ``k8sjobs run``: bounded cost per change, and a true final table.

Cost is counted in rows drawn (``LiveView.rows_drawn``) and draws, never in time: a clock
is passed in, so "a second later" is a number, not a sleep.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from k8sjobs.cli.statustable import LiveView, Progress, status_table
from k8sjobs.state import StepResult, StepState

from ..waiting import wait_until

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HEIGHT = 30
BUDGET = HEIGHT - 4  # the summary, the header, its rule, the line below the live display


class Clock:
    """A clock that moves only when told (``tick`` seconds per reading when given)."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def S(seconds: float) -> timedelta:  # reads as a unit: t0 + S(0.25)
    return timedelta(seconds=seconds)


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=100, height=HEIGHT)


def lifecycle(names: list[str]) -> Iterator[StepResult]:
    """Each step goes RUNNING, then ends (every seventh FAILED), in a rolling window."""
    window = 40
    for i, name in enumerate([*names, *[""] * window]):
        if name:
            yield StepResult(name=name, state=StepState.RUNNING, reason="Running")
        if i >= window:
            done = names[i - window]
            state = StepState.FAILED if (i - window) % 7 == 0 else StepState.SUCCEEDED
            yield StepResult(name=done, state=state, reason=str(state).title())


@pytest.mark.parametrize("n", [20, 100, 5000])
async def test_rows_drawn_per_draw_stay_within_the_terminal(n: int) -> None:
    names = [f"step-{i}" for i in range(n)]
    clock = Clock()
    progress = Progress(names, terminal(), live=True, clock=clock)
    view = progress.view
    most = changes = 0
    every = max(1, n // 50)  # about 100 draws whatever the size (each costs real time)
    with progress:
        for result in lifecycle(names):
            before = view.rows_drawn
            changes += 1
            if changes % every == 0:
                clock.now += 1.0  # a draw is due at this change
            progress.update(result)
            most = max(most, view.rows_drawn - before)
        assert view.draws == changes // every + 1  # the first draw, then one per due change
    # A study that fits is drawn whole; a larger one never more rows than the terminal has.
    assert most == (n if n <= BUDGET else BUDGET)


async def test_draws_are_at_most_rate_per_second_and_the_last_one_is_current() -> None:
    names = [f"step-{i}" for i in range(5000)]
    console = terminal()
    clock = Clock()  # frozen: every change after the first draw falls in the same slot
    progress = Progress(names, console, live=True, clock=clock, rate=4)
    with progress:
        for result in lifecycle(names):
            progress.update(result)
        assert progress.view.draws == 1  # 10,000 changes, no draw: the slot is taken
        await wait_until(lambda: progress.view.draws == 2, "the timer draws the pending changes")
        shown = console.file.getvalue()  # type: ignore[attr-defined]
        assert "5000 steps: 4285 succeeded, 715 failed" in shown
        for result in lifecycle(names[:3]):
            progress.update(result)
        assert progress.view.draws == 2  # the clock has not moved: the next slot is later
        clock.now += 0.25
        progress.update(StepResult(name="step-0", state=StepState.SUCCEEDED))
        assert progress.view.draws == 3


async def test_a_draw_cancels_the_timer_it_makes_needless() -> None:
    clock = Clock()
    progress = Progress(["a", "b"], terminal(), live=True, clock=clock, rate=4)
    with progress:
        progress.update(StepResult(name="a", state=StepState.RUNNING))  # slot taken: a timer
        timer = progress._timer
        assert timer is not None and progress.view.draws == 1
        clock.now += 0.25  # the loop was busy past the slot: the next change draws itself
        progress.update(StepResult(name="b", state=StepState.RUNNING))
        assert progress.view.draws == 2
        assert timer.cancelled()  # else it would draw again in the same slot


async def test_final_table_lists_every_step_in_its_last_state() -> None:
    names = [f"step-{i}" for i in range(2000)]
    console = terminal()
    progress = Progress(names, console, live=True, clock=Clock())
    with progress:
        for result in lifecycle(names):
            progress.update(result)
    shown = ANSI.sub("", console.file.getvalue())  # type: ignore[attr-defined]
    final = shown.rsplit("│ state", 1)[-1]  # the last draw: after its header
    rows = dict(re.findall(r"(step-\d+)\s+│\s+(\w+)", final))
    expected = {n: ("FAILED" if i % 7 == 0 else "SUCCEEDED") for i, n in enumerate(names)}
    assert rows == expected


def test_plain_output_prints_one_line_per_state_change(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(["a", "b"], terminal(), live=False, clock=Clock())
    progress.update(StepResult(name="a", state=StepState.RUNNING))
    progress.update(StepResult(name="a", state=StepState.RUNNING, message="still"))
    progress.update(StepResult(name="a", state=StepState.FAILED, reason="ExitCode"))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ")[1] for line in lines] == ["a: RUNNING", "a: FAILED (ExitCode)"]


changes = st.lists(st.tuples(st.integers(0, 59), st.sampled_from(list(StepState))), max_size=300)


@given(changes, st.integers(1, 80))
def test_view_counts_and_rows_match_the_results(
    seq: list[tuple[int, StepState]], budget: int
) -> None:
    names = [f"s{i}" for i in range(60)]
    view = LiveView(names)
    for i, state in seq:
        view.change(StepResult(name=names[i], state=state))
    truth = Counter(r.state for r in view.results.values())
    assert +view.counts == truth
    rows = view.rows(budget)
    assert len(rows) == min(budget, len(names))  # a full view, never more than the budget
    order = [names.index(r.name) for r in rows]
    assert order == sorted(order)  # study order
    shown = {r.name for r in rows}
    running = [n for n, r in view.results.items() if r.state is StepState.RUNNING]
    if len(running) <= budget:
        assert set(running) <= shown  # every running step, when they fit
    assert all(view.results[r.name] is r for r in rows)  # each row is the step's latest


def test_rows_show_sub_second_durations_and_running_steps_their_time_so_far() -> None:
    t0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    results = [
        StepResult("quick", StepState.SUCCEEDED, started_at=t0, finished_at=t0 + S(0.25)),
        StepResult("busy", StepState.RUNNING, started_at=t0 + S(0.5)),
        StepResult("waiting", StepState.PENDING, reason="Queued", started_at=t0),
    ]
    console = terminal()
    console.print(status_table(results, now=t0 + S(12)))
    rows = {
        cells[0]: cells[1:]
        for line in console.file.getvalue().splitlines()  # type: ignore[attr-defined]
        if len(cells := [c.strip() for c in ANSI.sub("", line).split("│")]) == 5
    }
    assert rows["quick"][:2] == ["SUCCEEDED", "250ms"]
    assert rows["busy"][:2] == ["RUNNING", "11.5s"]
    assert rows["waiting"] == ["PENDING", "", "", "Queued"]  # nothing used yet


async def test_the_live_table_redraws_a_running_step_so_its_time_moves() -> None:
    console = terminal()
    progress = Progress(["a"], console, live=True)
    started = datetime.now().astimezone()
    with progress:
        progress.update(StepResult("a", StepState.RUNNING, started_at=started))
        drawn = progress.view.draws
        await wait_until(lambda: progress.view.draws >= drawn + 2, "draws with no change")
        progress.update(StepResult("a", StepState.SUCCEEDED, started_at=started))
        await wait_until(lambda: progress._tick is None, "no more ticks once nothing runs")
        drawn = progress.view.draws
        await asyncio.sleep(0)  # a tick due now would have run here
        assert progress._tick is None and progress.view.draws == drawn


def test_an_unreachable_api_server_is_said_above_the_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The live view draws the notice above the table; off a terminal it is one line, and
    one more when it is taken back."""
    view = LiveView(["a", "b"])
    view.notice = "API server unreachable since 12:03:04, retrying (connection refused)"
    out = io.StringIO()
    Console(file=out, width=100, height=20).print(view)
    first = out.getvalue().splitlines()[0]
    assert first == "API server unreachable since 12:03:04, retrying (connection refused)"
    plain = Progress(["a"], Console(file=io.StringIO()), live=False, clock=lambda: 0.0)
    plain.notice(view.notice)
    plain.notice(view.notice)  # the same again: said once
    plain.notice(None)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[    0.0s] API server unreachable since 12:03:04, retrying (connection refused)",
        "[    0.0s] the API server answers again",
    ]


def test_plain_output_says_once_why_a_step_waits(capsys: pytest.CaptureFixture[str]) -> None:
    plain = Progress(["q"], Console(file=io.StringIO()), live=False, clock=lambda: 0.0)
    told = 'Error creating: pods "q-x" is forbidden: exceeded quota: nopods'
    plain.update(StepResult(name="q", reason="Queued"))
    plain.update(StepResult(name="q", reason="FailedCreate", message=told))
    plain.update(StepResult(name="q", reason="FailedCreate", message=told + " (again)"))
    # Queued is not news (every step starts so); the refusal is, once.
    assert capsys.readouterr().out.splitlines() == [f"[    0.0s] q: PENDING (FailedCreate: {told})"]
