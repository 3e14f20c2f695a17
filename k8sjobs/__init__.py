"""k8sjobs: run scientific workflow steps as Kubernetes Jobs."""

from __future__ import annotations

__version__ = "0.1.0"
