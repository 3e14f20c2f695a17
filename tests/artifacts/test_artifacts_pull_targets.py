"""Pull targets shared and strained (issue 25 items 4-6): several pulls of one artifact into
one target at once, in threads and in processes; names near the 255-byte limit pulled
again; a full, read-only or impossible target under ``python -m k8sjobs.handoff pull``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8sjobs.artifacts import DigestCache, OCILayout, Registry, RegistryError
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import FAST_RETRY, make_tree, old, same_tree
from .hostile_registry import HostileRegistry, file_layer, manifest_for

ROOT = Path(__file__).resolve().parents[2]


def _artifact(tmp_path: Path) -> tuple[OCILayout, Path, Path]:
    """A layout holding ``t/x:v1``: a tree ``tree`` and a file ``f.bin``."""
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    tree = old(make_tree(tmp_path / "src" / "tree"))
    for i in range(40):  # enough members that an extraction takes a while
        (tree / "sub" / f"n{i}.txt").write_text(f"{i}\n" * 100)
    single = tmp_path / "src" / "f.bin"
    single.write_bytes(os.urandom(200_000))
    asyncio.run(layout.push("t/x:v1", [tree, single]))
    return layout, tree, single


def _pull_in_threads(
    layout: OCILayout, target: Path, threads: int, pulls: int
) -> list[BaseException]:
    """Pull ``t/x:v1`` into ``target`` ``pulls`` times from each of ``threads`` threads,
    all released at once; return every error raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def pull() -> None:
        start.wait()
        try:
            for _ in range(pulls):
                asyncio.run(layout.pull("t/x:v1", target))
        except BaseException as exc:
            errors.append(exc)

    running = [threading.Thread(target=pull) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return errors


def _leftovers(target: Path) -> list[str]:
    return sorted(n for n in os.listdir(target) if n.startswith(".k8sjobs"))


def test_concurrent_pulls_into_one_target_from_threads_all_succeed(tmp_path: Path) -> None:
    """Item 4, threads: between moving the old copy aside and the new one in, another pull
    moved, removed or re-created it ("Directory not empty", "No such file"; failed on main)."""
    layout, tree, single = _artifact(tmp_path)
    target = tmp_path / "target"
    assert _pull_in_threads(layout, target, threads=8, pulls=6) == []
    assert same_tree(tree, target / "tree")
    assert (target / "f.bin").read_bytes() == single.read_bytes()
    assert _leftovers(target) == []


_PULLER = textwrap.dedent(
    """
    import asyncio, sys
    from k8sjobs.artifacts import DigestCache, OCILayout
    layout = OCILayout(sys.argv[1], cache=DigestCache(sys.argv[3]))
    for _ in range(int(sys.argv[4])):
        asyncio.run(layout.pull("t/x:v1", sys.argv[2]))
    """
)


def test_concurrent_pulls_into_one_target_from_processes_all_succeed(tmp_path: Path) -> None:
    """Item 4, processes: a study whose steps share an input on one machine."""
    layout, tree, single = _artifact(tmp_path)
    target = tmp_path / "target"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PULLER,
                str(layout.root),
                str(target),
                str(tmp_path / f"c{i}"),
                "16",
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    failures = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert [f for f in failures if f[0] != 0] == []
    assert same_tree(tree, target / "tree")
    assert (target / "f.bin").read_bytes() == single.read_bytes()
    assert _leftovers(target) == []


@pytest.mark.parametrize("length", [240, 250, 255])
async def test_a_name_near_255_bytes_is_pulled_again_and_again(tmp_path: Path, length: int) -> None:
    """Item 5: the second pull moved the old copy aside under the name plus a suffix, past
    255 bytes: "File name too long" (failed on main)."""
    name = "é" * ((length - 1) // 2) + "d" * (1 + (length - 1) % 2)  # two bytes per "é"
    assert len(name.encode()) == length
    tree = tmp_path / "src" / name
    (tree / name).mkdir(parents=True)
    (tree / name / name).write_text("deep\n")
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    await layout.push("t/long:v1", [tree])
    for _ in range(3):
        await layout.pull("t/long:v1", tmp_path / "out")
    assert same_tree(tree, tmp_path / "out" / name)
    assert _leftovers(tmp_path / "out") == []


def test_a_directory_replaces_a_file_and_a_file_a_directory(tmp_path: Path) -> None:
    layout, tree, _ = _artifact(tmp_path)
    target = tmp_path / "target"
    (target / "tree").parent.mkdir(parents=True)
    (target / "tree").write_text("a file where the directory goes\n")
    (target / "f.bin").mkdir()
    (target / "f.bin" / "inside").write_text("a directory where the file goes\n")
    asyncio.run(layout.pull("t/x:v1", target))
    assert same_tree(tree, target / "tree")
    assert (target / "f.bin").is_file()


# -- python -m k8sjobs.handoff pull onto a target that cannot take it (item 6) -------------


def _handoff_pull(
    tmp_path: Path, inputs: Path, registry: RegistryServer, fsize: int | None = None
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "handoff.json"
    config.write_text(
        json.dumps({"store": registry.location, "plain_http": True, "inputs": {"data": "t/x:v1"}})
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "K8SJOBS_INPUTS": str(inputs),
        "K8SJOBS_CACHE_DIR": str(tmp_path / "cache"),
    }

    def limit() -> None:  # a write past fsize bytes fails with EFBIG, as a full disk would
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "k8sjobs.handoff", "pull", "--config", str(config)],
        env=env, capture_output=True, text=True, timeout=60, preexec_fn=limit, cwd=tmp_path,
    )  # fmt: skip


@pytest.fixture
def pushed(plain_registry: RegistryServer, tmp_path: Path) -> RegistryServer:
    big = tmp_path / "src" / "big"
    big.mkdir(parents=True)
    (big / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    store = Registry(plain_registry.location, plain_http=True, retry=FAST_RETRY)

    async def push() -> None:
        async with store:
            await store.push("t/x:v1", [big], compression="none")

    asyncio.run(push())
    return plain_registry


def _one_line(done: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("k8sjobs handoff pull: ")
    for text in expected:
        assert text in lines[0], lines[0]


def test_a_handoff_pull_that_fills_the_volume_is_one_line_and_exit_1(
    tmp_path: Path, pushed: RegistryServer
) -> None:
    """Item 6: ENOSPC (here EFBIG, the same write failing) was a 50-60 line traceback."""
    done = _handoff_pull(tmp_path, tmp_path / "inputs", pushed, fsize=1024 * 1024)
    _one_line(done, "cannot write", str(tmp_path / "inputs" / "data"), "EFBIG")


def test_a_handoff_pull_under_a_file_is_one_line_and_exit_1(
    tmp_path: Path, pushed: RegistryServer
) -> None:
    (tmp_path / "inputs").write_text("not a directory\n")
    done = _handoff_pull(tmp_path, tmp_path / "inputs", pushed)
    _one_line(done, "cannot write", str(tmp_path / "inputs"), "ENOTDIR")


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.mark.parametrize(("options", "expected"), [("size=1m", "ENOSPC"), ("size=8m,ro", "EROFS")])
def test_a_handoff_pull_onto_a_full_or_read_only_volume_is_one_line(
    tmp_path: Path, pushed: RegistryServer, options: str, expected: str
) -> None:
    with _tmpfs(tmp_path / "volume", options) as volume:
        done = _handoff_pull(tmp_path, volume / "inputs" if "ro" not in options else volume, pushed)
    _one_line(done, "cannot write", str(tmp_path / "volume"), expected)


def test_the_library_pull_names_the_target_and_the_cause(tmp_path: Path) -> None:
    layout, _, _ = _artifact(tmp_path)
    (tmp_path / "file").write_text("x\n")
    with pytest.raises(RegistryError, match=r"Pulling t/x:v1: cannot write .*file.*ENOTDIR"):
        asyncio.run(layout.pull("t/x:v1", tmp_path / "file" / "below"))


async def test_a_file_named_with_255_bytes_of_four_byte_characters_is_pulled(
    tmp_path: Path,
) -> None:
    """The partial file's name took 100 characters of the name: 400 bytes of emoji."""
    name = "\U0001f600" * 63  # 252 bytes
    (tmp_path / name).write_text("smile\n")
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    await layout.push("t/emoji:v1", [tmp_path / name])
    for _ in range(2):
        await layout.pull("t/emoji:v1", tmp_path / "out")
    assert (tmp_path / "out" / name).read_text() == "smile\n"


def test_a_file_that_vanishes_during_a_push_is_one_error_naming_it(tmp_path: Path) -> None:
    """A directory's file removed between the scan and the archive: one RegistryError
    naming the file, not a FileNotFoundError traceback."""
    from k8sjobs.artifacts import _tarball

    tree = make_tree(tmp_path / "tree")
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    real_scan = _tarball.scan

    def scan_then_remove(root: Path) -> list[_tarball.Entry]:
        entries = real_scan(root)
        (tree / "a.txt").unlink()  # the user's job still writing, say
        return entries

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tarball, "scan", scan_then_remove)
        with pytest.raises(RegistryError, match=r"Pushing t/x:v1: .*a\.txt: No such file"):
            asyncio.run(layout.push("t/x:v1", [tree]))


@contextlib.contextmanager
def _nfs_locks() -> Iterator[None]:
    """flock(2) as Linux's NFS client gives it: emulated with byte-range locks, so an
    exclusive lock on a descriptor opened read-only (every directory's) fails with EBADF."""
    import errno
    import fcntl

    real_flock = fcntl.flock

    def nfs_flock(fd: int, operation: int) -> None:
        read_only = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        if operation & fcntl.LOCK_EX and read_only:
            raise OSError(errno.EBADF, "Bad file descriptor")
        real_flock(fd, operation)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fcntl, "flock", nfs_flock)
        yield


def test_pulls_onto_nfs_lock_through_files_and_still_sweep_leftovers(tmp_path: Path) -> None:
    """On NFS every directory pull failed (EBADF locking its staging directory, on main
    before this work too). Staging directories and the target are locked through lock
    files there; leftovers are still told from living pulls, and concurrent pulls into one
    target still succeed."""
    layout, tree, single = _artifact(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    dead = target / ".k8sjobs-extract-dead"  # what a pull killed on NFS leaves
    dead.mkdir()
    (dead / ".k8sjobs-lock").write_text("")
    (target / ".k8sjobs-part-f.bin.dead").write_text("partial")
    with _nfs_locks():
        asyncio.run(layout.pull("t/x:v1", target))
        assert _leftovers(target) == [".k8sjobs-lock"]  # the target's lock, left on NFS
        assert _pull_in_threads(layout, target, threads=6, pulls=4) == []
    assert same_tree(tree, target / "tree")
    assert (target / "f.bin").read_bytes() == single.read_bytes()
    assert _leftovers(target) == [".k8sjobs-lock"]


def test_a_living_pulls_staging_directory_on_nfs_is_left_alone(tmp_path: Path) -> None:
    from k8sjobs.artifacts import _staging

    with _nfs_locks():
        held = _staging.staging_dir(tmp_path)
        _staging.sweep(tmp_path)
        assert held.path.is_dir()  # its lock file is locked: a living pull
        held.release()
    assert list(tmp_path.iterdir()) == []


def test_names_of_k8sjobs_temporary_files_are_refused_as_titles(tmp_path: Path) -> None:
    """A pull's sweep removes ``.k8sjobs-*`` entries, and a staging directory on NFS holds
    ``.k8sjobs-lock``: a file or directory so named is refused by the push, naming it."""
    reserved = tmp_path / ".k8sjobs-lock"
    reserved.write_text("x\n")
    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    with pytest.raises(RegistryError, match=r"Cannot push .*\.k8sjobs-lock: names starting"):
        asyncio.run(layout.push("t/x:v1", [reserved]))


@pytest.mark.parametrize("title", [".k8sjobs-lock", "x/.k8sjobs-extract-a/f", "x/.k8sjobs-old-1"])
async def test_a_title_with_a_temporary_name_is_refused_before_anything_is_written(
    tmp_path: Path, title: str
) -> None:
    """A later pull's sweep would remove what such a layer wrote (data loss), so it is refused."""
    async with HostileRegistry() as hostile:
        hostile.put("v1", manifest_for([file_layer(title, b"x")]), {"f": b"x"})
        async with Registry(hostile.location, plain_http=True, retry=FAST_RETRY) as store:
            with pytest.raises(RegistryError, match="temporary names of k8sjobs pulls"):
                await store.pull("t/x:v1", tmp_path / "out")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
