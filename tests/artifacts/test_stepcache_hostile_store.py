"""The step cache's store turned hostile: what ``cache ls``/``clear`` and a run meet in a
registry or layout that another tool, a crash or a bad server left behind (issue 34).

Each test is named for the class of input it covers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.artifacts import OCILayout, Registry, _layout, _media
from k8sjobs.artifacts.stepcache import CACHE_REPOSITORY, RESULT_TYPE, StepCache, content_digest
from k8sjobs.errors import RegistryError

from .hostile_registry import HostileRegistry
from .test_artifacts_pull_targets import _tmpfs
from .test_stepcache_records import cli


def _records(root: Path, count: int) -> list[str]:
    """Put ``count`` records (unreadable ones: they list and clear as records do) in a
    layout at ``root``, in one write of index.json; return their keys."""
    manifest = _media.encode_manifest(
        _media.build_manifest([], RESULT_TYPE, {"k8sjobs.io/step-result": "{}"})
    )
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(count)]

    async def put() -> None:
        async with OCILayout(root) as store:
            digest = _media.sha256_digest(manifest)
            await store.put_manifest(store._ref(f"{CACHE_REPOSITORY}:{keys[0]}"), manifest, "")
            index = json.loads((root / "index.json").read_text())
            index["manifests"] = [
                {
                    **index["manifests"][0],
                    "annotations": {_media.REF_NAME: f"{CACHE_REPOSITORY}:{k}"},
                }
                for k in keys
            ]
            assert index["manifests"][0]["digest"] == digest
            (root / "index.json").write_text(json.dumps(index))

    asyncio.run(put())
    return [f"sha256:{k}" for k in keys]


class _Counted:
    """json as _layout uses it, counting the documents parsed of index.json's size or more."""

    def __init__(self, smallest: int) -> None:
        self.smallest, self.parsed = smallest, 0

    def loads(self, data: Any) -> Any:
        self.parsed += len(data) >= self.smallest
        return json.loads(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def test_many_records_in_a_layout_are_listed_and_cleared_with_one_read_and_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record's lookup parsed all of index.json, and each clear rewrote it: n records
    cost n times n (4,000: ls 85 s, clear 223 s; 100,000 would take days)."""
    _records(tmp_path, 300)
    counted = _Counted((tmp_path / "index.json").stat().st_size // 2)
    monkeypatch.setattr(_layout, "json", counted)
    writes = []
    real_write = OCILayout._atomic_write

    def write(self: OCILayout, path: Path, data: bytes) -> None:
        writes.append(path.name)
        real_write(self, path, data)

    monkeypatch.setattr(OCILayout, "_atomic_write", write)
    code, out, _ = cli("cache", "ls", "--store", f"oci:{tmp_path}")
    assert code == 0 and out.count("unreadable") == 300
    assert counted.parsed <= 1, counted.parsed
    code, out, _ = cli("cache", "clear", "--store", f"oci:{tmp_path}")
    assert (code, out) == (0, "forgot 300 recorded results\n")
    assert writes.count("index.json") == 1, writes.count("index.json")
    code, out, _ = cli("cache", "ls", "--store", f"oci:{tmp_path}")
    assert (code, out) == (0, "")


async def test_a_record_written_while_cache_clear_runs_is_kept_not_marked(
    tmp_path: Path,
) -> None:
    """clear marks only the record it read: a run's record written meanwhile is newer."""
    keys = await asyncio.to_thread(_records, tmp_path, 2)
    async with OCILayout(tmp_path) as store, OCILayout(tmp_path) as other:
        read = {
            f"{CACHE_REPOSITORY}:{k[7:]}": await store.resolve(f"{CACHE_REPOSITORY}:{k[7:]}")
            for k in keys
        }
        fresh = _media.encode_manifest(_media.build_manifest([], RESULT_TYPE, {"new": "1"}))
        first = f"{CACHE_REPOSITORY}:{keys[0][7:]}"
        await other.put_manifest(other._ref(first), fresh, _media.MANIFEST)  # a run's record
        mark = _media.encode_manifest(_media.build_manifest([], RESULT_TYPE, {"mark": "1"}))
        replaced = await store.replace_manifests(read, mark, _media.MANIFEST)
        assert replaced == [f"{CACHE_REPOSITORY}:{keys[1][7:]}"]
        assert await store.resolve(first) == _media.sha256_digest(fresh)
        assert (await StepCache(store).lookup(keys[1])) is None


async def test_an_index_replaced_by_another_writer_is_read_anew(tmp_path: Path) -> None:
    """The layout keeps index.json as parsed: a tag another process wrote must be seen."""
    manifest = _media.encode_manifest(_media.build_manifest([], RESULT_TYPE, {}))
    async with OCILayout(tmp_path) as store, OCILayout(tmp_path) as other:
        await store.put_manifest(store._ref("r:a"), manifest, _media.MANIFEST)
        assert await store.tags("r") == ["a"]
        for tag in ("b", "c"):
            await other.put_manifest(other._ref(f"r:{tag}"), manifest, _media.MANIFEST)
            assert await store.resolve(f"r:{tag}") == _media.sha256_digest(manifest)
        await other.delete("r:a")
        assert await store.tags("r") == []


@pytest.mark.parametrize(
    "next_page",
    ["/v2/k8sjobs/cache/tags/list?n=1000", "/v2/k8sjobs/cache/tags/list?n=1000&last=t"],
    ids=["back-to-the-first-page", "a-page-to-itself"],
)
async def test_a_tag_listing_whose_links_loop_ends_with_an_error(next_page: str) -> None:
    """A ``Link: rel="next"`` back to a page already read listed tags without end (28,542
    requests in 10 s, memory growing): ``cache ls`` and ``clear`` never returned."""
    async with HostileRegistry() as hostile:
        hostile.tags_next = next_page
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(RegistryError, match="pagination loops"):
                await asyncio.wait_for(registry.tags(CACHE_REPOSITORY), 120)
        assert len(hostile.requests) <= 3


@pytest.mark.parametrize(("options", "expected"), [("size=64k", "ENOSPC"), ("ro", "EROFS")])
def test_a_store_on_a_full_or_read_only_disk_is_one_line_naming_it_exit_1(
    tmp_path: Path, options: str, expected: str
) -> None:
    """It was "error: [Errno 30] Read-only file system: '<a temporary file>'" (or ENOSPC with
    no file at all), exit 2 as if the input were bad; nothing of the store may change."""
    with _tmpfs(tmp_path / "disk", "size=64k") as disk:
        _records(disk / "store", 20)
        before = (disk / "store" / "index.json").read_bytes()
        names = sorted(p.name for p in (disk / "store").rglob("*"))
        if expected == "EROFS":
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        else:
            with contextlib.suppress(OSError), (disk / "fill").open("wb") as fill:
                fill.write(bytes(1 << 20))
        code, out, err = cli("cache", "clear", "--store", f"oci:{disk / 'store'}")
        assert (code, out) == (1, ""), (code, out, err)
        assert err.count("\n") == 1 and expected in err and str(disk / "store") in err, err
        assert (disk / "store" / "index.json").read_bytes() == before
        assert sorted(p.name for p in (disk / "store").rglob("*")) == names


def _relabelled(manifest: bytes, change: dict[str, str | None]) -> bytes:
    """The manifest with its first layer's annotations changed (None: removed)."""
    data = json.loads(manifest)
    annotations = data["layers"][0]["annotations"]
    for name, value in change.items():
        if value is None:
            annotations.pop(name, None)
        else:
            annotations[name] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    "change",
    [
        {_media.UNPACK: "false"},
        {_media.UNPACK: "false", _media.FILES_DIGEST: None},
        {_media.UNPACK: "false", _media.FILES_DIGEST: "sha256:" + "0" * 64},
    ],
    ids=["kept-whole", "kept-whole-no-files-digest", "kept-whole-other-files-digest"],
)
async def test_an_archive_a_reader_gets_whole_is_another_input_than_its_files(
    tmp_path: Path, change: dict[str, str | None]
) -> None:
    """The same archive, unpacked (a directory) or not (one file holding the archive, its
    times and all), had one content digest, so one key: a result made from the files stood
    for a step that reads the archive."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    async with OCILayout(tmp_path / "store") as store:
        pushed = await store.push("d/in:v1", [folder])
        manifest, _, _ = await store.get_manifest(store._ref(pushed.pinned))
    whole = _relabelled(manifest, change)
    assert not _media.decode_manifest(whole, "whole").layers[0].unpack
    assert content_digest(whole) != content_digest(manifest)
    # A directory of the same files re-made (another archive, other times) keeps its key.
    again = _relabelled(manifest, {})
    assert content_digest(again) == content_digest(manifest)


async def test_an_index_replaced_by_one_of_the_same_size_and_time_is_read_anew(
    tmp_path: Path,
) -> None:
    """The parsed index is known by its file's identity: another file of the same size and
    mtime (a retag within one clock tick) must not pass for it, whatever inode it gets."""
    manifest = _media.encode_manifest(_media.build_manifest([], RESULT_TYPE, {}))
    async with OCILayout(tmp_path) as store:
        await store.put_manifest(store._ref("r:aa"), manifest, _media.MANIFEST)
        assert await store.tags("r") == ["aa"]
        index = tmp_path / "index.json"
        old = index.stat()
        (tmp_path / "new.json").write_bytes(index.read_bytes().replace(b"r:aa", b"r:bb"))
        os.utime(tmp_path / "new.json", ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(tmp_path / "new.json", index)
        assert index.stat().st_size == old.st_size
        assert await store.tags("r") == ["bb"]
