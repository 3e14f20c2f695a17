"""Directory archives: deterministic tar(+gzip/zstd) creation (blocking); _untar extracts.

Archives hold the directory under its own name (``name/...``), as ORAS does, so that a pull
recreates ``target/name/``. They are deterministic (sorted entries, no owners, gzip without
a timestamp), so unchanged data gives the same digest and the registry can skip it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import struct
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ..errors import RegistryError
from . import _media
from ._links import LinkLoop, resolve

Compression = Literal["none", "gzip", "zstd"]
_COPY_BUFFER = 1024 * 1024
# Enough to tell compressible data from random, and quick: the push waits for this.
_SAMPLE_FILES, _SAMPLE_BYTES = 8, 16 * 1024


@dataclass(frozen=True)
class ArchiveInfo:
    """What writing an archive produced: the blob's digest and size, and the tar's digest."""

    digest: str
    size: int
    tar_digest: str
    files_digest: str = ""  # over names, kinds, modes, links and bytes: no times (FILES_DIGEST)


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


def zstandard_module() -> Any:
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

    Blocks are full (65535 bytes) whatever the sizes written: a tar header and the file
    after it share a block, so a reader meets a third as many blocks as with one block
    per write. A block goes out as its pieces, never joined; only the pieces of a block
    not yet full are copied, as the caller may reuse its buffer.
    """

    _HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, OS unknown
    _BLOCK = 65535

    def __init__(self, out: Writable) -> None:
        self._out = out
        self._crc = 0
        self._size = 0
        self._held: list[bytes] = []  # the start of the next block
        self._held_size = 0
        out.write(self._HEADER)

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        view = memoryview(data).cast("B")
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        while len(view) >= self._BLOCK - self._held_size:
            take = self._BLOCK - self._held_size
            self._block(self._BLOCK, [*self._held, view[:take]], final=False)
            self._held, self._held_size = [], 0
            view = view[take:]
        if view:
            self._held.append(bytes(view))
            self._held_size += len(view)
        return len(data)

    def _block(self, length: int, pieces: list[Any], final: bool) -> None:
        self._out.write(struct.pack("<BHH", int(final), length, length ^ 0xFFFF))
        for piece in pieces:
            self._out.write(piece)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """End the deflate stream with a final block holding what is left, and write the
        gzip trailer."""
        self._block(self._held_size, self._held, final=True)
        self._held, self._held_size = [], 0
        self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


# An entry of a tree: its name in the archive, its path and its lstat.
Entry = tuple[str, str, os.stat_result]


def scan(root: Path) -> list[Entry]:
    """Return every entry below ``root`` (inclusive), sorted by name in the archive;
    symlinks are listed, not followed. One walk and one lstat per entry serve the
    fingerprint, the choice of level and the archive. Strings, not Paths: this runs once
    per entry on every push, and pathlib made it several times slower."""
    found = [(root.name, str(root))]
    pending = [(str(root), root.name)]
    while pending:
        directory, name = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                inner = f"{name}/{entry.name}"
                found.append((inner, entry.path))
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, inner))
    found.sort()
    return [(name, path, os.lstat(path)) for name, path in found]


def fingerprint(
    root: Path, entries: list[Entry], compression: Compression, level: int | None
) -> str | None:
    """Return a key that changes when anything in the tree or the archive settings changes.

    Returns None when an entry changed in the last second: timestamps are too coarse to
    tell such a tree from one modified again in the same tick (see _digest).
    """
    recent = time.time_ns() - 1_000_000_000
    where = f"{os.path.realpath(root)}\0{compression}\0{level}"
    hasher = hashlib.sha256(where.encode("utf-8", "surrogateescape"))
    skip = len(root.name) + 1
    for name, _, st in entries:
        if st.st_mtime_ns >= recent:
            return None
        # ctime too: no user can set it, so a rewrite with the mtime put back still shows.
        # Names are bytes on POSIX: one that is not UTF-8 is hashed as those bytes.
        hasher.update(
            f"{name[skip:] or '.'}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}"
            f"\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}\n".encode("utf-8", "surrogateescape")
        )
    return "dir:" + hasher.hexdigest()


def check_links(root: Path, entries: list[Entry]) -> None:
    """Raise RegistryError naming the first symlink of the tree that is absolute, loops, or
    leads out of it (followed through the tree's own links, as _links does): a pull would
    refuse the archive, so the push refuses it first."""
    top = root.name
    links = {name: os.readlink(path) for name, path, st in entries if stat.S_ISLNK(st.st_mode)}
    for name in links:
        path = shown(os.path.join(os.path.dirname(root), name))
        try:
            lands = resolve(name, links)
        except LinkLoop:
            raise RegistryError(f"Cannot push {path}: the symlink is a loop of links.") from None
        if lands is None or not (lands == top or lands.startswith(top + "/")):
            raise RegistryError(
                f"Cannot push {path}: the symlink points to {shown(links[name])!r}, outside "
                f"{shown(str(root))}; a pull would refuse it. Make it point inside the "
                "directory, or copy what it points to in."
            )


def shown(path: str) -> str:
    """Return a path as an error message may show it: as it is when printable, else as the
    bytes it names (a newline or a name that is not UTF-8 must not break the one line)."""
    return path if path.isprintable() else repr(os.fsencode(path))


def choose_level(entries: list[Entry], compression: Compression, level: int | None) -> int:
    """Return the compression level to use: ``level`` if given, else one fitted to the data.

    For gzip, a sample of the files is compressed first: data that does not shrink (already
    compressed, or random) is stored at level 0, which is about twenty times faster than
    level 1 and still a valid gzip stream for every ORAS client. zstd defaults to 3.
    """
    if level is not None:
        return level
    if compression != "gzip":
        return 3
    files = [Path(path) for _, path, st in entries if stat.S_ISREG(st.st_mode)]
    sample = b"".join(
        _head(p) for p in files[:: max(1, len(files) // _SAMPLE_FILES)][:_SAMPLE_FILES]
    )
    if not sample:
        return 1
    return 0 if len(zlib.compress(sample, 1)) > 0.9 * len(sample) else 1


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(_SAMPLE_BYTES)


def write_archive(
    entries: list[Entry], out: Writable, compression: Compression, level: int
) -> ArchiveInfo:
    """Write a scanned tree as a deterministic archive to ``out``; return its digests and
    size."""
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
        zstd = zstandard_module().ZstdCompressor(level=level)
        compressor = zstd.stream_writer(blob, closefd=False)
    else:
        compressor = blob
    # Uncompressed, the blob is the tar: one hash serves both digests.
    tar_stream = blob if compressor is blob else _HashingWriter(compressor)
    files = _FilesHasher(tar_stream)
    for name, path, st in entries:
        _write_member(files, path, name, st, inodes)
    tar_stream.write(_END)  # two zero blocks, then zeros to a whole record, as tarfile does
    tar_stream.write(bytes(-tar_stream.size % tarfile.RECORDSIZE))
    if compressor is not blob:
        compressor.close()
    return ArchiveInfo(blob.digest, blob.size, tar_stream.digest, files.digest())


class FilesDigest:
    """The files digest of a directory archive (``k8sjobs.io/files-digest``): a SHA-256 over
    what its files are apart from their times. Each member's PAX header, rebuilt with its
    mtime zeroed and no owners, then its bytes and the zero padding after them.

    One class for both sides: the push feeds it as it writes the archive, and every pull
    as it unpacks one (``_untar``), so a claim on a layer is checked by the very function
    that made it. A producer that re-makes the same files gets the same digest, though the
    archive (which keeps the mtimes a pull restores) differs.
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def member(self, info: tarfile.TarInfo) -> None:
        """Count a member's header (name, kind, mode, link target, size), never its time."""
        mtime, info.mtime = info.mtime, 0
        try:
            self._hash.update(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        finally:
            info.mtime = mtime

    def entry(self, name: str, kind: bytes, mode: int, linkname: str, size: int) -> None:
        """Count a member as an unpacking reader sees it (the pull's side of ``member``)."""
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.linkname, info.size = kind, mode & 0o7777, linkname, size
        self.member(info)

    def data(self, piece: bytes | memoryview) -> None:
        """Count bytes of the current member's file."""
        self._hash.update(piece)

    def end_of_file(self, size: int) -> None:
        """Count the padding after a file of ``size`` bytes, as the archive writes it."""
        if size % tarfile.BLOCKSIZE:
            self._hash.update(bytes(-size % tarfile.BLOCKSIZE))

    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()


class _FilesHasher:
    """Writes the tar to ``out`` and feeds its files to a FilesDigest."""

    def __init__(self, out: _HashingWriter) -> None:
        self.out = out
        self.files = FilesDigest()

    def header(self, info: tarfile.TarInfo) -> None:
        self.out.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        self.files.member(info)

    def write(self, data: bytes) -> int:
        self.files.data(data)
        return self.out.write(data)

    def end_of_file(self, size: int) -> None:
        self.files.end_of_file(size)
        self.out.write(bytes(-size % tarfile.BLOCKSIZE))

    def digest(self) -> str:
        return self.files.digest()


_END = bytes(2 * tarfile.BLOCKSIZE)
_KINDS = {
    stat.S_IFREG: tarfile.REGTYPE,
    stat.S_IFDIR: tarfile.DIRTYPE,
    stat.S_IFLNK: tarfile.SYMTYPE,
}


def _write_member(
    out: _FilesHasher,
    path: str,
    arcname: str,
    st: os.stat_result,
    inodes: dict[tuple[int, int], str],
) -> None:
    """Write one tar member as tarfile.addfile would (PAX, owners dropped, whole-second
    mtime: a fractional one costs an extra PAX header per member, which doubled the time to
    read the archive back), reading a file's bytes in large pieces straight into ``out``.

    The header comes from the scan's lstat, without tarfile.gettarinfo's user and group
    name look-ups; a file seen before under another name (a hard link) becomes a link member.
    """
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
    out.header(info)
    if info.size:
        _copy_file(path, info.size, out)
        out.end_of_file(info.size)


def _copy_file(path: str, size: int, out: _FilesHasher) -> None:
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
