"""A layer writes only under its own title, and layers whose titles overlap are refused
whole, on push and on pull (property tests over member names and title sets)."""

from __future__ import annotations

import io
import itertools
import posixpath
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.artifacts import OCILayout, RegistryError, UnsafeArchive, _media
from k8sjobs.artifacts._reference import parse_reference
from k8sjobs.artifacts._transfer import overlapping_titles
from k8sjobs.artifacts._untar import Extractor, inside

from .test_artifacts_archive_safety import _archive, _file, _special, _store_hostile


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in root.rglob("*")
    }


@pytest.mark.parametrize(
    "members",
    [
        [_file("d/ok.txt"), _file("other/x.txt")],
        [_file("other/x.txt")],
        [_file("d/ok.txt"), _special("d/l", tarfile.SYMTYPE, "../other")],
        [_file("d2/x.txt")],
        [_file("x.txt")],
    ],
    ids=["sibling-dir", "only-sibling", "symlink-to-sibling", "prefix-name", "top-file"],
)
async def test_layer_cannot_touch_what_is_beside_its_title(
    members: list[object], tmp_path: Path
) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, _archive(members), title="d")  # type: ignore[arg-type]
    target = tmp_path / "target"
    (target / "other").mkdir(parents=True)
    (target / "other" / "keep.txt").write_text("mine")
    before = _tree(target)
    with pytest.raises(UnsafeArchive, match=r'outside the layer "d"|climbs out'):
        await layout.pull("evil/x:v1", target)
    assert _tree(target) == before


components = st.sampled_from(["d", "d2", "other", "x", ".", "..", "", "d.txt"])
member_names = st.lists(components, min_size=1, max_size=4).map("/".join)


@given(st.lists(member_names, min_size=1, max_size=5))
@settings(max_examples=200, deadline=None)
def test_any_member_outside_the_title_is_refused(names: list[str]) -> None:
    def allowed(name: str) -> bool:
        try:
            norm = inside(name.rstrip("/") or name)
        except UnsafeArchive:
            return False
        return norm in ("d", ".") or norm.startswith("d/")

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp)
        extractor = Extractor(staging, _media.LAYER_TAR, lambda: None, root="d")
        try:
            extractor.feed(buffer.getvalue())
            extractor.close()
        except UnsafeArchive:
            assert not all(allowed(n) for n in names)
            return
        finally:
            extractor.abort()
        assert all(allowed(n) for n in names)
        assert {p.name for p in staging.iterdir()} <= {"d"}


title_parts = st.lists(st.sampled_from(["d", "x.txt", "e", "d-1", "."]), min_size=1, max_size=3)


@given(st.lists(title_parts.map("/".join), min_size=1, max_size=5))
def test_overlapping_titles_are_found_exactly(titles: list[str]) -> None:
    def parts(t: str) -> list[str]:
        return posixpath.normpath(t).split("/")

    expected = any(
        parts(b)[: len(parts(a))] == parts(a) for a, b in itertools.permutations(titles, 2)
    )
    found = overlapping_titles(titles)
    assert (found is not None) == expected
    if found is not None:
        a, b = sorted((parts(found[0]), parts(found[1])), key=len)
        assert b[: len(a)] == a


async def test_pull_refuses_layers_d_and_d_slash_x_before_writing(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    tree = tmp_path / "d"
    tree.mkdir()
    (tree / "y.txt").write_text("y")
    pushed = await layout.push("good/x:v1", [tree])
    file_blob = b"file"
    file_digest = layout._store_bytes(file_blob)
    file_layer = _media.Descriptor(
        _media.LAYER_TAR, file_digest, len(file_blob), {_media.TITLE: "d/x.txt"}
    )
    manifest = _media.build_manifest([*pushed.layers, file_layer], None, {})
    await layout.put_manifest(
        parse_reference("evil/x:v1"), _media.encode_manifest(manifest), _media.MANIFEST
    )
    with pytest.raises(UnsafeArchive, match=r'"d" and "d/x\.txt" would write the same path'):
        await layout.pull("evil/x:v1", tmp_path / "target")
    assert list((tmp_path / "target").iterdir()) == []


async def test_push_refuses_two_paths_with_one_name(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub / "same").mkdir(parents=True)
    layout = OCILayout(tmp_path / "layout")
    with pytest.raises(RegistryError, match='two paths named "same"'):
        await layout.push("x/y:v1", [tmp_path / "a" / "same", tmp_path / "b" / "same"])


async def test_title_with_a_component_no_filesystem_stores_is_refused_up_front(
    tmp_path: Path,
) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, _archive([_file("d/ok.txt")]), title="e" * 300)
    with pytest.raises(UnsafeArchive, match="longer than 255 bytes"):
        await layout.pull("evil/x:v1", tmp_path / "target")
    assert list((tmp_path / "target").iterdir()) == []
