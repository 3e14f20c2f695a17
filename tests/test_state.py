"""StepState and StepResult: which states are final, and what a result says about itself."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.state import StepResult, StepState

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FINAL = {StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED, StepState.LOST}


@pytest.mark.parametrize("state", list(StepState))
def test_exactly_the_four_outcomes_are_terminal(state: StepState) -> None:
    assert state.terminal is (state in FINAL)
    assert str(state) == state.value == state.name


@pytest.mark.parametrize("state", list(StepState))
def test_only_success_is_ok(state: StepState) -> None:
    assert StepResult(name="s", state=state).ok is (state is StepState.SUCCEEDED)


@given(st.integers(min_value=0, max_value=10**6), st.booleans(), st.booleans())
def test_duration_needs_both_ends(seconds: int, started: bool, finished: bool) -> None:
    result = StepResult(
        name="s",
        started_at=T0 if started else None,
        finished_at=T0 + timedelta(seconds=seconds) if finished else None,
    )
    assert result.duration == (float(seconds) if started and finished else None)


def test_evolve_returns_a_copy_and_leaves_the_snapshot_alone() -> None:
    first = StepResult(name="s")
    later = first.evolve(state=StepState.RUNNING, pods=("p-1",))
    assert (first.state, first.pods) == (StepState.PENDING, ())
    assert (later.name, later.state, later.pods) == ("s", StepState.RUNNING, ("p-1",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.state = StepState.FAILED  # type: ignore[misc]


def test_describe_prefers_the_message_then_the_reason() -> None:
    failed = StepResult(name="s", state=StepState.FAILED, reason="ExitCode")
    assert failed.describe() == "s: FAILED (ExitCode)"
    assert failed.evolve(message="exit code 3").describe() == "s: FAILED (exit code 3)"
    assert StepResult(name="s").describe() == "s: PENDING"


def test_describe_says_how_long_a_step_took_and_has_run_so_far() -> None:
    ran = StepResult(name="s", started_at=T0, finished_at=T0 + timedelta(seconds=0.25))
    assert ran.evolve(state=StepState.SUCCEEDED, reason="Completed").describe() == (
        "s: SUCCEEDED in 250ms (Completed)"
    )
    assert ran.evolve(state=StepState.FAILED, message="exit code 3").describe() == (
        "s: FAILED after 250ms (exit code 3)"
    )
    running = StepResult(name="s", state=StepState.RUNNING, started_at=T0 + timedelta(seconds=0.5))
    assert running.describe(now=T0 + timedelta(seconds=62)) == "s: RUNNING for 1m 02s"
    assert running.took(now=T0 + timedelta(seconds=2)) == "1.50s"
    assert StepResult(name="s", started_at=T0).took() == ""  # pending: it has not run
