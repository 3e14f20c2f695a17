"""The keys tables of the docs list exactly the keys the code takes, and a study refuses
every other key with the one meant (issue 34 item 29).

docs/steps.md's Fields table against ``Step.model_fields``, docs/studies.md's against
``study._STUDY_KEYS`` and ``study._EXTRA_STEP_KEYS``, in both directions: a key missing from
its page, and a documented key that does not exist. ``python -m k8sjobs.fieldtables``
updates them; each failure names that command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k8sjobs import StudyError, fieldtables, study
from k8sjobs.steps.allocation import Allocation
from k8sjobs.steps.spec import Step
from k8sjobs.study import parse_study

DOCS = Path(__file__).parent.parent / "docs"
_FIX = f"run `{fieldtables.COMMAND}` and write the meaning of each new row"


def _page(table: str) -> str:
    return (DOCS / fieldtables.TABLES[table][0]).read_text(encoding="utf-8")


@pytest.mark.parametrize("table", sorted(fieldtables.TABLES))
def test_every_key_has_one_row_and_every_row_names_a_key(table: str) -> None:
    problems = fieldtables.check_page(_page(table), table)
    assert not problems, "\n".join([*problems, _FIX])


@pytest.mark.parametrize("table", sorted(fieldtables.TABLES))
def test_regenerating_a_table_that_is_true_changes_nothing(table: str) -> None:
    text = _page(table)
    assert fieldtables.update_page(text, table) == text, _FIX


def test_the_tables_stand_for_the_models() -> None:
    """What the check compares against is the models' keys themselves, not a copy."""
    keys = {table: set(rows()) for table, (_, rows) in fieldtables.TABLES.items()}
    assert keys["Step.model_fields"] == set(Step.model_fields)
    assert keys["Allocation.model_fields"] == set(Allocation.model_fields)
    assert keys["study._STUDY_KEYS"] == set(study._STUDY_KEYS)
    assert keys["study._EXTRA_STEP_KEYS"] == set(study._EXTRA_STEP_KEYS)


def _drop_row(text: str, name: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(f"| `{name}` |"))


@pytest.mark.parametrize("table", sorted(fieldtables.TABLES))
def test_a_key_missing_from_its_page_is_caught_and_regenerated(table: str) -> None:
    text = _page(table)
    name = fieldtables.page_rows(text, table)[0].names[0]
    without = _drop_row(text, name)
    assert f"{table}: {name!r} has no row" in fieldtables.check_page(without, table)
    regenerated = fieldtables.update_page(without, table)
    assert name in [n for row in fieldtables.page_rows(regenerated, table) for n in row.names]


@pytest.mark.parametrize("table", sorted(fieldtables.TABLES))
def test_a_documented_key_that_does_not_exist_is_caught_and_dropped(table: str) -> None:
    text = _page(table)
    row = fieldtables.page_rows(text, table)[0]
    forged = text.replace(row.line(), f"{row.line()}\n| `no_such_key`, `{row.names[0]}x` | x | y |")
    problems = fieldtables.check_page(forged, table)
    assert f"{table}: 'no_such_key' is documented but is no key" in problems
    assert fieldtables.update_page(forged, table) == text


@pytest.mark.parametrize(
    ("field", "written", "model"),
    [("shell", "`/bin/sh`", "`/bin/bash`"), ("retries", "`3`", "`0`"), ("name", "`x`", "required"),
     ("image", "required", "`python:3.12-slim`")],
)  # fmt: skip
def test_a_default_the_model_states_otherwise_is_caught_and_regenerated(
    field: str, written: str, model: str
) -> None:
    table = "Step.model_fields"
    text = _page(table)
    row = next(r for r in fieldtables.page_rows(text, table) if r.names == (field,))
    forged = text.replace(row.line(), fieldtables.Row(row.names, written, row.meaning).line())
    problems = fieldtables.check_page(forged, table)
    assert f"{table}: {field!r}: the default says {written}, the model {model}" in problems
    assert fieldtables.update_page(forged, table) == text


def test_a_default_described_in_words_is_the_pages_own() -> None:
    """ "by `mpi`" (launcher) or "the target's" (namespace) say more than the model's value."""
    text = _page("Step.model_fields")
    rows = {r.names: r for r in fieldtables.page_rows(text, "Step.model_fields")}
    assert rows[("launcher",)].default == "by `mpi`"
    assert rows[("namespace",)].default == "the target's"
    assert not fieldtables.check_page(text, "Step.model_fields")


def test_a_new_field_gets_a_row_with_the_models_default_and_description() -> None:
    rows = fieldtables.step_keys()
    assert rows["retries"] == fieldtables.Row(
        ("retries",), "`0`", "Pod retries: the Job's backoffLimit."
    )
    assert rows["name"].default == "required"
    assert rows["queue"].default == "none"
    assert rows["flux_in_image"].default == "`false`"
    # A new row without a description is flagged until the writer gives its meaning.
    bare = fieldtables.Row(("x",), "none", "").line()
    assert fieldtables._parse_row(bare) == fieldtables.Row(("x",), "none", "")


def test_the_command_rewrites_the_pages_and_checks_them(tmp_path: Path) -> None:
    for page in {page for page, _ in fieldtables.TABLES.values()}:
        text = (DOCS / page).read_text(encoding="utf-8")
        (tmp_path / page).write_text(_drop_row(text, "script_file" if "studies" in page else "shm"))
    assert fieldtables.main(["--docs", str(tmp_path), "--check"]) == 1
    assert fieldtables.main(["--docs", str(tmp_path)]) == 1  # new rows, meanings to write
    steps = (tmp_path / "steps.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `shm` \| none \| Memory-backed /dev/shm size", steps, re.M)


def _copy_pages(tmp_path: Path) -> None:
    for page in {page for page, _ in fieldtables.TABLES.values()}:
        (tmp_path / page).write_text((DOCS / page).read_text(encoding="utf-8"))


def _without_table(text: str, table: str) -> str:
    lines = text.split("\n")
    start = lines.index(fieldtables._MARKER.format(table)) + 1
    end = start
    while lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:start] + lines[end:])


@pytest.mark.parametrize("table", sorted(fieldtables.TABLES))
def test_a_marker_whose_table_is_gone_is_an_error_and_nothing_is_written(
    tmp_path: Path, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows were looked for at the next table on the page, wherever it was: the study
    keys' marker without its table rewrote the extra step keys' table, its prose lost."""
    _copy_pages(tmp_path)
    page = tmp_path / fieldtables.TABLES[table][0]
    broken = _without_table(page.read_text(encoding="utf-8"), table)
    page.write_text(broken, encoding="utf-8")
    for argv in (["--check"], []):
        assert fieldtables.main(["--docs", str(tmp_path), *argv]) == 2
        error = capsys.readouterr().err
        assert "is not the head of a keys table" in error and table in error, error
        assert page.read_text(encoding="utf-8") == broken


def test_a_missing_page_is_an_error_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing page (or one not UTF-8) ended in a traceback."""
    assert fieldtables.main(["--docs", str(tmp_path / "nowhere"), "--check"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{fieldtables.COMMAND}: ") and "No such file" in line
    _copy_pages(tmp_path)
    (tmp_path / "studies.md").write_bytes(b"\xff\xfe garbled")
    assert fieldtables.main(["--docs", str(tmp_path)]) == 2
    assert "studies.md" in capsys.readouterr().err
    assert (tmp_path / "steps.md").read_text() == (DOCS / "steps.md").read_text()


def test_the_studies_page_names_the_merged_defaults() -> None:
    text = (DOCS / "studies.md").read_text(encoding="utf-8")
    section = text.split("## Defaults", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in study._MERGED if f"`{key}`" not in section]
    assert not missing, f"docs/studies.md, Defaults: say that {missing} merge key by key"


_STEP_KEYS = sorted({*Step.model_fields, *study._EXTRA_STEP_KEYS} - {"name", "script"})


@pytest.mark.parametrize("key", _STEP_KEYS)
@pytest.mark.parametrize("where", ["step", "defaults"])
def test_a_typo_of_any_step_key_names_the_key_meant(key: str, where: str) -> None:
    """Study-only keys too: Step alone would answer ``parameter:`` with its own fields."""
    typo = key + key[-1]
    text = f"steps:\n  - name: a\n    script: echo\n    {typo}: 1\n"
    if where == "defaults":
        text = f"defaults:\n  {typo}: 1\nsteps:\n  - name: a\n    script: echo\n"
    with pytest.raises(StudyError) as refused:
        parse_study(text, source="s.yaml")
    line = 2 if where == "defaults" else 4
    assert f's.yaml:{line}: step "a": {typo}: "{typo}"' in str(refused.value)
    assert f'did you mean "{key}"?' in str(refused.value)


def test_a_key_like_no_step_key_says_which_keys_a_step_takes() -> None:
    with pytest.raises(StudyError) as refused:
        parse_study("steps:\n  - name: a\n    script: echo\n    zzzqqq: 1\n", source="s.yaml")
    keys = ", ".join(sorted(study._EXTRA_STEP_KEYS))
    assert str(refused.value) == (
        's.yaml:4: step "a": zzzqqq: "zzzqqq" is not a step key; a step takes the fields of '
        f"Step (docs/steps.md#fields) and {keys}"
    )
