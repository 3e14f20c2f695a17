"""The streaming extractor against the stdlib: the same tree as ``tarfile`` with the "data"
filter, for every tar format, compression and split of the stream; corrupt input refused."""

from __future__ import annotations

import gzip
import io
import os
import random
import stat
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.artifacts import UnsafeArchive, _media
from k8sjobs.artifacts._tarball import StoredGzip
from k8sjobs.artifacts._untar import Extractor

GZIP, TAR, ZSTD = _media.LAYER_TAR_GZIP, _media.LAYER_TAR, _media.LAYER_TAR_ZSTD
FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
SIZES = [0, 1, 511, 512, 513, 65535, 65536, 70001]
Entry = tuple[str, str, int]  # (kind, path, size or index of the link target)


def _stored_gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    stored = StoredGzip(out)
    stored.write(data)
    stored.close()
    return out.getvalue()


def _stored_then_compressed(data: bytes) -> bytes:
    """One gzip member whose first half is stored blocks and whose rest is compressed with
    back-references into that first half (the window the extractor has to keep)."""
    half = len(data) // 2
    out = bytearray(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
    for start in range(0, half, 65535):
        block = data[start : min(half, start + 65535)]
        out += struct.pack("<BHH", 0, len(block), len(block) ^ 0xFFFF) + block
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=data[max(0, half - 32768) : half])
    out += deflate.compress(data[half:]) + deflate.flush()
    return bytes(out + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF))


COMPRESSIONS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "none": (TAR, lambda d: d),
    "gzip-1": (GZIP, lambda d: gzip.compress(d, 1, mtime=0)),
    "gzip-9": (GZIP, lambda d: gzip.compress(d, 9, mtime=0)),
    "gzip-stored": (GZIP, _stored_gzip),
    "gzip-two-members": (
        GZIP,
        lambda d: gzip.compress(d[: len(d) // 3], 6) + gzip.compress(d[len(d) // 3 :], 0),
    ),
    "gzip-stored-then-compressed": (GZIP, _stored_then_compressed),
    "zstd": (ZSTD, lambda d: zstandard.ZstdCompressor(level=3).compress(d)),
}


def _data(path: str, size: int) -> bytes:
    seed = random.Random(f"{path}:{size}")
    return bytes(seed.randrange(4) for _ in range(size))  # compressible, but not trivially


def _archive(entries: list[Entry], fmt: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for kind, path, arg in entries:
            info = tarfile.TarInfo(path)
            info.mtime, info.mode = 1_600_000_000 + len(path), 0o640 if arg % 2 else 0o755
            if kind == "file":
                info.size = arg
                tar.addfile(info, io.BytesIO(_data(path, arg)))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, entries[arg][1].rsplit("/", 1)[-1]
            else:
                info.type, info.linkname = tarfile.LNKTYPE, entries[arg][1]
            tar.addfile(info)
    return buffer.getvalue()


def _tree(root: Path) -> dict[str, tuple[object, ...]]:
    """What a user sees: each path's kind, bytes or link target, mode and mtime."""
    seen: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        st_ = path.lstat()
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            seen[name] = ("symlink", os.readlink(path))
        elif path.is_dir():
            seen[name] = ("dir", int(st_.st_mtime))
        else:
            seen[name] = ("file", path.read_bytes(), stat.S_IMODE(st_.st_mode), st_.st_mtime)
    return seen


def _extract(blob: bytes, media_type: str, target: Path, cut: random.Random) -> list[str]:
    extractor = Extractor(target, media_type, lambda: zstandard)
    view, at = memoryview(bytearray(blob)), 0
    while at < len(view):
        step = cut.choice([1, 5, 511, 512, 4096, 65536, 1 << 20])
        extractor.feed(view[at : at + step])
        at += step
    return extractor.close()


@st.composite
def trees(draw: st.DrawFn) -> list[Entry]:
    names = st.sampled_from(["a", "b.txt", "é-ü", "x" * 101, "long-" + "n" * 150, "sp ace"])
    entries: list[Entry] = [("dir", "data", 0)]
    dirs = ["data"]
    for _ in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from(dirs))
        path = f"{parent}/{draw(names)}"
        if any(path == p for _, p, _ in entries):
            continue
        kind = draw(st.sampled_from(["file", "file", "file", "dir", "symlink", "hardlink"]))
        files = [i for i, e in enumerate(entries) if e[0] == "file"]
        if kind in ("symlink", "hardlink") and not files:
            kind = "file"
        if kind == "file":
            entries.append(("file", path, draw(st.sampled_from(SIZES))))
        elif kind == "dir":
            entries.append(("dir", path, 0))
            dirs.append(path)
        elif kind == "symlink":  # a sibling link, when the target sits in the same directory
            target = draw(st.sampled_from(files))
            if entries[target][1].rsplit("/", 1)[0] != parent:
                continue
            entries.append(("symlink", path, target))
        else:
            entries.append(("hardlink", path, draw(st.sampled_from(files))))
    return entries


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=trees(),
    fmt=st.sampled_from(sorted(FORMATS)),
    compression=st.sampled_from(sorted(COMPRESSIONS)),
    seed=st.integers(0, 2**32),
)
def test_same_tree_as_tarfile(entries: list[Entry], fmt: str, compression: str, seed: int) -> None:
    try:
        tar = _archive(entries, FORMATS[fmt])
    except ValueError:  # ustar cannot hold the longest names: nothing to compare
        return
    media_type, compress = COMPRESSIONS[compression]
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = Path(tmp, "ours"), Path(tmp, "theirs")
        ours.mkdir()
        tops = _extract(compress(tar), media_type, ours, random.Random(seed))
        with tarfile.open(fileobj=io.BytesIO(tar)) as reference:
            reference.extractall(theirs, filter="data")
        assert tops == ["data"]
        assert _tree(ours) == _tree(theirs)


def _good_archive() -> bytes:
    entries: list[Entry] = [("dir", "data", 0), ("file", "data/f", 70001), ("file", "data/g", 3)]
    return _archive(entries, tarfile.PAX_FORMAT)


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_corrupt_or_truncated_streams_are_refused_or_exact(
    compression: str, tmp_path: Path
) -> None:
    """Flipped bytes and cut streams either fail as UnsafeArchive or extract the original
    (a flip in padding changes nothing); no other error, and nothing outside the target."""
    media_type, compress = COMPRESSIONS[compression]
    tar = _good_archive()
    blob = compress(tar)
    expected_root = tmp_path / "expected"
    expected_root.mkdir()
    _extract(blob, media_type, expected_root, random.Random(0))
    expected = _tree(expected_root)
    chance = random.Random(compression)
    for attempt in range(60):
        damaged = bytearray(blob)
        if attempt % 3 == 0:
            damaged = damaged[: chance.randrange(len(damaged))]
        else:
            for _ in range(chance.randint(1, 4)):
                damaged[chance.randrange(len(damaged))] ^= 1 << chance.randrange(8)
        sandbox = tmp_path / f"sandbox{attempt}"
        target = sandbox / "target"
        target.mkdir(parents=True)
        try:
            _extract(bytes(damaged), media_type, target, chance)
        except UnsafeArchive:
            pass
        else:
            got = _tree(target)
            assert got == expected or all(k.startswith("data") for k in got)
        assert [p.name for p in sandbox.iterdir()] == ["target"]


def _header_with(tar: bytes, offset: int, value: bytes, fix_sum: bool = False) -> bytes:
    """Change the first header; with ``fix_sum``, keep its checksum valid."""
    header = bytearray(tar[:512])
    header[offset : offset + len(value)] = value
    if fix_sum:
        header[148:156] = b" " * 8
        header[148:155] = b"%06o\0" % sum(header)
    return bytes(header) + tar[512:]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda t: _header_with(t, 0, b"X"), "checksum"),
        (lambda t: t[:700], "ends in the middle"),
        (lambda t: _header_with(t, 124, b"zz", fix_sum=True), "invalid size"),
        (lambda t: _header_with(t, 156, b"3", fix_sum=True), "special file"),
    ],
)
def test_specific_damage_is_named(
    damage: Callable[[bytes], bytes], message: str, tmp_path: Path
) -> None:
    tar = _archive([("file", "data", 5000)], tarfile.USTAR_FORMAT)
    with pytest.raises(UnsafeArchive, match=message):
        _extract(damage(tar), TAR, tmp_path, random.Random(1))


def test_special_members_and_sparse_files_are_refused(tmp_path: Path) -> None:
    for kind in (tarfile.CHRTYPE, tarfile.FIFOTYPE, tarfile.GNUTYPE_SPARSE):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
            info = tarfile.TarInfo("data/odd")
            info.type = kind
            tar.addfile(info)
        with pytest.raises(UnsafeArchive, match="special file"):
            _extract(buffer.getvalue(), TAR, tmp_path, random.Random(2))


def test_pax_global_header_and_base256_numbers(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "git"}
    ) as tar:
        info = tarfile.TarInfo("data/old")
        info.size, info.mtime = 3, -1_000  # before 1970: GNU writes it in base-256
        tar.addfile(info, io.BytesIO(b"abc"))
    gnu = io.BytesIO()
    with tarfile.open(fileobj=gnu, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("data/old")
        info.size, info.mtime = 3, -1_000
        tar.addfile(info, io.BytesIO(b"abc"))
    for i, blob in enumerate((buffer.getvalue(), gnu.getvalue())):
        target = tmp_path / str(i)
        target.mkdir()
        assert _extract(blob, TAR, target, random.Random(3)) == ["data"]
        assert (target / "data" / "old").read_bytes() == b"abc"
        assert (target / "data" / "old").stat().st_mtime == -1_000


def test_a_gzip_header_with_a_file_name_is_read(tmp_path: Path) -> None:
    tar = _archive([("file", "data/f", 10)], tarfile.USTAR_FORMAT)
    named = io.BytesIO()
    with gzip.GzipFile("archive.tar", "wb", 6, named, mtime=0) as stream:
        stream.write(tar)
    assert named.getvalue()[3] & 8  # FNAME is set
    assert _extract(named.getvalue(), GZIP, tmp_path, random.Random(4)) == ["data"]
    assert (tmp_path / "data" / "f").read_bytes() == _data("data/f", 10)


def test_a_member_under_a_file_is_refused(tmp_path: Path) -> None:
    tar = _archive([("file", "data", 3), ("file", "data/x", 3)], tarfile.USTAR_FORMAT)
    with pytest.raises(UnsafeArchive, match="under a file"):
        _extract(tar, TAR, tmp_path, random.Random(5))


@pytest.mark.parametrize("mtime", ["nan", "inf", "1e300"])
def test_an_impossible_pax_mtime_is_refused(mtime: str, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("data/f")
        info.size, info.pax_headers = 1, {"mtime": mtime}
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(UnsafeArchive, match="modification time"):
        _extract(buffer.getvalue(), TAR, tmp_path, random.Random(6))
