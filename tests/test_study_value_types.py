"""Study files whose queue, priority or target is not a string YAML kept as written: a
number, a boolean (``yes``), a list, a mapping, null, a name of the wrong case. Each is
refused at its line, naming the field, the value YAML made of it and how to write it; the
message said only "Input should be a valid string", which a study's author cannot act on
when ``queue: yes`` looked like a string to them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs import StudyError, load_study

FIELDS = ("queue", "priority", "target")
# YAML scalars and collections that do not load as a string, and what the error must say.
NOT_STRINGS = {
    "5": "the number 5",
    "1.5": "the number 1.5",
    "yes": "the boolean true",
    "off": "the boolean false",
    "[lq]": "a list",
    "{a: 1}": "a mapping",
}


def _refusal(tmp_path: Path, field: str, value: str) -> str:
    queue = "" if field == "queue" else "    queue: lq\n"
    path = tmp_path / "study.yaml"
    path.write_text(
        f"name: s\nsteps:\n  - name: a\n    script: echo\n{queue}    {field}: {value}\n"
    )
    with pytest.raises(StudyError) as caught:
        load_study(path)
    return str(caught.value)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", sorted(NOT_STRINGS))
def test_a_value_that_is_not_a_string_is_refused_naming_what_yaml_made_of_it(
    tmp_path: Path, field: str, value: str
) -> None:
    said = _refusal(tmp_path, field, value)
    line = 5 if field == "queue" else 6
    assert f"study.yaml:{line}:" in said and f"{field}:" in said, said
    assert NOT_STRINGS[value] in said, said
    if not value.startswith(("[", "{")):
        assert "quotes" in said, said


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,10}", fullmatch=True))
def test_a_target_outside_the_choices_is_refused_naming_it(tmp_path: Path, target: str) -> None:
    if target in ("job", "jobset", "minicluster") or target.lower() in (
        "yes",
        "no",
        "on",
        "off",
        "true",
        "false",
        "y",
        "n",
        "null",
    ):
        return
    said = _refusal(tmp_path, "target", target)
    assert f'not "{target}"' in said and "'jobset'" in said, said


def test_an_empty_target_is_refused_saying_it_is_empty(tmp_path: Path) -> None:
    said = _refusal(tmp_path, "target", "")
    assert "not null" in said and "leave the key out" in said, said
