"""Kubernetes backend: a thin REST client and shared watches.

``KubernetesBackend`` is what ``Session(backend="kubernetes")`` uses; ``judge`` (the pure
function mapping a Job and its pods to a ``StepResult``) lives in ``k8sjobs.status``, where
both backends stand, and is re-exported here for existing callers.
"""

from __future__ import annotations

from ..status import judge
from .backend import KubernetesBackend
from .client import ClientOptions, KubeClient
from .config import ClusterConfig, load_config

__all__ = [
    "ClientOptions",
    "ClusterConfig",
    "KubeClient",
    "KubernetesBackend",
    "judge",
    "load_config",
]
