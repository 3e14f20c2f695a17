"""What a local step used: peak memory, CPU seconds and wall time, measured by its keeper."""

from __future__ import annotations

from pathlib import Path

from k8sjobs import Session, Step
from k8sjobs.local import LocalBackend

MIB = 1024 * 1024
# Touches every page (a bytearray of zeros would be mapped lazily and never resident).
ALLOCATE = """
import sys
block = b"x" * (200 * 1024 * 1024)
print(len(block))
"""
SPIN = """
import time
end = time.process_time() + 1.5
while time.process_time() < end:
    pass
"""


def _session(tmp_path: Path) -> Session:
    return Session(study="use", backend=LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5))


async def test_a_step_that_allocates_200_mb_shows_its_peak(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        result = await (await s.submit(Step(name="big", shell="python", script=ALLOCATE))).wait(60)
    assert result.ok, result.describe()
    assert result.usage is not None and result.usage.memory_peak is not None, result
    # The interpreter adds ~10 MiB to the 200 MiB block: within 10%.
    assert 200 * MIB <= result.usage.memory_peak <= 220 * MIB, result.usage
    assert result.usage.source == "rusage"
    assert "mem 2" in result.describe() and "Mi peak" in result.describe()


async def test_a_cpu_bound_step_shows_cpu_seconds_close_to_its_wall_time(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        result = await (await s.submit(Step(name="spin", shell="python", script=SPIN))).wait(60)
    assert result.ok, result.describe()
    usage = result.usage
    assert usage is not None and usage.cpu_seconds is not None and usage.wall_seconds is not None
    assert usage.cpu_seconds >= 1.5  # the script spun for 1.5 s of its own CPU time
    # CPU time cannot exceed the wall time of a single-threaded tree; the machine's load
    # only stretches the wall time, so only this side of "close" is safe to assert.
    assert usage.cpu_seconds <= usage.wall_seconds * 1.05, usage
    assert usage.missing["gpu_seconds"] == "the step asked for no GPU"


async def test_a_failed_step_has_its_usage_too(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        step = Step(name="bad", shell="python", script=ALLOCATE + "raise SystemExit(3)")
        result = await (await s.submit(step)).wait(60)
    assert result.exit_code == 3
    assert result.usage is not None and (result.usage.memory_peak or 0) >= 200 * MIB


def test_the_usage_page_example_runs(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    page = Path(__file__).parents[2] / "docs" / "usage.md"
    (code,) = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.DOTALL | re.MULTILINE)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "grow: SUCCEEDED" in done.stdout and "Mi peak" in done.stdout, done.stdout
