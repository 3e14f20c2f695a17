"""File reads and writes, archive work and the digest cache stay off the event loop: the
loop's own thread touches no file of a transfer (seen through audit hooks, not timed)."""

from __future__ import annotations

import os
from pathlib import Path

from k8sjobs.artifacts import OCILayout, Registry

from ..loop_io import loop_file_calls
from .artifact_helpers import make_tree


async def test_registry_transfers_leave_file_work_to_threads(
    registry: Registry, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 * 1024 * 1024))
    tree = make_tree(tmp_path / "tree")
    async with registry:
        with loop_file_calls(under=tmp_path) as push_calls:
            await registry.push("lag/x:v1", [big, tree])
        with loop_file_calls(under=tmp_path) as pull_calls:
            await registry.pull("lag/x:v1", tmp_path / "out")
    assert (push_calls, pull_calls) == ([], [])
    assert (tmp_path / "out" / "big.bin").read_bytes() == big.read_bytes()


async def test_layout_transfers_leave_file_work_to_threads(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 * 1024 * 1024))
    store = OCILayout(tmp_path / "layout")
    with loop_file_calls(under=tmp_path) as push_calls:
        await store.push("lag/x:v1", [big])
    with loop_file_calls(under=tmp_path) as pull_calls:
        await store.pull("lag/x:v1", tmp_path / "out")
    assert (push_calls, pull_calls) == ([], [])
    assert (tmp_path / "out" / "big.bin").read_bytes() == big.read_bytes()


def test_the_recorder_sees_a_file_opened_on_the_loop_thread(tmp_path: Path) -> None:
    """The check above can fail: a read on this thread is recorded, one on another is not."""
    import threading

    (tmp_path / "f").write_text("x")
    with loop_file_calls(under=tmp_path) as calls:
        (tmp_path / "f").read_text()
        elsewhere = threading.Thread(target=(tmp_path / "f").read_text)
        elsewhere.start()
        elsewhere.join()
    assert calls == [("open", str(tmp_path / "f"))]
