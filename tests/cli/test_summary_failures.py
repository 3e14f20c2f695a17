"""The run's summary names every failure, and says a failure shared by many steps once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.cli.statustable import SAME_FAILURES_SHOWN, failure_lines
from k8sjobs.state import StepResult, StepState


def refused(name: str) -> StepResult:
    message = f'Step "{name}" has a queue, but the cluster serves no kueue.x-k8s.io API'
    return StepResult(name=name, state=StepState.FAILED, reason="SubmitFailed", message=message)


def test_a_refusal_shared_by_200_steps_is_said_in_full_a_few_times_then_named() -> None:
    lines = failure_lines([refused(f"s{i}") for i in range(200)])
    assert len(lines) == SAME_FAILURES_SHOWN + 1
    assert (
        lines[0]
        == '  s0: FAILED (Step "s0" has a queue, but the cluster serves no kueue.x-k8s.io API)'
    )
    assert lines[-1].startswith(f"  {200 - SAME_FAILURES_SHOWN} more as s0: s3, s4,")
    assert lines[-1].endswith(f" and {200 - SAME_FAILURES_SHOWN - 10} others")


@given(
    st.lists(st.sampled_from(["exit code 3", "OOMKilled", "exit code 1"]), max_size=12)
)  # at most 9 named per line
def test_every_failed_step_is_shown_or_named_once_in_its_order(whys: list[str]) -> None:
    results = [
        StepResult(name=f"s{i}", state=StepState.FAILED, reason="ExitCode", message=why)
        for i, why in enumerate(whys)
    ]
    lines = failure_lines(results)
    shown = [line.split(":")[0].strip() for line in lines if " more as " not in line]
    named = [n for line in lines if " more as " in line for n in line.split(": ", 1)[1].split(", ")]
    assert sorted(shown + named, key=lambda n: int(n[1:])) == [r.name for r in results]
    assert shown == sorted(shown, key=lambda n: int(n[1:]))  # in the run's order
    assert len(shown) <= 3 * SAME_FAILURES_SHOWN
