"""The ``k8sjobs`` command line: its commands (``main``), the live status table, the HTML
report, and the ``artifact`` and ``rbac`` subcommands. Nothing below it imports it.

This module is the console script's entry point, so it imports nothing heavy itself: a
Ctrl-C while the commands' modules load (rich, pydantic: most of a second) must still end
with one line and exit 130, and ``--version`` must not pay for them at all (nor ``--help``,
which loads only the parser: main.py says how).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .exits import closed_pipe, interrupted

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the k8sjobs command line; return its exit code (130 on Ctrl-C at any moment)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if args == ["--version"]:
            from .._version import __version__

            print(f"k8sjobs {__version__}")
            return 0
        from .main import main as run

        try:
            code = run(args)
        finally:  # --help ends in SystemExit; its text is still in stdout's buffer
            sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        return closed_pipe()
