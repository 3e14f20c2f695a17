"""The docs' tables of step and study keys, kept to the models' keys so they cannot drift.

docs/steps.md's "Fields" table has a row for every field of ``Step`` (``Step.model_fields``),
docs/studies.md's allocation table one for every field of ``Allocation``;
docs/studies.md's tables have one for every key of a study (``study._STUDY_KEYS``) and every
key a study's step has beyond Step's (``study._EXTRA_STEP_KEYS``). A table follows a marker
line ``<!-- keys-table: ID -->`` naming which of ``TABLES`` it is.

The prose of a row is the page's own: regenerating keeps it, drops the names (and rows) of
keys that no longer exist, and adds a row for each new key, with the model's default and
description, for the writer to finish. One command does it, and tests/test_studies_page.py
names it when a table and its model disagree::

    python -m k8sjobs.fieldtables          # rewrite the tables of docs/steps.md and studies.md
    python -m k8sjobs.fieldtables --check  # say what disagrees, exit 1 if anything does
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from . import study
from .steps.allocation import Allocation
from .steps.spec import Step

__all__ = ["TABLES", "Row", "check_page", "key_rows", "main", "update_page"]

COMMAND = "python -m k8sjobs.fieldtables"
_MARKER = "<!-- keys-table: {} -->"
_HEADER = ("| {} | default | meaning |", "|---|---|---|")
_CODE = re.compile(r"`([^`]+)`")
_ONE_CODE = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class Row:
    """One row of a keys table: the keys it documents, their default and what they mean."""

    names: tuple[str, ...]
    default: str
    meaning: str

    def line(self) -> str:
        """Return the row as a Markdown table line."""
        names = ", ".join(f"`{name}`" for name in self.names)
        return f"| {names} | {self.default} | {self.meaning} |"


def _default(info: FieldInfo) -> str:
    """Return a field's default as the table writes it, for a new row."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, timedelta):
        return f"`{int(value.total_seconds())}` s"
    if isinstance(value, str | int | float | list | dict) and len(repr(value)) < 40:
        return f"`{value}`" if isinstance(value, str) else f"`{value!r}`"
    return "see below"


def _model_keys(model: type[BaseModel]) -> Callable[[], dict[str, Row]]:
    """Return a function giving a new row for each field of ``model``: default, description."""
    return lambda: {
        name: Row((name,), _default(info), info.description or "")
        for name, info in model.model_fields.items()
    }


#: A new row for each field of Step, from the model: default and description.
step_keys = _model_keys(Step)


def _plain_keys(keys: Sequence[str]) -> Callable[[], dict[str, Row]]:
    return lambda: {name: Row((name,), "", "") for name in sorted(keys)}


#: Each table's marker ID -> the page it is on and the rows its model would start it with.
TABLES: Mapping[str, tuple[str, Callable[[], dict[str, Row]]]] = {
    "Step.model_fields": ("steps.md", step_keys),
    "Allocation.model_fields": ("studies.md", _model_keys(Allocation)),
    "study._STUDY_KEYS": ("studies.md", _plain_keys(sorted(study._STUDY_KEYS))),
    "study._EXTRA_STEP_KEYS": ("studies.md", _plain_keys(sorted(study._EXTRA_STEP_KEYS))),
}


def _table_lines(lines: list[str], table: str) -> tuple[int, int]:
    """Return the first and past-the-last line of the rows of ``table`` in ``lines``."""
    marker = _MARKER.format(table)
    if marker not in lines:
        raise ValueError(f"no line {marker!r}: put it just above the table")
    start = lines.index(marker) + 1
    while start < len(lines) and not lines[start].strip():
        start += 1  # blank lines only: a marker whose table is gone must not take the next
    header = [line.replace(" ", "") for line in lines[start : start + 2]]
    if len(header) < 2 or not header[0].endswith("|default|meaning|") or header[1] != _HEADER[1]:
        raise ValueError(
            f"line {start + 1}: the line after {marker!r} is not the head of a keys table "
            f"({_HEADER[0].format('key')!r}, then {_HEADER[1]!r}): put the table just below it"
        )
    start += 2  # past the header and its rule
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def _parse_row(line: str) -> Row:
    cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
    cells += [""] * (3 - len(cells))
    return Row(tuple(_CODE.findall(cells[0])), cells[1], " | ".join(cells[2:]).strip())


def page_rows(text: str, table: str) -> list[Row]:
    """Return the rows of ``table`` as the page has them."""
    lines = text.splitlines()
    start, end = _table_lines(lines, table)
    return [_parse_row(line) for line in lines[start:end]]


def _model_default(row: Row, keys: Mapping[str, Row]) -> str | None:
    """Return the model's default for a one-key row whose page default is one the model
    states the same way (``required``, or one code span such as `` `0` ``) and says other;
    None when they agree or the page describes the default in words ("by `mpi`")."""
    if len(row.names) != 1 or row.names[0] not in keys:
        return None
    model = keys[row.names[0]].default
    comparable = {row.default, model} & {"required"} or (
        _ONE_CODE.fullmatch(row.default) and _ONE_CODE.fullmatch(model)
    )
    return model if comparable and model != row.default else None


def key_rows(rows: Sequence[Row], keys: Mapping[str, Row]) -> list[Row]:
    """Return ``rows`` made to list exactly ``keys``: each row keeps its prose and the names
    that are keys (a default the model states otherwise becomes the model's), a row left with
    none goes, and each key no row names gets its new row."""
    kept = [
        Row(names, _model_default(row, keys) or row.default, row.meaning)
        for row in rows
        if (names := tuple(n for n in row.names if n in keys))
    ]
    named = {name for row in kept for name in row.names}
    return kept + [row for name, row in keys.items() if name not in named]


def update_page(text: str, table: str) -> str:
    """Return the page ``text`` with ``table`` listing exactly its model's keys."""
    lines = text.splitlines()
    start, end = _table_lines(lines, table)
    rows = key_rows(page_rows(text, table), TABLES[table][1]())
    lines[start:end] = [row.line() for row in rows]
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def check_page(text: str, table: str) -> list[str]:
    """Return what is wrong with ``table`` on the page: keys without a row, documented keys
    that do not exist, keys in two rows, a default the model states otherwise, rows without
    a meaning. Empty when it is right."""
    keys = TABLES[table][1]()
    rows = page_rows(text, table)
    names = [name for row in rows for name in row.names]
    problems = [f"{table}: {n!r} has no row" for n in keys if n not in names]
    problems += [f"{table}: {n!r} is documented but is no key" for n in names if n not in keys]
    problems += [f"{table}: {n!r} has two rows" for n in sorted(set(names)) if names.count(n) > 1]
    problems += [
        f"{table}: {row.names[0]!r}: the default says {row.default}, the model {model}"
        for row in rows
        if (model := _model_default(row, keys))
    ]
    problems += [
        f"{table}: the row of {', '.join(row.names) or 'no key'} says no meaning"
        for row in rows
        if not row.meaning or not row.default or not row.names
    ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with ``--check``, check) every table of ``TABLES`` in the docs directory."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=Path(__file__).parent.parent / "docs")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    texts: dict[Path, str] = {}
    problems: list[str] = []
    try:  # every page read and every table found before anything is written
        for table, (page, _) in TABLES.items():
            path = args.docs / page
            if path not in texts:
                texts[path] = path.read_text(encoding="utf-8")
            if not args.check:
                texts[path] = update_page(texts[path], table)
            problems += [f"{path}: {problem}" for problem in check_page(texts[path], table)]
        if not args.check:
            for path, text in texts.items():
                path.write_text(text, encoding="utf-8")
    except (OSError, UnicodeError, ValueError) as exc:
        where = f"{path}: " if not isinstance(exc, OSError) else ""
        print(f"{COMMAND}: {where}{exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems and not args.check:
        print("write the default and meaning of each new row", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
