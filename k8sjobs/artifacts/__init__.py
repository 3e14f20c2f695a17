"""OCI artifacts for k8sjobs: push and pull files between steps through an OCI registry
(``Registry``) or a local OCI layout directory (``OCILayout``), in the ORAS format.

    async with open_store("127.0.0.1:5000", plain_http=True) as store:
        result = await store.push("study/train:v1", ["model.bin", "logs/"])
        await store.pull(result.pinned, "inputs/")
"""

from __future__ import annotations

import typing as _typing

from .._lazy import lazy_exports as _lazy_exports
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

if _typing.TYPE_CHECKING:
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

# Where each public name lives, imported on first use: the handoff entry point imports the
# registry stack (aiohttp) only when it has something to pull or push.
_HOMES = {
    "ArtifactStore": "._store",
    "Compression": "._tarball",
    "Credentials": "._auth",
    "DEFAULT_ARTIFACT_TYPE": "._media",
    "Descriptor": "._media",
    "DigestCache": "._digest",
    "Manifest": "._media",
    "OCILayout": "._layout",
    "ProgressCallback": "._transfer",
    "ProgressEvent": "._transfer",
    "PullLimits": "._limits",
    "PullResult": "._transfer",
    "PushResult": "._transfer",
    "Reference": "._reference",
    "Registry": "._registry",
    "RetryPolicy": "._http",
    "Timeouts": "._http",
    "open_store": "._store",
    "parse_reference": "._reference",
}


__getattr__, __dir__ = _lazy_exports(__name__, _HOMES)


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
