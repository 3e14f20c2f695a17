"""The Python examples in docs/security.md run as written, and its Role table is the Role."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k8sjobs.cli.rbac import RULES

PAGE = Path(__file__).parents[2] / "docs" / "security.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[str]:
    return _BLOCK.findall(PAGE.read_text())


def test_page_has_examples() -> None:
    assert len(_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_example_runs(index: int) -> None:
    code = compile(_blocks()[index], f"{PAGE.name}[example {index + 1}]", "exec")
    exec(code, {"__name__": "docs"})


def test_role_table_lists_every_rule_with_its_verbs() -> None:
    text = PAGE.read_text()
    for rule in RULES:
        group = f" ({rule.group})" if rule.group else ""
        row = f"| `{rule.resource}`{group} | {', '.join(rule.verbs)} |"
        assert row in text, row
