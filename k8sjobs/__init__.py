"""k8sjobs: run scientific workflow steps as Kubernetes Jobs, with artifacts handed over.

The public API is what this module exports; everything else is private to the package.
"""

from __future__ import annotations

from .errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    K8sJobsError,
    NotFound,
    ServerUnavailable,
    SessionClosed,
    SpecMismatch,
    StepFailed,
    StudyError,
)
from .handle import StepHandle
from .render import Manifests, Target, render
from .session import Session, default_session, submit_step
from .spec import Resources, SecretKeyRef, Step, StepOutput, Toleration
from .state import StepResult, StepState
from .study import Study, StudyRun, load_study

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "ApiError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "K8sJobsError",
    "Manifests",
    "NotFound",
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
    "default_session",
    "load_study",
    "render",
    "submit_step",
]
