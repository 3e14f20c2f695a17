"""How long something took, as people read it: the one formatting of durations (pure).

Every view of a step (the live table, ``k8sjobs status``, the notebook table, ``describe()``,
the HTML report) writes its durations through ``format_duration``, so a step reads the same
everywhere. Under a minute the figure keeps sub-second precision, as Nextflow's trace does:

    0.0004 -> "<1ms"     0.25 -> "250ms"     1.234 -> "1.23s"     12.34 -> "12.3s"
    75 -> "1m 15s"       7380 -> "2h 03m"    93600 -> "1d 02h"

Stamps with whole-second resolution (what the Kubernetes API gives) cannot say more than
whole seconds, so ``span`` shows them as such ("<1s", "3s") rather than inventing "0.000s".
"""

from __future__ import annotations

from datetime import datetime

__all__ = ["format_duration", "span"]

# Below each bound (after rounding to the shown precision), the format that shows it.
_MINUTE, _HOUR, _DAY = 60, 3600, 86400


def format_duration(seconds: float, *, whole: bool = False) -> str:
    """Return ``seconds`` as a short text; ``whole``: the figure is known to whole seconds.

    A negative figure (clocks of two machines that disagree) reads as zero.
    """
    seconds = max(seconds, 0.0)
    total = round(seconds)
    if whole and total < _MINUTE:
        return f"{total}s" if total else "<1s"
    if not whole and seconds < _MINUTE - 0.05:  # 59.96 would round to "60.0s"
        return _under_a_minute(seconds)
    if total < _HOUR:
        return f"{total // _MINUTE}m {total % _MINUTE:02d}s"
    minutes = round(seconds / _MINUTE)
    if minutes < _DAY // _MINUTE:
        return f"{minutes // 60}h {minutes % 60:02d}m"
    hours = round(seconds / _HOUR)
    return f"{hours // 24}d {hours % 24:02d}h"


def _under_a_minute(seconds: float) -> str:
    if seconds < 0.0005:
        return "<1ms"
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)}ms"
    if round(seconds, 2) < 10:
        return f"{seconds:.2f}s"
    return f"{seconds:.1f}s"


def span(start: datetime | None, end: datetime | None, now: datetime | None = None) -> str:
    """Return how long from ``start`` to ``end`` (or to ``now``, for what still runs).

    "" when there is no start, or no end and no ``now``. Both stamps on whole seconds (the
    Kubernetes API's resolution) give a whole-second figure.
    """
    stop = end or now
    if start is None or stop is None:
        return ""
    # An elapsed time (to ``now``) is as fine as its start allows.
    whole = start.microsecond == 0 and (end is None or end.microsecond == 0)
    return format_duration((stop - start).total_seconds(), whole=whole)
