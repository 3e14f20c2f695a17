"""A mistyped command or option gets a "did you mean" and the help of the command given.

The cases are drawn from the parser itself (every command, every long option of every
command), so a command added later is covered without touching this file.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.cli.main import build_parser, main


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


_ALL = _commands(build_parser())
_OPTIONS = [
    (path, option)
    for path, parser in _ALL
    if path
    for option in parser._option_string_actions
    if option.startswith("--") and len(option) > 6 and option not in ("--help", "--version")
]


def _error(argv: list[str]) -> str:
    err = io.StringIO()
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as caught,
    ):
        main(argv)
    assert caught.value.code == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _swap(word: str, at: int) -> str:
    at = 2 + at % (len(word) - 3)  # keep "--" and swap two letters of the name
    return word[:at] + word[at + 1] + word[at] + word[at + 2 :]


@given(st.sampled_from([(p, o) for p, o in _OPTIONS]), st.integers(0, 100))
@settings(max_examples=150, deadline=None)
def test_any_mistyped_option_of_any_command_suggests_it_and_that_commands_help(
    case: tuple[tuple[str, ...], str], at: int
) -> None:
    path, option = case
    typo = _swap(option, at)
    if typo == option:
        return
    line = _error([*path, typo])
    prog = " ".join(("k8sjobs", *path))
    assert f"unrecognized arguments: {typo}" in line, line
    assert line.endswith(f"(see: {prog} --help)"), line
    assert "did you mean --" in line, line


@pytest.mark.parametrize(
    ("path", "name"),
    [(path[:-1], path[-1]) for path, _ in _ALL if path and len(path[-1]) >= 4],
)
def test_any_mistyped_command_suggests_the_command(path: tuple[str, ...], name: str) -> None:
    typo = name[0] + name[2] + name[1] + name[3:]
    line = _error([*path, typo])
    assert f'"{typo}" is not a command; did you mean "{name}"?' in line, line
    assert line.endswith(f"(see: {' '.join(('k8sjobs', *path))} --help)"), line


def test_an_unknown_option_far_from_any_gets_no_guess_but_the_commands_help() -> None:
    line = _error(["run", "--bogus", "s.yaml"])
    assert line == (
        "error: k8sjobs run: unrecognized arguments: --bogus (see: k8sjobs run --help)"
    ), line


_CHOICES = [
    (path, action)
    for path, parser in _ALL
    for action in parser._actions
    if action.choices and action.option_strings and not isinstance(action.choices, dict)
]


@pytest.mark.parametrize(
    ("path", "action"), _CHOICES, ids=[f"{' '.join(p)} {a.option_strings[-1]}" for p, a in _CHOICES]
)
def test_a_value_outside_an_options_choices_names_the_option_not_a_command(
    path: tuple[str, ...], action: argparse.Action
) -> None:
    """``status -o bogus`` said '"bogus" is not a command (commands: table, wide, ...)'."""
    option = action.option_strings[-1]
    assert action.choices is not None
    first = sorted(str(c) for c in action.choices)[0]
    line = _error([*path, option, first + "x"])
    assert f'{option}: "{first}x" is not one of ' in line, line
    assert "not a command" not in line, line
    assert f'did you mean "{first}"?' in line, line
