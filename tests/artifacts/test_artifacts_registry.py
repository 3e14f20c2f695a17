"""Registry against a real docker-registry: push, pull, tags, delete, copy, cache, chunks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from k8sjobs.artifacts import ArtifactNotFound, DigestCache, ProgressEvent, Registry
from k8sjobs.artifacts._media import EMPTY_CONFIG, TITLE, UNPACK
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import FAST_RETRY, make_tree, old, same_tree


async def test_push_then_pull_file_and_directory_roundtrip(
    registry: Registry, tmp_path: Path
) -> None:
    data = tmp_path / "model.bin"
    data.write_bytes(os.urandom(300_000))
    tree = make_tree(tmp_path / "results")
    async with registry:
        pushed = await registry.push("study/train:v1", [data, tree], annotations={"step": "train"})
        pulled = await registry.pull(pushed.pinned, tmp_path / "out")
    assert pulled.digest == pushed.digest
    assert (tmp_path / "out" / "model.bin").read_bytes() == data.read_bytes()
    assert same_tree(tree, tmp_path / "out" / "results")


async def test_manifest_follows_oras_conventions(registry: Registry, tmp_path: Path) -> None:
    f = tmp_path / "f.txt"
    f.write_text("x")
    d = make_tree(tmp_path / "d")
    async with registry:
        await registry.push(
            "conv/a:v1", [f, d], artifact_type="application/vnd.test", annotations={"k": "v"}
        )
        data, _, _ = await registry.get_manifest(registry._ref("conv/a:v1"))
    manifest = json.loads(data)
    assert manifest["artifactType"] == "application/vnd.test"
    assert manifest["config"]["mediaType"] == EMPTY_CONFIG and manifest["config"]["size"] == 2
    assert manifest["annotations"] == {"k": "v"}
    file_layer, dir_layer = manifest["layers"]
    assert file_layer["annotations"] == {TITLE: "f.txt"}
    assert dir_layer["annotations"][UNPACK] == "true"
    assert dir_layer["mediaType"].endswith("tar+gzip")


async def test_tags_resolve_exists_copy_delete(registry: Registry, tmp_path: Path) -> None:
    f = tmp_path / "f.txt"
    f.write_text("y")
    async with registry:
        pushed = await registry.push("ops/x:one", [f])
        await registry.copy("ops/x:one", "ops/x:two")
        await registry.copy("ops/x:one", "elsewhere/y:three")
        assert await registry.tags("ops/x") == ["one", "two"]
        assert await registry.resolve("elsewhere/y:three") == pushed.digest
        assert await registry.exists(pushed.pinned)
        assert not await registry.exists("ops/x:missing")
        assert await registry.tags("never/pushed") == []
        await registry.delete("elsewhere/y:three")
        assert not await registry.exists("elsewhere/y:three")
        with pytest.raises(ArtifactNotFound, match="ops/x:missing"):
            await registry.pull("ops/x:missing", tmp_path / "out")


async def test_repush_of_unchanged_data_sends_no_blob_bytes(
    registry: Registry, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024))
    old(big)
    tree = old(make_tree(tmp_path / "tree"))
    async with registry:
        first = await registry.push("cache/x:v1", [big, tree])
        assert first.bytes_sent > 3 * 1024 * 1024
        second = await registry.push("cache/x:v2", [big, tree])
    assert second.bytes_sent == 0
    assert second.layers == first.layers


async def test_rewrite_with_the_mtime_put_back_is_pushed_with_its_new_bytes(
    registry: Registry, tmp_path: Path
) -> None:
    """Issue 25 item 8: the digest cache keyed on size, mtime, inode and device, so other
    bytes of the same size under the restored mtime went up as the OLD content (failed on
    main). The ctime, which no user can set back, is in the key now, for files and trees."""
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1024 * 1024))
    old(big)
    tree = old(make_tree(tmp_path / "tree"))
    async with registry:
        first = await registry.push("cache/y:v1", [big, tree])
        _rewrite_in_place(big)
        _rewrite_in_place(tree / "sub" / "b.bin")
        second = await registry.push("cache/y:v2", [big, tree])
        await registry.pull("cache/y:v2", tmp_path / "out")
    assert all(a.digest != b.digest for a, b in zip(first.layers, second.layers, strict=True))
    assert (tmp_path / "out" / "big.bin").read_bytes() == big.read_bytes()
    assert same_tree(tree, tmp_path / "out" / "tree")


def _rewrite_in_place(path: Path) -> None:
    """Give a file other bytes of the same size, keeping its inode and mtime."""
    st = path.stat()
    with path.open("r+b") as f:
        f.write(os.urandom(st.st_size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


async def test_large_blob_goes_up_in_chunks_hashed_while_streaming(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(5 * 1024 * 1024 + 17))
    events: list[ProgressEvent] = []
    store = Registry(
        plain_registry.location,
        plain_http=True,
        chunk_size=1024 * 1024,
        monolithic_limit=1024,
        cache=DigestCache(tmp_path / "c.sqlite"),
    )
    async with store:
        pushed = await store.push("chunks/x:v1", [big], progress=events.append)
        await store.pull("chunks/x:v1", tmp_path / "out")
    assert (tmp_path / "out" / "big.bin").read_bytes() == big.read_bytes()
    assert pushed.layers[0].size == big.stat().st_size
    assert events[-1].completed == events[-1].total == big.stat().st_size


async def test_pull_replaces_existing_files_and_directories(
    registry: Registry, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    out = tmp_path / "out"
    (out / "tree").mkdir(parents=True)
    (out / "tree" / "stale.txt").write_text("stale")
    async with registry:
        await registry.push("replace/x:v1", [tree], compression="none")
        await registry.pull("replace/x:v1", out)
    assert same_tree(tree, out / "tree")
    assert [p.name for p in out.iterdir()] == ["tree"]


async def test_reference_with_host_addresses_that_registry(
    registry: Registry, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    f = tmp_path / "f.txt"
    f.write_text("z")
    other = Registry("example.invalid", plain_http=True, retry=FAST_RETRY)
    async with registry, other:
        await registry.push("hosted/x:v1", [f])
        digest = await other.resolve(f"{plain_registry.location}/hosted/x:v1")
    assert digest.startswith("sha256:")
