"""Helpers shared by the artifact tests (a plain module: conftest is not importable)."""

from __future__ import annotations

import functools
import gzip
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from k8sjobs.artifacts import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=4, initial_delay=0.05, max_delay=0.2, total=5.0)


@dataclass(frozen=True)
class CountingRetry(RetryPolicy):
    """A retry policy that records each pause it hands out (one per failed attempt; the last
    is not waited): a test counts attempts and sums the backoff from it, not from a clock."""

    pauses: list[float] = field(default_factory=list, compare=False)

    def delay(self, attempt: int) -> float:
        pause = super().delay(attempt)
        self.pauses.append(pause)
        return pause

    def check_bounded(self) -> None:
        """Assert that the attempts stopped at the policy's count and the pauses waited stayed
        within its figures (each at most max_delay, together within total)."""
        assert len(self.pauses) == self.attempts, self.pauses
        waited = self.pauses[:-1]
        assert all(0 < p <= self.max_delay for p in waited) and sum(waited) <= self.total


def make_tree(root: Path) -> Path:
    """Make a small directory tree with nested files, an empty dir and a relative symlink."""
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(70_000))
    (root / "sub" / "deeper" / "c.txt").write_text("gamma\n")
    (root / "link").symlink_to("a.txt")
    return root


def old(path: Path) -> Path:
    """Backdate a file's or a tree's mtimes so the digest cache trusts them (it ignores very
    recent writes)."""
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (1_600_000_000, 1_600_000_000), follow_symlinks=False)
    return path


def same_tree(a: Path, b: Path) -> bool:
    """Return True when two trees hold the same names, file bytes and symlink targets."""
    names_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*"))
    names_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*"))
    if names_a != names_b:
        return False
    for name in names_a:
        pa, pb = a / name, b / name
        if pa.is_symlink() != pb.is_symlink():
            return False
        if pa.is_symlink():
            if os.readlink(pa) != os.readlink(pb):
                return False
        elif pa.is_file() and pa.read_bytes() != pb.read_bytes():
            return False
    return True


@functools.lru_cache(maxsize=4)
def gzip_bomb(unpacked: int, member: int = 8 * 1024 * 1024) -> bytes:
    """A tar+gzip layer titled "d" holding one file of zeros, about ``unpacked`` bytes: one
    gzip member per ``member`` zeros, each the same few KiB (gzip allows members in a row)."""
    count = max(1, unpacked // member)
    size = count * member - 1024  # leave room for the two end-of-archive blocks
    info = tarfile.TarInfo("d/zeros")
    info.size = size
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    zeros = gzip.compress(bytes(member), compresslevel=9, mtime=0)
    return gzip.compress(header, mtime=0) + zeros * count
