"""An interrupted pull leaves nothing behind: SIGINT cleans its staging directory and
partial files on the way out, and what a SIGKILL left is removed by the next pull into the
same place (never what a living pull holds). The pull runs as a real CLI process against a
registry that stalls mid-body."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from k8sjobs.artifacts import Registry, _media

from ..waiting import wait_until
from .hostile_registry import HostileRegistry, file_layer, manifest_for

_CLI = "import sys; from k8sjobs.cli import main; sys.exit(main(sys.argv[1:]))"
BIG = 6 * 1024 * 1024  # over the 4 MiB from which a body is received on threads


def _dir_layer(size: int) -> tuple[dict[str, object], bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("d/data.bin")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    blob = buffer.getvalue()
    layer = file_layer("d", blob, _media.LAYER_TAR_GZIP)
    layer["annotations"] = {_media.TITLE: "d", _media.UNPACK: "true"}
    return layer, blob


def _artifact(kind: str) -> tuple[bytes, dict[str, bytes]]:
    if kind == "file":
        blob = os.urandom(BIG)
        return manifest_for([file_layer("f.bin", blob)]), {"f": blob}
    layer, blob = _dir_layer(BIG)
    return manifest_for([layer]), {"d": blob}


USERS = {".keep", ".k8sjobs-part-mine.txt"}  # the user's own dotted names, never removed


def _staged(target: Path) -> list[str]:
    """What a pull keeps beside its results while it works: any hidden name not the user's."""
    return [p.name for p in target.iterdir() if p.name.startswith(".") and p.name not in USERS]


def _start_pull(location: str, target: Path) -> subprocess.Popen[bytes]:
    argv = ["artifact", "pull", "r:v1", str(target), "--store", location, "--plain-http"]
    return subprocess.Popen(
        [sys.executable, "-c", _CLI, *argv, "--no-progress"], stderr=subprocess.PIPE
    )


@pytest.mark.parametrize("kind", ["file", "directory"])
@pytest.mark.parametrize("send_length", [True, False], ids=["on-threads", "on-aiohttp"])
async def test_sigint_mid_pull_leaves_nothing_behind(
    kind: str, send_length: bool, tmp_path: Path
) -> None:
    manifest, blobs = _artifact(kind)
    target = tmp_path / "target"
    target.mkdir()
    hostile = HostileRegistry(stall_after=1 << 20, chunk=64 * 1024, send_length=send_length)
    async with hostile:
        hostile.put("v1", manifest, blobs)
        proc = _start_pull(hostile.location, target)
        try:
            await wait_until(lambda: hostile.stalled.is_set() and _staged(target))
            proc.send_signal(signal.SIGINT)
            await wait_until(lambda: proc.poll() is not None)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("kind", ["file", "directory"])
async def test_next_pull_removes_what_a_sigkill_left(kind: str, tmp_path: Path) -> None:
    manifest, blobs = _artifact(kind)
    target = tmp_path / "target"
    target.mkdir()
    (target / ".k8sjobs-part-mine.txt").mkdir()  # a user's own dotted name is kept: a dir
    (target / ".keep").write_text("mine")
    async with HostileRegistry(stall_after=64 * 1024, chunk=64 * 1024) as hostile:
        hostile.put("v1", manifest, blobs)
        proc = _start_pull(hostile.location, target)
        try:
            await wait_until(lambda: hostile.stalled.is_set() and _staged(target))
            proc.kill()
        finally:
            proc.wait()
        assert len(_staged(target)) == 1  # the killed pull's leftover
        hostile.stall_after = None
        async with Registry(hostile.location, plain_http=True) as registry:
            await registry.pull("r:v1", target)
    names = sorted(p.name for p in target.iterdir())
    assert names == sorted([".keep", ".k8sjobs-part-mine.txt", "f.bin" if kind == "file" else "d"])


async def test_a_living_pulls_staging_is_left_alone(tmp_path: Path) -> None:
    manifest, blobs = _artifact("directory")
    target = tmp_path / "target"
    target.mkdir()
    async with HostileRegistry(stall_after=64 * 1024, chunk=64 * 1024) as hostile:
        hostile.put("v1", manifest, blobs)
        proc = _start_pull(hostile.location, target)
        try:
            await wait_until(lambda: hostile.stalled.is_set() and _staged(target))
            living = _staged(target)
            other = HostileRegistry()
            async with other:
                small = manifest_for([file_layer("g.txt", b"g")])
                other.put("v1", small, {"g": b"g"})
                async with Registry(other.location, plain_http=True) as registry:
                    await registry.pull("r:v1", target)
            assert set(living) <= set(_staged(target))
        finally:
            proc.kill()
            proc.wait()
