# ruff: noqa: ASYNC240  (tests read small files inline; the library never does)
"""Interop with oras-py (the ORAS Python SDK) both ways, against a real registry."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from k8sjobs.artifacts import Registry
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import make_tree, same_tree

oras_provider = pytest.importorskip("oras.provider")


def _oras(server: RegistryServer) -> object:
    return oras_provider.Registry(hostname=server.location, insecure=True)


async def test_k8sjobs_push_then_oras_pull(
    registry: Registry, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    data = tmp_path / "model.bin"
    data.write_bytes(os.urandom(200_000))
    tree = make_tree(tmp_path / "results")
    (tree / "link").unlink()  # oras-py's extraction drops symlinks' meaning; compare files only
    async with registry:
        await registry.push("interop/k2o:v1", [data, tree])
    out = tmp_path / "oras-out"
    client = _oras(plain_registry)
    target = f"{plain_registry.location}/interop/k2o:v1"
    await asyncio.to_thread(client.pull, target=target, outdir=str(out))  # type: ignore[attr-defined]
    assert (out / "model.bin").read_bytes() == data.read_bytes()
    assert same_tree(tree, out / "results")


async def test_oras_push_then_k8sjobs_pull(
    registry: Registry,
    plain_registry: RegistryServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # oras-py wants relative paths under the working directory
    Path("model.bin").write_bytes(os.urandom(150_000))
    tree = make_tree(tmp_path / "results")
    (tree / "link").unlink()
    client = _oras(plain_registry)
    target = f"{plain_registry.location}/interop/o2k:v1"
    await asyncio.to_thread(client.push, target=target, files=["model.bin", "results"])  # type: ignore[attr-defined]
    async with registry:
        pulled = await registry.pull("interop/o2k:v1", tmp_path / "out")
    assert (tmp_path / "out" / "model.bin").read_bytes() == Path("model.bin").read_bytes()
    assert same_tree(tree, tmp_path / "out" / "results")
    assert pulled.digest.startswith("sha256:")
