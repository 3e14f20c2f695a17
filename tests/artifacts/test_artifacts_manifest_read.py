"""Manifests are read to their end, whatever pieces the body arrives in, and capped at the
distribution spec's 4 MiB with a clear message, from a registry and from a layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k8sjobs.artifacts import LimitExceeded, OCILayout, Registry

from .hostile_registry import HostileRegistry, digest_of, file_layer, manifest_for


async def test_large_manifest_from_real_registry_pulls_every_time(
    registry: Registry, tmp_path: Path
) -> None:
    # 30 files with long names make a manifest of about 10 KiB: more than one read returns.
    files = []
    for i in range(30):
        f = tmp_path / "src" / f"{i:02d}-{'long-file-name-' * 12}.txt"
        f.parent.mkdir(exist_ok=True)
        f.write_text(str(i))
        files.append(f)
    async with registry:
        pushed = await registry.push("read/many:v1", files)
        for attempt in range(8):
            pulled = await registry.pull("read/many:v1", tmp_path / f"out{attempt}")
            assert pulled.digest == pushed.digest
            assert len(pulled.paths) == 30


@pytest.mark.parametrize("send_length", [True, False])
async def test_manifest_in_tiny_pieces_is_read_whole(send_length: bool, tmp_path: Path) -> None:
    blobs = {f"f{i}-{'x' * 200}": str(i).encode() for i in range(60)}
    manifest = manifest_for([file_layer(name, data) for name, data in blobs.items()])
    async with HostileRegistry(chunk=7, send_length=send_length) as hostile:
        digest = hostile.put("v1", manifest, blobs)
        async with Registry(hostile.location, plain_http=True) as registry:
            pulled = await registry.pull("r:v1", tmp_path / "out")
    assert pulled.digest == digest
    assert (tmp_path / "out" / f"f7-{'x' * 200}").read_bytes() == b"7"


def _huge_manifest(size: int) -> bytes:
    return json.dumps({**json.loads(manifest_for([])), "annotations": {"pad": "p" * size}}).encode()


@pytest.mark.parametrize("send_length", [True, False])
async def test_registry_manifest_over_4_mib_is_refused_clearly(
    send_length: bool, tmp_path: Path
) -> None:
    async with HostileRegistry(send_length=send_length, chunk=256 * 1024) as hostile:
        hostile.put("v1", _huge_manifest(5 * 1024 * 1024))
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(LimitExceeded, match=r"larger than 4 MiB.*distribution spec"):
                await registry.pull("r:v1", tmp_path / "out")


async def test_layout_manifest_over_4_mib_is_refused_clearly(tmp_path: Path) -> None:
    seed = tmp_path / "seed.txt"
    seed.write_text("seed")
    layout = OCILayout(tmp_path / "layout")
    await layout.push("r:seed", [seed])
    huge = _huge_manifest(5 * 1024 * 1024)
    root = tmp_path / "layout"
    (root / "blobs" / "sha256" / digest_of(huge).split(":")[1]).write_bytes(huge)
    with pytest.raises(LimitExceeded, match="larger than 4 MiB"):
        await layout.pull(f"r@{digest_of(huge)}", tmp_path / "out")
