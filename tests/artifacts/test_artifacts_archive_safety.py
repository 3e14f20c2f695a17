# ruff: noqa: ASYNC240  (tests read small files inline; the library never does)
"""Hostile directory archives are refused whole, and nothing lands outside the target."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from k8sjobs.artifacts import OCILayout, UnsafeArchive, _media
from k8sjobs.artifacts._reference import parse_reference

Member = Callable[[tarfile.TarFile], None]


def _file(name: str, data: bytes = b"pwned") -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return add


def _special(name: str, kind: bytes, linkname: str = "") -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = linkname
        tar.addfile(info)

    return add


HOSTILE: dict[str, list[Member]] = {
    "dotdot": [_file("data/ok.txt"), _file("data/../../escaped.txt")],
    "absolute": [_file("/tmp/k8sjobs-absolute-escape.txt")],
    "symlink_escape": [_special("data/out", tarfile.SYMTYPE, "../../..")],
    "symlink_absolute": [_special("data/etc", tarfile.SYMTYPE, "/etc")],
    "write_through_symlink": [
        _special("data/inner", tarfile.SYMTYPE, "sub"),
        _file("data/inner/evil.txt"),
    ],
    "hardlink_escape": [_special("data/passwd", tarfile.LNKTYPE, "../outside.txt")],
    "hardlink_absolute": [_special("data/passwd", tarfile.LNKTYPE, "/etc/passwd")],
    "symlink_up_through_a_symlink": [
        _special("data/here", tarfile.SYMTYPE, "."),
        _special("data/up", tarfile.SYMTYPE, "here/../.."),
    ],
    "write_through_hardlinked_symlink": [
        _special("data/inner", tarfile.SYMTYPE, "sub"),
        _special("data/again", tarfile.LNKTYPE, "data/inner"),
        _file("data/again/evil.txt"),
    ],
    "char_device": [_special("data/null", tarfile.CHRTYPE)],
    "block_device": [_special("data/sda", tarfile.BLKTYPE)],
    "fifo": [_special("data/pipe", tarfile.FIFOTYPE)],
}


def _archive(members: list[Member]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for add in members:
            add(tar)
    return buffer.getvalue()


async def _store_hostile(layout: OCILayout, blob: bytes, title: str = "data") -> None:
    digest = layout._store_bytes(blob)
    layer = _media.Descriptor(
        _media.LAYER_TAR_GZIP, digest, len(blob), {_media.TITLE: title, _media.UNPACK: "true"}
    )
    manifest = _media.build_manifest([layer], None, {})
    layout._store_bytes(_media.EMPTY_CONFIG_DATA)
    await layout.put_manifest(
        parse_reference("evil/x:v1"), _media.encode_manifest(manifest), _media.MANIFEST
    )


def _everything(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_archive_is_refused_and_writes_nothing(case: str, tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, _archive(HOSTILE[case]))
    sandbox = tmp_path / "sandbox"
    target = sandbox / "a" / "target"
    target.mkdir(parents=True)
    (sandbox / "outside.txt").write_text("untouched")
    with pytest.raises(UnsafeArchive):
        await layout.pull("evil/x:v1", target)
    assert _everything(sandbox) == {"a", "a/target", "outside.txt"}
    assert (sandbox / "outside.txt").read_text() == "untouched"
    assert not Path("/tmp/k8sjobs-absolute-escape.txt").exists()


@pytest.mark.parametrize("title", ["../up", "/abs", "a/../../b"])
async def test_hostile_layer_title_is_refused(title: str, tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, _archive([_file("data/ok.txt")]), title=title)
    with pytest.raises(UnsafeArchive):
        await layout.pull("evil/x:v1", tmp_path / "target")
    assert _everything(tmp_path) == _everything(tmp_path) - {"up", "b"}


async def test_links_inside_the_tree_are_kept(tmp_path: Path) -> None:
    members = [
        _file("data/sub/f.txt", b"ok"),
        _special("data/l", tarfile.SYMTYPE, "sub/f.txt"),
        _special("data/h", tarfile.LNKTYPE, "data/sub/f.txt"),
    ]
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, _archive(members))
    await layout.pull("evil/x:v1", tmp_path / "t")
    assert (tmp_path / "t" / "data" / "l").read_bytes() == b"ok"
    assert (tmp_path / "t" / "data" / "h").read_bytes() == b"ok"
    assert (
        json.loads((tmp_path / "layout" / "oci-layout").read_text())["imageLayoutVersion"]
        == "1.0.0"
    )
