"""Writing pieces to a file descriptor whole: the one seam both blob files and extracted
archive members go through."""

from __future__ import annotations

import os
from collections.abc import Sequence

Buffer = bytes | bytearray | memoryview
_IOV_MAX = 512


def write_all(fd: int, pieces: Sequence[Buffer]) -> None:
    """Write every piece to ``fd`` with as few system calls as the kernel allows, and no
    joining copy (``os.writev`` may write less than asked: the rest follows)."""
    for start in range(0, len(pieces), _IOV_MAX):
        group = pieces[start : start + _IOV_MAX]
        done = os.writev(fd, group)
        for piece in group:
            if done >= len(piece):
                done -= len(piece)
                continue
            view = memoryview(piece)[done:]
            while view:
                view = view[os.write(fd, view) :]
            done = 0
