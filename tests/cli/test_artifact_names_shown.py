"""``artifact pull`` and ``artifact tags`` print names from the store: a file name (or an OCI
layout's tag) can hold terminal escapes. To a terminal they are escaped, as ``ls`` does; to
a pipe the very bytes go, so scripts get the real names.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

HOSTILE = "a\x1b]0;PWN\x07\u202eb"


def _cli(folder: Path, *args: str, stdout: int) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", *args],
        cwd=folder,
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def _pulled(folder: Path, *, terminal: bool) -> bytes:
    store = f"oci:{folder / 'layout'}"
    if not terminal:
        done = _cli(folder, "artifact", "pull", "--store", store, "x:v1", "out", stdout=-1)
        assert done.returncode == 0, done.stderr
        return done.stdout
    main, side = pty.openpty()
    try:
        done = _cli(folder, "artifact", "pull", "--store", store, "x:v1", "out2", stdout=side)
        os.close(side)
        assert done.returncode == 0, done.stderr
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(main)


def test_a_pulled_name_with_escapes_is_escaped_on_a_terminal_and_raw_in_a_pipe(
    tmp_path: Path,
) -> None:
    (tmp_path / HOSTILE).write_text("x")
    store = f"oci:{tmp_path / 'layout'}"
    pushed = _cli(tmp_path, "artifact", "push", "--store", store, "x:v1", HOSTILE, stdout=-1)
    assert pushed.returncode == 0, pushed.stderr
    piped = _pulled(tmp_path, terminal=False).decode()
    assert HOSTILE in piped, piped  # the real name, for xargs and scripts
    shown = _pulled(tmp_path, terminal=True).decode()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown, shown
    assert "a\\x1b]0;PWN\\x07\\u202eb" in shown, shown
