"""Where a step is in its life, and what came of it (pure values, no I/O).

    PENDING ──> RUNNING ──> SUCCEEDED
     ▲ │           │──────> FAILED      (reason says why: exit code, OOMKilled, ...)
     │ │           │──────> CANCELLED   (this driver cancelled it)
     │ └───────────┴──────> LOST        (its Job vanished without us asking)
     │             │
     │             ▼
     └──────── PREEMPTED                (Kueue evicted its Workload and re-suspended its Job)

PENDING covers queued, suspended by Kueue, unschedulable and pulling an image; the reason
tells which. PREEMPTED is not an end: Kueue requeues the step, which waits (PENDING, with
the quota reason) and runs again when re-admitted; its pods' exit 143 there is not its
failure. ``StepResult.evictions`` counts the evictions, so a handle orders
PENDING/RUNNING/PREEMPTED by (evictions, state) and a replayed older event cannot move it
back (docs/design.md). The four right-hand states are terminal: a handle never leaves them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ._printable import printable
from .durations import span
from .usage import Usage

__all__ = ["StepResult", "StepState"]


class StepState(enum.Enum):
    """The life stage of a step."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"

    @property
    def terminal(self) -> bool:
        """Return whether a step in this state will never change again."""
        return self in _TERMINAL

    def __str__(self) -> str:
        return self.value


_ROUND = {StepState.PREEMPTED: 0, StepState.PENDING: 1, StepState.RUNNING: 2}
_TERMINAL = frozenset({StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED, StepState.LOST})


@dataclass(frozen=True)
class StepResult:
    """A snapshot of one step: its state, why, and the facts a user acts on.

    ``reason`` is short and machine-readable ("ExitCode", "OOMKilled", "DeadlineExceeded",
    "BackoffLimitExceeded", "ImagePullBackOff", "Unschedulable", "Suspended", ...);
    ``message`` is the sentence to show a person. ``outputs`` maps each output name to its
    artifact reference (pinned by digest once the push reported it). ``usage`` is what the
    main container used (``k8sjobs.usage.Usage``), known once it has ended, else None.
    ``memory_attempts`` is the memory (bytes) each attempt of a ``retry_oom`` step asked
    for, oldest first (empty for any other step). ``evictions`` is how many times Kueue
    evicted the step's Workload (its ``status.schedulingStats.evictions``; 0 unqueued).
    """

    name: str
    state: StepState = StepState.PENDING
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pods: tuple[str, ...] = ()
    outputs: Mapping[str, str] = field(default_factory=dict)
    log_file: str | None = None
    usage: Usage | None = None
    memory_attempts: tuple[int, ...] = ()
    evictions: int = 0

    @property
    def ok(self) -> bool:
        """Return whether the step succeeded."""
        return self.state is StepState.SUCCEEDED

    @property
    def progress(self) -> tuple[int, int]:
        """Return where a non-terminal step is in its life, to order two reports of it.

        Each eviction starts a new round: PREEMPTED, PENDING again, RUNNING again. So
        (evictions, PENDING) > (evictions - 1, RUNNING), and a replayed event of an earlier
        round sorts below the news that followed it.
        """
        return self.evictions, _ROUND.get(self.state, len(_ROUND))

    @property
    def duration(self) -> float | None:
        """Return the seconds between start and finish, when both are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def evolve(self, **changes: Any) -> StepResult:
        """Return a copy with ``changes`` applied."""
        return replace(self, **changes)

    def timed_by(self, started: datetime | None, finished: datetime | None) -> StepResult:
        """Return this result with a finer clock's times where its own are whole seconds.

        The Kubernetes API stamps a start and an end to the second; ``started`` and
        ``finished`` are when a finer clock (the driver's) saw the step start and end, so a
        step of 0.3 s reads "340ms", not "<1s". Finer stamps (the local backend's) are kept,
        and so is a result that clock did not see start.
        """
        whole = self.started_at is not None and self.started_at.microsecond == 0
        if not whole or started is None:
            return self
        if self.finished_at is None:
            return self.evolve(started_at=started)
        if self.finished_at.microsecond or finished is None:
            return self
        return self.evolve(started_at=started, finished_at=finished)

    def took(self, now: datetime | None = None) -> str:
        """Return how long the step ran ("" if unknown); a running step's time up to ``now``.

        Without ``now`` a running step's time is read from this machine's clock.
        """
        if self.state is StepState.RUNNING:
            return span(self.started_at, None, now or datetime.now().astimezone())
        if not self.state.terminal:
            return ""
        return span(self.started_at, self.finished_at)

    def describe(self, now: datetime | None = None) -> str:
        """Return one line a person can read: name, state, how long, and why.

        "train: SUCCEEDED in 1.23s (Completed)", "b: FAILED after 250ms (exit code 3)",
        "a: RUNNING for 4m 02s".
        """
        why = self.message or self.reason
        took = self.took(now)
        if took:
            took = {StepState.SUCCEEDED: " in ", StepState.RUNNING: " for "}.get(
                self.state, " after "
            ) + took
        used = f"; {self.usage.describe()}" if self.usage is not None else ""
        return printable(f"{self.name}: {self.state}{took}" + (f" ({why})" if why else "") + used)
