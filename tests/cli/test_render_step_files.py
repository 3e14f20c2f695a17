"""`k8sjobs render FILE` with a file holding one step: its errors are located at file:line as a
study's are, and a study key mistyped (``step:`` for ``steps:``) says why the file was read as
one step, where pydantic's raw "1 validation error for Step" came out."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs.cli.main import main


def render(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Return render's exit code and its stderr (its stdout stays in ``capsys``)."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    code = main(["render", str(path)])
    captured = capsys.readouterr()
    print(captured.out, end="")  # for the test that reads the objects
    return code, captured.err


@pytest.mark.parametrize("key", ["step", "stepz", "Steps", "stps"])
def test_a_mistyped_steps_key_names_steps_and_why_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    code, err = render(tmp_path, f"name: t\n{key}:\n  - name: a\n    script: echo hi\n", capsys)
    assert code == 2
    assert err.startswith(f"error: {tmp_path / 's.yaml'}:"), err
    assert f'"{key}" is not a step key; did you mean "steps"?' in err
    assert "validation error for Step" not in err


def test_a_bad_field_of_a_step_file_is_located_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "name: t\nscript: echo hi\nresources:\n  cores_per_task: lots\n"
    code, err = render(tmp_path, text, capsys)
    assert code == 2
    assert err.startswith(f'error: {tmp_path / "s.yaml"}:4: step "t": resources.cores_per_task:')
    assert "validation error for Step" not in err


def test_a_step_file_without_a_name_says_so_at_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = render(tmp_path, "script: echo hi\n", capsys)
    assert code == 2
    assert "the step: name:" in err and "validation error for Step" not in err


def test_a_good_step_file_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = render(tmp_path, "name: t\nscript: echo hi\n", capsys)
    assert (code, err) == (0, "")
    assert "kind: Job" in capsys.readouterr().out
