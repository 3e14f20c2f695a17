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
    _open_closed_streams()
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


def _open_closed_streams() -> None:
    """Point a standard stream the caller closed (``k8sjobs status >&-``) at /dev/null.

    Python starts with ``sys.stdout`` (or stderr, stdin) None when its descriptor was
    closed: every command's first write, or the parser's ``sys.stderr.isatty()``, was an
    AttributeError traceback, and the next file the command opened took the free
    descriptor, where a step's process would write as its stdout. As ``print`` does with a
    None stdout, what would go there is dropped; the exit code is the command's.
    """
    import os

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:  # closed: take the descriptor back before any file can have it
            devnull = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115
