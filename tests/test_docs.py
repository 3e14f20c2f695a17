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
