"""A real `k8sjobs run` whose state directory fills up while it runs (a small tmpfs).

Every write of the driver (step records, the run journal, the run record) can fail with
ENOSPC; the run must still end (never wait forever for a step whose record could not be
written), every step must end in a state, and the error must name the file and the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_state_directory_that_fills_up_fails_clearly_and_the_run_ends(
    tmp_path: Path, small_disk: Path
) -> None:
    values = ", ".join(str(n) for n in range(20))
    (tmp_path / "study.yaml").write_text(
        f"name: full\nsteps:\n  - name: s\n    parameters: {{N: [{values}]}}\n"
        "    script: sleep 0.2\n"
    )
    state = str(small_disk / "st")
    driver = subprocess.Popen(
        [sys.executable, "-m", "k8sjobs.cli", "--state-dir", state, "run", "study.yaml", "--plain"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate(timeout=30)
    assert driver.returncode not in (0, None), out + err
    ended = {
        line.split("]: ")[0] for line in out.splitlines() if "SUCCEEDED" in line or "FAILED" in line
    }
    assert len(ended) == 20, out + err  # every step ended in a state, none left waiting
    assert "No space left on device" in err and str(small_disk) in err, err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert "--state-dir on a disk that can be written" in out + err
