"""Directory archives: deterministic tar(+gzip/zstd) creation and safe extraction (blocking).

Archives hold the directory under its own name (``name/...``), as ORAS does, so that a pull
recreates ``target/name/``. They are deterministic (sorted entries, no owners, gzip without
a timestamp), so unchanged data gives the same digest and the registry can skip it.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import posixpath
import queue
import stat
import struct
import tarfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ..errors import RegistryError, UnsafeArchive
from . import _media

Compression = Literal["none", "gzip", "zstd"]
_COPY_BUFFER = 1024 * 1024
# Enough to tell compressible data from random, and quick: the push waits for this.
_SAMPLE_FILES, _SAMPLE_BYTES = 8, 16 * 1024
_ALLOWED_TYPES = {
    tarfile.REGTYPE,
    tarfile.AREGTYPE,
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
}


@dataclass(frozen=True)
class ArchiveInfo:
    """What writing an archive produced: the blob's digest and size, and the tar's digest."""

    digest: str
    size: int
    tar_digest: str


def media_type_for(compression: Compression) -> str:
    """Return the layer media type of a directory archive with ``compression``."""
    return {
        "none": _media.LAYER_TAR,
        "gzip": _media.LAYER_TAR_GZIP,
        "zstd": _media.LAYER_TAR_ZSTD,
    }[compression]


class Writable(Protocol):
    """Where an archive is written: a file, or a pipe to an upload."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, inner: Writable | Any) -> None:
        self.inner = inner
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.size += len(data)
        self.inner.write(data)
        return len(data)

    def flush(self) -> None:
        self.inner.flush()

    def tell(self) -> int:
        return self.size

    @property
    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


def _zstandard() -> Any:
    """Return the zstandard module, an optional dependency, or say how to install it."""
    try:
        import zstandard
    except ImportError:
        raise RegistryError(
            'Compression "zstd" needs the zstandard package: pip install zstandard.'
        ) from None
    return zstandard


class StoredGzip:
    """A gzip stream made of stored (uncompressed) deflate blocks.

    Every gzip reader accepts it, and it is written at memory speed: zlib at level 0 still
    pushes each byte through its window, about eight times slower. Used for gzip level 0,
    which choose_level picks for data that would not shrink anyway.
    """

    _HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, OS unknown
    _BLOCK = 65535

    def __init__(self, out: Writable) -> None:
        self._out = out
        self._crc = 0
        self._size = 0
        out.write(self._HEADER)

    def write(self, data: bytes, /) -> int:
        view = memoryview(data)
        for start in range(0, len(view), self._BLOCK):
            block = view[start : start + self._BLOCK]
            self._out.write(struct.pack("<BHH", 0, len(block), len(block) ^ 0xFFFF))
            self._out.write(block)  # type: ignore[arg-type]
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """End the deflate stream (an empty final block) and write the gzip trailer."""
        self._out.write(struct.pack("<BHH", 1, 0, 0xFFFF))
        self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


def _walk(root: Path) -> list[tuple[str, str]]:
    """Return (name in the archive, path) of every entry below ``root`` (inclusive), sorted
    by that name; symlinks are listed, not followed. Strings, not Paths: this runs once per
    entry on every push, and pathlib made it several times slower."""
    out = [(root.name, str(root))]
    pending = [(str(root), root.name)]
    while pending:
        directory, name = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                inner = f"{name}/{entry.name}"
                out.append((inner, entry.path))
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, inner))
    out.sort()
    return out


def fingerprint(root: Path, compression: Compression, level: int | None) -> str | None:
    """Return a key that changes when anything in the tree or the archive settings changes.

    Returns None when an entry changed in the last second: timestamps are too coarse to
    tell such a tree from one modified again in the same tick (see _digest).
    """
    recent = time.time_ns() - 1_000_000_000
    hasher = hashlib.sha256(f"{os.path.realpath(root)}\0{compression}\0{level}".encode())
    skip = len(root.name) + 1
    for name, path in _walk(root):
        st = os.lstat(path)
        if st.st_mtime_ns >= recent:
            return None
        hasher.update(
            f"{name[skip:] or '.'}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}"
            f"\0{st.st_ino}\n".encode()
        )
    return "dir:" + hasher.hexdigest()


def choose_level(root: Path, compression: Compression, level: int | None) -> int:
    """Return the compression level to use: ``level`` if given, else one fitted to the data.

    For gzip, a sample of the files is compressed first: data that does not shrink (already
    compressed, or random) is stored at level 0, which is about twenty times faster than
    level 1 and still a valid gzip stream for every ORAS client. zstd defaults to 3.
    """
    if level is not None:
        return level
    if compression != "gzip":
        return 3
    files = [Path(p) for _, p in _walk(root) if stat.S_ISREG(os.lstat(p).st_mode)]
    sample = b"".join(
        _head(p) for p in files[:: max(1, len(files) // _SAMPLE_FILES)][:_SAMPLE_FILES]
    )
    if not sample:
        return 1
    return 0 if len(zlib.compress(sample, 1)) > 0.9 * len(sample) else 1


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(_SAMPLE_BYTES)


def write_archive(root: Path, out: Writable, compression: Compression, level: int) -> ArchiveInfo:
    """Write ``root`` as a deterministic archive to ``out``; return its digests and size."""
    blob = _HashingWriter(out)
    inodes: dict[tuple[int, int], str] = {}
    compressor: Any
    if compression == "gzip" and level == 0:
        compressor = StoredGzip(blob)
    elif compression == "gzip":
        compressor = gzip.GzipFile(
            filename="", mode="wb", fileobj=blob, compresslevel=level, mtime=0
        )
    elif compression == "zstd":
        compressor = _zstandard().ZstdCompressor(level=level).stream_writer(blob, closefd=False)
    else:
        compressor = blob
    # Uncompressed, the blob is the tar: one hash serves both digests.
    tar_stream = blob if compressor is blob else _HashingWriter(compressor)
    for name, path in _walk(root):
        _write_member(tar_stream, path, name, inodes)
    tar_stream.write(_END)  # two zero blocks, then zeros to a whole record, as tarfile does
    tar_stream.write(bytes(-tar_stream.size % tarfile.RECORDSIZE))
    if compressor is not blob:
        compressor.close()
    return ArchiveInfo(blob.digest, blob.size, tar_stream.digest)


_END = bytes(2 * tarfile.BLOCKSIZE)
_KINDS = {
    stat.S_IFREG: tarfile.REGTYPE,
    stat.S_IFDIR: tarfile.DIRTYPE,
    stat.S_IFLNK: tarfile.SYMTYPE,
}


def _write_member(
    out: _HashingWriter, path: str, arcname: str, inodes: dict[tuple[int, int], str]
) -> None:
    """Write one tar member as tarfile.addfile would (PAX, owners dropped, whole-second
    mtime: a fractional one costs an extra PAX header per member, which doubled the time to
    read the archive back), reading a file's bytes in large pieces straight into ``out``.

    The header comes from one lstat, without tarfile.gettarinfo's user and group name
    look-ups; a file seen before under another name (a hard link) becomes a link member.
    """
    st = os.lstat(path)
    kind = _KINDS.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        raise RegistryError(f"Cannot archive {path}: it is a device, fifo or socket.")
    info = tarfile.TarInfo(arcname)
    info.mode, info.mtime, info.type = stat.S_IMODE(st.st_mode), int(st.st_mtime), kind
    if kind == tarfile.SYMTYPE:
        info.linkname = os.readlink(path)
    elif kind == tarfile.REGTYPE and st.st_nlink > 1:
        first = inodes.setdefault((st.st_ino, st.st_dev), arcname)
        if first != arcname:
            info.type, info.linkname = tarfile.LNKTYPE, first
    if info.type == tarfile.REGTYPE:
        info.size = st.st_size
    out.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
    if info.size:
        _copy_file(path, info.size, out)
        out.write(bytes(-info.size % tarfile.BLOCKSIZE))


def _copy_file(path: str, size: int, out: _HashingWriter) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        left = size
        while left:
            chunk = os.read(fd, min(left, _COPY_BUFFER))
            if not chunk:
                raise RegistryError(f"Cannot archive {path}: it shrank while it was read.")
            out.write(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)


def _inside(name: str) -> str:
    """Return the normalised member path, or raise if it is absolute or climbs out."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise UnsafeArchive(f'member "{name}" has an absolute or malformed path')
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../") or any(p == ".." for p in name.split("/")):
        raise UnsafeArchive(f'member "{name}" climbs out of the target with ".."')
    return norm


def _check_member(member: tarfile.TarInfo, links: set[str], seen: set[str]) -> None:
    name = _inside(member.name)
    if member.type not in _ALLOWED_TYPES:
        raise UnsafeArchive(f'member "{member.name}" is a device, fifo or other special file')
    parts = name.split("/")
    for i in range(1, len(parts) + 1):
        if "/".join(parts[:i]) in links:
            raise UnsafeArchive(f'member "{member.name}" would be written through a symlink')
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            raise UnsafeArchive(f'symlink "{member.name}" points to absolute "{target}"')
        _inside(posixpath.join(posixpath.dirname(name), target))
        links.add(name)
    elif member.islnk():
        target = _inside(member.linkname)
        if target not in seen:
            raise UnsafeArchive(f'hard link "{member.name}" points outside the archive')
        if target in links:  # a hard link to a symlink is one more symlink
            links.add(name)
    seen.add(name)


class ChunkFeed:
    """A read-only file fed with chunks by another thread (``put``), for a streaming reader.

    The queue is small, so the feeding thread waits rather than piling up memory; ``cancel``
    unblocks both sides. Once the reader is done it ``discard``s the rest, so the feeder
    (which hashes every byte) never waits on a reader that has stopped.
    """

    def __init__(self, depth: int = 8) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._cancelled = threading.Event()
        self._ended = False

    def put(self, chunk: bytes | None) -> None:
        """Hand over a chunk, or None for the end (blocking while the queue is full)."""
        while not self._cancelled.is_set():
            try:
                self._queue.put(chunk, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(self, n: int = -1) -> bytes:
        """Return the next chunk as it came (``n`` is ignored), or b"" at the end."""
        while not self._ended and not self._cancelled.is_set():
            try:
                chunk = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if chunk is None:
                self._ended = True
                return b""
            if chunk:
                return chunk
        return b""

    def discard(self) -> None:
        """Read and drop everything up to the end."""
        while self.read():
            pass

    def cancel(self) -> None:
        self._cancelled.set()


class _Gunzip:
    """Inflates a gzip stream (members one after another) read from ``raw``, in pieces of at
    most ``n`` bytes, so a small hostile input cannot expand all at once in memory."""

    def __init__(self, raw: ChunkFeed) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(31)
        self._input = b""
        self._started = False

    def read(self, n: int) -> bytes:
        while True:
            if self._inflate.eof:
                self._input = self._inflate.unused_data + self._input
                self._inflate = zlib.decompressobj(31)
                self._started = False
            if not self._input:
                self._input = self._raw.read()
                if not self._input:
                    if self._started:
                        raise EOFError("the compressed stream ended early")
                    return b""
            self._started = True
            out = self._inflate.decompress(self._input, n)
            self._input = self._inflate.unconsumed_tail
            if out:
                return out


class _ForwardReader:
    """The read/tell/forward-seek file that TarFile needs, over a decoded stream; member data
    is copied to files straight from the decoded pieces (``copy_to``)."""

    _PIECE = 1024 * 1024

    def __init__(self, decoded: Any) -> None:
        self._decoded = decoded
        self._chunk = b""
        self._at = 0
        self._pos = 0

    def _more(self) -> bool:
        self._chunk, self._at = self._decoded.read(self._PIECE), 0
        return bool(self._chunk)

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        parts: list[bytes] = []
        left = n if n >= 0 else 1 << 62
        while left > 0:
            if self._at >= len(self._chunk) and not self._more():
                break
            part = self._chunk[self._at : self._at + left]
            self._at += len(part)
            left -= len(part)
            parts.append(part)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence != 0 or pos < self._pos:
            raise tarfile.ReadError("a streamed archive can only be read forwards")
        while self._pos < pos:
            if not self.read(min(pos - self._pos, self._PIECE)):
                break
        return self._pos

    def copy_to(self, fd: int, size: int) -> None:
        """Write the next ``size`` bytes to ``fd``."""
        while size > 0:
            if self._at >= len(self._chunk) and not self._more():
                raise EOFError("the archive ended inside a file")
            view = memoryview(self._chunk)[self._at : self._at + size]
            while view:
                view = view[os.write(fd, view) :]
            n = min(size, len(self._chunk) - self._at)
            self._at += n
            self._pos += n
            size -= n


def _decoded(feed: ChunkFeed, media_type: str) -> Any:
    if media_type.endswith("+zstd"):
        return _zstandard().ZstdDecompressor().stream_reader(feed, read_across_frames=True)
    if media_type.endswith("+gzip") or media_type.endswith(".gzip"):
        return _Gunzip(feed)
    return feed


def extract_stream(feed: ChunkFeed, media_type: str, target: Path) -> list[str]:
    """Extract an archive arriving through ``feed`` into the empty staging directory
    ``target``; return its top-level names. Raises UnsafeArchive on the first unsafe member.

    Written for speed, with the same guarantees: every member is checked (_check_member)
    before anything is written; files are created with O_EXCL|O_NOFOLLOW, and their modes
    filtered as the stdlib "data" filter does; links, rare, also pass through that filter.
    The feed is read to its end even after a failure, so the digest covers every byte.
    """
    try:
        return _extract_members(_ForwardReader(_decoded(feed, media_type)), target)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise UnsafeArchive(f"the archive cannot be extracted safely ({exc})") from exc
    finally:
        feed.discard()


def _extract_members(reader: _ForwardReader, target: Path) -> list[str]:
    links: set[str] = set()
    seen: set[str] = set()
    tops: set[str] = set()
    made: set[str] = {""}
    dirs: list[tuple[str, int]] = []
    base = str(target)
    with tarfile.TarFile(fileobj=reader, mode="r") as tar:  # type: ignore[arg-type]
        for member in tar:
            _check_member(member, links, seen)
            name = _inside(member.name)
            tops.add(name.split("/")[0])
            if name == ".":
                continue
            parent = posixpath.dirname(name)
            if parent not in made:
                os.makedirs(os.path.join(base, parent), exist_ok=True)
                made.add(parent)
            path = os.path.join(base, name)
            if member.isreg():
                _write_file(path, member, reader)
            elif member.isdir():
                if name not in made:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(path)
                    made.add(name)
                dirs.append((path, int(member.mtime)))
            else:
                tar.extract(member, base, filter="data")
    for path, mtime in reversed(dirs):  # after their contents, which change the mtime
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return sorted(tops - {"."})


def _write_file(path: str, member: tarfile.TarInfo, reader: _ForwardReader) -> None:
    mode = member.mode & 0o755
    if not mode & 0o100:
        mode &= ~0o111
    mode |= 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:  # a later member of the same name replaces the file
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise UnsafeArchive(f'member "{member.name}" would replace a directory') from None
        os.unlink(path)
        fd = os.open(path, flags, mode)
    try:
        reader.copy_to(fd, member.size)
        os.fchmod(fd, mode)
        os.utime(fd, (member.mtime, member.mtime))
    finally:
        os.close(fd)
