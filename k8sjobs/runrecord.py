"""A study run's record on disk, written as the run goes: a journal of changes, then one JSON.

While a study runs, ``RunJournal`` appends one JSON line per change of a step to
``<name>.jsonl`` (a header line first), so the cost of recording a change does not grow with
the number of steps and a driver that dies leaves the run up to its last change. At the end
``compact`` writes ``<name>.json`` (the timeline ``StudyRun.timeline`` returns) and removes the
journal. ``read_run`` returns the timeline from either: the journal of a run that did not end
(the latest line of each step wins), else the compacted JSON (also how records written before
the journal existed are read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .steps.names import label_value

__all__ = ["RunJournal", "read_run", "record_paths"]


def record_paths(directory: Path, study: str) -> tuple[Path, Path]:
    """Return the compacted record's path and the journal's path for ``study``."""
    stem = label_value(study)
    return directory / f"{stem}.json", directory / f"{stem}.jsonl"


class RunJournal:
    """Appends a run's changes to ``<directory>/<study>.jsonl`` and compacts them at the end."""

    def __init__(self, directory: Path, study: str, started: float) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path, self.journal = record_paths(directory, study)
        # Line-buffered: each change reaches the file as one write, whole lines only.
        self._file: IO[str] | None = self.journal.open("w", buffering=1)
        self._write({"study": study, "started": started})

    def append(self, step: Mapping[str, Any]) -> None:
        """Record one step's latest state (a line; the last line of a step wins)."""
        self._write({"step": step})

    def compact(self, timeline: Mapping[str, Any]) -> Path:
        """Write the whole run as one JSON (atomically), drop the journal; return the path."""
        self.close()
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(timeline, indent=2))
        os.replace(partial, self.path)
        self.journal.unlink(missing_ok=True)
        return self.path

    def close(self) -> None:
        """Close the journal file (kept on disk: ``read_run`` still reads it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, entry: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"the run journal {self.journal} is closed")
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")


def read_run(directory: Path, study: str) -> dict[str, Any] | None:
    """Return the recorded timeline of ``study``'s latest run, or None if there is none.

    A journal left by a run that did not compact (still running, or its driver died) is newer
    than any compacted record, so it is read first; a torn last line is skipped.
    """
    path, journal = record_paths(directory, study)
    if journal.exists():
        return _replay(journal)
    if path.exists():
        return dict(json.loads(path.read_text()))
    return None


def _replay(journal: Path) -> dict[str, Any]:
    header: dict[str, Any] = {}
    steps: dict[str, dict[str, Any]] = {}  # insertion order: first seen, as the study lists
    with journal.open() as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # the driver died while writing this line
            if "step" in entry:
                steps[entry["step"]["name"]] = entry["step"]
            else:
                header = entry
    return {
        "study": header.get("study"),
        "started": header.get("started"),
        "steps": [*steps.values()],
    }
