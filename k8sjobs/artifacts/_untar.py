"""Safe extraction of a directory archive (tar, tar+gzip, tar+zstd) fed piece by piece.

``Extractor.feed`` parses whatever bytes arrive and writes file data straight from them:
no copy, no reader thread, and no reference kept once it returns, so the caller may reuse
its receive buffers. It is push-style because the pull that feeds it is: the bytes come off
a socket on another thread, which hashes them, and this one only has to place them.

Why not ``tarfile``: it pulls from a file object, which costs a thread and a copy of every
byte to bridge, and it parses each header field by field in Python; for 1000 small files
that was most of a directory pull. The parser here reads the ustar, GNU (long names) and
pax formats that tar, Go's archive/tar and Python's tarfile write, and it is stricter than
tarfile: a bad header checksum or a truncated archive is an error, never a silent end.

Every member is checked before anything is written (``_check``): no absolute paths, no
``..`` in a member's name, nothing written through a symlink, no device, fifo or unknown
type. A symlink may hold ``..`` as long as it lands inside the layer (``_links``): each is
judged as it comes, and all again at the end, when every link that could change where
another leads is known. A backslash is an ordinary character on POSIX, and a name that is
not UTF-8 is carried as its bytes. Files are created with O_EXCL|O_NOFOLLOW and their
modes filtered as the stdlib "data" filter does. The caller extracts into an empty staging
directory and moves the result into place only after the blob's digest is verified.

gzip's CRC-32 is not computed: the blob's SHA-256 already covers every byte, and stored
(uncompressed) deflate blocks, which k8sjobs writes for data that does not compress, are
passed through as views of the input.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UnsafeArchive
from ._fd import write_all
from ._links import LinkLoop, resolve, within
from ._tarball import FilesDigest

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_WINDOW = 32 * 1024  # how far back a deflate block may refer
_PIECE = 1024 * 1024  # most decompressed bytes produced per step (no bomb in memory)
_META_LIMIT = 1024 * 1024  # longest pax header or GNU long name accepted
_LINK, _SYMLINK, _DIR = b"1", b"2", b"5"
_REGULAR = {b"0", b"\0", b"7"}  # file, old-style file, contiguous file
_META = {b"x", b"g", b"L", b"K"}  # pax extended, pax global, GNU long name, GNU long link
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Sink = Callable[[Sequence[memoryview]], None]


def inside(name: str) -> str:
    """Return the normalised member path, or raise if it is absolute or climbs out."""
    if not name or name.startswith("/") or "\0" in name:
        raise UnsafeArchive(f'member "{name}" has an absolute or malformed path')
    parts = name.split("/")
    if ".." in parts:
        raise UnsafeArchive(f'member "{name}" climbs out of the target with ".."')
    # With no "..", normalising only drops "." and empty parts: most names have none.
    return posixpath.normpath(name) if "" in parts or "." in parts else name


class _Member:
    """One archive entry, as its header (and any pax or GNU records before it) describe it."""

    __slots__ = ("linkname", "mode", "mtime", "name", "size", "type")

    def __init__(self, header: bytes, meta: dict[str, Any]) -> None:
        self.type = header[156:157]
        self.mode = _number(header[100:108], "mode")
        self.size = int(meta.get("size", _number(header[124:136], "size")))
        self.mtime: float = meta.get("mtime", _number(header[136:148], "mtime"))
        name = meta.get("path") or _text(header[0:100])
        if "path" not in meta and header[257:263] == b"ustar\x00" and header[345] != 0:
            name = _text(header[345:500]) + "/" + name  # the ustar prefix field
        self.linkname: str = meta.get("linkpath") or _text(header[157:257])
        if self.type == b"\0" and name.endswith("/"):
            self.type = _DIR  # old tar marked directories by a trailing slash alone
        self.name = name.rstrip("/") if self.type == _DIR and name != "/" else name
        if self.size < 0:
            raise UnsafeArchive(f'member "{self.name}" has a negative size')
        if not -(2**40) < self.mtime < 2**40:  # also refuses NaN, which compares false
            raise UnsafeArchive(f'member "{self.name}" has an impossible modification time')


def _data_mode(mode: int) -> int:
    """A file's mode as the stdlib "data" filter leaves it: no setuid, setgid, sticky or
    group/other write; executable only if the owner may execute; owner read and write."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _umask() -> int | None:
    """Return the process umask without changing it (Linux), or None if unknown."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"Umask:"):
                return int(line.split()[1], 8)
    return None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, what: str) -> int:
    """Decode a numeric header field: octal text, or GNU base-256 for large values."""
    if field[0] in (0o200, 0o377):
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0o377 else value
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        raise UnsafeArchive(f"a tar header has an invalid {what} field") from None


def _check_sum(header: bytes) -> None:
    stored = _number(header[148:156], "checksum")
    # The sum of the bytes, with the field itself counted as spaces. Adler-32's low half is
    # 1 + that sum modulo 65521, exact for 256 bytes (at most 65280): five times faster
    # than sum() over the 512 bytes of every header.
    unsigned = (
        (zlib.adler32(header[:256]) & 0xFFFF)
        + (zlib.adler32(header[256:]) & 0xFFFF)
        - 2
        - sum(header[148:156])
        + 8 * 32
    )
    if stored != unsigned:
        signed = sum(struct.unpack_from("148b8x356b", header)) + 8 * 32
        if stored != signed:
            raise UnsafeArchive("a tar header is corrupt (its checksum does not match)")


def _pax_records(data: bytes) -> dict[str, Any]:
    """Parse pax "length key=value\\n" records into the keys extraction uses."""
    found: dict[str, Any] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise UnsafeArchive("a pax header is malformed") from None
        record = data[space + 1 : pos + length]
        if space < 0 or length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise UnsafeArchive("a pax header is malformed")
        key, _, value = record[:-1].partition(b"=")
        name = key.decode("utf-8", "surrogateescape")
        if name.startswith("GNU.sparse"):
            raise UnsafeArchive("the archive holds a sparse file, which is not supported")
        text = value.decode("utf-8", "surrogateescape")
        try:
            if name == "size":
                found["size"] = int(text)
            elif name == "mtime":
                found["mtime"] = float(text)
            elif name in ("path", "linkpath"):
                found[name] = text
        except ValueError:
            raise UnsafeArchive(f"a pax header has an invalid {name}") from None
        pos += length
    return found


class _Tar:
    """The tar parser proper: a state machine fed with decompressed views. With ``root``,
    every member (and every symlink's destination) must be ``root`` or under it. With
    ``files``, every member is counted into that files digest as it is placed; without a
    ``target``, nothing is written (a claim checked without unpacking)."""

    def __init__(
        self,
        target: Path | None,
        root: str | None = None,
        meter: Callable[[int], None] | None = None,
        files: FilesDigest | None = None,
    ) -> None:
        self._base = None if target is None else str(target)
        self._files = files
        self._root = root
        self._meter = meter
        self._held = bytearray()  # a header, or a pax/long-name record, split across pieces
        self._want = _BLOCK  # bytes still to collect into _held
        self._meta_type = b""
        self._meta: dict[str, Any] = {}
        self._global: dict[str, Any] = {}
        self._fd = -1
        self._file: _Member | None = None
        self._left = 0  # file bytes still to write
        self._skip = 0  # padding still to skip
        self.ended = False
        self._links: dict[str, str] = {}  # every symlink: its name and target as written
        self._seen: set[str] = set()
        self._made: set[str] = {""}
        self._dirs: list[tuple[str, float]] = []
        self.tops: set[str] = set()
        self._umask = _umask()

    def feed(self, views: Sequence[memoryview]) -> None:
        """Parse ``views`` in order; a file's data in them is written with one system call."""
        if self._meter is not None:  # once per piece, never per byte
            self._meter(sum(len(view) for view in views))
        data: list[memoryview] = []  # the current file's data seen in this call
        for view in views:
            while view and not self.ended:
                if self._skip:
                    step = min(self._skip, len(view))
                    self._skip -= step
                    view = view[step:]
                elif self._left:
                    step = min(self._left, len(view))
                    data.append(view[:step])
                    if self._files is not None:
                        self._files.data(view[:step])
                    view = view[step:]
                    self._left -= step
                    if not self._left:
                        self._write(data)
                        data.clear()
                        self._close_file()
                elif not self._held and len(view) >= _BLOCK and not self._meta_type:
                    self._header(bytes(view[:_BLOCK]))
                    view = view[_BLOCK:]
                else:
                    view = self._collect(view)
        if data:  # the views are the caller's again once this returns
            self._write(data)

    def _write(self, data: list[memoryview]) -> None:
        if self._fd >= 0:  # none when only counting
            write_all(self._fd, data)

    def _collect(self, view: memoryview) -> memoryview:
        """Hold bytes of a header or record split across views; act once it is whole."""
        step = min(self._want - len(self._held), len(view))
        self._held += view[:step]
        if len(self._held) == self._want:
            held, self._held = bytes(self._held), bytearray()
            if self._meta_type:
                self._record(held)
            else:
                self._header(held)
        return view[step:]

    def close(self) -> list[str]:
        """Finish: raise if the archive stopped inside a member or a link now leads out
        (through a link that came after it); set the directories' times."""
        if self._left or self._held or self._meta_type or self._fd >= 0:
            raise UnsafeArchive("the archive ends in the middle of a member")
        for name in self._links:
            self._check_link(name)
        for path, mtime in reversed(self._dirs):  # after their contents, which change it
            os.utime(path, (mtime, mtime), follow_symlinks=False)
        return sorted(self.tops - {"."})

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _header(self, header: bytes) -> None:
        if header == _ZERO_BLOCK:
            self.ended = True  # the end-of-archive marker; what follows is ignored
            return
        _check_sum(header)
        kind = header[156:157]
        if kind in _META:
            size = _number(header[124:136], "size")
            if not 0 <= size <= _META_LIMIT:
                raise UnsafeArchive("a pax header or GNU long name is too large")
            self._meta_type, self._want = kind, size
            if size == 0:
                self._record(b"")
            return
        member = _Member(header, {**self._global, **self._meta})
        self._meta = {}
        if self._files is not None:  # as declared: placing it filters its mode
            try:
                self._files.entry(
                    member.name, member.type, member.mode, member.linkname, member.size
                )
            except ValueError as exc:  # a field tar cannot write back: no digest matches it
                raise UnsafeArchive(f'member "{member.name}": {exc}') from None
        self._place(member)

    def _record(self, data: bytes) -> None:
        """Apply a pax or GNU record to the members it describes."""
        kind, size = self._meta_type, len(data)
        self._meta_type, self._want = b"", _BLOCK
        self._skip = -size % _BLOCK
        if kind == b"L":
            self._meta["path"] = _text(data)
        elif kind == b"K":
            self._meta["linkpath"] = _text(data)
        elif kind == b"x":
            self._meta.update(_pax_records(data))
        else:
            self._global.update(_pax_records(data))

    def _place(self, member: _Member) -> None:
        name = self._check(member)
        self.tops.add(name.partition("/")[0])
        if name == ".":
            return
        if self._base is None:  # only counting: a file's bytes are read, nothing is made
            if member.type in _REGULAR:
                self._file, self._left = member, member.size
                if not self._left:
                    self._close_file()
            return
        parent = name.rpartition("/")[0]  # the name is normalised: no trailing slash
        if parent not in self._made:
            try:
                os.makedirs(os.path.join(self._base, parent), exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise UnsafeArchive(f'member "{member.name}" is under a file') from None
            self._made.add(parent)
        path = f"{self._base}/{name}"
        if member.type in _REGULAR:
            self._open(path, member)
        elif member.type == _DIR:
            if name not in self._made:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path)
                self._made.add(name)
            self._dirs.append((path, member.mtime))
        elif member.type == _SYMLINK:
            self._clear(path, member)
            os.symlink(member.linkname, path)
        else:
            self._clear(path, member)
            source = os.path.join(self._base, inside(member.linkname))
            os.link(source, path, follow_symlinks=False)
            if name not in self._links:  # like tar, the link's header sets the file's
                os.chmod(path, _data_mode(member.mode))
                os.utime(path, (member.mtime, member.mtime))

    def _under_root(self, name: str) -> bool:
        root = self._root
        return root is None or name in (root, ".") or name.startswith(root + "/")

    def _check(self, member: _Member) -> str:
        """Refuse a member that could write outside the target; return its path."""
        name = inside(member.name)
        if not self._under_root(name):
            raise UnsafeArchive(f'member "{member.name}" is outside the layer "{self._root}"')
        kind = member.type
        if kind not in _REGULAR and kind not in (_DIR, _SYMLINK, _LINK):
            raise UnsafeArchive(f'member "{member.name}" is a device, fifo or other special file')
        if self._links:
            parts = name.split("/")
            for i in range(1, len(parts) + 1):
                if "/".join(parts[:i]) in self._links:
                    raise UnsafeArchive(
                        f'member "{member.name}" would be written through a symlink'
                    )
        if kind == _SYMLINK:
            if member.linkname.startswith("/"):
                raise UnsafeArchive(
                    f'symlink "{member.name}" points to absolute "{member.linkname}"'
                )
            self._links[name] = member.linkname
            self._check_link(name)
        elif kind == _LINK:
            target = inside(member.linkname)
            if target not in self._seen:
                raise UnsafeArchive(f'hard link "{member.name}" points outside the archive')
            if target in self._links:  # a hard link to a symlink is one more symlink, whose
                self._links[name] = self._links[target]  # target is read from its own place
                self._check_link(name)
        self._seen.add(name)
        return name

    def _check_link(self, name: str) -> None:
        """Refuse the symlink ``name`` if, followed through the archive's links, it leads
        out of the layer (or out of the target), or never ends."""
        try:
            lands = resolve(name, self._links)
        except LinkLoop:
            raise UnsafeArchive(f'symlink "{name}" is a loop of links') from None
        if lands is None or not within(lands, self._root):
            where = f'the layer "{self._root}"' if self._root else "the target"
            raise UnsafeArchive(f'symlink "{name}" -> "{self._links[name]}" climbs out of {where}')

    @staticmethod
    def _clear(path: str, member: _Member) -> None:
        """Make way for a member that replaces an earlier one of the same name."""
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise UnsafeArchive(f'member "{member.name}" would replace a directory')
            os.unlink(path)
        except FileNotFoundError:
            pass

    def _open(self, path: str, member: _Member) -> None:
        member.mode = _data_mode(member.mode)
        try:
            self._fd = os.open(path, _OPEN_FLAGS, member.mode)
        except FileExistsError:
            self._clear(path, member)
            self._fd = os.open(path, _OPEN_FLAGS, member.mode)
        self._file, self._left = member, member.size
        if not self._left:
            self._close_file()

    def _close_file(self) -> None:
        member, fd = self._file, self._fd
        assert member is not None
        self._fd, self._file = -1, None
        if fd >= 0:
            try:
                if self._umask is None or member.mode & self._umask:
                    os.fchmod(fd, member.mode)  # the umask took bits away
                os.utime(fd, (member.mtime, member.mtime))
            finally:
                os.close(fd)
        if self._files is not None:
            self._files.end_of_file(member.size)
        self._skip = -member.size % _BLOCK


class _Gunzip:
    """gzip members one after another. Stored deflate blocks pass through as views of the
    input; the first compressed block hands the rest of the member to zlib, primed with the
    last 32 KiB already produced, which is all a deflate block may refer back to."""

    def __init__(self, out: Sink) -> None:
        self._out = out
        self._held = bytearray()
        self._state = "header"
        self._stored = 0  # bytes left in the current stored block
        self._final = False
        self._window = b""
        self._recent: list[memoryview] = []  # stored output of this call, for the window
        self._inflate: Any = None

    def write(self, view: memoryview) -> None:
        try:
            while view:
                if self._state == "stored":
                    step = min(self._stored, len(view))
                    self._recent.append(view[:step])
                    view = view[step:]
                    self._stored -= step
                    if not self._stored:
                        self._state = "trailer" if self._final else "block"
                elif self._state == "block" and not self._held and len(view) >= 5:
                    view = self._block(view[:5], view[5:])
                elif self._state == "inflate":
                    view = self._inflate_some(view)
                else:
                    view = self._parse(view)
        finally:
            self._pass_on()  # the input is the caller's again once this returns

    def close(self) -> None:
        if self._state != "header" or self._held:
            raise UnsafeArchive("the archive's gzip stream ends early")

    def _pass_on(self) -> None:
        """Hand the stored data of this call on, and keep its last 32 KiB as the window."""
        if not self._recent:
            return
        self._out(self._recent)
        tail: list[bytes] = []
        size = 0
        for piece in reversed(self._recent):
            if size >= _WINDOW:
                break
            tail.append(bytes(piece[-(_WINDOW - size) :]))
            size += len(tail[-1])
        self._window = (self._window + b"".join(reversed(tail)))[-_WINDOW:]
        self._recent = []

    def _block(self, header: memoryview | bytes, rest: memoryview) -> memoryview:
        """Start a deflate block whose first 5 bytes are ``header``."""
        if header[0] & 0b110:  # compressed: zlib takes the rest of this member
            self._pass_on()
            self._inflate = zlib.decompressobj(-15, zdict=self._window)
            self._state = "inflate"
            return memoryview(bytes(header) + bytes(rest))  # once per member: a copy is fine
        # Stored: 3 header bits, padding to the byte, LEN, ~LEN, then LEN bytes as they are.
        length, check = struct.unpack_from("<HH", header, 1)
        if length ^ check != 0xFFFF:
            raise UnsafeArchive("the archive's gzip stream is corrupt")
        self._final = bool(header[0] & 1)
        self._stored = length
        self._state = "stored" if length else ("trailer" if self._final else "block")
        return rest

    def _parse(self, view: memoryview) -> memoryview:
        """Collect and read a gzip header, a deflate block header or a gzip trailer."""
        need = {"header": 10, "block": 5, "trailer": 8}[self._state]
        if self._state == "header":
            need = max(need, _gzip_header_length(bytes(self._held) + bytes(view[:4096])))
        step = max(0, min(need - len(self._held), len(view)))
        self._held += view[:step]
        view = view[step:]
        if len(self._held) < need:
            return view
        held, self._held = bytes(self._held), bytearray()
        if self._state == "header":
            self._pass_on()  # what came before belongs to the previous member
            self._state, self._window = "block", b""
        elif self._state == "trailer":
            self._state = "header"
        else:
            return self._block(held, view)
        return view

    def _inflate_some(self, data: memoryview | bytes) -> memoryview:
        """Inflate what ``data`` holds, in pieces of at most _PIECE bytes."""
        inflate = self._inflate
        try:
            while True:
                out = inflate.decompress(data, _PIECE)
                if out:
                    self._out([memoryview(out)])
                data = inflate.unconsumed_tail
                if inflate.eof or (not data and len(out) < _PIECE):
                    break
        except zlib.error:
            raise UnsafeArchive("the archive's gzip stream is corrupt") from None
        if inflate.eof:
            self._state, self._inflate = "trailer", None
            return memoryview(inflate.unused_data)
        return memoryview(b"")


def _gzip_header_length(data: bytes) -> int:
    """How long the gzip header at the start of ``data`` is (10 when it cannot tell yet)."""
    if len(data) < 10:
        return 10
    if data[:3] != b"\x1f\x8b\x08":
        raise UnsafeArchive("the archive is not a gzip stream")
    flags, end = data[3], 10
    if flags & 4:  # FEXTRA
        if len(data) < 12:
            return 12
        end += 2 + int.from_bytes(data[10:12], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            zero = data.find(b"\0", end)
            if zero < 0:
                if len(data) > _META_LIMIT:
                    raise UnsafeArchive("the archive's gzip header is too long")
                return len(data) + 1
            end = zero + 1
    return end + 2 if flags & 2 else end  # FHCRC


class _Unzstd:
    """zstd frames, decompressed by zstandard's stream writer, which hands the output on in
    pieces of at most _PIECE bytes (no bomb in memory). It cannot tell a cut frame: the tar
    reader then misses the rest of a member, and the blob's digest the rest of the bytes."""

    def __init__(self, out: Sink, zstandard: Any) -> None:
        self._writer = zstandard.ZstdDecompressor().stream_writer(_Forward(out), write_size=_PIECE)
        self._error: type[Exception] = zstandard.ZstdError

    def write(self, view: memoryview) -> None:
        try:
            self._writer.write(view)
        except self._error as exc:
            raise UnsafeArchive(f"the archive's zstd stream is corrupt ({exc})") from None

    def close(self) -> None:
        self._writer.flush()


class _Forward:
    """The file-like end zstandard writes decompressed pieces to."""

    def __init__(self, out: Sink) -> None:
        self._out = out

    def write(self, data: bytes) -> int:
        self._out([memoryview(data)])
        return len(data)


class Extractor:
    """Extract one archive into the empty directory ``target`` as it is fed (blocking);
    with ``root`` (a layer's title), only ``root`` and what is under it; ``meter`` is told
    the size of every piece of tar stream produced, and may raise to stop; ``files`` counts
    every member into a files digest (``_tarball.FilesDigest``, the push's own), and with no
    ``target`` nothing is written: the archive is only read and counted.

    ``feed`` raises UnsafeArchive on the first unsafe member or corrupt byte; ``close``
    returns the top-level names once the archive is complete; ``abort`` closes what is
    open. What is in ``target`` after a failure is partial and the caller's to discard.
    """

    def __init__(
        self,
        target: Path | None,
        media_type: str,
        zstandard: Callable[[], Any],
        root: str | None = None,
        meter: Callable[[int], None] | None = None,
        files: FilesDigest | None = None,
    ) -> None:
        self._tar = _Tar(target, root, meter, files)
        self._decoder: _Gunzip | _Unzstd | None = None
        if media_type.endswith("+zstd"):
            self._decoder = _Unzstd(self._tar.feed, zstandard())
        elif media_type.endswith("+gzip") or media_type.endswith(".gzip"):
            self._decoder = _Gunzip(self._tar.feed)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._tar.ended:
            return  # past the end-of-archive marker: the rest is only hashed
        view = memoryview(data).cast("B")
        if self._decoder is None:
            self._tar.feed([view])
        else:
            self._decoder.write(view)

    def close(self) -> list[str]:
        if not self._tar.ended and self._decoder is not None:
            self._decoder.close()
        return self._tar.close()

    def abort(self) -> None:
        self._tar.abort()
