"""The reference of every ``k8sjobs`` command and option, as Markdown, made from the parser.

docs/cli.md holds it between two markers; tests/cli/test_cli_reference.py fails when it
differs from the parser. After adding a command or an option:

    python -m k8sjobs.cli.reference --write docs/cli.md
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from .main import build_parser

__all__ = ["BEGIN", "END", "commands", "reference_markdown", "write_into"]

BEGIN = "<!-- reference: made by python -m k8sjobs.cli.reference --write docs/cli.md -->"
END = "<!-- end of reference -->"
# Every command has these; the reference says so once rather than in every table.
_EVERYWHERE = {"-h", "-v", "-q"}


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Yield (the words naming a command, its parser) for every command that runs."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, (*words, name))


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    metavar = action.metavar or (
        "|".join(map(str, action.choices)) if action.choices else action.dest.upper()
    )
    return ", ".join(f"`{o} {metavar}`" for o in action.option_strings)


def _help(action: argparse.Action) -> str:
    text = (action.help or "") % {"default": action.default, "prog": "k8sjobs"}
    return re.sub(r"\s+", " ", text).replace("|", "\\|")


def _table(parser: argparse.ArgumentParser) -> list[str]:
    rows = [
        f"| {_invocation(a).replace('|', chr(92) + '|')} | {_help(a)} |"
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        and not _EVERYWHERE & set(a.option_strings)
    ]
    return ["| option | what |", "|---|---|", *rows] if rows else []


def reference_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Return the Markdown reference: the global options, then each command's."""
    parser = parser or build_parser()
    lines = [
        BEGIN,
        "",
        "Every command also takes `-h`/`--help`, `-v`/`--verbose` (repeatable) and "
        "`-q`/`--quiet`. The options of the top level (before the command):",
        "",
        *_table(parser),
    ]
    for words, sub in commands(parser):
        lines += ["", f"### k8sjobs {' '.join(words)}", ""]
        if sub.description:
            lines += [re.sub(r"\s+", " ", sub.description), ""]
        usage = re.sub(r"\s+", " ", sub.format_usage().removeprefix("usage: ")).strip()
        lines += [f"`{usage}`", ""]
        lines += _table(sub)
    return "\n".join([*lines, "", END]) + "\n"


def write_into(path: Path) -> None:
    """Replace the reference between the markers of ``path`` (or append it)."""
    text = path.read_text()
    fresh = reference_markdown()
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END + "\n")
        path.write_text(head + fresh + tail)
    else:
        path.write_text(text.rstrip("\n") + "\n\n## Reference\n\n" + fresh)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        write_into(Path(sys.argv[2]))
    else:
        sys.stdout.write(reference_markdown())
