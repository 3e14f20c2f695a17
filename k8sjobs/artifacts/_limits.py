"""Limits on what one pull may write, so that a hostile or mistaken artifact (a gzip bomb, a
manifest declaring a huge layer) cannot fill the disk.

Two limits, both with defaults a user can raise: the total bytes a pull writes (files, and
directory archives counted by their unpacked tar stream) and the expansion ratio of each
compressed archive (unpacked bytes per byte received; an archive may always unpack to
RATIO_FLOOR, so small archives of many empty files pass). Declared sizes are checked before
anything is fetched; unpacked bytes are counted as they are produced, per piece.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._handoffimage import ENV_MAX_BYTES, ENV_MAX_RATIO
from ..errors import LimitExceeded

GiB = 1024**3
DEFAULT_MAX_BYTES = 100 * GiB
DEFAULT_MAX_RATIO = 200.0
RATIO_FLOOR = 64 * 1024 * 1024
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(?:i?B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": GiB, "T": 1024**4, "P": 1024**5}
_HOW_BYTES = (
    f"raise it with limits=PullLimits(max_bytes=...), --max-bytes, or {ENV_MAX_BYTES} "
    "in the step's env (the in-pod handoff)"
)
_HOW_RATIO = (
    f"raise it with limits=PullLimits(max_ratio=...), --max-ratio, or {ENV_MAX_RATIO} "
    "in the step's env (the in-pod handoff)"
)


def parse_size(text: str, what: str) -> int:
    """Return the byte count ``text`` spells ("1000", "512M", "10GiB", "1.5T"; binary units)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f'{what}: "{text}" is not a size; write e.g. "500M", "20G" or "1T".')
    return int(float(match[1]) * _UNITS[match[2].upper()])


def _ratio(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f'{what}: "{text}" is not a number; write e.g. "500".') from None


@dataclass(frozen=True)
class PullLimits:
    """What one pull may write: ``max_bytes`` in all, and ``max_ratio`` unpacked bytes per
    received byte of a compressed directory archive. Raise them for data known to be large
    or highly compressible; each refusal names the limit it hit and how to raise it."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_ratio: float = DEFAULT_MAX_RATIO

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise ValueError(f"PullLimits.max_bytes must be an int, got {self.max_bytes!r}.")
        if self.max_bytes <= 0 or not self.max_ratio >= 1:
            raise ValueError(
                f"PullLimits: max_bytes must be positive and max_ratio at least 1 "
                f"(got {self.max_bytes}, {self.max_ratio})."
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> PullLimits:
        """Return the defaults, with K8SJOBS_PULL_MAX_BYTES / _MAX_RATIO where set."""
        size, ratio = environ.get(ENV_MAX_BYTES), environ.get(ENV_MAX_RATIO)
        return cls(
            parse_size(size, ENV_MAX_BYTES) if size else DEFAULT_MAX_BYTES,
            _ratio(ratio, ENV_MAX_RATIO) if ratio else DEFAULT_MAX_RATIO,
        )


class Budget:
    """The bytes one pull may still write, shared by its layers' threads."""

    def __init__(self, limits: PullLimits, where: str) -> None:
        self.limits, self.where = limits, where
        self.used = 0
        self._lock = threading.Lock()

    def _refuse(self, what: str) -> LimitExceeded:
        return LimitExceeded(
            f"{self.where}: {what} would take the pull past its limit of "
            f"{self.limits.max_bytes} bytes; {_HOW_BYTES}."
        )

    def check_declared(self, sizes: Mapping[str, tuple[int, bool]]) -> None:
        """Refuse, before anything is fetched, a layer whose declared size alone is over the
        limit, or files (``sizes``: title -> (size, is an archive)) that together are."""
        total = 0
        for title, (size, archive) in sizes.items():
            if size > self.limits.max_bytes:
                raise self._refuse(f'layer "{title}" declares {size} bytes, which')
            total += 0 if archive else size
        if total > self.limits.max_bytes:
            raise self._refuse(f"the files declared ({total} bytes)")

    def reserve(self, n: int, what: str) -> None:
        """Count ``n`` more bytes written; raise LimitExceeded past the limit."""
        with self._lock:
            if self.used + n > self.limits.max_bytes:
                raise self._refuse(what)
            self.used += n

    def release(self, n: int) -> None:
        """Give back ``n`` bytes counted for an attempt whose output was discarded."""
        with self._lock:
            self.used -= n

    def meter(self, title: str, received: int, cancelled: Callable[[], bool]) -> Meter:
        """Return the counter of one archive layer of ``received`` (compressed) bytes."""
        return Meter(self, title, received, cancelled)


class Cancelled(Exception):
    """Internal: the transfer was abandoned; the extraction stops at the next piece."""


class Meter:
    """Counts what one archive unpacks to, piece by piece (never per byte): raises
    LimitExceeded past the ratio or the pull's budget, and Cancelled once abandoned."""

    __slots__ = ("_budget", "_cancelled", "_title", "cap", "unpacked")

    def __init__(
        self, budget: Budget, title: str, received: int, cancelled: Callable[[], bool]
    ) -> None:
        self._budget, self._title, self._cancelled = budget, title, cancelled
        self.cap = max(int(received * budget.limits.max_ratio), RATIO_FLOOR)
        self.unpacked = 0

    def __call__(self, n: int) -> None:
        if self._cancelled():
            raise Cancelled
        self.unpacked += n
        if self.unpacked > self.cap:
            raise LimitExceeded(
                f'{self._budget.where}: layer "{self._title}" unpacks to more than '
                f"{self._budget.limits.max_ratio:g} times its size (past {self.cap} bytes); "
                f"{_HOW_RATIO}."
            )
        self._budget.reserve(n, f'layer "{self._title}"')
