"""The stored-block gzip writer used for data that does not compress: whatever the sizes
written, gzip reads back exactly those bytes, and every block but the last is full."""

from __future__ import annotations

import gzip
import io
import random
import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.artifacts._tarball import StoredGzip

_HEADER = 10


def _blocks(stream: bytes) -> list[tuple[bool, int]]:
    """(final, length) of each stored deflate block of a one-member stream."""
    pos, found = _HEADER, []
    while True:
        final, length, check = struct.unpack_from("<BHH", stream, pos)
        assert length ^ check == 0xFFFF
        found.append((bool(final), length))
        pos += 5 + length
        if final:
            return found


@given(st.lists(st.integers(0, 140_000), max_size=12), st.integers(0, 2**32))
def test_any_writes_read_back_in_full_blocks(sizes: list[int], seed: int) -> None:
    data = random.Random(seed).randbytes(sum(sizes))
    out = io.BytesIO()
    writer = StoredGzip(out)
    start = 0
    for size in sizes:
        piece = bytearray(data[start : start + size])
        assert writer.write(piece) == size
        piece[:] = bytes(size)  # the caller reuses its buffer: what was held must be a copy
        start += size
    writer.close()
    stream = out.getvalue()

    assert gzip.decompress(stream) == data
    assert struct.unpack("<II", stream[-8:]) == (zlib.crc32(data), len(data))
    blocks = _blocks(stream)
    assert [final for final, _ in blocks] == [False] * (len(blocks) - 1) + [True]
    assert all(length == 65535 for _, length in blocks[:-1])
    assert sum(length for _, length in blocks) == len(data)
