"""What the commands write to a terminal: rich's Console, and the one-line error.

Apart from the options (options.py): building the parser, as ``--help`` does, must not load
rich; a command imports this module when it runs.
"""

from __future__ import annotations

from rich import console as _rich
from rich.text import Text

from .._printable import printable

__all__ = ["Console", "in_cli_words", "print_error"]


class Console(_rich.Console):
    """rich's Console whose closed stdout ends the command as every other write does.

    rich answers a reader that left with its own ``SystemExit(1)``; raising
    ``BrokenPipeError`` instead lets the entry point end quietly with 141, as ``cat``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def print_error(message: str) -> None:
    """Print ``message`` as one ``error:`` line on stderr, in the CLI's words, its control
    characters escaped: an error can quote a server, a store or a path (rich drops BEL but
    passes ESC, C1 controls and bidi overrides)."""
    text = printable(" ".join(in_cli_words(message).split()))  # one line, whatever it held
    error = Text("error: ", style="bold red").append(text)
    Console(stderr=True, soft_wrap=True).print(error, highlight=False)


# The Python API's words in messages, and what a shell user types instead.
_CLI_WORDS = (
    ("pass kubeconfig=...", "give --kubeconfig FILE (or run on this machine: --backend local)"),
    ("pass plain_http=True", "give --plain-http"),
    ("plain_http=True", "--plain-http"),
    ("pass ca_file", "give --ca-file"),
    ("max_parallel", "--max-parallel"),
    ("handoff_image=", "--handoff-image "),
)


def in_cli_words(message: str) -> str:
    """Return ``message`` with the API's parameter names replaced by the CLI's options."""
    for api, cli in _CLI_WORDS:
        message = message.replace(api, cli)
    return message
