"""The tab-separated printers (``run --trace FILE``, ``status -o tsv``) given any text.

A step name, parameter value or reason can hold any character; each row must stay one line
of exactly ``len(COLUMNS)`` fields, show nothing a terminal acts on (controls, bidi
overrides, zero-width marks: ``_printable.unsafe``'s rule, the one every view uses) and
read back to the very text (each escape is Python's, and a backslash is escaped too).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs._printable import unsafe
from k8sjobs.observe.tracefile import COLUMNS, escape, row

HOSTILE = st.text(
    st.characters(codec=None)
    | st.sampled_from("\x1b]0;x\x07\x1b[2J\r\n\t\\\x9b\u202e\u2066\u200b\u2028\x85\U000e0001"),
    max_size=40,
)


def unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


@given(HOSTILE)
def test_a_tsv_value_of_any_text_shows_nothing_a_terminal_acts_on_and_reads_back(
    text: str,
) -> None:
    shown = escape(text)
    assert [c for c in shown if unsafe(c)] == []
    assert unescape(shown) == text


@given(st.lists(HOSTILE, min_size=len(COLUMNS), max_size=len(COLUMNS)))
def test_a_row_of_any_text_is_one_line_of_every_column(values: list[str]) -> None:
    line = row(dict(zip(COLUMNS, values, strict=True)))
    assert line.endswith("\n") and len(line[:-1].splitlines()) == 1
    assert len(line[:-1].split("\t")) == len(COLUMNS)
