"""The trace file: one tab-separated row per step, Nextflow's habit (``run --trace FILE``).

``COLUMNS`` is the stable, documented order (docs/observability.md); new columns are only
ever appended. Values are escaped so each row stays one line of exactly ``len(COLUMNS)``
fields: a backslash, tab, newline, carriage return and every other character a terminal
acts on (a control, a bidi override: ``_printable``'s rule) becomes a backslash escape
(``\\t``, ``\\n``, ``\\\\``, ``\\x07``, ``\\u202e``). An unknown value is "-".
``row`` is pure; ``TraceFile`` appends the row of each step as it ends.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .._printable import printable
from ..state import StepResult, StepState

if TYPE_CHECKING:
    from ..events import StepEvent
    from .observer import Track

__all__ = ["COLUMNS", "TraceFile", "escape", "origin_of", "row", "row_of_result"]

_log = logging.getLogger("k8sjobs.observe")

COLUMNS = (
    "name",
    "key",
    "native_id",
    "origin",
    "state",
    "exit",
    "submit",
    "start",
    "end",
    "wait_s",
    "duration_s",
    "cpu_s",
    "peak_mem_bytes",
    "gpu_s",
    "gpu_peak_mem_bytes",
    "attempts",
    "reason",
)

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape(value: str) -> str:
    """Return ``value`` with backslash, tab, newline and every character a terminal would
    act on escaped (``_printable``'s rule: controls, bidi overrides, zero-width marks)."""
    if value.isascii() and value.isprintable() and "\\" not in value:
        return value  # the common case, without a look at each character
    return "".join(_ESCAPES.get(char) or printable(char) for char in value)


def origin_of(result: StepResult, adopted: bool) -> str:
    """Return how a step's result came about, in the run record's words
    (``StepRecord.origin``): "reused", "adopted", "ran" or "not run"."""
    if result.reason == "Cached":
        return "reused"
    if result.reason == "DependencyFailed":
        return "not run"
    return "adopted" if adopted else "ran"


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).isoformat(timespec="milliseconds")


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.3f}"


def row(fields: Mapping[str, str]) -> str:
    """Return one line of the file: ``fields`` by ``COLUMNS`` ("-" where missing), escaped."""
    return "\t".join(escape(fields.get(c) or "-") for c in COLUMNS) + "\n"


def row_of_result(
    result: StepResult,
    *,
    key: str = "",
    native_id: str = "",
    adopted: bool = False,
    origin: str = "",
    submitted: datetime | None = None,
    wait: float | None = None,
) -> str:
    """Return a step's row from what its result says (``status -o tsv`` and the run both)."""
    usage = result.usage
    attempts = max(len(result.memory_attempts), len(result.pods))
    if result.state is StepState.RUNNING or result.started_at is not None:
        attempts = max(attempts, 1)
    return row(
        {
            "name": result.name,
            "key": key,
            "native_id": native_id,
            "origin": origin or origin_of(result, adopted),
            "state": str(result.state),
            "exit": _num(result.exit_code),
            "submit": _time(submitted),
            "start": _time(result.started_at),
            "end": _time(result.finished_at),
            "wait_s": _num(wait),
            "duration_s": _num(result.duration),
            "cpu_s": _num(usage.cpu_seconds if usage else None),
            "peak_mem_bytes": _num(usage.memory_peak if usage else None),
            "gpu_s": _num(usage.gpu_seconds if usage else None),
            "gpu_peak_mem_bytes": _num(usage.gpu_memory_peak if usage else None),
            "attempts": str(attempts),
            "reason": result.reason,
        }
    )


def header() -> str:
    """Return the file's first line: the column names."""
    return "\t".join(COLUMNS) + "\n"


def _open_regular(path: Path) -> IO[str]:
    """Open ``path`` for writing, refusing a FIFO or socket.

    Opened non-blocking so a FIFO with no reader fails at once instead of blocking
    ``open`` forever; one with a reader is refused too, as its writes would stall the
    event loop whenever the reader lags. Character devices (``/dev/stdout``) are kept.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise OSError(exc.errno, "a FIFO or socket, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "w", buffering=1, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


class TraceFile:
    """Appends each ended step's row to ``path`` (written at once: a header line first).

    Opening raises ``ValueError`` naming the path when it cannot be written, before any step
    is sent; a write that fails later is logged once and the run goes on.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._file: IO[str] | None = _open_regular(self.path)
            self._file.write(header())
        except OSError as exc:
            raise ValueError(
                f"trace file {str(self.path)!r} cannot be written ({exc.strerror or exc}); "
                "give a path in a directory you can write to"
            ) from None

    def submitted(self, track: Track) -> None:
        """Nothing to write until the step ends."""

    def changed(self, track: Track, previous: StepState, reason: str) -> None:
        """Nothing to write until the step ends."""

    def happened(self, track: Track, event: StepEvent) -> None:
        """Events are counted in the attempts column, from the result."""

    def ended(self, track: Track) -> None:
        """Append the step's row."""
        if self._file is None:
            return
        line = row_of_result(
            track.handle.result,
            key=track.key,
            native_id=track.native.id,
            adopted=track.handle.adopted,
            submitted=datetime.fromtimestamp(track.submit_ns / 1e9, UTC),
            wait=track.wait_seconds,
        )
        try:
            self._file.write(line)
        except OSError as exc:
            _log.warning("k8sjobs: trace file %s: writing failed, stopped: %s", self.path, exc)
            self.close()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()
