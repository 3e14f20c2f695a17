"""Blocking file pieces of streaming transfers, run in worker threads: read or write a
chunk while hashing it, so a blob is never whole in memory and never hashed twice."""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
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

    def write(self, chunk: bytes) -> None:
        self.written += len(chunk)
        if self.written > self.size:
            raise DigestMismatch(
                f"{self.where}: received more than the {self.size} bytes announced."
            )
        self._hasher.update(chunk)
        self._file.write(chunk)

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
