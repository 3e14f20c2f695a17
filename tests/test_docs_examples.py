"""The Python examples in docs/steps.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STEPS_PAGE = Path(__file__).parent.parent / "docs" / "steps.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


def test_steps_page_has_examples() -> None:
    assert len(_blocks(STEPS_PAGE)) >= 5


@pytest.mark.parametrize("index", range(len(_blocks(STEPS_PAGE))))
def test_steps_page_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = _blocks(STEPS_PAGE)[index]
    exec(compile(code, f"{STEPS_PAGE.name}[example {index + 1}]", "exec"), {"__name__": "docs"})


README = Path(__file__).parent.parent / "README.md"


def test_readme_quickstart_runs_on_the_local_backend(tmp_path: Path) -> None:
    import subprocess
    import sys

    (code,) = _blocks(README)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "sum: SUCCEEDED" in done.stdout
    assert "55" in done.stdout  # 1 + 2 + ... + 10, read from the producer's artifact


API_PAGE = Path(__file__).parent.parent / "docs" / "api.md"


def test_api_page_blocking_session_example_runs(tmp_path: Path) -> None:
    """docs/api.md's synchronous example (it failed with NameError: Step; issue 28 item 11)."""
    import subprocess
    import sys

    (code,) = [b for b in _blocks(API_PAGE) if "BlockingSession(" in b]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "a: SUCCEEDED" in done.stdout
