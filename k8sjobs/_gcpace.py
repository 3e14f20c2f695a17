"""The garbage collector's pace while a driver holds many steps.

A driver keeps every step's state for the whole run (its handle, its cached Job and pods):
about 35 GC-tracked objects a step, 3.5 million at 100,000 steps. CPython (3.11 to 3.13)
collects its youngest generation every 700 net allocations of tracked objects, and what a
request in flight holds at that moment (a submit keeps ~150 objects across its three round
trips, 128 of them at once) survives two young collections and is promoted to the oldest
generation. Promotions are what start a full collection (once they reach a quarter of the
oldest generation), and a full collection walks every live step's objects: at the default
pace the collector's CPU per step grew with the number of steps (0.11 s per 1,000 steps
at 5,000 steps, 0.30 s at 20,000), and the driver's with it.

At a young threshold of 50,000, a request's objects are freed by reference counting before
a young collection sees them, and a full collection comes once in a 10,000- or a
100,000-step run: the collector's CPU per 1,000 steps was 0.05 s at both. (At 10,000 it
still grew, 0.07 to 0.12 s, with five full collections at 100,000.) At most 50,000 young
objects wait for a collection: a few MB, a few ms to walk.

The pace is process-wide, so it is held by count (each open session, and a running fake
cluster, holds it once) and put back when the last holder lets go, unless someone changed
the thresholds meanwhile. A threshold already at or above the pace, or collection turned
off (0), is left alone.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["YOUNG_THRESHOLD", "Holder", "hold", "release"]

YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, int, int] | None = None  # the thresholds before the first hold
_paced: tuple[int, int, int] | None = None  # the thresholds we set (None: left alone)


def hold() -> None:
    """Raise the young generation's threshold to ``YOUNG_THRESHOLD`` (once per holder)."""
    global _holders, _saved, _paced
    with _lock:
        _holders += 1
        if _holders > 1:
            return
        young, middle, old = gc.get_threshold()
        if young == 0 or young >= YOUNG_THRESHOLD:
            return
        _saved, _paced = (young, middle, old), (YOUNG_THRESHOLD, middle, old)
        gc.set_threshold(*_paced)


def release() -> None:
    """Let go of one ``hold``; the last one puts the thresholds back as they were."""
    global _holders, _saved, _paced
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders:
            return
        if _saved is not None and gc.get_threshold() == _paced:
            gc.set_threshold(*_saved)
        _saved = _paced = None


class Holder:
    """One holder's share of the pace, for an object that starts and stops (a session, the
    fake cluster): ``hold`` and ``release`` may each be called again, and count once."""

    def __init__(self) -> None:
        self._held = False

    def hold(self) -> None:
        """Hold the pace, unless this holder already does."""
        if not self._held:
            self._held = True
            hold()

    def release(self) -> None:
        """Let go of the pace, if this holder holds it."""
        if self._held:
            self._held = False
            release()
