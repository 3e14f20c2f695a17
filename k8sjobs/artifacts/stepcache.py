"""The step cache: one small OCI artifact per step key, kept in the study's artifact store.

A step that succeeded leaves a *result record* under ``k8sjobs/cache:<key hex>`` (in the
registry or the OCI layout its outputs went to): an artifact with no content of its own whose
manifest annotation ``k8sjobs.io/step-result`` holds, as JSON, the exit code, the times, where
it ran (study, step, backend, namespace, Job) and, for each output, its pinned reference and
its manifest's very bytes. So a later run that meets the same key reads one manifest (one
request) and re-tags each output under its own study's and step's names with one manifest
PUT: no blob is read or copied (in a registry, blobs another repository holds are mounted
into the new one first, a request per blob, only the first time a study reuses another's
step). Records live as long as the store keeps them, shared by every driver and study that
uses it; clearing them is deleting that repository's tags (``k8sjobs cache clear``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .._version import __version__
from ..errors import ArtifactNotFound, RegistryError
from . import _media
from ._media import Descriptor
from ._reference import Reference, parse_reference, pin

__all__ = [
    "CACHE_REPOSITORY",
    "RESULT_TYPE",
    "CacheStore",
    "CachedOutput",
    "ResultRecord",
    "StepCache",
    "content_digest",
    "record_reference",
]

_log = logging.getLogger(__name__)

#: The repository (under the store's prefix) that holds one tag per step key.
CACHE_REPOSITORY = "k8sjobs/cache"
#: The artifactType of a result record.
RESULT_TYPE = "application/vnd.k8sjobs.step-result.v1+json"
_ANNOTATION = "k8sjobs.io/step-result"


@dataclass(frozen=True)
class CachedOutput:
    """One output of a recorded success: where it was pushed, and its manifest's bytes."""

    reference: str  # pinned: repository@sha256:...
    manifest: bytes
    media_type: str = _media.MANIFEST

    @property
    def digest(self) -> str:
        """Return the digest the reference is pinned to."""
        return self.reference.rpartition("@")[2]


@dataclass(frozen=True)
class ResultRecord:
    """A step's recorded success: what a later run with the same key reuses."""

    key: str
    study: str
    step: str
    outputs: Mapping[str, CachedOutput] = field(default_factory=dict)
    exit_code: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    backend: str = ""
    namespace: str = ""
    object_name: str = ""
    version: str = __version__

    def to_json(self) -> dict[str, Any]:
        """Return the record as plain JSON data (manifests in base64)."""

        def stamp(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "key": self.key,
            "study": self.study,
            "step": self.step,
            "exit_code": self.exit_code,
            "started_at": stamp(self.started_at),
            "finished_at": stamp(self.finished_at),
            "backend": self.backend,
            "namespace": self.namespace,
            "object_name": self.object_name,
            "k8sjobs_version": self.version,
            "outputs": {
                name: {
                    "reference": out.reference,
                    "media_type": out.media_type,
                    "manifest": base64.b64encode(out.manifest).decode(),
                }
                for name, out in self.outputs.items()
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> ResultRecord:
        """Return the record in ``data``; raise ValueError (or KeyError) when malformed."""

        def when(value: Any) -> datetime | None:
            return None if value is None else datetime.fromisoformat(str(value))

        outputs = {}
        for name, out in dict(data["outputs"]).items():
            manifest = base64.b64decode(out["manifest"], validate=True)
            reference = str(out["reference"])
            digest = reference.rpartition("@")[2]
            if _media.digest_like(manifest, digest) != digest:
                raise ValueError(f'output "{name}": its manifest does not match {reference}')
            outputs[str(name)] = CachedOutput(reference, manifest, str(out["media_type"]))
        return cls(
            key=str(data["key"]),
            study=str(data["study"]),
            step=str(data["step"]),
            outputs=outputs,
            exit_code=int(data["exit_code"]),
            started_at=when(data.get("started_at")),
            finished_at=when(data.get("finished_at")),
            backend=str(data.get("backend", "")),
            namespace=str(data.get("namespace", "")),
            object_name=str(data.get("object_name", "")),
            version=str(data.get("k8sjobs_version", "")),
        )


class CacheStore(Protocol):
    """What the cache needs of a store: Registry and OCILayout both are one."""

    def _ref(self, reference: str) -> Reference: ...

    async def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]: ...

    async def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str: ...

    async def has_blob(self, ref: Reference, digest: str) -> bool: ...

    async def put_blob_bytes(self, ref: Reference, data: bytes, digest: str) -> None: ...

    async def mount_blob(self, dst: Reference, desc: Descriptor, src: Reference) -> None: ...

    async def resolve(self, reference: str) -> str: ...

    async def delete(self, reference: str) -> None: ...

    async def aclose(self) -> None: ...


def content_digest(manifest: bytes, where: str = "an input") -> str:
    """Return ``sha256:<hex>`` over what an artifact holds: its layers' titles, media types
    and digests, not its annotations.

    A pushed output's manifest carries its lineage (times, exit code, where it ran), so two
    pushes of the same bytes have different manifest digests; a step's key takes its
    inputs by this digest instead, so re-running a producer that makes the same files does
    not make its readers run.
    """
    parsed = _media.decode_manifest(manifest, where)
    layers = sorted((d.title or "", d.media_type, d.digest) for d in parsed.layers)
    canonical = json.dumps(layers, separators=(",", ":")).encode()
    return _media.sha256_digest(canonical)


def record_reference(key: str) -> str:
    """Return the reference of the record for ``key`` (``k8sjobs/cache:<hex>``)."""
    algorithm, _, hexpart = key.partition(":")
    if algorithm != "sha256" or len(hexpart) != 64:
        raise ValueError(f'"{key}" is not a step key (sha256:<64 hex digits>)')
    return f"{CACHE_REPOSITORY}:{hexpart}"


class StepCache:
    """Reads and writes result records in one artifact store (a Registry or an OCILayout).

    ``requests`` counts the store requests made, for benchmarks and tests (a reuse should
    cost one read and one manifest PUT per output).
    """

    def __init__(self, store: CacheStore) -> None:
        self.store = store
        self.requests = 0  # network requests: a layout's file reads are not counted
        self.local = type(store).__name__ == "OCILayout"
        self._config_stored = False

    def _ref(self, reference: str) -> Reference:
        return self.store._ref(reference)  # the store's own naming (its prefix, its host)

    async def lookup(self, key: str) -> ResultRecord | None:
        """Return the record of ``key``, or None when there is none (or it is unreadable).

        One manifest GET. A record that does not parse, or that names another key, is
        ignored (and logged): it can only make the step run again, never stand for it.
        """
        ref = self._ref(record_reference(key))
        self.requests += 1
        try:
            data, _, _ = await self.store.get_manifest(ref)
        except ArtifactNotFound:
            return None
        try:
            manifest = _media.decode_manifest(data, str(ref))
            record = ResultRecord.from_json(json.loads(manifest.annotations[_ANNOTATION]))
        except (KeyError, ValueError, TypeError, RegistryError) as exc:
            _log.warning("ignoring the unreadable step result %s: %s", ref, exc)
            return None
        if record.key != key:
            _log.warning("ignoring the step result %s: it records key %s", ref, record.key)
            return None
        return record

    async def save(self, record: ResultRecord) -> None:
        """Store ``record`` under its key (replacing an older record of that key)."""
        ref = self._ref(record_reference(record.key))
        if not self._config_stored:
            self.requests += 1
            if not await self.store.has_blob(ref, _media.EMPTY_CONFIG_DIGEST):
                self.requests += 1
                await self.store.put_blob_bytes(
                    ref, _media.EMPTY_CONFIG_DATA, _media.EMPTY_CONFIG_DIGEST
                )
            self._config_stored = True
        annotations = {
            _ANNOTATION: json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")),
            "org.opencontainers.image.created": (
                record.finished_at.isoformat() if record.finished_at else ""
            ),
        }
        manifest = _media.build_manifest([], RESULT_TYPE, annotations)
        self.requests += 1
        await self.store.put_manifest(ref, _media.encode_manifest(manifest), _media.MANIFEST)

    async def manifest_of(self, reference: str) -> tuple[bytes, str]:
        """Return the manifest bytes and digest ``reference`` names (one GET)."""
        self.requests += 1
        data, _, digest = await self.store.get_manifest(self._ref(reference))
        return data, digest

    async def output_of(self, reference: str) -> CachedOutput:
        """Return a pushed output as a record keeps it: pinned reference and manifest bytes."""
        ref = self._ref(reference)
        self.requests += 1
        data, media_type, digest = await self.store.get_manifest(ref)
        return CachedOutput(pin(reference, digest), data, media_type)

    async def retag(self, output: CachedOutput, reference: str) -> str:
        """Point ``reference`` (a ``repository:tag``) at ``output``; return it pinned.

        One manifest PUT. A registry refuses a manifest whose blobs its repository lacks:
        then each blob is mounted from the repository that holds it (no data moves) and
        the PUT is made again.
        """
        target = self._ref(reference)
        if self.local:
            # A layout takes any manifest: check its blobs are still there (file stats, no
            # network), as a registry does on the PUT, or a reader would pull a hole.
            manifest = _media.decode_manifest(output.manifest, output.reference)
            for blob in manifest.blobs():
                if not await self.store.has_blob(target, blob.digest):
                    raise ArtifactNotFound(f"{output.reference}: blob {blob.digest} is gone")
        self.requests += 1
        try:
            await self.store.put_manifest(target, output.manifest, output.media_type)
        except RegistryError as exc:
            if not _blob_unknown(exc):
                raise
            source = self._ref(_unpinned(output.reference))
            manifest = _media.decode_manifest(output.manifest, output.reference)
            for blob in manifest.blobs():
                self.requests += 1
                await self.store.mount_blob(target, blob, source)
            self.requests += 1
            await self.store.put_manifest(target, output.manifest, output.media_type)
        return pin(reference, output.digest)

    async def forget(self, key: str) -> bool:
        """Delete the record of ``key``; return whether there was one."""
        try:
            await self.store.delete(record_reference(key))
        except ArtifactNotFound:
            return False
        return True


def _unpinned(reference: str) -> str:
    """Return ``reference`` without its tag or digest (its repository, with host)."""
    ref = parse_reference(reference)
    return f"{ref.registry}/{ref.repository}" if ref.registry else ref.repository


def _blob_unknown(exc: RegistryError) -> bool:
    text = str(exc)
    return "BLOB_UNKNOWN" in text or "blob unknown" in text.lower()
