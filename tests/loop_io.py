"""See which file-system calls the event-loop thread makes, to show that work stays off it.

A test that measured the loop's lag ("no pause over 0.1 s") guessed how fast the machine is:
on a loaded 2-core machine a correct implementation could fail it, and on a fast one a
blocking read could pass it. This records instead what the loop thread itself does, through
Python's audit hooks (PEP 578): every `open`, directory listing, rename, removal and the like
is an event naming its path. Code that keeps file work on worker threads leaves no such event
on the loop thread, however slow the machine; code that opens or walks a file there does,
however fast.

    with loop_file_calls(under=tmp_path) as calls:
        await store.push("x:v1", [big])
    assert calls == []
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["loop_file_calls"]

# Audit events that touch the file system by path (see the audit events table of the
# Python docs). Starting a process is left out: asyncio's subprocesses start on the loop.
FILE_EVENTS = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "os.mkdir",
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.truncate",
        "os.utime",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.rmtree",
        "sqlite3.connect",
    }
)

_watched: dict[int, tuple[str, list[tuple[str, str]]]] = {}  # thread id -> (prefix, calls)
_installed = False


def _hook(event: str, args: tuple[object, ...]) -> None:
    watch = _watched.get(threading.get_ident())
    if watch is None or event not in FILE_EVENTS or not args:
        return
    path = args[0]
    if isinstance(path, str | bytes | os.PathLike):
        name = os.fsdecode(path)
        if name.startswith(watch[0]):
            watch[1].append((event, name))


@contextlib.contextmanager
def loop_file_calls(under: Path | str = "/") -> Iterator[list[tuple[str, str]]]:
    """Record (event, path) for each file-system call this thread makes on a path starting
    with ``under`` while the block runs. Enter it on the event loop's thread (in a test's
    coroutine): worker threads' calls are not recorded, which is the point."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)  # stays for the process; costs a dict lookup per event
        _installed = True
    calls: list[tuple[str, str]] = []
    ident = threading.get_ident()
    _watched[ident] = (os.fspath(under), calls)
    try:
        yield calls
    finally:
        del _watched[ident]
