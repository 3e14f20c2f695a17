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


def test_a_study_s_own_key_in_a_step_file_is_said_to_be_a_study_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``description:`` is no typo of a step key: the hint named the key itself ("did you
    mean \\"description\\"?")."""
    code, err = render(tmp_path, "description: a study\nscript: echo hi\n", capsys)
    assert code == 2
    assert '"description" is not a step key; it is a study\'s' in err
    assert "did you mean" not in err


MAESTRO = "description:\n  name: sweep\nbatch:\n  type: kubernetes\nstudy:\n  - name: a\n"


@pytest.mark.parametrize("command", ["render", "run"])
def test_a_maestro_study_file_is_named_as_one_with_the_command_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """examples/maestro/study.yaml given to k8sjobs: read key by key, it was "unknown key
    batch" (run) or a step key suggesting itself (render)."""
    path = tmp_path / "study.yaml"
    path.write_text(MAESTRO)
    code = main(["--state-dir", str(tmp_path), command, str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {path}:5: study: this is a Maestro study file"), err
    assert "maestro run (docs/maestro.md)" in err


def test_the_maestro_example_is_named_as_a_maestro_study(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = Path(__file__).parents[2] / "examples" / "maestro" / "study.yaml"
    assert main(["render", str(example)]) == 2
    assert "this is a Maestro study file" in capsys.readouterr().err
