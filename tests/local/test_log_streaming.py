"""Logs are read in bounded memory: the last lines from the end, a huge log chunk by chunk."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.local._logfile import CHUNK, lines, tail_offset

from .test_interrupted_runs import study


def last_lines(data: bytes, count: int) -> bytes:
    """The reference: the last ``count`` lines, each ending at a newline (or the end)."""
    found = data.splitlines(keepends=True) if b"\r" not in data else []
    return b"".join(found[-count:]) if count > 0 else b""


@given(
    data=st.binary(max_size=200).map(lambda b: bytes(b"ab\n"[x % 3] for x in b)),
    count=st.integers(0, 12),
    chunk=st.integers(1, 9),
)
def test_tail_offset_finds_the_last_lines_across_chunk_boundaries(
    data: bytes, count: int, chunk: int
) -> None:
    with tempfile.NamedTemporaryFile() as log:
        log.write(data)
        log.flush()
        assert data[tail_offset(Path(log.name), count, chunk) :] == last_lines(data, count)


MEASURE = """
import resource, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
size, head, tail = 0, b"", b""
while block := child.stdout.read(1 << 20):
    head = head or block[:16]
    tail = (tail + block)[-16:]
    size += len(block)
assert child.wait() == 0
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(size, peak, head.hex(), tail.hex())
"""


def print_log(folder: Path, *args: str) -> tuple[int, int, bytes, bytes]:
    """Run `k8sjobs logs` in a fresh process; return what it printed and its peak RSS."""
    command = [sys.executable, "-m", "k8sjobs.cli", "logs", "--study", "big", "step", *args]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *command],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    size, peak, head, tail = done.stdout.split()
    return int(size), int(peak), bytes.fromhex(head), bytes.fromhex(tail)


def test_a_log_far_larger_than_memory_bound_prints_whole_in_bounded_memory(
    tmp_path: Path,
) -> None:
    study(tmp_path, "echo first", name="big")
    run = [sys.executable, "-m", "k8sjobs.cli", "run", "study.yaml", "--plain"]
    subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    (log,) = (tmp_path / ".k8sjobs" / "pods").rglob("step.log")
    small = print_log(tmp_path)
    assert small[0] == len(b"first\n")
    with open(log, "r+b") as out:  # 200 MB: a sparse middle of zeros, cheap to make and read
        out.truncate(200 << 20)
        out.seek(0, 2)
        out.write(b"\nlast line\n")
    size, peak, head, tail = print_log(tmp_path)
    assert (size, head[:6], tail[-11:]) == ((200 << 20) + 11, b"first\n", b"\nlast line\n")
    # Before: the whole log as bytes and again as text (over 400 MB). Now: a few chunks.
    assert peak < small[1] + 256 * CHUNK, (peak, small[1])
    size, peak, _, tail = print_log(tmp_path, "--tail", "1")
    assert (size, tail) == (10, b"last line\n")
    assert peak < small[1] + 256 * CHUNK, (peak, small[1])


@given(
    data=st.binary(max_size=300).map(lambda b: bytes(b"ab\n"[x % 3] for x in b)),
    cut=st.integers(1, 7),
)
def test_lines_of_chunks_are_the_lines_of_the_text(data: bytes, cut: int) -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(data), cut):
            yield data[at : at + cut]

    async def collect() -> list[str]:
        return [line async for line in lines(pieces())]

    expected = data.decode().split("\n")
    if expected and expected[-1] == "":
        expected.pop()
    assert asyncio.run(collect()) == expected
