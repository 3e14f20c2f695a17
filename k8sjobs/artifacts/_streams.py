"""Blocking file pieces of streaming transfers, run in worker threads: read or write a
chunk while hashing it, so a blob is never whole in memory and never hashed twice."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, TypeVar

from ..errors import DigestMismatch, LimitExceeded, RegistryError
from . import _media, _tarball, _untar
from ._fd import Buffer, write_all
from ._limits import Budget, Cancelled

T = TypeVar("T")
A = TypeVar("A")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


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


class BlobSink:
    """Where a fetched blob goes, verified: ``count`` each piece as it arrives (raising past
    the announced size), ``take`` it (hash, then ``store``, in a worker thread), and
    ``finish`` (DigestMismatch unless size and digest both match) or ``abort``."""

    # Which thread of a SocketDrain hashes: the storing one (writing a file is cheap), or,
    # for sinks whose store costs more (extraction), the receiving one, to even them out.
    hash_on_receive = False

    def __init__(self, digest: str, size: int, where: str) -> None:
        self._hasher = _media.new_hasher(digest)
        self.digest, self.size, self.where = digest, size, where
        self.written = 0
        self.cancelled = False  # set from the event loop; seen by the storing thread

    def cancel(self) -> None:
        """Ask a store in progress to stop at its next piece (the transfer was abandoned)."""
        self.cancelled = True

    def count(self, n: int) -> None:
        """Account for ``n`` more bytes; raise DigestMismatch past the announced size."""
        self.written += n
        if self.written > self.size:
            raise DigestMismatch(
                f"{self.where}: received more than the {self.size} bytes announced."
            )

    def take(self, pieces: Sequence[Buffer]) -> None:
        """Hash and store pieces already counted (hashing releases the GIL)."""
        self.hash(pieces)
        self.store(pieces)

    def hash(self, pieces: Sequence[Buffer]) -> None:
        """Hash pieces already counted; ``store`` them next (in another thread if wanted)."""
        for piece in pieces:
            self._hasher.update(piece)

    def store(self, pieces: Sequence[Buffer]) -> None:
        raise NotImplementedError

    def write(self, chunk: bytes) -> None:
        """Count, hash and store a chunk (for callers without a pipeline)."""
        self.count(len(chunk))
        self.take((chunk,))

    def finish(self) -> None:
        """Raise DigestMismatch unless size and digest both match (the caller has closed)."""
        actual = f"{self.digest.partition(':')[0]}:{self._hasher.hexdigest()}"
        if self.written != self.size:
            raise DigestMismatch(
                f"{self.where}: received {self.written} bytes, expected {self.size}."
            )
        if actual != self.digest:
            raise DigestMismatch(
                f"{self.where}: content has digest {actual}, expected {self.digest}."
            )

    def abort(self) -> None:
        pass


# Makes the sink for one attempt at a blob (called in a worker thread), given what it is.
SinkFactory = Callable[[str], BlobSink]


class VerifyingWriter(BlobSink):
    """Writes a blob to a file while hashing it, refusing more bytes than announced."""

    def __init__(self, path: Path, digest: str, size: int, where: str) -> None:
        super().__init__(digest, size, where)
        # Not O_TRUNC: on ext4, truncating (even an empty file) makes close() flush the whole
        # file to disk (auto_da_alloc), which cost 0.3 s per GiB. Only a retry finds data.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | _O_CLOEXEC, 0o600)
        if os.fstat(self._fd).st_size:
            os.ftruncate(self._fd, 0)

    @classmethod
    def factory(cls, path: Path, digest: str, size: int) -> SinkFactory:
        """Return a SinkFactory writing to ``path``."""
        return lambda where: cls(path, digest, size, where)

    def store(self, pieces: Sequence[Buffer]) -> None:
        write_all(self._fd, pieces)

    def finish(self) -> None:
        self.abort()
        super().finish()

    def abort(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


class VerifyingExtractor(BlobSink):
    """Extracts a directory archive into ``staging`` as it arrives, and verifies the
    archive's digest. The caller moves the extracted tree into place only after ``finish``
    (digest first, then the archive's safety, then the layer's files digest ``claim``) and
    otherwise discards ``staging``: an unverified byte never reaches the target. After an
    unsafe member the rest of the blob is still hashed, so that a corrupt transfer is
    reported as such, not as its effects.

    With a ``claim`` (the layer's ``k8sjobs.io/files-digest``) the files digest is computed
    as the members are placed, and a mismatch is refused as a blob digest mismatch is: the
    step cache keys a directory input by that claim, so a false one would have a result
    made from other files stand for this one. With no ``staging``, nothing is written:
    ``files_digest`` is all the caller wants (a claim checked without a pull)."""

    hash_on_receive = True

    def __init__(
        self,
        staging: Path | None,
        media_type: str,
        digest: str,
        size: int,
        where: str,
        root: str,
        budget: Budget,
        claim: str | None = None,
    ):
        super().__init__(digest, size, where)
        self._budget = budget
        self._meter = budget.meter(root, size, lambda: self.cancelled)
        self._claim = claim
        self._files = _tarball.FilesDigest() if claim is not None or staging is None else None
        self._extractor = _untar.Extractor(
            staging,
            media_type,
            _tarball.zstandard_module,
            root=root,
            meter=self._meter,
            files=self._files,
        )
        self._failure: Exception | None = None
        self.tops: list[str] = []
        self.files_digest = ""  # once finished, when counted

    def store(self, pieces: Sequence[Buffer]) -> None:
        if self._failure is not None:
            return
        try:
            for piece in pieces:
                self._extractor.feed(piece)
        except (LimitExceeded, Cancelled):
            self._extractor.abort()
            raise  # stop the transfer now: the rest would only be refused or thrown away
        except Exception as exc:
            self._failure = exc
            self._extractor.abort()

    def finish(self) -> None:
        if self._failure is None:
            try:
                self.tops = self._extractor.close()
            except Exception as exc:
                self._failure = exc
        self._extractor.abort()
        super().finish()
        if self._failure is not None:
            raise self._failure
        if self._files is not None:
            self.files_digest = self._files.digest()
        if self._claim is not None and self.files_digest != self._claim:
            raise DigestMismatch(
                f"{self.where}: its files have digest {self.files_digest}, but the layer "
                f"claims {_media.FILES_DIGEST} {_tarball.shown(self._claim[:80])}; "
                "nothing of it was written."
            )

    def abort(self) -> None:
        self._extractor.abort()
        # What this attempt unpacked is thrown away: a retry may write it again.
        self._budget.release(self._meter.unpacked)
        self._meter.unpacked = 0


class OrderedWorker:
    """A thread of its own that runs calls one at a time, in submission order.

    ``submit`` returns at once unless more than ``depth`` calls are pending, so the event
    loop keeps moving bytes while the thread hashes or writes (bounded memory: ``depth``
    chunks).
    """

    def __init__(self, depth: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k8sjobs-blob")
        self._pending: deque[asyncio.Future[None]] = deque()
        self._depth = depth

    async def submit(self, fn: Callable[[A], None], arg: A) -> None:
        self._pending.append(asyncio.wrap_future(self._pool.submit(fn, arg)))
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
        self._queue: queue.Queue[bytearray | BaseException | None] = queue.Queue(maxsize=depth)
        self._buffer = bytearray()
        self._chunk = chunk
        self._cancelled = threading.Event()

    def write(self, data: bytes, /) -> int:
        self._buffer += data
        if len(self._buffer) >= self._chunk:
            # Handed over whole, not copied: a fresh buffer takes its place.
            self._put(self._buffer)
            self._buffer = bytearray()
        return len(data)

    def flush(self) -> None:
        pass

    def _put(self, item: bytearray | BaseException | None) -> None:
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
                self._put(self._buffer)
            self._put(None)
            return result
        except BaseException as exc:
            if not self._cancelled.is_set():
                self._put(exc)
            raise

    def get(self) -> bytearray | None:
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


class SocketDrain:
    """Receives a body from a socket into a ring of reused buffers while a second thread
    hashes and stores each filled one: no bytes object per piece, and the receive, the hash
    and the write run at once (all release the GIL). For a sink that costs more to store
    (``hash_on_receive``), the receiving thread hashes instead, to keep both equally busy.

    ``head`` is what the HTTP client had already read of the body; it goes first.
    ``run`` blocks (call it from a worker thread); ``stop`` (from any thread) makes it
    return promptly. Silence longer than ``timeout`` raises TimeoutError, an early end of
    the stream ConnectionError: both retryable, like the same failures inside aiohttp.
    """

    _BUFFER, _RING = 1024 * 1024, 8

    def __init__(
        self,
        sock: socket.socket,
        head: bytes,
        remaining: int,
        writer: BlobSink,
        report: Callable[[int], object],
        timeout: float,
    ) -> None:
        self.sock, self.head, self.remaining, self.writer = sock, head, remaining, writer
        self.report, self.timeout = report, timeout
        self._stopped = threading.Event()
        self._free: queue.Queue[bytearray] = queue.Queue()
        self._made = 0
        self._full: queue.Queue[tuple[Buffer, bytearray | None] | None] = queue.Queue()
        self._failure: BaseException | None = None

    def stop(self) -> None:
        self._stopped.set()
        self.writer.cancel()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        storing = threading.Thread(target=self._store, name="k8sjobs-blob-store")
        storing.start()
        try:
            if self.head:
                self._pass_on(self.head, None)
            self.sock.settimeout(min(self.timeout, 0.5))
            while self.remaining > 0 and self._failure is None:
                buffer = self._next_free()
                if buffer is None:
                    break
                n = self._fill(buffer)
                self.remaining -= n
                self._pass_on(memoryview(buffer)[:n], buffer)
        except BaseException as exc:
            self._failure = self._failure or exc
        finally:
            self._full.put(None)
            storing.join()
            self.sock.close()
        if self._failure is not None:
            raise self._failure

    def _pass_on(self, piece: Buffer, ring: bytearray | None) -> None:
        """Count ``piece``, maybe hash it, and queue it (``ring`` is its buffer to reuse)."""
        self.writer.count(len(piece))
        if self.writer.hash_on_receive:
            self.writer.hash((piece,))
        self._full.put((piece, ring))

    def _next_free(self) -> bytearray | None:
        """Return a buffer to fill: a stored one, or a new one while the ring is not full
        (so a writer that keeps up is served by two or three, and the start is quick)."""
        if self._free.empty() and self._made < self._RING:
            self._made += 1
            return bytearray(self._BUFFER)
        while not self._stopped.is_set() and self._failure is None:
            try:
                return self._free.get(timeout=0.1)
            except queue.Empty:
                continue
        return None

    def _fill(self, buffer: bytearray) -> int:
        """Receive into ``buffer`` until it is full or the body is complete."""
        view, filled = memoryview(buffer), 0
        want = min(len(buffer), self.remaining)
        heard = time.monotonic()
        while filled < want:
            if self._stopped.is_set():
                raise ConnectionError("the download was abandoned")
            try:
                n = self.sock.recv_into(view[filled:want])
            except TimeoutError:
                if time.monotonic() - heard > self.timeout:
                    raise TimeoutError("no data from the registry") from None
                continue
            if n == 0:
                raise ConnectionError("the server closed the connection mid-body")
            filled += n
            heard = time.monotonic()
        return filled

    def _store(self) -> None:
        while (item := self._full.get()) is not None:
            piece, ring = item
            if self._failure is None:
                try:
                    if self.writer.hash_on_receive:
                        self.writer.store((piece,))
                    else:
                        self.writer.take((piece,))
                    self.report(len(piece))
                except BaseException as exc:
                    self._failure = exc
            if ring is not None:
                self._free.put(ring)
