"""The Maestro (maestrowf) plug-in: run the steps of a Maestro study as Kubernetes Jobs.

- ``adapter``: ``KubernetesScriptAdapter`` and its ``batch:`` settings;
- ``_hook``: the import hook that shows the adapter to ``maestro run`` (standard library
  only: ``k8sjobs-maestro.pth`` loads it by path at interpreter start);
- ``_adapters``: the directory maestrowf's adapter scan reads (one module, ``kubernetes``);
- ``k8sjobs-maestro.pth``: shipped at the top of site-packages by setup.py, for a wheel and
  an editable install alike.

Importing this package imports maestrowf (the ``maestro`` extra).
"""

from __future__ import annotations

from .adapter import (
    ANNOTATION_LOG,
    ANNOTATION_WORKSPACE,
    LABEL_ADAPTER,
    BatchSettings,
    KubernetesScriptAdapter,
    StepSettings,
    format_job_id,
    maestro_state,
    parse_job_id,
)

# Maestro pickles its study (adapter included): the public path stays the one to load from.
KubernetesScriptAdapter.__module__ = __name__

__all__ = [
    "ANNOTATION_LOG",
    "ANNOTATION_WORKSPACE",
    "LABEL_ADAPTER",
    "BatchSettings",
    "KubernetesScriptAdapter",
    "StepSettings",
    "format_job_id",
    "maestro_state",
    "parse_job_id",
]
