"""Text from elsewhere made safe for a terminal: the one escaping every human view uses.

Step names, reasons, server messages, log headers and artifact annotations can come from
another team's store or a cluster's events. Printed raw, a control character is an
instruction to the terminal (``ESC]0;...BEL`` retitles the window, ``ESC[2J`` clears it, a
carriage return overwrites the line, a bidi override reorders what follows) instead of
text. ``printable`` shows each such character as its Python escape, so what is printed is
what is there.
"""

from __future__ import annotations

import re

__all__ = ["printable", "unsafe"]

_ASCII_SAFE = re.compile(r"[\x20-\x7e]*")


def unsafe(char: str) -> bool:
    """Return whether ``char`` is not plain text to a terminal: a control (C0, DEL, C1), a
    format character (bidi overrides, zero-width marks), a separator other than the space,
    a surrogate, or unassigned (``str.isprintable``'s rule)."""
    return not char.isprintable()


def printable(text: str) -> str:
    """Return ``text`` with every character a terminal would act on escaped (``\\x1b``,
    ``\\u202e``); text without one is returned unchanged."""
    if _ASCII_SAFE.fullmatch(text):
        return text  # the common case, without a look at each character
    return "".join(_escape(c) if not c.isprintable() else c for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
