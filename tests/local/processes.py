"""What the local tests ask of /proc: whether a process lives, and which ones a step left.

One copy for every local test: a zombie counts as gone (it has ended; only its parent has not
reaped it yet, and PID 1 in a container may never do so).
"""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Return whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def with_word(word: str) -> list[int]:
    """Return the live processes (this one aside) whose command line holds ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if word.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
