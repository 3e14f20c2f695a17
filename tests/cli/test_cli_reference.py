"""docs/cli.md is the reference of every command and option, and the help is complete
(issue 28 item 4 and "done means"): every option has a line of help, a command lists only
the options that apply to it, no reST backticks, hints a shell can take as they are."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from k8sjobs.cli.main import build_parser
from k8sjobs.cli.reference import BEGIN, END, commands, reference_markdown

from .test_cli_commands import k8sjobs, study_file

DOCS = Path(__file__).parents[2] / "docs" / "cli.md"
COMMANDS = [" ".join(words) for words, _ in commands(build_parser())]


def test_docs_cli_md_holds_the_reference_of_the_parser() -> None:
    text = DOCS.read_text()
    documented = BEGIN + text.partition(BEGIN)[2].partition(END)[0] + END + "\n"
    assert documented == reference_markdown(), (
        "docs/cli.md's reference differs from the parser: run "
        "python -m k8sjobs.cli.reference --write docs/cli.md"
    )


def test_the_reference_names_every_command_and_option() -> None:
    text = DOCS.read_text()
    for words, parser in commands(build_parser()):
        assert f"### k8sjobs {' '.join(words)}\n" in text
        for action in parser._actions:
            for option in action.option_strings:
                assert f"`{option}" in text, (words, option)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_option_has_a_line_of_help(command: str) -> None:
    parser = dict(((" ".join(w), p) for w, p in commands(build_parser())))
    chosen = parser.get(command, build_parser())
    for action in chosen._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (command, action.dest)
        assert "`" not in action.help, (command, action.help)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_has_no_rest_backticks(command: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", *command.split(), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "`" not in shown


@pytest.mark.parametrize(
    ("command", "absent"),
    [
        ("report", {"--backend", "--kubeconfig", "--namespace", "--registry", "--volume"}),
        ("render", {"--backend", "--kubeconfig", "--state-dir", "--volume", "--cpu"}),
        ("rbac", {"--backend", "--kubeconfig", "--state-dir", "--registry"}),
        ("status", {"--registry", "--cpu", "--volume", "--handoff-image", "--max-parallel"}),
        ("logs", {"--registry", "--cpu", "--volume", "--output", "--watch"}),
        ("image build", {"--backend", "--namespace", "--state-dir"}),
        ("artifact push", {"--backend", "--namespace", "--kubeconfig"}),
    ],
)
def test_a_command_lists_only_the_options_that_apply_to_it(command: str, absent: set[str]) -> None:
    parser = dict(((" ".join(w), p) for w, p in commands(build_parser())))[command]
    options = {o for a in parser._actions for o in a.option_strings}
    assert not options & absent


def test_hint_lines_are_shell_quoted(tmp_path: Path) -> None:
    study_file(tmp_path, "name: My Study!\nsteps:\n  - name: a\n    script: echo hi\n")
    out = k8sjobs(tmp_path, "run", "study.yaml", check=0).stdout
    hint = re.search(r"timeline: (.*) \(run data", out)
    assert hint is not None, out
    assert hint.group(1) == "k8sjobs report 'My Study!'"
    # As pasted into a shell, it works.
    done = subprocess.run(
        f"{sys.executable} -m k8sjobs.cli report {hint.group(1).removeprefix('k8sjobs report ')}",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
