"""A study run's record on disk, written as the run goes: a journal of changes, then one JSON.

While a study runs, ``RunJournal`` appends one JSON line per change of a step to
``<name>.jsonl`` (a header line first), so the cost of recording a change does not grow with
the number of steps and a driver that dies leaves the run up to its last change. At the end
``compact`` writes ``<name>.json`` (the timeline ``StudyRun.timeline`` returns) and removes the
journal. ``read_run`` returns the timeline from either: the journal of a run that did not end
(the latest line of each step wins), else the compacted JSON (also how records written before
the journal existed are read).

The driver holds an exclusive ``flock`` on its journal while the run goes (the kernel drops it
when the process dies, even by ``kill -9``), and names itself (pid, host) in the header, so a
reader tells a run still going from one whose driver died: ``read_run`` says which in the
timeline's ``driver`` field. A journal does not overwrite the last complete run's JSON, so
``read_runs`` returns both, the newest first.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import socket
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from .errors import StudyBusy
from .state import StepResult
from .steps.names import label_value

__all__ = ["RunJournal", "read_run", "read_runs", "record_paths", "retime"]

_log = logging.getLogger(__name__)


def record_paths(directory: Path, study: str) -> tuple[Path, Path]:
    """Return the compacted record's path and the journal's path for ``study``."""
    stem = label_value(study)
    return directory / f"{stem}.json", directory / f"{stem}.jsonl"


class RunJournal:
    """Appends a run's changes to ``<directory>/<study>.jsonl`` and compacts them at the end."""

    def __init__(self, directory: Path, study: str, started: float) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path, self.journal = record_paths(directory, study)
        # Locked before it is emptied: a second driver of the study is refused with the live
        # journal untouched. Held while the run goes: a reader that can take it knows the
        # driver is gone. On a file system without locks, readers cannot tell, and say so.
        fd = os.open(self.journal, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            header = os.pread(fd, 512, 0).decode(errors="replace").partition("\n")[0]
            os.close(fd)
            raise _busy(study, header) from None
        except OSError:
            pass
        os.ftruncate(fd, 0)
        # Line-buffered: each change reaches the file as one write, whole lines only.
        self._file: IO[str] | None = os.fdopen(fd, "w", buffering=1)
        self.unwritten: OSError | None = None  # the first write that failed, if one did
        self._write(
            {"study": study, "started": started, "pid": os.getpid(), "host": socket.gethostname()}
        )

    def append(self, step: Mapping[str, Any]) -> None:
        """Record one step's latest state (a line; the last line of a step wins)."""
        self._write({"step": step})

    def compact(self, timeline: Mapping[str, Any]) -> Path:
        """Write the whole run as one JSON (atomically), drop the journal; return the path."""
        self.close()
        partial = self.path.with_suffix(".json.partial")
        try:
            partial.write_text(json.dumps(timeline, indent=2))
            os.replace(partial, self.path)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise OSError(
                exc.errno,
                f"the run record {self.path} cannot be written ({exc.strerror or exc}); free "
                f"space there, or run with --state-dir on a disk that can be written",
            ) from None
        self.journal.unlink(missing_ok=True)
        return self.path

    def discard(self) -> None:
        """Remove this run's journal: a run refused before any step was sent (another
        driver holds the study) leaves the records of the study as they were."""
        self.close()
        self.journal.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the journal file (kept on disk: ``read_run`` still reads it)."""
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as exc:  # its last line could not be flushed: said in _write's way
                self.unwritten = self.unwritten or exc

    def _write(self, entry: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"the run journal {self.journal} is closed")
        if self.unwritten is not None:
            return
        try:
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        except OSError as exc:
            # A full disk, a state directory made read-only: the steps go on (a change of a
            # step must never fail it); the run's end says the record is incomplete.
            self.unwritten = exc
            _log.warning(
                "k8sjobs: the run journal %s cannot be written (%s); the run goes on, and "
                "its record misses the changes from here on",
                self.journal,
                exc.strerror or exc,
            )


def read_run(directory: Path, study: str) -> dict[str, Any] | None:
    """Return the recorded timeline of ``study``'s latest run, or None if there is none.

    A journal left by a run that did not compact (still running, or its driver died) is newer
    than any compacted record, so it is read first; a torn last line is skipped.
    """
    runs = read_runs(directory, study)
    return runs[0] if runs else None


def read_runs(directory: Path, study: str) -> list[dict[str, Any]]:
    """Return ``study``'s recorded runs, the newest first: a journal's, then the last complete.

    A run read from a journal has a ``driver`` field: its ``pid`` and ``host``, ``alive``
    (True: still running; False: it died before the run ended; None: cannot tell from this
    machine) and ``last_change``, when the journal was last written (epoch seconds).
    """
    path, journal = record_paths(directory, study)
    runs = []
    if journal.exists():
        runs.append(_replay(journal))
    if path.exists():
        runs.append(_read_record(path))
    return runs


def _read_record(path: Path) -> dict[str, Any]:
    """Return the compacted record at ``path``; one that is cut short or corrupt (a crash
    or a full disk while it was written, an edit by hand) gives what can still be read,
    with a ``damaged`` field that names the file, what is wrong and the fix."""
    try:
        text = path.read_bytes().decode(errors="replace")
    except OSError as exc:
        return _damaged(path, {}, f"cannot be read: {exc.strerror or exc}")
    try:
        data = json.loads(text)
    except RecursionError:
        return _damaged(path, {}, "it is nested too deep to be a run record")
    except ValueError as exc:
        why = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else exc
        return _damaged(path, _salvage(text), f"it is cut short or corrupt ({why})")
    if not isinstance(data, dict):
        return _damaged(path, {}, "it holds no run (not a JSON object)")
    run, dropped = _well_typed(data)
    if dropped:
        return _damaged(path, data, f"{dropped} of its fields or steps are not a run record's")
    return run


def _well_typed(data: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """Return ``data`` without the fields of the wrong type and the steps that name none,
    and how many were dropped."""
    run = {k: v for k, v in data.items() if k not in _TYPES or _typed(v, _TYPES[k])}
    dropped = len(data) - len(run) + ("steps" not in run)
    steps = run.get("steps") or []
    run["steps"] = [s for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str)]
    return run, dropped + len(steps) - len(run["steps"])


def _typed(value: object, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


_TYPES: dict[str, type | tuple[type, ...]] = {
    "study": str,
    "started": (int, float),
    "steps": list,
    "driver": dict,
}


def _damaged(path: Path, found: Mapping[str, Any], why: str) -> dict[str, Any]:
    run, _ = _well_typed(found)
    n = len(run["steps"])
    run["damaged"] = (
        f"the run record {path} is damaged: {why}; shown: the {n} step record"
        f"{'' if n == 1 else 's'} it holds whole. The next k8sjobs run of the study writes "
        f"it anew; to drop it now: rm {shlex.quote(str(path))}"
    )
    return run


def _salvage(text: str) -> dict[str, Any]:
    """Return the top-level fields of a JSON object cut short, read until the cut: each
    whole field, and of the ``steps`` list every whole step."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return found
    at += 1
    key: object = None
    start = at
    while True:
        try:
            key, at = decoder.raw_decode(text, _skip(text, at))
            at = _skip(text, at)
            if not (isinstance(key, str) and text.startswith(":", at)):
                return found
            start = _skip(text, at + 1)
            found[key], at = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            if key == "steps" and text.startswith("[", start):
                found["steps"] = _whole_items(decoder, text, start + 1)
            return found
        at = _skip(text, at)
        if not text.startswith(",", at):
            return found
        at += 1


def _whole_items(decoder: json.JSONDecoder, text: str, at: int) -> list[Any]:
    items: list[Any] = []
    while True:
        try:
            item, at = decoder.raw_decode(text, _skip(text, at))
        except (ValueError, RecursionError):
            return items
        items.append(item)
        at = _skip(text, at)
        if not text.startswith(",", at):
            return items
        at += 1


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _replay(journal: Path) -> dict[str, Any]:
    header: dict[str, Any] = {}
    steps: dict[str, dict[str, Any]] = {}  # insertion order: first seen, as the study lists
    with journal.open(errors="replace") as lines:
        alive = _driver_alive(lines)
        for line in lines:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue  # the driver died while writing this line, or it was not ours
            if not isinstance(entry, dict):
                continue
            step = entry.get("step")
            if isinstance(step, dict) and isinstance(step.get("name"), str):
                steps[step["name"]] = step
            elif "step" not in entry:
                header, _ = _well_typed(entry)
    if header.get("host") not in (None, socket.gethostname()):
        alive = None  # its lock lives on another machine's kernel
    return {
        "study": header.get("study"),
        "started": header.get("started"),
        "steps": [*steps.values()],
        "driver": {
            "pid": header.get("pid"),
            "host": header.get("host"),
            "alive": alive,
            "last_change": journal.stat().st_mtime,
        },
    }


def _driver_alive(journal: IO[str]) -> bool | None:
    """Return whether a driver still holds ``journal``'s lock (None: locks do not work here)."""
    try:
        fcntl.flock(journal, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    fcntl.flock(journal, fcntl.LOCK_UN)
    return False


def retime(result: StepResult, run: Mapping[str, Any] | None) -> StepResult:
    """Return ``result`` timed by the driver that ran it, if ``run`` is the run it came from.

    ``status`` reads a step from the backend, whose stamps are whole seconds on Kubernetes;
    the run record (``run``, from ``read_run``) holds the driver's microsecond times. They
    are used only when the record's step started at the very stamp the result has (the same
    run, not an earlier or later one).
    """
    if run is None or result.started_at is None:
        return result
    step = next((s for s in run.get("steps") or [] if s.get("name") == result.name), None)
    ran = (step or {}).get("ran") or {}
    if step is None or ran.get("started") != result.started_at.timestamp():
        return result

    def when(stamp: object) -> datetime | None:
        return datetime.fromtimestamp(stamp).astimezone() if isinstance(stamp, float) else None

    return result.timed_by(when(step.get("started")), when(step.get("finished")))


def _busy(study: str, header: str) -> StudyBusy:
    """Return the refusal of a second driver of ``study``, naming the first (its header)."""
    try:
        first = json.loads(header)
        holder = f"(pid {int(first['pid'])}) on {str(first['host'])[:64]}"
    except (ValueError, KeyError, TypeError):
        holder = "(its journal names no pid)"
    return StudyBusy(
        f'study "{study}" is being run by another driver {holder}: wait for it to end, '
        f"watch it with {shlex.join(['k8sjobs', 'status', '--study', study])}, or stop it "
        f"with {shlex.join(['k8sjobs', 'cancel', '--study', study])}"
    )
