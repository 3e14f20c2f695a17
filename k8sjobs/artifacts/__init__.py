"""OCI artifacts for k8sjobs: push and pull files between steps through an OCI registry
(``Registry``) or a local OCI layout directory (``OCILayout``), in the ORAS format.

    async with open_store("127.0.0.1:5000", plain_http=True) as store:
        result = await store.push("study/train:v1", ["model.bin", "logs/"])
        await store.pull(result.pinned, "inputs/")
"""

from __future__ import annotations

from ..errors import (
    ArtifactNotFound,
    AuthenticationError,
    DigestMismatch,
    InvalidReference,
    LimitExceeded,
    RegistryError,
    RegistryUnavailable,
    UnsafeArchive,
    UploadFailed,
)
from ._auth import Credentials
from ._digest import DigestCache
from ._http import RetryPolicy, Timeouts
from ._layout import OCILayout
from ._limits import PullLimits
from ._media import DEFAULT_ARTIFACT_TYPE, Descriptor, Manifest
from ._reference import Reference, parse_reference
from ._registry import Registry
from ._store import ArtifactStore, open_store
from ._tarball import Compression
from ._transfer import ProgressCallback, ProgressEvent, PullResult, PushResult

__all__ = [
    "DEFAULT_ARTIFACT_TYPE",
    "ArtifactNotFound",
    "ArtifactStore",
    "AuthenticationError",
    "Compression",
    "Credentials",
    "Descriptor",
    "DigestCache",
    "DigestMismatch",
    "InvalidReference",
    "LimitExceeded",
    "Manifest",
    "OCILayout",
    "ProgressCallback",
    "ProgressEvent",
    "PullLimits",
    "PullResult",
    "PushResult",
    "Reference",
    "Registry",
    "RegistryError",
    "RegistryUnavailable",
    "RetryPolicy",
    "Timeouts",
    "UnsafeArchive",
    "UploadFailed",
    "open_store",
    "parse_reference",
]
