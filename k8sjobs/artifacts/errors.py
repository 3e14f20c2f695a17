"""The artifact errors, for the modules of this package; they live in ``k8sjobs.errors``."""

from __future__ import annotations

from ..errors import (
    ArtifactNotFound,
    AuthenticationError,
    DigestMismatch,
    InvalidReference,
    RegistryError,
    RegistryUnavailable,
    UnsafeArchive,
    UploadFailed,
)

__all__ = [
    "ArtifactNotFound",
    "AuthenticationError",
    "DigestMismatch",
    "InvalidReference",
    "RegistryError",
    "RegistryUnavailable",
    "UnsafeArchive",
    "UploadFailed",
]
