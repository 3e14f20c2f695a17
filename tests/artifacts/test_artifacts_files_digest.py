"""A directory output keyed by its files, not its archive (issue 34, item 5).

A directory's archive keeps each file's mtime (a pull restores it), so a producer that makes
the same files again (a comment-only edit, a re-run) pushes an archive of another digest.
The step cache keys readers by ``content_digest``, which takes a directory layer by its
files digest: names, kinds, modes, link targets and bytes, never times. Each change below
that a reader could see moves it; a change of times alone does not.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from k8sjobs.artifacts import OCILayout
from k8sjobs.artifacts.stepcache import content_digest


def _tree(root: Path) -> Path:
    folder = root / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("alpha\n")
    (folder / "sub" / "b.txt").write_text("beta\n")
    (folder / "link").symlink_to("a.txt")
    return folder


def _times(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)


def _bytes(folder: Path) -> None:
    (folder / "a.txt").write_text("alpha!\n")


def _mode(folder: Path) -> None:
    (folder / "a.txt").chmod(0o755)


def _name(folder: Path) -> None:
    (folder / "sub" / "b.txt").rename(folder / "sub" / "c.txt")


def _link(folder: Path) -> None:
    (folder / "link").unlink()
    (folder / "link").symlink_to("sub/b.txt")


def _empty_dir(folder: Path) -> None:
    (folder / "empty").mkdir()


@pytest.mark.parametrize(
    ("change", "same"),
    [
        (_times, True),
        (_bytes, False),
        (_mode, False),
        (_name, False),
        (_link, False),
        (_empty_dir, False),
    ],
    ids=["times", "bytes", "mode", "name", "link-target", "new-empty-dir"],
)
@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
async def test_a_directory_s_key_digest_covers_its_files_and_never_their_times(
    tmp_path: Path, change: Callable[[Path], None], same: bool, compression: str
) -> None:
    folder = _tree(tmp_path / "src")
    async with OCILayout(tmp_path / "store") as store:

        async def pushed(tag: str) -> tuple[str, str]:
            result = await store.push(f"s/p:{tag}", [folder], compression=compression)  # type: ignore[arg-type]
            manifest, _, _ = await store.get_manifest(store._ref(result.pinned))
            return result.layers[0].digest, content_digest(manifest)

        archive_before, before = await pushed("v1")
        change(folder)
        if change is not _times:
            _times(folder)  # and new times too, as a producer's re-run gives
        archive_after, after = await pushed("v2")
    assert (before == after) is same, change.__name__
    if change is _times:
        assert archive_before != archive_after  # the archive itself keeps the mtimes
