"""Kubernetes backend: a thin REST client, shared watches, and Job status judgement.

``KubernetesBackend`` is what ``Session(backend="kubernetes")`` uses; ``judge`` is the
pure function mapping a Job and its pods to a ``StepResult``.
"""

from __future__ import annotations

from .backend import KubernetesBackend
from .client import ClientOptions, KubeClient
from .config import ClusterConfig, load_config
from .status import judge

__all__ = [
    "ClientOptions",
    "ClusterConfig",
    "KubeClient",
    "KubernetesBackend",
    "judge",
    "load_config",
]
