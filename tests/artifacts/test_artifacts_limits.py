"""Limits on what a pull writes (total bytes, expansion ratio, declared sizes), how to raise
them (API, CLI, the handoff's environment), and cleanup on every exit path: a cancelled
pull stops at its next piece, and nothing it staged stays behind."""

from __future__ import annotations

import functools
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
import zstandard

from k8sjobs.artifacts import LimitExceeded, OCILayout, PullLimits, Registry, _fd, _media, _untar
from k8sjobs.artifacts._limits import parse_size
from k8sjobs.artifacts.handoff import HandoffConfig, pull_inputs
from k8sjobs.cli.main import main
from k8sjobs.errors import HandoffError
from k8sjobs.render.manifests import Target, render
from k8sjobs.steps.spec import Step

from ..waiting import wait_until
from .artifact_helpers import gzip_bomb, make_tree
from .hostile_registry import HostileRegistry, file_layer, manifest_for
from .test_artifacts_archive_safety import _store_hostile


def _everything(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


async def test_gzip_bomb_is_refused_by_the_default_ratio(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, gzip_bomb(512 * 1024 * 1024), title="d")
    target = tmp_path / "target"
    with pytest.raises(LimitExceeded, match=r"200 times its size.*--max-ratio.*PULL_MAX_RATIO"):
        await layout.pull("evil/x:v1", target)
    assert _everything(target) == []


def _zstd_bomb(unpacked: int) -> bytes:
    info = tarfile.TarInfo("d/zeros")
    info.size = unpacked
    stream = info.tobuf(format=tarfile.GNU_FORMAT) + bytes(unpacked) + bytes(1024)
    return zstandard.ZstdCompressor(level=3).compress(stream)


async def test_zstd_bomb_is_refused_by_the_default_ratio(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    blob = _zstd_bomb(256 * 1024 * 1024)
    digest = layout._store_bytes(blob)
    layer = _media.Descriptor(
        _media.LAYER_TAR_ZSTD, digest, len(blob), {_media.TITLE: "d", _media.UNPACK: "true"}
    )
    manifest = _media.encode_manifest(_media.build_manifest([layer], None, {}))
    layout._store_bytes(_media.EMPTY_CONFIG_DATA)
    await layout.put_manifest(layout._ref("evil/z:v1"), manifest, _media.MANIFEST)
    with pytest.raises(LimitExceeded, match="200 times its size"):
        await layout.pull("evil/z:v1", tmp_path / "target")
    assert _everything(tmp_path / "target") == []


async def test_bomb_within_raised_limits_is_refused_by_total_bytes(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, gzip_bomb(512 * 1024 * 1024), title="d")
    limits = PullLimits(max_bytes=100 * 1024 * 1024, max_ratio=1e6)
    with pytest.raises(LimitExceeded, match=r"limit of 104857600 bytes.*max_bytes"):
        await layout.pull("evil/x:v1", tmp_path / "target", limits=limits)
    assert _everything(tmp_path / "target") == []


async def test_total_bytes_limit_counts_every_layer_and_can_be_raised(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(600_000))
    layout = OCILayout(tmp_path / "layout")
    await layout.push("a/b:v1", [tree, big])
    with pytest.raises(LimitExceeded, match=r"big\.bin"):
        await layout.pull("a/b:v1", tmp_path / "small", limits=PullLimits(max_bytes=500_000))
    with pytest.raises(LimitExceeded):  # the file fits alone; with the tree it does not
        await layout.pull("a/b:v1", tmp_path / "small2", limits=PullLimits(max_bytes=650_000))
    await layout.pull("a/b:v1", tmp_path / "ok", limits=PullLimits(max_bytes=10_000_000))
    assert (tmp_path / "ok" / "big.bin").read_bytes() == big.read_bytes()


async def test_declared_size_over_the_limit_is_refused_before_any_fetch(tmp_path: Path) -> None:
    layer = {**file_layer("huge.bin", b"x"), "size": 200 * 1024**3}
    async with HostileRegistry() as hostile:
        hostile.put("v1", manifest_for([layer]))
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(LimitExceeded, match=r'"huge.bin" declares 214748364800 bytes'):
                await registry.pull("r:v1", tmp_path / "out")
    assert [path for _, path in hostile.requests if "/blobs/" in path] == []


@pytest.mark.parametrize(
    ("text", "size"), [("1000", 1000), ("1K", 1024), ("512M", 512 << 20), ("2GiB", 2 << 30)]
)
def test_sizes_are_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text, "x") == size


def test_cli_max_bytes_flag_limits_the_pull(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "f.bin"
    data.write_bytes(b"x" * 5000)
    store = ["--store", f"oci:{tmp_path / 'layout'}", "--no-progress"]
    assert main(["artifact", "push", "a/b:v1", str(data), *store]) == 0
    pull = ["artifact", "pull", "a/b:v1", str(tmp_path / "out"), *store]
    assert main([*pull, "--max-bytes", "4K"]) == 1
    assert "--max-bytes" in capsys.readouterr().err
    assert main([*pull, "--max-bytes", "1M", "--max-ratio", "10"]) == 0


async def test_handoff_pull_takes_its_limits_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "f.bin"
    data.write_bytes(b"x" * 5000)
    layout = OCILayout(tmp_path / "layout")
    await layout.push("a/b:v1", [data])
    config = HandoffConfig(store=f"oci:{tmp_path / 'layout'}", inputs={"i": "a/b:v1"})
    monkeypatch.setenv("K8SJOBS_PULL_MAX_BYTES", "4K")
    with pytest.raises(LimitExceeded, match="K8SJOBS_PULL_MAX_BYTES"):
        await pull_inputs(config, tmp_path / "in")
    monkeypatch.setenv("K8SJOBS_PULL_MAX_BYTES", "lots")
    with pytest.raises(HandoffError, match='K8SJOBS_PULL_MAX_BYTES: "lots" is not a size'):
        await pull_inputs(config, tmp_path / "in")
    monkeypatch.setenv("K8SJOBS_PULL_MAX_BYTES", "1M")
    assert set(await pull_inputs(config, tmp_path / "in")) == {"i"}


async def test_cancelled_pull_stops_unpacking_at_the_next_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel a layout pull of a 4 GiB bomb (limits raised) once it has written 16 MiB:
    it must stop within a piece or so, not unpack the rest first."""
    written = 0
    real_write_all = _fd.write_all  # what _untar calls

    def counting(fd: int, pieces: Sequence[_fd.Buffer]) -> None:
        nonlocal written
        written += sum(len(p) for p in pieces)
        real_write_all(fd, pieces)

    monkeypatch.setattr(_untar, "write_all", counting)
    layout = OCILayout(tmp_path / "layout")
    await _store_hostile(layout, gzip_bomb(4 * 1024**3), title="d")
    limits = PullLimits(max_bytes=10 * 1024**4, max_ratio=1e9)
    target = tmp_path / "target"
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(layout.pull, "evil/x:v1", target, limits=limits))
        await wait_until(lambda: written >= 16 * 1024 * 1024)
        tg.cancel_scope.cancel()
    assert written < 2 * 1024**3, f"{written} bytes written after the cancellation"
    assert _everything(target) == []


def test_step_env_raises_the_limits_of_the_pods_pull_container() -> None:
    step = Step(
        name="train",
        script="true",
        env={"K8SJOBS_PULL_MAX_BYTES": "500G", "OTHER": "x"},
        inputs={"data": "registry.example:5000/d:1"},
    )
    job = render(step, Target(store="registry.example:5000/k8sjobs")).job
    pull = job["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e.get("value") for e in pull["env"]}
    assert env["K8SJOBS_PULL_MAX_BYTES"] == "500G"
    assert "OTHER" not in env


async def test_copy_refuses_a_declared_size_over_the_default_limit() -> None:
    layer = {**file_layer("huge.bin", b"x"), "size": 200 * 1024**3}
    async with HostileRegistry() as hostile:
        hostile.put("v1", manifest_for([layer]))
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(LimitExceeded, match=r"Copying .*huge\.bin"):
                await registry.copy("r:v1", "r:v2")
    assert [path for _, path in hostile.requests if "/blobs/" in path] == []


@pytest.mark.parametrize("send_length", [True, False], ids=["on-threads", "on-aiohttp"])
async def test_bomb_from_a_registry_stops_at_the_ratio(send_length: bool, tmp_path: Path) -> None:
    blob = gzip_bomb(8 * 1024**3)  # 8 MB received: over the size taken over by threads
    layer = file_layer("d", blob, _media.LAYER_TAR_GZIP)
    layer["annotations"] = {_media.TITLE: "d", _media.UNPACK: "true"}
    target = tmp_path / "target"
    async with HostileRegistry(send_length=send_length) as hostile:
        hostile.put("v1", manifest_for([layer]), {"d": blob})
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(LimitExceeded, match="10 times its size"):
                await registry.pull("r:v1", target, limits=PullLimits(max_ratio=10))
    assert _everything(target) == []
