"""The ``k8sjobs`` command line: its commands (``main``), the live status table, the HTML
report, and the ``artifact`` and ``rbac`` subcommands. Nothing below it imports it."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
