"""Read a text file the user named: bounded in size, UTF-8, and errors that say where.

A study file and a step's script file are read here, so that a file too large to hold (or
``/dev/zero``) is refused after a bounded read, and a file in another encoding is refused
naming the file, the line and the byte, rather than with a bare codec error.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["TextFileError", "read_text_file"]


class TextFileError(ValueError):
    """A text file that cannot be read, is too large, or is not UTF-8 (message says where)."""


def read_text_file(path: Path, *, limit: int, what: str) -> str:
    """Return the UTF-8 text of ``path`` (a ``what``), refusing more than ``limit`` bytes."""
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as exc:
        raise TextFileError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError:  # a NUL byte in the path
        raise TextFileError(f"cannot read {str(path)!r}: a path holds no NUL byte") from None
    if len(data) > limit:
        raise TextFileError(
            f"{path} is larger than {limit} bytes, the limit of a {what}; make it smaller"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TextFileError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); "
            f"save the {what} as UTF-8"
        ) from None
