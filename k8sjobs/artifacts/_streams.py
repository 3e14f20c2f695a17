"""Blocking file pieces of streaming transfers, run in worker threads: read or write a
chunk while hashing it, so a blob is never whole in memory and never hashed twice."""

from __future__ import annotations

import asyncio
import hashlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, TypeVar

from .errors import DigestMismatch, RegistryError

T = TypeVar("T")


class HashingReader:
    """Reads a file region in chunks and hashes every byte read."""

    def __init__(self, path: Path, start: int = 0, hasher: hashlib._Hash | None = None) -> None:
        self._file: BinaryIO = path.open("rb")
        self._file.seek(start)
        self.hasher = hasher or hashlib.sha256()

    def read(self, n: int) -> bytes:
        chunk = self._file.read(n)
        self.hasher.update(chunk)
        return chunk

    def read_only(self, n: int) -> bytes:
        """Read without hashing (the caller hashes elsewhere, with ``hash``)."""
        return self._file.read(n)

    def hash(self, chunk: bytes) -> None:
        self.hasher.update(chunk)

    def close(self) -> None:
        self._file.close()

    @property
    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


class VerifyingWriter:
    """Writes a blob to a file while hashing it, refusing more bytes than announced."""

    def __init__(self, path: Path, digest: str, size: int, where: str) -> None:
        self._file: BinaryIO = path.open("wb")
        self._hasher = hashlib.sha256()
        self.digest, self.size, self.where = digest, size, where
        self.written = 0

    def count(self, n: int) -> None:
        """Account for ``n`` more bytes; raise DigestMismatch past the announced size."""
        self.written += n
        if self.written > self.size:
            raise DigestMismatch(
                f"{self.where}: received more than the {self.size} bytes announced."
            )

    def hash(self, chunk: bytes) -> None:
        self._hasher.update(chunk)

    def store(self, chunk: bytes) -> None:
        self._file.write(chunk)

    def write(self, chunk: bytes) -> None:
        """Count, hash and store a chunk (for callers without a pipeline)."""
        self.count(len(chunk))
        self.hash(chunk)
        self.store(chunk)

    def finish(self) -> None:
        """Close the file and raise DigestMismatch unless size and digest both match."""
        self._file.close()
        actual = "sha256:" + self._hasher.hexdigest()
        if self.written != self.size:
            raise DigestMismatch(
                f"{self.where}: received {self.written} bytes, expected {self.size}."
            )
        if actual != self.digest:
            raise DigestMismatch(
                f"{self.where}: content has digest {actual}, expected {self.digest}."
            )

    def abort(self) -> None:
        self._file.close()


class OrderedWorker:
    """A thread of its own that runs calls one at a time, in submission order.

    ``submit`` returns at once unless more than ``depth`` calls are pending, so the event
    loop keeps moving bytes while the thread hashes or writes (bounded memory: ``depth``
    chunks). Two workers (hash, write) let both run at once on two cores.
    """

    def __init__(self, depth: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k8sjobs-blob")
        self._pending: deque[asyncio.Future[None]] = deque()
        self._depth = depth

    async def submit(self, fn: Callable[[bytes], None], chunk: bytes) -> None:
        self._pending.append(asyncio.wrap_future(self._pool.submit(fn, chunk)))
        while len(self._pending) > self._depth:
            await self._pending.popleft()

    async def drain(self) -> None:
        """Wait for every pending call; raise the first failure."""
        while self._pending:
            await self._pending.popleft()

    async def close(self) -> None:
        """Wait for pending calls (ignoring failures, already raised elsewhere) and stop."""
        await asyncio.gather(*self._pending, return_exceptions=True)
        self._pending.clear()
        self._pool.shutdown(wait=False)


class ArchivePipe:
    """A file-like object that an archiving thread writes into and an upload reads from.

    Chunks pass through a small bounded queue, so the archive streams to the registry while
    it is being made, with at most a few MiB in memory and no temporary file.
    """

    def __init__(self, chunk: int = 1024 * 1024, depth: int = 4) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=depth)
        self._buffer = bytearray()
        self._chunk = chunk
        self._cancelled = threading.Event()

    def write(self, data: bytes, /) -> int:
        self._buffer += data
        if len(self._buffer) >= self._chunk:
            self._put(bytes(self._buffer))
            self._buffer.clear()
        return len(data)

    def flush(self) -> None:
        pass

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise RegistryError("The upload of the archive was abandoned.")

    def run(self, produce: Callable[[ArchivePipe], T]) -> T:
        """Run ``produce(self)`` (in a worker thread), then mark the end of the stream."""
        try:
            result = produce(self)
            if self._buffer:
                self._put(bytes(self._buffer))
            self._put(None)
            return result
        except BaseException as exc:
            if not self._cancelled.is_set():
                self._put(exc)
            raise

    def get(self) -> bytes | None:
        """Return the next chunk, or None at the end (blocking: call from a worker thread)."""
        while not self._cancelled.is_set():
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise RegistryError(f"Archiving the directory failed: {item}") from item
            return item
        return None

    def cancel(self) -> None:
        """Stop both sides: the writer raises, the reader sees the end."""
        self._cancelled.set()
