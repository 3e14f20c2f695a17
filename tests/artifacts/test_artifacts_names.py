"""Archives users really make (issue 25 items 1-3): links whose target holds ``..`` but stays
inside, backslashes, names that are not UTF-8. Each is carried by push and pull alike, or
refused by the push, naming the file, before anything is sent."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from k8sjobs.artifacts import OCILayout, RegistryError, UnsafeArchive
from k8sjobs.artifacts._tarball import zstandard_module
from k8sjobs.artifacts._untar import Extractor

from .artifact_helpers import old, same_tree


def _layout(tmp_path: Path) -> OCILayout:
    from k8sjobs.artifacts import DigestCache

    return OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))


async def _round_trip(tmp_path: Path, tree: Path) -> Path:
    store = _layout(tmp_path)
    await store.push("names/x:v1", [tree])
    await store.pull("names/x:v1", tmp_path / "out")
    return tmp_path / "out" / tree.name


async def test_a_link_with_dotdot_that_stays_inside_is_pulled(tmp_path: Path) -> None:
    """Item 1: ``d/sub/latest -> ../v2/data.txt`` was refused on pull ("climbs out"), so
    k8sjobs could not pull what it pushed (failed on main)."""
    d = tmp_path / "d"
    (d / "v2").mkdir(parents=True)
    (d / "sub").mkdir()
    (d / "v2" / "data.txt").write_text("two\n")
    (d / "sub" / "latest").symlink_to("../v2/data.txt")
    (d / "sub" / "here").symlink_to("../sub/./latest")  # a link through a link
    (d / "top").symlink_to("sub/..")  # the directory itself
    out = await _round_trip(tmp_path, d)
    assert same_tree(d, out)
    assert (out / "sub" / "latest").read_text() == "two\n"
    assert (out / "sub" / "here").read_text() == "two\n"


@pytest.mark.parametrize(
    ("links", "culprit"),
    [
        ({"up": "../.."}, "up"),
        ({"sub/out": "../../x"}, "sub/out"),
        ({"abs": "/etc/passwd"}, "abs"),
        # No ".." reaches out by itself, but through another link it does.
        ({"sub/self": "..", "sub/far": "self/.."}, "sub/far"),
        ({"a": "b", "b": "a"}, "a"),
    ],
)
async def test_a_push_refuses_links_that_leave_the_directory_naming_the_link(
    tmp_path: Path, links: dict[str, str], culprit: str
) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    for name, target in links.items():
        (d / name).symlink_to(target)
    with pytest.raises(RegistryError, match=rf"Cannot push {d / culprit}: the symlink"):
        await _layout(tmp_path).push("names/x:v1", [d])
    assert not (tmp_path / "layout" / "index.json").exists()  # nothing stored


def _tar(members: list[tuple[str, str]]) -> bytes:
    """A tar whose members are (name, symlink target) in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, target in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def _extract(tmp_path: Path, data: bytes, root: str | None = "d") -> list[str]:
    target = tmp_path / "x"
    target.mkdir(parents=True)
    extractor = Extractor(target, "application/vnd.oci.image.layer.v1.tar", zstandard_module, root)
    extractor.feed(data)
    return extractor.close()


def test_a_later_link_that_makes_an_earlier_one_leave_is_refused(tmp_path: Path) -> None:
    """``d/b -> a/..`` lands in ``d`` while ``d/a`` does not exist; ``d/a -> ..`` then makes
    it land above the layer. Each link is judged again once the archive is whole."""
    archive = _tar([("d/b", "a/.."), ("d/a", "..")])  # d/a alone lands at the top: "."
    with pytest.raises(UnsafeArchive, match='symlink "d/a"'):
        _extract(tmp_path, archive)
    with pytest.raises(UnsafeArchive, match=r'symlink "d/b" -> "a/\.\." climbs out of the target'):
        _extract(tmp_path / "whole", archive, root=None)


def test_links_are_judged_where_they_land_as_tarfile_data_filter_does(tmp_path: Path) -> None:
    archive = _tar([("d/sub/latest", "../v2/data.txt"), ("d/sub/alias", "latest")])
    assert _extract(tmp_path, archive) == ["d"]
    assert os.readlink(tmp_path / "x" / "d" / "sub" / "latest") == "../v2/data.txt"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:  # the stdlib agrees
        tar.extractall(tmp_path / "stdlib", filter="data")


async def test_a_backslash_is_an_ordinary_character(tmp_path: Path) -> None:
    """Item 2: ``d/win\\style.txt`` was pushed, then refused on pull as "absolute or
    malformed" (failed on main)."""
    d = tmp_path / "d"
    (d / "a\\b").mkdir(parents=True)
    (d / "win\\style.txt").write_text("one\n")
    (d / "a\\b" / "c\\").write_text("two\n")
    (d / "link\\").symlink_to("win\\style.txt")
    out = await _round_trip(tmp_path, d)
    assert same_tree(d, out)
    assert (out / "win\\style.txt").read_text() == "one\n"


async def test_a_name_that_is_not_utf8_is_carried_as_its_bytes(tmp_path: Path) -> None:
    """Item 3: ``b"caf\\xe9.txt"`` crashed the push with a codec error naming no file (the
    directory fingerprint encoded names; failed on main). Inside a directory it is carried."""
    d = tmp_path / "d"
    d.mkdir()
    odd = os.fsdecode(b"caf\xe9.txt")
    (d / odd).write_bytes(b"latin-1\n")
    (d / os.fsdecode(b"dir\xff")).mkdir()
    (d / os.fsdecode(b"dir\xff") / "f").write_text("f\n")
    (d / os.fsdecode(b"l\xe9")).symlink_to(odd)
    old(d)  # settled, so that the push fingerprints the tree (which encoded the names)
    out = await _round_trip(tmp_path, d)
    assert sorted(os.listdir(os.fsencode(out))) == [b"caf\xe9.txt", b"dir\xff", b"l\xe9"]
    assert (out / odd).read_bytes() == b"latin-1\n"
    assert os.readlink(out / os.fsdecode(b"l\xe9")) == odd


async def test_a_top_level_name_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    """A layer's title is UTF-8 text in the manifest: such a file or directory cannot be one."""
    odd = tmp_path / os.fsdecode(b"caf\xe9.txt")
    odd.write_text("x\n")
    with pytest.raises(RegistryError, match=r"Cannot push b'.*caf\\xe9\.txt': its name is not"):
        await _layout(tmp_path).push("names/x:v1", [odd])


def test_a_hard_link_to_a_symlink_is_judged_from_where_it_lands(tmp_path: Path) -> None:
    """A hard link to a symlink is one more symlink, whose target is read from the hard
    link's own directory: ``d/sub/l -> ../f`` stays in ``d``, its hard link ``d/l2`` does not."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        link = tarfile.TarInfo("d/sub/l")
        link.type, link.linkname = tarfile.SYMTYPE, "../f"
        tar.addfile(link)
        hard = tarfile.TarInfo("d/l2")
        hard.type, hard.linkname = tarfile.LNKTYPE, "d/sub/l"
        tar.addfile(hard)
    with pytest.raises(UnsafeArchive, match=r'symlink "d/l2" -> "\.\./f" climbs out of the layer'):
        _extract(tmp_path, buf.getvalue())
