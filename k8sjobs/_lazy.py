"""Lazy public names for a package: each is imported from its home module on first use.

``python -m k8sjobs.handoff`` (every pod's handoff containers) imports ``k8sjobs`` and
``k8sjobs.artifacts``; eager re-exports would make it pay for pydantic, yaml and aiohttp
before it knows whether it has anything to do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return the module ``__getattr__`` and ``__dir__`` for ``package``, whose public names
    live in the modules ``homes`` names (relative to ``package``); a name imported once is
    kept in the package's namespace, so later lookups never come back here."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(homes[name], package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__
