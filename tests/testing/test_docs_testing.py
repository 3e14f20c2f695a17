"""The "Without pytest" example in docs/testing.md runs as written."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

PAGE = Path(__file__).parents[2] / "docs" / "testing.md"


async def test_the_standalone_example_runs_and_prints_the_conditions(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    example = next(b for b in blocks if "asyncio.run(main())" in b)
    script = tmp_path / "example.py"
    script.write_text(example)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert "('Failed', 'BackoffLimitExceeded')" in out.decode()


async def test_the_fixture_example_runs(fake_cluster: object) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "docs/testing.md", "exec"), namespace)
    test = namespace["test_my_job_succeeds"]
    await test(fake_cluster)  # type: ignore[operator]


async def test_the_quota_example_runs(fake_cluster: object) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    example = next(b for b in blocks if "test_a_full_quota_is_reported" in b)
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)
    test = namespace["test_a_full_quota_is_reported"]
    await asyncio.wait_for(test(fake_cluster), 60)  # type: ignore[operator]
