"""Loaded by maestrowf's adapter scan as ``maestrowf.interfaces.script.kubernetes``.

Exposes KubernetesScriptAdapter to ``ScriptAdapterFactory``. A k8sjobs that cannot be
imported is reported and skipped, so that it never breaks Maestro for other adapters.
"""

from __future__ import annotations

import logging

try:
    from k8sjobs.maestro import KubernetesScriptAdapter
except Exception as exc:  # pragma: no cover - exercised only by a broken install
    logging.getLogger("k8sjobs.maestro").warning(
        "k8sjobs is installed but its Maestro adapter could not be loaded: %s", exc
    )
else:
    __all__ = ["KubernetesScriptAdapter"]
