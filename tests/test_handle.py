"""StepHandle: it only moves forward, a terminal result is final, and listeners hear changes.

The handle is driven here through ``report`` (the seam backends use) with a recording
StepControl, so every ordering rule is checked without a backend in the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.errors import StepFailed
from k8sjobs.handle import StepControl, StepHandle
from k8sjobs.state import StepResult, StepState
from k8sjobs.steps.spec import Step

P, R, X = StepState.PENDING, StepState.RUNNING, StepState.PREEMPTED
# Within a round (one more Kueue eviction each): PREEMPTED, PENDING, RUNNING; terminal last.
ROUND = {X: 0, P: 1, R: 2}


class Recorder:
    """A StepControl that records what the handle asked of it."""

    kind = "recorder"

    def __init__(self) -> None:
        self.cancelled: list[StepHandle] = []

    async def cancel(self, handle: StepHandle) -> None:
        self.cancelled.append(handle)

    async def logs(
        self, handle: StepHandle, *, container: str | None, tail: int | None, index: int | None
    ) -> str:
        return f"{handle.name} {container} {tail}"

    async def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        yield f"{handle.name} {container}"


def make(step: Step | None = None) -> tuple[StepHandle, Recorder]:
    control = Recorder()
    handle = StepHandle(
        name="s", study="t", object_name="t-s-0", namespace="ns", backend=control, step=step
    )
    return handle, control


def rank(result: StepResult) -> tuple[int, int]:
    if result.state.terminal:
        return (1 << 30, 0)
    return result.evictions, ROUND[result.state]


results = st.builds(
    StepResult,
    name=st.just("s"),
    state=st.sampled_from(list(StepState)),
    reason=st.sampled_from(["", "Pulling", "ExitCode", "Completed"]),
    exit_code=st.sampled_from([None, 0, 3]),
    evictions=st.integers(0, 3),
)


def test_a_recorder_is_a_step_control() -> None:
    assert isinstance(Recorder(), StepControl)


@given(st.lists(results, max_size=12))
def test_a_handle_only_moves_forward_and_stops_at_a_terminal_result(
    reports: list[StepResult],
) -> None:
    handle, _ = make()
    seen = [handle.result]
    for result in reports:
        before = handle.result
        changed = handle.report(result)
        assert changed is (handle.result is not before)
        if changed:
            assert handle.result == result
            seen.append(result)
    ranks = [rank(r) for r in seen]
    assert ranks == sorted(ranks), "a handle went back"
    terminal = [r for r in seen if r.state.terminal]
    assert len(terminal) <= 1 and (not terminal or seen[-1] is terminal[0])
    assert handle.done is bool(terminal)


@given(st.lists(results, max_size=12))
def test_listeners_hear_each_change_of_state_or_reason_and_the_end(
    reports: list[StepResult],
) -> None:
    handle, _ = make()
    heard: list[StepState] = []
    handle.add_listener(lambda h: heard.append(h.state))
    expected: list[StepState] = []
    for result in reports:
        before = handle.result
        changed = result.state is not before.state or result.reason != before.reason
        if handle.report(result) and (changed or result.state.terminal):
            expected.append(result.state)
    assert heard == expected


def test_a_new_reason_wakes_listeners_other_news_within_a_state_does_not() -> None:
    """A step that waits says why as soon as it is known (the live table, a run's record)."""
    handle, _ = make()
    heard: list[str] = []
    handle.add_listener(lambda h: heard.append(h.result.reason))
    assert handle.report(StepResult(name="s", state=P, reason="FailedCreate", message="quota"))
    assert heard == ["FailedCreate"]
    assert handle.report(StepResult(name="s", state=P, reason="FailedCreate", message="again"))
    assert handle.result.message == "again" and heard == ["FailedCreate"]
    assert not handle.report(StepResult(name="s", state=P, reason="FailedCreate", message="again"))


def test_a_running_step_never_goes_back_to_pending() -> None:
    handle, _ = make()
    assert handle.report(StepResult(name="s", state=R))
    assert not handle.report(StepResult(name="s", state=P, reason="Pulling"))
    assert handle.state is R


def test_a_replayed_event_cannot_resurrect_an_ended_step() -> None:
    handle, _ = make()
    assert handle.report(StepResult(name="s", state=StepState.CANCELLED))
    for state in StepState:
        assert not handle.report(StepResult(name="s", state=state, reason="replay"))
    assert handle.state is StepState.CANCELLED and handle.done


async def test_wait_returns_the_final_result_and_check_raises_on_failure() -> None:
    handle, _ = make()
    waiter = asyncio.create_task(handle.wait(timeout=10))
    handle.report(StepResult(name="s", state=R))
    assert not waiter.done()
    handle.report(StepResult(name="s", state=StepState.FAILED, reason="ExitCode", exit_code=3))
    assert (await waiter).exit_code == 3
    with pytest.raises(StepFailed, match="s: FAILED"):
        await handle.wait(check=True)


async def test_wait_times_out_while_the_step_runs() -> None:
    handle, _ = make()
    with pytest.raises(TimeoutError):
        await handle.wait(timeout=0)
    assert not handle.done


def test_a_listener_added_after_the_end_is_called_at_once_and_can_be_removed() -> None:
    handle, _ = make()
    heard: list[str] = []

    def listener(h: StepHandle) -> None:
        heard.append(str(h.state))

    handle.remove_listener(listener)  # not added: no error
    handle.add_listener(listener)
    handle.remove_listener(listener)
    handle.report(StepResult(name="s", state=R))
    assert heard == []
    handle.report(StepResult(name="s", state=StepState.SUCCEEDED))
    handle.add_listener(listener)
    assert heard == ["SUCCEEDED"]


def test_a_listener_may_remove_itself_while_being_called() -> None:
    handle, _ = make()
    heard: list[str] = []

    def once(h: StepHandle) -> None:
        heard.append("once")
        h.remove_listener(once)

    handle.add_listener(once)
    handle.add_listener(lambda h: heard.append("always"))
    handle.report(StepResult(name="s", state=R))
    handle.report(StepResult(name="s", state=StepState.SUCCEEDED))
    assert heard == ["once", "always", "always"]


def test_a_listener_that_raises_is_said_once_and_dropped_and_the_others_hear_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A listener's bug raised into ``report`` would end the backend's watch that called it
    (a local step then never ended); it is logged with the step's name and called no more."""
    handle, _ = make()
    heard: list[str] = []

    def broken(h: StepHandle) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def cancelled(h: StepHandle) -> None:
        raise asyncio.CancelledError  # a BaseException, as a callback's in asyncio

    handle.add_listener(broken)
    handle.add_listener(cancelled)
    handle.add_listener(lambda h: heard.append(str(h.state)))
    assert handle.report(StepResult(name="s", state=R))
    assert handle.report(StepResult(name="s", state=StepState.SUCCEEDED))
    assert heard == ["RUNNING", "SUCCEEDED"]
    said = [r for r in caplog.records if r.name == "k8sjobs.handle"]
    assert [r.getMessage() for r in said] == [
        'a listener of step "s" raised; it is called no more'
    ] * 2
    assert all(r.exc_info is not None for r in said)


async def test_cancel_asks_the_backend_only_while_the_step_lives() -> None:
    handle, control = make()
    await handle.cancel()
    assert control.cancelled == [handle]
    handle.report(StepResult(name="s", state=StepState.SUCCEEDED))
    await handle.cancel()
    assert control.cancelled == [handle]


async def test_logs_come_from_the_backend() -> None:
    handle, _ = make()
    assert await handle.logs(container="push", tail=5) == "s push 5"
    assert [line async for line in handle.stream_logs()] == ["s None"]


def test_output_needs_the_step() -> None:
    step = Step(name="s", script="echo", outputs={"o": "o.txt"})
    handle, _ = make(step)
    assert handle.output("o") == step.output("o")
    with pytest.raises(KeyError, match="re-attached"):
        make()[0].output("o")
