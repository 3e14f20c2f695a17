"""Blocking file pieces of streaming transfers, run in worker threads: read or write a
chunk while hashing it, so a blob is never whole in memory and never hashed twice."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

from .errors import DigestMismatch


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
