"""The ArtifactStore protocol that Registry and OCILayout share, and ``open_store``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from ..errors import InvalidReference
from . import _media
from ._layout import OCILayout
from ._limits import PullLimits
from ._reference import redact
from ._tarball import Compression
from ._transfer import ProgressCallback, PullResult, PushResult

if TYPE_CHECKING:  # the registry stack (aiohttp) is imported when a registry is opened
    from ._auth import Credentials
    from ._http import RetryPolicy, Timeouts


class ArtifactStore(Protocol):
    """Where artifacts live: an OCI registry or an OCI layout directory."""

    async def push(
        self,
        reference: str,
        paths: Sequence[str | Path],
        *,
        artifact_type: str | None = _media.DEFAULT_ARTIFACT_TYPE,
        annotations: dict[str, str] | None = None,
        compression: Compression = "gzip",
        level: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> PushResult: ...

    async def pull(
        self,
        reference: str,
        target: str | Path,
        *,
        progress: ProgressCallback | None = None,
        limits: PullLimits | None = None,
    ) -> PullResult: ...

    async def resolve(self, reference: str) -> str: ...

    async def exists(self, reference: str) -> bool: ...

    async def tags(self, repository: str) -> list[str]: ...

    async def delete(self, reference: str) -> None: ...

    async def copy(self, source: str, destination: str) -> str: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> ArtifactStore: ...

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def open_store(
    location: str,
    *,
    plain_http: bool = False,
    ca_file: str | None = None,
    credentials: Credentials | None = None,
    timeouts: Timeouts | None = None,
    retry: RetryPolicy | None = None,
    concurrency: int = 4,
) -> ArtifactStore:
    """Return the store a location names: ``oci:<path>`` is an OCILayout, else a Registry.

    >>> open_store("oci:/tmp/artifacts")
    OCILayout('/tmp/artifacts')
    >>> open_store("127.0.0.1:5000/team", plain_http=True)
    Registry('127.0.0.1:5000/team')
    """
    if location.startswith("oci:"):
        path = location[len("oci:") :]
        if not path:
            raise InvalidReference(
                'Store location "oci:" needs a directory, e.g. "oci:./artifacts".'
            )
        return OCILayout(path, concurrency=concurrency)
    if not location or "://" in location:
        raise InvalidReference(
            f'Store location "{redact(location)}" must be "oci:<dir>" or "host[:port][/prefix]" '
            "(no scheme: pass plain_http=True for an HTTP registry)."
        )
    from ._registry import Registry

    return Registry(
        location,
        plain_http=plain_http,
        ca_file=ca_file,
        username=credentials.username if credentials else None,
        password=credentials.password if credentials else None,
        timeouts=timeouts,
        retry=retry,
        concurrency=concurrency,
    )
