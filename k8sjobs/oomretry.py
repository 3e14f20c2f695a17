"""OOM retries that grow: an OOMKilled step runs again with more memory (``retry_oom``).

The session sets ``GrowingMemory.on_end`` as the handle's ``on_end``: when the step's end is
OOMKilled and its last attempt asked for less than ``retry_oom.max``, the handle gets a
PENDING snapshot (reason ``OOMRetry``) instead of the failure, an event records the attempt
and its size, and the step is sent again with ``factor`` times the memory (the backend
replaces the ended Job, or the ended local run). Any other end is final, and says which
sizes were tried. The same on both backends: the decision is here, not in a backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from .events import StepEvent
from .handle import StepHandle
from .state import StepResult, StepState
from .steps.spec import RetryOOM
from .usage import format_bytes

__all__ = ["GrowingMemory"]

Resend = Callable[[StepHandle, int], Coroutine[Any, Any, None]]


class GrowingMemory:
    """One ``retry_oom`` step's attempts: the memory each asked for, and the next one."""

    def __init__(self, handle: StepHandle, grow: RetryOOM, memory: int, resend: Resend) -> None:
        self.handle = handle
        self.grow = grow
        self.attempts = [memory]
        self._resend = resend
        self._tasks: set[asyncio.Task[None]] = set()

    def on_end(self, result: StepResult) -> StepResult:
        """Return the snapshot to show for an ended attempt: the end, or PENDING if resent."""
        tried = ", ".join(format_bytes(m) for m in self.attempts)
        result = result.evolve(memory_attempts=tuple(self.attempts))
        if result.reason != "OOMKilled":
            if len(self.attempts) == 1:
                return result
            return result.evolve(
                message=f"{result.message or result.reason} (memory tried: {tried})"
            )
        current = self.attempts[-1]
        following = self.grow.next_memory(current)
        if following is None:
            return result.evolve(
                message=f"ran out of memory at every size tried: {tried} "
                f"(retry_oom max {format_bytes(self.grow.max_bytes)})"
            )
        self.attempts.append(following)
        attempt = len(self.attempts)
        message = (
            f"attempt {attempt - 1} ran out of memory with {format_bytes(current)}; "
            f"attempt {attempt} asks for {format_bytes(following)}"
        )
        pod = result.pods[-1] if result.pods else ""
        self.handle.add_event(
            StepEvent(datetime.now(UTC), pod, "OOMRetry", message, action="RetryOOM")
        )
        task = asyncio.get_running_loop().create_task(self._resend(self.handle, following))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return StepResult(
            name=result.name,
            state=StepState.PENDING,
            reason="OOMRetry",
            message=message,
            log_file=result.log_file,
            memory_attempts=tuple(self.attempts),
        )
