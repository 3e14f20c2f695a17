"""The docs say what the program does, and each thing once (issue 34 item 29)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_installs_k8sjobs_from_an_index_it_is_not_on(page: Path) -> None:
    """k8sjobs is not on PyPI: ``pip install k8sjobs`` (or an extra of it) fails for readers."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"pip install\s+['\"]?k8sjobs\b[^\n`]*", text)
    assert not found, f"{page.name}: {found} shows k8sjobs as published; install from a checkout"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_repeats_a_paragraph(page: Path) -> None:
    """A paragraph said twice on one page is an editing slip; fold it."""
    paragraphs = [p.strip() for p in page.read_text(encoding="utf-8").split("\n\n")]
    prose = [p for p in paragraphs if len(p) > 80 and not p.startswith(("```", "|", "<!--"))]
    repeated = [p[:80] for p, n in Counter(prose).items() if n > 1]
    assert not repeated, f"{page.name} repeats: {repeated}"
