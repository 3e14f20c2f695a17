"""Errors raised by k8sjobs.artifacts.

The tree::

    RegistryError                  any failure to store or fetch an artifact
    ├── InvalidReference           a reference or store location that cannot be parsed
    ├── AuthenticationError        credentials missing, wrong, or refused (401/403)
    ├── ArtifactNotFound           the manifest or blob does not exist (404)
    ├── DigestMismatch             the bytes received do not match their digest or size
    ├── UnsafeArchive              a directory archive would write outside its target
    ├── RegistryUnavailable        connection refused, timed out, or 5xx after retries
    └── UploadFailed               the registry rejected an upload

Messages are full sentences naming the reference and the cause; they never hold a secret.
"""

from __future__ import annotations

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


class RegistryError(Exception):
    """Base class: storing or fetching an artifact failed."""


class InvalidReference(RegistryError, ValueError):
    """A reference or a store location could not be parsed."""


class AuthenticationError(RegistryError):
    """The registry refused the credentials, or asked for credentials none were given."""


class ArtifactNotFound(RegistryError):
    """The manifest, tag, or blob does not exist in the store."""


class DigestMismatch(RegistryError):
    """Received bytes do not match the digest or size that names them."""


class UnsafeArchive(RegistryError):
    """A directory archive holds a member that would escape its target directory."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached, timed out, or kept failing after retries."""


class UploadFailed(RegistryError):
    """The registry rejected an upload (a status that retrying will not fix)."""
