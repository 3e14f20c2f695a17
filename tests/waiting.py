"""Wait for a condition in a test, never a fixed sleep: the one helper every test folder uses.

A test that sleeps a fixed time and then asserts guesses how long the machine needs; on a
loaded 2-core machine the guess is wrong and the test fails at random. These helpers poll the
condition instead, and return as soon as it holds, so a fast machine stays fast and a slow one
only waits longer. Each wait is bounded (`timeout`, well under the suite's 120 s per test), and
on timeout the failure names what was awaited: the `what` text, else the condition's source.

    await wait_until(lambda: cluster.objects("pods"), "the job's pods exist")
    wait_until_sync(lambda: not alive(pid), "the helper is gone")

A condition may also be a coroutine function (an API read, say); its result is awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["DEFAULT_TIMEOUT", "wait_until", "wait_until_sync"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a wait may take before failing: generous for a loaded machine, bounded for a hang."""

INTERVAL = 0.02
"""Seconds between two checks of the condition."""


async def wait_until(
    condition: Callable[[], object] | Callable[[], Awaitable[object]],
    what: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Return once ``condition()`` is truthy; raise AssertionError naming `what` after `timeout` s.

    The deadline is wall-clock (monotonic), not a count of checks, so slow checks on a loaded
    machine do not stretch the bound.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(condition, what, timeout))
        await asyncio.sleep(INTERVAL)


def wait_until_sync(
    condition: Callable[[], object], what: str | None = None, *, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """The blocking twin of `wait_until`, for tests that run no event loop."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(condition, what, timeout))
        time.sleep(INTERVAL)


def _timed_out(condition: Callable[[], object], what: str | None, timeout: float) -> str:
    """The failure message: what was awaited (given, else the condition's source line)."""
    if what is None:
        try:
            what = inspect.getsource(condition).strip()
        except (OSError, TypeError):
            what = repr(condition)
    return f"timed out after {timeout:g} s waiting until: {what}"
