"""OCILayout: the same behaviour as Registry, in a directory, safe for concurrent writers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k8sjobs.artifacts import ArtifactNotFound, DigestCache, DigestMismatch, OCILayout, open_store

from .artifact_helpers import make_tree, old, same_tree


async def test_layout_roundtrip_tags_copy_delete(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    store = open_store(f"oci:{tmp_path / 'layout'}")
    async with store:
        pushed = await store.push("study/a:v1", [tree], annotations={"k": "v"})
        await store.copy("study/a:v1", "study/a:v2")
        assert await store.tags("study/a") == ["v1", "v2"]
        assert await store.resolve("study/a:v2") == pushed.digest
        await store.pull(pushed.pinned, tmp_path / "out")
        await store.delete("study/a:v1")
        assert await store.tags("study/a") == []
        with pytest.raises(ArtifactNotFound):
            await store.pull("study/a:v1", tmp_path / "out2")
    assert same_tree(tree, tmp_path / "out" / "tree")
    index = json.loads((tmp_path / "layout" / "index.json").read_text())
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"


async def test_corrupt_blob_is_detected_and_leaves_no_file(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(10_000))
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    pushed = await layout.push("c/x:v1", [data])
    blob = layout._blob_path(pushed.layers[0].digest)
    content = blob.read_bytes()
    blob.write_bytes(bytes([content[0] ^ 0xFF]) + content[1:])
    with pytest.raises(DigestMismatch):
        await layout.pull("c/x:v1", tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


async def test_repush_to_layout_copies_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(100_000))
    old(data)
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    first = await layout.push("c/x:v1", [data])
    second = await layout.push("c/x:v2", [data])
    assert first.bytes_sent == 100_000 and second.bytes_sent == 0


WRITER = """
import asyncio, sys
from pathlib import Path
from k8sjobs.artifacts import OCILayout
async def main(layout, worker, workdir):
    store = OCILayout(layout)
    for i in range(8):
        f = Path(workdir) / f"f-{worker}-{i}.txt"
        f.write_text(f"{worker}-{i}")
        await store.push(f"w{worker}/x:t{i}", [f])
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


def test_concurrent_writer_processes_keep_index_consistent(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(layout), str(w), str(tmp_path)], env=env
        )
        for w in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    index = json.loads((layout / "index.json").read_text())
    names = {m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]}
    assert names == {f"w{w}/x:t{i}" for w in range(4) for i in range(8)}


FULL_DISK_PUSH = """
import asyncio, resource, signal, sys
from pathlib import Path
from k8sjobs.artifacts import DigestCache, OCILayout
from k8sjobs.errors import RegistryError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # a write past it fails: EFBIG
store = OCILayout(sys.argv[1], cache=DigestCache(Path(sys.argv[2]) / "c.sqlite"))
try:
    asyncio.run(store.push("full/x:new", [Path(sys.argv[2]) / "small.txt"]))
except RegistryError as exc:  # the disk's error, named: "... File too large (EFBIG); ..."
    print(exc)
    sys.exit(3)
"""


def test_a_failed_index_rewrite_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Issue 25 item 7: when the disk filled while index.json was rewritten, its temporary
    file (290 KB) stayed in the layout and the disk stayed full (failed on main)."""
    layout = tmp_path / "layout"
    asyncio.run(OCILayout(layout, cache=DigestCache(tmp_path / "c.sqlite")).push("a/b:c", []))
    index = json.loads((layout / "index.json").read_text())
    entry = index["manifests"][0]
    index["manifests"] = [
        {**entry, "annotations": {"org.opencontainers.image.ref.name": f"many/x:t{i}"}}
        for i in range(2000)
    ]
    (layout / "index.json").write_text(json.dumps(index, indent=1))
    before = (layout / "index.json").read_bytes()
    (tmp_path / "small.txt").write_text("small\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_PUSH, str(layout), str(tmp_path), str(len(before) // 2)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "(EFBIG)" in done.stdout and str(layout) in done.stdout, done.stdout
    assert (layout / "index.json").read_bytes() == before
    assert sorted(p.name for p in layout.iterdir()) == [
        "blobs", "index.json", "index.json.lock", "oci-layout",
    ]  # fmt: skip
    assert not [p for p in (layout / "blobs" / "sha256").iterdir() if p.name.startswith(".")]
