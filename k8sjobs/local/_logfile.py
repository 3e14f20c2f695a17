"""Reading a container's log file in bounded memory: from an offset, the last lines, following.

A step may write gigabytes of log; a reader must not hold it. Everything here reads and hands
on ``CHUNK`` bytes at a time: ``tail_offset`` finds where the last N lines start by reading
backwards from the end (the start of the file is never read for a short tail), and ``chunks``
yields the file from an offset, and, when following, what is appended until told to stop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio

__all__ = ["CHUNK", "chunks", "lines", "tail_offset"]

CHUNK = 1 << 16
_POLL_SECONDS = 0.2


def tail_offset(path: Path, count: int, chunk: int = CHUNK) -> int:
    """Return the offset where the last ``count`` lines of the file start (blocking I/O).

    A line ends at a newline; a final newline ends the last line, it starts none.
    """
    with open(path, "rb") as log:
        size = log.seek(0, os.SEEK_END)
        if count <= 0:
            return size
        end = size
        if size and os.pread(log.fileno(), 1, size - 1) == b"\n":
            end -= 1
        found = 0
        while end > 0:
            start = max(0, end - chunk)
            block = os.pread(log.fileno(), end - start, start)
            at = len(block)
            while (at := block.rfind(b"\n", 0, at)) >= 0:
                found += 1
                if found == count:
                    return start + at + 1
            end = start
        return 0


async def chunks(
    path: Path, offset: int = 0, *, until: Callable[[], bool] | None = None
) -> AsyncIterator[bytes]:
    """Yield the file's bytes from ``offset`` in chunks of at most ``CHUNK``.

    Without ``until``, stop at the end of the file. With it, keep following what is appended,
    and stop once ``until()`` is true and everything written before that has been read.
    """
    async with await anyio.open_file(path, "rb") as log:
        await log.seek(offset)
        while True:
            ended = until() if until is not None else True  # read before looking at the end
            block = await log.read(CHUNK)
            if block:
                yield block
            elif ended:
                return
            else:
                await asyncio.sleep(_POLL_SECONDS)


async def lines(source: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """Yield the text lines (without their newline) of a stream of chunks.

    Memory is bounded by the longest line, which is what a reader of lines asks for.
    """
    pending: list[bytes] = []  # the pieces of a line not yet ended (joined once, when it ends)
    async for block in source:
        *complete, rest = block.split(b"\n")
        for piece in complete:
            yield b"".join([*pending, piece]).decode(errors="replace")
            pending = []
        if rest:
            pending.append(rest)
    if pending:
        yield b"".join(pending).decode(errors="replace")
