"""An adopted step keeps the times its backend saw, never those of the driver that re-attached.

Issue 34 item 14: a step left by a killed driver was shown ``SUCCEEDED in 1m 07s``, timed from
when the next driver looked. Its start stamp (whole seconds on Kubernetes, a pod's locally)
may share the second the new run queued it in, so the runner cannot tell an earlier run's
step from its own by the stamp alone: the backend, which found it, says so.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.handle import StepHandle
from k8sjobs.local import LocalBackend
from k8sjobs.state import StepResult, StepState
from k8sjobs.study import StepRecord


@given(
    ran=st.integers(min_value=0, max_value=120),
    before=st.integers(min_value=0, max_value=3600),
    state=st.sampled_from([StepState.SUCCEEDED, StepState.FAILED]),
)
def test_an_adopted_step_keeps_its_own_times_even_within_the_second_it_was_queued(
    ran: int, before: int, state: StepState
) -> None:
    queued = datetime.now(UTC).replace(microsecond=500_000)
    started = queued.replace(microsecond=0) - timedelta(seconds=before)  # whole seconds
    finished = started + timedelta(seconds=ran)  # whole seconds too, as the API stamps
    handle = StepHandle(
        name="a",
        study="st",
        object_name="st-a",
        namespace="",
        backend=LocalBackend(state_dir=Path("/nonexistent-k8sjobs-state")),
    )
    handle.adopted = True  # the backend found it from an earlier run
    record = StepRecord(StepResult(name="a", reason="Waiting"), queued_at=queued, handle=handle)
    record.observe(StepResult(name="a", state=StepState.RUNNING, started_at=started))
    ended = StepResult(name="a", state=state, started_at=started, finished_at=finished)
    record.observe(ended)
    seen = record.seen()
    assert (seen.started_at, seen.finished_at) == (started, finished)
    assert record.origin == "adopted"
