"""StepHandle: the caller's grip on one submitted step.

A handle's state is pushed into it by its backend's shared watcher through
``handle.report(result)``, so reading ``handle.state`` or awaiting ``handle.wait()`` costs no
request. The handle only moves forward: once terminal, later news is ignored (a watch replay
cannot resurrect a step).

``StepControl`` is what a handle asks of the backend that runs its step (cancel, logs); the
``Backend`` protocol extends it, so this module needs nothing from ``backend.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .errors import StepFailed
from .events import EventLog, StepEvent
from .state import StepResult, StepState

if TYPE_CHECKING:
    from .steps.spec import Step, StepOutput

__all__ = ["StepControl", "StepHandle"]

_log = logging.getLogger("k8sjobs.handle")


@runtime_checkable
class StepControl(Protocol):
    """What a handle needs from the backend running its step (part of ``Backend``)."""

    #: Short name shown to users ("kubernetes", "local").
    kind: str

    async def cancel(self, handle: StepHandle) -> None:
        """Stop the step and delete its objects; the handle ends CANCELLED."""

    async def logs(
        self, handle: StepHandle, *, container: str | None, tail: int | None, index: int | None
    ) -> str:
        """Return the step's log text (the main container's unless ``container`` says; of a
        multi-node step, the launcher's unless ``index`` names another)."""

    def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        """Yield the step's log lines as they are written, until the step ends."""


class StepHandle:
    """A submitted step: wait for it, cancel it, read its logs.

    ``name`` is the step's own name, ``object_name`` the name of its Job (and ConfigMap) in
    ``namespace``; ``step`` is the Step it was submitted from (None after a re-attach that
    found only the Job).
    """

    def __init__(
        self,
        *,
        name: str,
        study: str,
        object_name: str,
        namespace: str,
        backend: StepControl,
        step: Step | None = None,
    ) -> None:
        self.name = name
        self.study = study
        self.object_name = object_name
        self.namespace = namespace
        self.backend = backend
        self.step = step
        #: Set by the backend when it took over a step that already existed (a driver's
        #: restart, or a step of the same spec left from an earlier run) instead of starting it.
        self.adopted = False
        self._result = StepResult(name=name)
        # Made when someone waits for a step still running: a driver holds 100,000 handles,
        # most of them never awaited before they end (an asyncio.Event costs ~400 bytes).
        self._done: asyncio.Event | None = None
        self._listeners: list[Callable[[StepHandle], None]] = []
        self._events = EventLog()
        self._abandoned: BaseException | None = None
        # The session's say when the step ends (retry_oom): a non-terminal answer means it
        # sends the step again, and the ended attempt's news is stale until the next's comes.
        self.on_end: Callable[[StepResult], StepResult] | None = None
        self._between_attempts = False

    @property
    def result(self) -> StepResult:
        """Return the latest snapshot of the step (final once ``state.terminal``)."""
        return self._result

    @property
    def state(self) -> StepState:
        """Return the step's current state, as last reported by its backend."""
        return self._result.state

    @property
    def events(self) -> tuple[StepEvent, ...]:
        """Return what happened to the step's pods (evicted, failed, retried), oldest first.

        The last ``k8sjobs.events.EVENT_LIMIT`` only, as seen by this process: a re-attached
        handle knows the failed pods that still exist.
        """
        return tuple(self._events)

    def add_event(self, event: StepEvent) -> bool:
        """Record ``event`` (a backend's call); return False if it was already known."""
        return self._events.add(event)

    @property
    def done(self) -> bool:
        """Return whether the step has reached a terminal state."""
        return self._result.state.terminal

    async def wait(self, timeout: float | None = None, *, check: bool = False) -> StepResult:
        """Return the final result once the step ends.

        Raises ``TimeoutError`` after ``timeout`` seconds (the step keeps running), and
        ``StepFailed`` if ``check`` is true and the step did not succeed.
        """
        if not self.done and self._abandoned is None:
            if self._done is None:
                self._done = asyncio.Event()
            async with asyncio.timeout(timeout):
                await self._done.wait()
        if not self.done and self._abandoned is not None:
            raise self._abandoned
        if check and not self._result.ok:
            raise StepFailed(self._result.describe(), self._result)
        return self._result

    async def cancel(self) -> None:
        """Stop the step and delete what runs it; a step already ended is left as it is."""
        if not self.done:
            await self.backend.cancel(self)

    async def logs(
        self, *, container: str | None = None, tail: int | None = None, index: int | None = None
    ) -> str:
        """Return the step's log: the script's output unless ``container`` names another.

        Of a multi-node step, the launcher's (index 0: the program's output); ``index``
        names a worker's, and a ``container`` given alone reads it from every index.
        """
        return await self.backend.logs(self, container=container, tail=tail, index=index)

    def stream_logs(self, *, container: str | None = None) -> AsyncIterator[str]:
        """Yield log lines as the step writes them, ending when the step ends."""
        return self.backend.stream_logs(self, container=container)

    def output(self, name: str) -> StepOutput:
        """Return this step's output ``name``, to use as another step's input."""
        if self.step is None:
            raise KeyError(f'Step "{self.name}" was re-attached without its spec; use its Step')
        return self.step.output(name)

    def add_listener(self, listener: Callable[[StepHandle], None]) -> None:
        """Call ``listener(handle)`` on every change of state or reason (at once if ended).

        A listener that raises is logged with its traceback and called no more; the step
        and its backend go on."""
        self._listeners.append(listener)
        if self.done:
            listener(self)

    def remove_listener(self, listener: Callable[[StepHandle], None]) -> None:
        """Stop calling ``listener`` (no error if it was not added)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def abandon(self, error: BaseException) -> None:
        """Stop waiting for the step (a backend's call): ``wait()`` raises ``error``.

        For a backend that can no longer follow the step (its API server was lost for longer
        than it may wait): the state stays the last one known, since the step itself was
        neither failed nor lost, and a later ``report`` still takes news.
        """
        if self.done:
            return
        self._abandoned = error
        if self._done is not None:
            self._done.set()

    def resend_failed(self, result: StepResult) -> bool:
        """Report ``result`` as the end of a step whose next attempt could not be sent.

        Between attempts a terminal report is taken for the old attempt's and dropped: this
        is the one that is not (the session's, when sending the grown attempt failed).
        """
        self._between_attempts = False
        self.on_end = None
        return self.report(result)

    def report(self, result: StepResult) -> bool:
        """Take a newer snapshot of the step; return whether anything changed.

        This is how a backend (and the session, for a step it refuses to send) tells the
        handle what it learned; callers of the library only read. Terminal snapshots are
        final and a step never goes back from RUNNING to PENDING except through a Kueue
        eviction (``StepResult.progress``: one more eviction), so a backend may report
        whatever its watch replays: stale news is dropped here and False is returned.
        Listeners are called on a change of state or of reason (a step that waits says why
        as soon as it is known: FailedCreate, Unschedulable) and on the terminal snapshot.
        """
        current = self._result
        if self.done or result == current:
            return False
        if self._between_attempts:
            if result.state.terminal:
                return False  # the ended attempt's, judged again (or cancelled by the resend)
            self._between_attempts = False  # the next attempt's first news
        elif not result.state.terminal and result.progress < current.progress:
            return False
        if result.state.terminal and self.on_end is not None:
            result = self.on_end(result)
            self._between_attempts = not result.state.terminal
        changed = result.state is not current.state or result.reason != current.reason
        self._result = result
        if result.state.terminal and self._done is not None:
            self._done.set()
        if changed or result.state.terminal:
            for listener in list(self._listeners):
                try:
                    listener(self)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException:  # asyncio's rule for a callback
                    # Raised into the backend's watch, a listener's bug would end it, and
                    # with it every step it follows: said once, the listener is dropped.
                    _log.exception(
                        'a listener of step "%s" raised; it is called no more', self.name
                    )
                    self.remove_listener(listener)
        return True

    def __repr__(self) -> str:
        return f"<StepHandle {self.name!r} {self.state}>"

    def _repr_html_(self) -> str:
        from ._display import result_table

        return result_table([self._result])
