"""One driver per study: an advisory lock on the study's state directory.

Two drivers running the same study would both believe they own its steps: the second one
followed records the first was writing, and waited forever. The first ``submit`` of a study
takes ``fcntl.flock`` on ``steps/<study>/.lock`` and holds it until the backend closes; a second
driver fails at once, naming the holder's pid. The kernel releases a flock when its holder
exits, however it exits (``kill -9`` included), so a lock is never stale. Reading a study
(``attach``, ``k8sjobs status|logs|cancel``) takes no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
from pathlib import Path

from ..errors import StudyBusy

__all__ = ["StudyBusy", "StudyLock"]

LOCK_NAME = ".lock"


class StudyLock:
    """The exclusive lock one driver holds on a study's state directory."""

    def __init__(self, folder: Path, study: str) -> None:
        self.path = folder / LOCK_NAME
        self.study = study
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Return whether this driver holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise StudyBusy naming the driver that holds it (blocking I/O)."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StudyBusy(
                f'study "{self.study}" is being run by another driver (pid {holder}) on this '
                "machine: wait for it to end, watch it with "
                f"{shlex.join(['k8sjobs', 'status', '--study', self.study])}, or stop it with "
                f"{shlex.join(['k8sjobs', 'cancel', '--study', self.study])}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Let another driver run the study (closing the descriptor drops the flock)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None
