"""k8sjobs: run scientific workflow steps as Kubernetes Jobs, with artifacts handed over.

The public API is what this module exports; everything else is private to the package.
"""

from __future__ import annotations

from ._version import __version__ as __version__
from .artifacts import open_store
from .errors import (
    AlreadyExists,
    ApiError,
    ArtifactNotFound,
    AuthenticationError,
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
from .handle import StepHandle
from .render import Manifests, Target, render
from .session import Session, default_session, submit_step
from .spec import Resources, SecretKeyRef, Step, StepOutput, Toleration
from .state import StepResult, StepState
from .study import Study, StudyRun, load_study

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ArtifactNotFound",
    "AuthenticationError",
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
    "default_session",
    "load_study",
    "open_store",
    "render",
    "submit_step",
]
