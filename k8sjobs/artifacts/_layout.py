"""OCILayout: an artifact store in a local directory in the OCI image layout format.

The layout holds ``oci-layout``, ``index.json`` (one entry per ``repository:tag``, named by
the ``org.opencontainers.image.ref.name`` annotation) and content-addressed
``blobs/sha256/<hex>``. Blobs are written to a temporary name and renamed, and index.json is
rewritten under an exclusive lock file and replaced atomically, so several local processes
can push to one layout at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio.to_thread

from ..errors import (
    ArtifactNotFound,
    DigestMismatch,
    InvalidReference,
    LimitExceeded,
    RegistryError,
)
from . import _media, _transfer
from ._digest import DigestCache
from ._limits import Cancelled
from ._media import Descriptor
from ._reference import Reference, parse_reference
from ._streams import BlobSink, SinkFactory
from ._tarball import ArchiveInfo

_T = TypeVar("_T")
_STORE_HINTS = {
    errno.ENOSPC: "free space on its disk, or name another store (--store)",
    errno.EDQUOT: "free space there, or raise the quota",
    errno.EROFS: "its filesystem is read-only: name a writable store (--store)",
    errno.EACCES: "check the directory's owner and permissions",
    errno.EPERM: "check the directory's owner and permissions",
}
_COPY_CHUNK = 1024 * 1024
# index.json lists every tag of the layout: generous, but not without end.
MAX_INDEX_BYTES = 64 * 1024 * 1024


class _Held:
    """An open file descriptor, closed when nothing holds it any more."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        os.close(self.fd)


class OCILayout(_transfer.StoreFront):
    """A directory in the OCI image layout format, as an ArtifactStore."""

    def __init__(
        self, root: str | Path, *, concurrency: int = 4, cache: DigestCache | None = None
    ) -> None:
        self.root = Path(root).absolute()
        self.concurrency = concurrency
        self.cache = cache or DigestCache()
        # index.json as last parsed, by the file's identity (it is only ever replaced whole),
        # with its tags by name: a lookup per tag re-parsed all of it, so listing the records
        # of a layout of n tags read n times n entries (4,000 tags: 85 s). The parsed file
        # is held open, so no later file can take its inode number and pass for it.
        self._parsed: tuple[tuple[int, ...], dict[str, Any], dict[str, str], _Held] | None = None

    def __repr__(self) -> str:
        return f"OCILayout({str(self.root)!r})"

    async def __aenter__(self) -> OCILayout:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Let go of the index.json last read (the layout is read anew if used again)."""
        self._parsed = None

    # -- files (blocking, run in worker threads) ----------------------------------------

    def _blob_path(self, digest: str) -> Path:
        # The digest becomes a path: only the OCI grammar may pass (no "..", no "/").
        checked = _media.check_digest(digest, f"A blob in {self.root}")
        algorithm, _, hexdigest = checked.partition(":")
        return self.root / "blobs" / algorithm / hexdigest

    def _ensure(self) -> None:
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        marker = self.root / "oci-layout"
        if not marker.exists():
            self._atomic_write(marker, b'{"imageLayoutVersion":"1.0.0"}')

    def _atomic_write(self, path: Path, data: bytes) -> None:
        """Replace ``path`` by ``data`` whole or not at all; a failed write (a full disk)
        removes its temporary file, which would otherwise keep the disk full."""
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def _locked_index(self) -> Iterator[dict[str, Any]]:
        """Yield index.json's content under an exclusive lock; write it back on exit."""
        self._ensure()
        with (self.root / "index.json.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                index = self._read_index()
                yield index
                self._atomic_write(self.root / "index.json", json.dumps(index, indent=1).encode())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_index(self) -> dict[str, Any]:
        """Return index.json, checked: an object whose "manifests" is a list of objects, each
        with a string "digest" (checked against the grammar where it is used)."""
        index, _ = self._parse_index()
        return dict(index, manifests=list(index["manifests"]))

    def _parse_index(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Return index.json (not to be changed) and its tags' digests by name, parsed once
        per version of the file."""
        path = self.root / "index.json"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return {"schemaVersion": 2, "mediaType": _media.INDEX, "manifests": []}, {}
        held = _Held(fd)
        st = os.fstat(fd)
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        parsed = self._parsed
        if parsed is not None and parsed[0] == seen:
            return parsed[1], parsed[2]
        if st.st_size > MAX_INDEX_BYTES:
            raise LimitExceeded(
                f"{path} is larger than {MAX_INDEX_BYTES >> 20} MiB; is it an OCI layout?"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_INDEX_BYTES + 1)
        try:
            index: Any = json.loads(data)
        except ValueError:
            raise RegistryError(f"{path} is not JSON; is {self.root} an OCI layout?") from None
        entries = index.get("manifests") if isinstance(index, dict) else None
        if not isinstance(entries, list) or not all(
            isinstance(e, dict)
            and isinstance(e.get("digest"), str)
            and isinstance(e.get("annotations") or {}, dict)
            for e in entries
        ):
            raise RegistryError(f'{path} is malformed: "manifests" must list descriptors.')
        names: dict[str, str] = {}
        for entry in entries:
            name = (entry.get("annotations") or {}).get(_media.REF_NAME)
            if isinstance(name, str):
                names.setdefault(name, entry["digest"])  # the first, as a scan finds it
        self._parsed = (seen, index, names, held)  # one assignment: threads read it at once
        return index, names

    def _store_file(self, source: Path, known: str | None, sent: _transfer.BytesCallback) -> str:
        self._ensure()
        if known and self._blob_path(known).exists():
            return known
        fd, tmp_name = tempfile.mkstemp(prefix=".upload-", dir=self.root / "blobs" / "sha256")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            hasher = hashlib.sha256()
            with source.open("rb") as src, tmp.open("wb") as dst:
                while chunk := src.read(_COPY_CHUNK):
                    hasher.update(chunk)
                    dst.write(chunk)
                    sent(len(chunk))
            digest = "sha256:" + hasher.hexdigest()
            if known and digest != known:
                raise DigestMismatch(
                    f"{source} changed while it was stored: digest {digest}, expected {known}."
                )
            os.replace(tmp, self._blob_path(digest))
            return digest
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _store_archive(self, produce: _transfer.ArchiveProducer) -> ArchiveInfo:
        self._ensure()
        fd, tmp_name = tempfile.mkstemp(prefix=".upload-", dir=self.root / "blobs" / "sha256")
        try:
            with os.fdopen(fd, "wb") as out:
                info = produce(out)
            os.replace(tmp_name, self._blob_path(info.digest))
            return info
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)

    def _store_bytes(self, data: bytes) -> str:
        self._ensure()
        digest = _media.sha256_digest(data)
        path = self._blob_path(digest)
        if not path.exists():
            self._atomic_write(path, data)
        return digest

    def _copy_verified(
        self, source: Path, writer: BlobSink, received: _transfer.BytesCallback
    ) -> None:
        try:
            with source.open("rb") as src:
                while chunk := src.read(_COPY_CHUNK):
                    if writer.cancelled:
                        raise Cancelled
                    writer.write(chunk)
                    received(len(chunk))
            writer.finish()
        except BaseException:
            writer.abort()
            raise

    # -- addressing ---------------------------------------------------------------------

    def _ref(self, reference: str) -> Reference:
        ref = parse_reference(reference)
        if ref.registry is not None:
            raise InvalidReference(
                f'Reference "{reference}" names registry {ref.registry}, but this store is the '
                f"OCI layout {self.root}; drop the host or open a registry store."
            )
        return ref

    @staticmethod
    def _name(ref: Reference) -> str:
        return f"{ref.repository}:{ref.tag}"

    def _lookup(self, ref: Reference) -> str:
        if ref.digest:
            if not self._blob_path(ref.digest).exists():
                raise ArtifactNotFound(f"{ref} is not in the OCI layout {self.root}.")
            return ref.digest
        digest = self._parse_index()[1].get(self._name(ref))
        if digest is None:
            raise ArtifactNotFound(f"{ref} is not in the OCI layout {self.root}.")
        return _media.check_digest(digest, f"{ref} in {self.root}/index.json")

    # -- BlobBackend --------------------------------------------------------------------

    async def has_blob(self, ref: Reference, digest: str) -> bool:
        """Return True when the layout holds blob ``digest``."""
        return await anyio.to_thread.run_sync(self._blob_path(digest).exists)

    async def put_blob(
        self,
        ref: Reference,
        path: Path,
        known: tuple[str, int] | None,
        sent: _transfer.BytesCallback,
    ) -> tuple[str, int]:
        """Copy a file into the layout as a blob (unless present); return digest and size."""
        return await anyio.to_thread.run_sync(self._put_blob_blocking, path, known, sent)

    def _put_blob_blocking(
        self, path: Path, known: tuple[str, int] | None, sent: _transfer.BytesCallback
    ) -> tuple[str, int]:
        started_ns = time.time_ns()
        st = path.stat()
        digest = self._store_file(path, known[0] if known else None, sent)
        if known is None:
            self.cache.remember_file(path, st, digest, started_ns)
        return digest, st.st_size

    async def put_archive(
        self, ref: Reference, produce: _transfer.ArchiveProducer, sent: _transfer.BytesCallback
    ) -> ArchiveInfo:
        """Write a directory archive straight into the layout's blobs."""
        info = await anyio.to_thread.run_sync(self._store_archive, produce)
        sent(info.size)
        return info

    async def _write(self, what: str, write: Callable[[], _T]) -> _T:
        """Run ``write`` (blocking) in a worker thread; an OSError of the layout's disk (full,
        read-only, not ours) is a RegistryError naming the layout, the cause and what to do.
        It escaped as a bare OSError: "[Errno 30] Read-only file system: '<temp name>'",
        exit 2 as if the user's input were wrong."""
        try:
            return await anyio.to_thread.run_sync(write)
        except OSError as exc:
            # the cause without the file: a temporary file's name tells the user nothing
            code = errno.errorcode.get(exc.errno or 0, "")
            cause = f"{exc.strerror or type(exc).__name__}{f' ({code})' if code else ''}"
            hint = _STORE_HINTS.get(exc.errno or 0, "check the disk and the directory")
            raise RegistryError(f"{what} in the OCI layout {self.root}: {cause}; {hint}.") from None

    async def put_blob_bytes(self, ref: Reference, data: bytes, digest: str) -> None:
        """Store a small in-memory blob."""
        await self._write(f"Storing a blob of {ref}", lambda: self._store_bytes(data))

    async def mount_blob(self, dst: Reference, desc: Descriptor, src: Reference) -> None:
        """Nothing to do: every repository of a layout shares its blobs."""

    async def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str:
        """Store a manifest blob and point ``ref``'s tag at it in index.json."""
        what = f"Storing {ref}"
        digest = await self._write(what, lambda: self._store_bytes(data))
        if ref.digest:
            if ref.digest != digest:
                raise DigestMismatch(f"The manifest for {ref} has digest {digest}.")
            return digest
        entry = {
            "mediaType": media_type,
            "digest": digest,
            "size": len(data),
            "annotations": {_media.REF_NAME: self._name(ref)},
        }
        await self._write(
            what,
            lambda: self._edit_index(lambda ms: [*self._without(ms, {self._name(ref)}), entry]),
        )
        return digest

    async def replace_manifests(
        self, expected: dict[str, str], data: bytes, media_type: str
    ) -> list[str]:
        """Point each tag of ``expected`` (``repository:tag`` -> the digest it was read at)
        at the manifest ``data``, in one rewrite of index.json, where the tag still names
        that digest (one written since is kept); return the references replaced.

        One rewrite for all: a rewrite per tag made ``cache clear`` of n records write
        index.json n times (4,000 records: 223 s; it grows as n squared)."""
        what = f"Replacing {len(expected)} tags"
        digest = await self._write(what, lambda: self._store_bytes(data))
        names = {self._name(self._ref(reference)): was for reference, was in expected.items()}
        done: set[str] = set()

        def edit(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
            seen: set[str] = set()
            kept = []
            for m in manifests:
                name = (m.get("annotations") or {}).get(_media.REF_NAME)
                # only a tag's first entry: the one a lookup finds
                if name in names and name not in seen and m.get("digest") == names[name]:
                    done.add(name)
                    m = {**m, "mediaType": media_type, "digest": digest, "size": len(data)}
                if isinstance(name, str):
                    seen.add(name)
                kept.append(m)
            return kept

        await self._write(what, lambda: self._edit_index(edit))
        return [r for r in expected if self._name(self._ref(r)) in done]

    @staticmethod
    def _without(manifests: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
        return [
            m for m in manifests if (m.get("annotations") or {}).get(_media.REF_NAME) not in names
        ]

    def _edit_index(self, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        with self._locked_index() as index:
            index["manifests"] = edit(list(index.get("manifests", [])))

    async def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]:
        """Return a manifest's bytes, media type and verified digest."""

        def read() -> tuple[bytes, str, str]:
            digest = self._lookup(ref)
            where = f"{ref} (in {self.root})"
            with self._blob_path(digest).open("rb") as f:
                _media.check_manifest_size(os.fstat(f.fileno()).st_size, where)
                data = f.read(_media.MAX_MANIFEST_BYTES + 1)  # a file can grow meanwhile
            _media.check_manifest_size(len(data), where)
            if _media.digest_like(data, digest) != digest:
                raise DigestMismatch(
                    f"The manifest of {ref} in {self.root} does not match {digest}."
                )
            # A layout keeps no Content-Type: the document's own mediaType stands for it.
            return data, _media.declared_type(data), digest

        return await anyio.to_thread.run_sync(read)

    async def fetch_blob(
        self,
        ref: Reference,
        desc: Descriptor,
        sink: SinkFactory,
        received: _transfer.BytesCallback,
    ) -> BlobSink:
        """Copy a blob into a sink, which verifies size and digest; return the sink."""
        where = f"Reading {desc.title or desc.digest} of {ref}"
        source = self._blob_path(desc.digest)
        if not await anyio.to_thread.run_sync(source.exists):
            raise ArtifactNotFound(f"{where}: blob {desc.digest} is missing from {self.root}.")
        writer = await anyio.to_thread.run_sync(sink, where)
        copying = asyncio.get_running_loop().run_in_executor(
            None, self._copy_verified, source, writer, received
        )
        try:
            await asyncio.shield(copying)
        except BaseException:
            writer.cancel()  # the copy stops at its next chunk; wait for it before cleaning up
            with anyio.CancelScope(shield=True):
                await asyncio.wait([copying])
            raise
        return writer

    # -- ArtifactStore ------------------------------------------------------------------

    async def resolve(self, reference: str) -> str:
        """Return the manifest digest that ``reference`` points to."""
        ref = self._ref(reference)
        return await anyio.to_thread.run_sync(self._lookup, ref)

    async def tags(self, repository: str) -> list[str]:
        """Return the tags of ``repository`` in this layout."""
        prefix = self._ref(f"{repository}:latest").repository + ":"
        index = await anyio.to_thread.run_sync(self._read_index)
        names = [
            (m.get("annotations") or {}).get(_media.REF_NAME, "")
            for m in index.get("manifests", [])
        ]
        return sorted(n[len(prefix) :] for n in names if n.startswith(prefix))

    async def delete(self, reference: str) -> None:
        """Remove every tag of the repository that points to the manifest ``reference`` names.

        Blobs stay on disk: another process may be pushing a manifest that uses them.
        """
        ref = self._ref(reference)
        digest = await self.resolve(reference)
        prefix = ref.repository + ":"

        def edit(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                m
                for m in manifests
                if not (
                    m.get("digest") == digest
                    and (m.get("annotations") or {}).get(_media.REF_NAME, "").startswith(prefix)
                )
            ]

        await self._write(f"Deleting {ref}", lambda: self._edit_index(edit))

    async def copy(self, source: str, destination: str) -> str:
        """Point ``destination`` at the manifest of ``source`` (blobs are shared)."""
        src, dst = self._ref(source), self._ref(destination)
        data, media_type, digest = await self.get_manifest(src)
        await self.put_manifest(dst, data, media_type)
        return digest
