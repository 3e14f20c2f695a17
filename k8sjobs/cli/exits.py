"""How the command ends when its process is interrupted or its reader leaves.

Standard library only: the entry point uses it before any heavy module has loaded.
"""

from __future__ import annotations

import sys

__all__ = ["closed_pipe", "interrupted"]


def interrupted() -> int:
    """Say in one line that Ctrl-C ended the command; return its exit code, 130."""
    print("interrupted (Ctrl-C)", file=sys.stderr)
    return 130


def closed_pipe() -> int:
    """End quietly when the reader of stdout went away (``| head``), as ``cat`` does.

    Python would otherwise report the failed flush of stdout at exit; pointing stdout at
    /dev/null lets that flush succeed. The code is the shell's for a SIGPIPE death (141).
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's StringIO): nothing to flush
        pass
    return 141
