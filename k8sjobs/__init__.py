"""k8sjobs: run scientific workflow steps as Kubernetes Jobs, with artifacts handed over.

The public API is what this module exports; everything else is private to the package.
"""

from __future__ import annotations

import sys as _sys
import types as _types
import typing as _typing

from ._lazy import lazy_exports as _lazy_exports
from ._version import __version__ as __version__
from .errors import (
    AllocationRefused,
    AlreadyExists,
    ApiError,
    ArtifactNotFound,
    AuthenticationError,
    ClusterUnreachable,
    ConfigError,
    Conflict,
    DigestMismatch,
    Forbidden,
    Gone,
    Invalid,
    InvalidReference,
    K8sJobsError,
    LimitExceeded,
    NotFound,
    RegistryError,
    RegistryUnavailable,
    ServerUnavailable,
    SessionClosed,
    SpecMismatch,
    StepFailed,
    StudyError,
    UnsafeArchive,
    UploadFailed,
)

if _typing.TYPE_CHECKING:
    from ._display import result_table
    from .artifacts import open_store
    from .handle import StepHandle
    from .render import Manifests, Target, render
    from .session import Session, default_session, submit_step
    from .state import StepResult, StepState
    from .steps import (
        Affinity,
        Allocation,
        Resources,
        SecretKeyRef,
        Step,
        StepOutput,
        Toleration,
        Volume,
    )
    from .study import Study, StudyRun, load_study
    from .usage import Usage

# Where each public name lives, imported on first use: ``python -m k8sjobs.handoff`` (every
# pod's handoff containers) imports this package, and must not pay for pydantic and yaml.
_HOMES = {
    "Affinity": ".steps",
    "Allocation": ".steps",
    "Manifests": ".render",
    "Resources": ".steps",
    "SecretKeyRef": ".steps",
    "Session": ".session",
    "Step": ".steps",
    "StepHandle": ".handle",
    "StepOutput": ".steps",
    "StepResult": ".state",
    "StepState": ".state",
    "Study": ".study",
    "StudyRun": ".study",
    "Target": ".render",
    "Toleration": ".steps",
    "Usage": ".usage",
    "Volume": ".steps",
    "default_session": ".session",
    "load_study": ".study",
    "open_store": ".artifacts",
    "render": ".render",
    "result_table": "._display",
    "submit_step": ".session",
}


__getattr__, __dir__ = _lazy_exports(__name__, _HOMES)


class _Package(_types.ModuleType):
    """The package, keeping ``k8sjobs.render`` the function once ``k8sjobs.render`` the module
    is imported (the import system sets a submodule as its parent's attribute; an eager
    ``from .render import render`` used to override it)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _HOMES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


__all__ = [
    "Affinity",
    "Allocation",
    "AllocationRefused",
    "AlreadyExists",
    "ApiError",
    "ArtifactNotFound",
    "AuthenticationError",
    "ClusterUnreachable",
    "ConfigError",
    "Conflict",
    "DigestMismatch",
    "Forbidden",
    "Gone",
    "Invalid",
    "InvalidReference",
    "K8sJobsError",
    "LimitExceeded",
    "Manifests",
    "NotFound",
    "RegistryError",
    "RegistryUnavailable",
    "Resources",
    "SecretKeyRef",
    "ServerUnavailable",
    "Session",
    "SessionClosed",
    "SpecMismatch",
    "Step",
    "StepFailed",
    "StepHandle",
    "StepOutput",
    "StepResult",
    "StepState",
    "Study",
    "StudyError",
    "StudyRun",
    "Target",
    "Toleration",
    "UnsafeArchive",
    "UploadFailed",
    "Usage",
    "Volume",
    "default_session",
    "load_study",
    "open_store",
    "render",
    "result_table",
    "submit_step",
]
