"""A blocking face for synchronous code (Maestro, plain scripts): one private loop thread.

Every call is sent to one long-lived event loop in a daemon thread, so connections and
the shared watch live across calls: no reconnect storm, no watch per call.

    with BlockingSession(study="demo", namespace="hpc") as s:
        handle = s.submit(Step(name="a", script="echo hi"))
        print(s.wait(handle).describe())
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from .handle import StepHandle
from .session import Session
from .state import StepResult
from .steps.spec import Step

__all__ = ["BlockingSession", "run"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="k8sjobs-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Return the result of ``coro`` run on the loop thread (blocking the caller)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


_shared: _LoopThread | None = None
_shared_lock = threading.Lock()


def _loop() -> _LoopThread:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _LoopThread()
        return _shared


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Return the result of ``coro`` run on k8sjobs' private loop thread."""
    return _loop().run(coro, timeout)


class BlockingSession:
    """``Session`` with blocking methods; takes the same keyword arguments."""

    def __init__(self, **options: Any) -> None:
        self._thread = _loop()
        self._session = self._thread.run(_make(options))

    @property
    def session(self) -> Session:
        """Return the underlying async Session (use it only from the loop thread)."""
        return self._session

    def __enter__(self) -> BlockingSession:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._thread.run(self._session.__aexit__(exc_type, exc, tb))

    def start(self) -> None:
        """Connect and start watching."""
        self._thread.run(self._session.start())

    def close(self) -> None:
        """Stop watching; running steps keep running."""
        self._thread.run(self._session.aclose())

    def submit(self, step: Step, **options: Any) -> StepHandle:
        """Start ``step`` and return its handle (see ``Session.submit``)."""
        return self._thread.run(self._session.submit(step, **options))

    def submit_many(self, steps: Sequence[Step], **options: Any) -> list[StepHandle]:
        """Submit several steps (see ``Session.submit_many``)."""
        return self._thread.run(self._session.submit_many(steps, **options))

    def wait(self, handle: StepHandle, timeout: float | None = None) -> StepResult:
        """Block until ``handle``'s step ends; return its result."""
        return self._thread.run(handle.wait(timeout))

    def gather(self, *handles: StepHandle, **options: Any) -> list[StepResult]:
        """Block until every step ends (see ``Session.gather``)."""
        return self._thread.run(self._session.gather(*handles, **options))

    def cancel(self, handle: StepHandle) -> None:
        """Cancel one step."""
        self._thread.run(handle.cancel())

    def logs(self, handle: StepHandle, **options: Any) -> str:
        """Return a step's log."""
        return self._thread.run(handle.logs(**options))

    def attach(self, study: str | None = None) -> list[StepHandle]:
        """Return handles for the existing steps of ``study`` (see ``Session.attach``)."""
        return self._thread.run(self._session.attach(study))

    def cancel_all(self) -> list[StepHandle]:
        """Cancel every unfinished step of this session."""
        return self._thread.run(self._session.cancel_all())


async def _make(options: dict[str, Any]) -> Session:
    # Built on the loop thread: the session's asyncio objects belong to that loop.
    return Session(**options)
