"""Temporary names a pull writes to before moving its results into place, and the cleanup
of those a killed pull left behind.

A staging directory (``.k8sjobs-extract-*``) or partial file (``.k8sjobs-part-*``) is held
under an exclusive flock(2) for as long as its pull lives; the kernel drops the lock when
the process dies, even by SIGKILL. So the next pull into the same place can tell a leftover
(lock free: removed) from another pull still at work (lock held: left alone). The trash of
a replaced directory (``.k8sjobs-old-*``, or ``.<name>.k8sjobs-old-*`` from older versions)
is always safe to remove.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

STAGING_PREFIX = ".k8sjobs-extract-"
PART_PREFIX = ".k8sjobs-part-"
OLD_MARK = ".k8sjobs-old-"
RESERVED = ".k8sjobs-"  # what every temporary name of a pull starts with
LOCK_FILE = ".k8sjobs-lock"  # inside a staging directory, where a directory cannot be locked
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class Held:
    """A staging directory or partial file, locked until ``release``."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    def release(self) -> None:
        """Remove the path (whatever is left of it) and drop the lock (blocking)."""
        if self.path.is_dir() and not self.path.is_symlink():
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def flock(fd: int, path: str, flags: int) -> int:
    """Lock ``fd`` (a staging directory or partial file at ``path``) with flock(2); return the
    descriptor that holds the lock, ``fd`` or one that replaced it (``fd`` is then closed).

    NFS emulates flock with byte-range locks, which a descriptor opened read-only cannot
    take (EBADF): there a directory is locked through a lock file inside it (LOCK_FILE),
    and a file through a read-write descriptor. Raises as flock does (BlockingIOError when
    held).
    """
    try:
        fcntl.flock(fd, flags)
        return fd
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        flags_rw = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        other = os.open(LOCK_FILE, flags_rw, 0o600, dir_fd=fd)
    else:
        other = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.flock(other, flags)
    except BaseException:
        os.close(other)
        raise
    os.close(fd)
    return other


def _locked(parent: Path, make: Callable[[], tuple[Path, int]]) -> Held:
    """Make a path and lock it. Another pull's sweep may find it in the moment before the
    lock and remove it (holding the lock meanwhile): then the path is no longer the one
    opened, and a new one is made."""
    for _ in range(100):
        try:
            path, fd = make()
        except FileNotFoundError:  # a sweep removed it between its making and its opening
            continue
        inode = os.fstat(fd).st_ino
        try:
            fd = flock(fd, str(path), fcntl.LOCK_EX)  # waits out a sweep that holds it
        except FileNotFoundError:  # removed before its lock file could be made (NFS)
            os.close(fd)
            continue
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(path).st_ino == inode:
                return Held(path, fd)
        os.close(fd)
    raise OSError(f"cannot keep a staging path in {parent}: something removes them")


def staging_dir(parent: Path) -> Held:
    """Make and lock a fresh staging directory in ``parent`` (blocking)."""

    def make() -> tuple[Path, int]:
        path = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=parent))
        return path, os.open(path, _OPEN | os.O_DIRECTORY)

    return _locked(parent, make)


def part_file(parent: Path, name: str) -> Held:
    """Make and lock a fresh, empty partial file for ``name`` in ``parent`` (blocking)."""

    def make() -> tuple[Path, int]:
        # At most 100 bytes of the name (not characters: four bytes each, 100 of them would
        # pass the 255-byte limit); a cut through a character is carried as its bytes.
        short = os.fsdecode(os.fsencode(name)[:100])
        fd, path = tempfile.mkstemp(prefix=f"{PART_PREFIX}{short}.", dir=parent)
        return Path(path), fd

    return _locked(parent, make)


def _remove_if_dead(entry: os.DirEntry[str], is_dir: bool) -> None:
    """Remove ``entry``, a staging path, if no living pull holds its lock; hold the lock
    while removing, so that its maker (see _locked) can tell."""
    try:
        fd = os.open(entry.path, _OPEN | (os.O_DIRECTORY if is_dir else os.O_NONBLOCK))
    except OSError:
        return
    try:
        held = flock(fd, entry.path, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: a living pull holds it; else it cannot be told
        os.close(fd)
        return
    Held(Path(entry.path), held).release()


def sweep(directory: Path) -> None:
    """Remove what killed pulls left in ``directory`` (not below it); never a living
    pull's files, nor anything of the user's (blocking)."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        name = entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        ours = (name.startswith(STAGING_PREFIX) and is_dir) or (
            name.startswith(PART_PREFIX) and entry.is_file(follow_symlinks=False)
        )
        if name.startswith(".") and OLD_MARK in name and is_dir:
            shutil.rmtree(entry.path, ignore_errors=True)
        elif ours:
            _remove_if_dead(entry, is_dir)
