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
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import anyio

from .._version import __version__
from ..errors import (
    ArtifactNotFound,
    DigestMismatch,
    InvalidReference,
    RegistryError,
    RegistryUnavailable,
)
from . import _media
from ._limits import PullLimits
from ._media import Descriptor
from ._reference import Reference, parse_reference, pin

__all__ = [
    "CACHE_REPOSITORY",
    "RESULT_TYPE",
    "CacheStore",
    "CachedOutput",
    "Cleared",
    "InputArchives",
    "ResultRecord",
    "StepCache",
    "UnreadableRecord",
    "archives_of",
    "claims_to_verify",
    "content_digest",
    "keys_of_tags",
    "record_reference",
]

_log = logging.getLogger(__name__)

#: The repository (under the store's prefix) that holds one tag per step key.
CACHE_REPOSITORY = "k8sjobs/cache"
#: The artifactType of a result record.
RESULT_TYPE = "application/vnd.k8sjobs.step-result.v1+json"
_ANNOTATION = "k8sjobs.io/step-result"
_CLEARED = "k8sjobs.io/step-result-cleared"


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
class InputArchives:
    """Which archives an input was when a result was made from it: its manifest's digest
    and, by title, the archive digest of each layer unpacked as a directory.

    A directory input is keyed by its files digest, a claim its layer carries; the archive
    a step pulled had that claim checked by the pull. A later input with the same key but
    another archive (a times-only re-push, or a forged claim) is checked before the record
    stands for it (``claims_to_verify``)."""

    manifest: str
    layers: Mapping[str, str] = field(default_factory=dict)


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
    #: The input archives the result was computed from; empty in a record written before
    #: they were recorded, whose every claimed directory is checked (``claims_to_verify``).
    inputs: Mapping[str, InputArchives] = field(default_factory=dict)

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
            "inputs": {
                name: {"manifest": one.manifest, "layers": dict(one.layers)}
                for name, one in self.inputs.items()
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> ResultRecord:
        """Return the record in ``data``, or raise UnreadableRecord naming the first field
        that is missing, of the wrong type or out of bounds.

        A record comes from a store that any tool (or another team) writes, so every field
        is checked before use: a value of another type, a number out of range, a reference
        that is not pinned or a manifest that does not match it makes the record unreadable
        (the step runs anew), never an error of the step.
        """
        top = _object(data, "the record")
        outputs_field = _object(top.get("outputs"), "outputs")
        if len(outputs_field) > MAX_RECORD_OUTPUTS:
            count = len(outputs_field)
            raise UnreadableRecord(f"outputs: {count} of them, over {MAX_RECORD_OUTPUTS}")
        outputs = {
            _text(name, "outputs", _NAME_LIMIT): _output(name, out)
            for name, out in outputs_field.items()
        }
        return cls(
            key=_text(top.get("key"), "key", _NAME_LIMIT),
            study=_text(top.get("study"), "study", _NAME_LIMIT),
            step=_text(top.get("step"), "step", _NAME_LIMIT),
            outputs=outputs,
            exit_code=_exit_code(top.get("exit_code")),
            started_at=_when(top.get("started_at"), "started_at"),
            finished_at=_when(top.get("finished_at"), "finished_at"),
            backend=_text(top.get("backend", ""), "backend", _NAME_LIMIT),
            namespace=_text(top.get("namespace", ""), "namespace", _NAME_LIMIT),
            object_name=_text(top.get("object_name", ""), "object_name", _NAME_LIMIT),
            version=_text(top.get("k8sjobs_version", ""), "k8sjobs_version", _NAME_LIMIT),
            inputs=_inputs(top.get("inputs", {})),
        )

    @classmethod
    def from_annotation(cls, text: object) -> ResultRecord:
        """Return the record a result manifest's annotation holds (JSON text), bounded in
        size and nesting before it is parsed; raise UnreadableRecord saying what is wrong."""
        if not isinstance(text, str):
            raise UnreadableRecord(f"the annotation is a {type(text).__name__}, not JSON text")
        if len(text) > MAX_RECORD_CHARS:
            raise UnreadableRecord(f"{len(text)} characters, over {MAX_RECORD_CHARS}")
        try:
            data = json.loads(text)
        except RecursionError:
            raise UnreadableRecord("its JSON nests too deep to read") from None
        except ValueError as exc:
            raise UnreadableRecord(f"not JSON ({exc})") from None
        return cls.from_json(data)


class UnreadableRecord(ValueError):
    """A result record that cannot stand for a step (malformed, foreign, out of bounds)."""


class Cleared(UnreadableRecord):
    """The record of a key that ``k8sjobs cache clear`` cleared: its step runs anew."""


#: Bounds on one result record: its JSON text, its outputs, each name and text field.
MAX_RECORD_CHARS = _media.MAX_MANIFEST_BYTES
MAX_RECORD_OUTPUTS = 1024
_NAME_LIMIT = 1024
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
)


def _object(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UnreadableRecord(f"{field}: a JSON {_kind(value)}, not an object")
    return value


def _text(value: object, field: str, limit: int) -> str:
    if not isinstance(value, str):
        raise UnreadableRecord(f"{field}: a JSON {_kind(value)}, not a string")
    if len(value) > limit:
        raise UnreadableRecord(f"{field}: {len(value)} characters, over {limit}")
    return value


def _exit_code(value: object) -> int:
    # bool is an int in Python, and 1e400 is a float (inf): neither is an exit code
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 255:
        raise UnreadableRecord(f"exit_code: {str(value)[:40]!r} is not an exit code (0-255)")
    return value


def _when(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    text = _text(value, field, 64)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise UnreadableRecord(f"{field}: {text!r} is not an ISO 8601 time") from None


def _output(name: str, value: object) -> CachedOutput:
    field = f'outputs "{str(name)[:80]}"'
    out = _object(value, field)
    reference = _text(out.get("reference"), f"{field}.reference", _NAME_LIMIT)
    media_type = _text(out.get("media_type"), f"{field}.media_type", 255)
    encoded = _text(out.get("manifest"), f"{field}.manifest", MAX_RECORD_CHARS)
    if not _MEDIA_TYPE.fullmatch(media_type):
        raise UnreadableRecord(f"{field}.media_type: {media_type[:80]!r} is not a media type")
    try:
        pinned = parse_reference(reference)
    except InvalidReference as exc:
        raise UnreadableRecord(f"{field}.reference: {exc}") from None
    if pinned.digest is None:
        raise UnreadableRecord(f"{field}.reference: {reference[:200]!r} is not pinned by digest")
    try:
        manifest = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise UnreadableRecord(f"{field}.manifest: not base64") from None
    if _media.digest_like(manifest, pinned.digest) != pinned.digest:
        raise UnreadableRecord(f"{field}: its manifest does not match {reference[:200]}")
    return CachedOutput(reference, manifest, media_type)


def _inputs(value: object) -> dict[str, InputArchives]:
    found = _object(value, "inputs")
    if len(found) > MAX_RECORD_OUTPUTS:
        raise UnreadableRecord(f"inputs: {len(found)} of them, over {MAX_RECORD_OUTPUTS}")
    inputs = {}
    for name, one in found.items():
        where = f'inputs "{str(name)[:80]}"'
        entry = _object(one, where)
        layers = _object(entry.get("layers", {}), f"{where}.layers")
        if len(layers) > MAX_RECORD_OUTPUTS:
            raise UnreadableRecord(f"{where}.layers: {len(layers)}, over {MAX_RECORD_OUTPUTS}")
        inputs[_text(name, "inputs", _NAME_LIMIT)] = InputArchives(
            _digest(entry.get("manifest"), f"{where}.manifest"),
            {
                _text(title, f"{where}.layers", _NAME_LIMIT): _digest(digest, f"{where}.layers")
                for title, digest in layers.items()
            },
        )
    return inputs


def _digest(value: object, field: str) -> str:
    text = _text(value, field, 200)
    if not _SHA256.fullmatch(text):
        raise UnreadableRecord(f"{field}: {text[:80]!r} is not a sha256 digest")
    return text


_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def _kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


class CacheStore(Protocol):
    """What the cache needs of a store: Registry and OCILayout both are one."""

    def _ref(self, reference: str) -> Reference: ...

    async def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]: ...

    async def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str: ...

    async def has_blob(self, ref: Reference, digest: str) -> bool: ...

    async def put_blob_bytes(self, ref: Reference, data: bytes, digest: str) -> None: ...

    async def mount_blob(self, dst: Reference, desc: Descriptor, src: Reference) -> None: ...

    async def resolve(self, reference: str) -> str: ...

    async def files_digest(
        self, reference: str, desc: Descriptor, limits: PullLimits | None = None
    ) -> str: ...

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
    layers = sorted((d.title or "", d.media_type, _layer_identity(d)) for d in parsed.layers)
    canonical = json.dumps(layers, separators=(",", ":")).encode()
    return _media.sha256_digest(canonical)


def _layer_identity(layer: Descriptor) -> str:
    """Return what a reader of ``layer`` sees, as a digest: a directory unpacked from it
    (by its files digest, "files:sha256:...": its archive keeps file times; else
    "unpack:<archive digest>"), or the blob itself as a file (its digest).

    Whether it is unpacked is part of it: the same archive pulled as a directory or kept as
    one file ``<title>`` are different inputs (they had one key, so a step that read the
    files stood for one that reads the archive); and a files digest on a layer kept whole
    says nothing of the bytes the reader gets, which keep the times.
    """
    if not layer.unpack:
        return layer.digest
    value = _claim(layer)
    if value:
        return f"files:{value}"
    return f"unpack:{layer.digest}"


def _claim(layer: Descriptor) -> str:
    """Return the files digest an unpacked layer claims, when it is one ("" otherwise)."""
    value = layer.annotations.get(_media.FILES_DIGEST, "")
    return value if layer.unpack and _SHA256.fullmatch(value) else ""


def archives_of(manifest: bytes, digest: str, where: str = "an input") -> InputArchives:
    """Return the archives of an input, as a record keeps them (``InputArchives``)."""
    parsed = _media.decode_manifest(manifest, where)
    layers = {d.title or "": d.digest for d in parsed.layers if d.unpack}
    return InputArchives(digest, layers)


def claims_to_verify(manifest: bytes, recorded: InputArchives | None) -> list[Descriptor]:
    """Return the layers of an input whose files digest claim must be checked before a
    record made from ``recorded`` stands for it: each directory layer keyed by its claim
    whose archive is not the one recorded. Empty when the input is the recorded archives
    (the common case: no fetch); every claimed layer for a record without them."""
    parsed = _media.decode_manifest(manifest, "an input")
    known = recorded.layers if recorded is not None else {}
    return [d for d in parsed.layers if _claim(d) and known.get(d.title or "") != d.digest]


def record_reference(key: str) -> str:
    """Return the reference of the record for ``key`` (``k8sjobs/cache:<hex>``)."""
    algorithm, _, hexpart = key.partition(":")
    if algorithm != "sha256" or not _KEY_HEX.fullmatch(hexpart):
        raise ValueError(f'"{key[:80]}" is not a step key (sha256:<64 hex digits>)')
    return f"{CACHE_REPOSITORY}:{hexpart}"


def keys_of_tags(tags: Sequence[str]) -> tuple[list[str], list[str]]:
    """Return the step keys the tags of ``k8sjobs/cache`` name, and the tags that name none
    (pushed there by hand or by another tool: ``0-backup``), which are left alone."""
    keys = [f"sha256:{tag}" for tag in tags if _KEY_HEX.fullmatch(tag)]
    return sorted(keys), sorted(tag for tag in tags if not _KEY_HEX.fullmatch(tag))


_KEY_HEX = re.compile(r"[0-9a-f]{64}")


class StepCache:
    """Reads and writes result records in one artifact store (a Registry or an OCILayout).

    ``requests`` counts the store requests made, for benchmarks and tests (a reuse should
    cost one read and one manifest PUT per output).
    """

    def __init__(self, store: CacheStore) -> None:
        self.store = store
        self.requests = 0  # network requests: a layout's file reads are not counted
        #: Layers read to check their files digest claim before a reuse (one blob GET each).
        self.verifications = 0
        self._confirmed: set[tuple[str, str]] = set()  # (layer digest, files digest) read
        self._confirming: dict[tuple[str, str], anyio.Lock] = {}
        self.local = type(store).__name__ == "OCILayout"
        self._config_stored = False
        #: The keys a lookup found cleared (``cache clear``): their steps run anew.
        self.cleared: set[str] = set()

    def _ref(self, reference: str) -> Reference:
        return self.store._ref(reference)  # the store's own naming (its prefix, its host)

    async def lookup(self, key: str) -> ResultRecord | None:
        """Return the record of ``key``, or None when there is none (or it is unreadable).

        One manifest GET. A record that does not parse, or that names another key, is
        ignored (and logged): it can only make the step run again, never stand for it.
        """
        try:
            return await self.read(key)
        except ArtifactNotFound:
            return None
        except Cleared:
            self.cleared.add(key)
            return None
        except (UnreadableRecord, RegistryError) as exc:
            _log.warning("ignoring the unreadable step result %s: %s", record_reference(key), exc)
            return None

    async def read(self, key: str) -> ResultRecord:
        """Return the record of ``key``; raise ArtifactNotFound when there is none,
        UnreadableRecord (or RegistryError) saying why one cannot stand for the step."""
        ref = self._ref(record_reference(key))
        self.requests += 1
        data, _, _ = await self.store.get_manifest(ref)
        manifest = _media.decode_manifest(data, str(ref))
        if _CLEARED in manifest.annotations and _ANNOTATION not in manifest.annotations:
            raise Cleared(f"cleared at {str(manifest.annotations[_CLEARED])[:40]}")
        record = ResultRecord.from_annotation(manifest.annotations.get(_ANNOTATION))
        if record.key != key:
            raise UnreadableRecord(f"it records key {record.key[:80]!r}, not its own tag's")
        return record

    async def save(self, record: ResultRecord) -> None:
        """Store ``record`` under its key (replacing an older record of that key)."""
        annotations = {
            _ANNOTATION: json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")),
            "org.opencontainers.image.created": (
                record.finished_at.isoformat() if record.finished_at else ""
            ),
        }
        await self._put(record.key, annotations)

    async def clear(self, key: str, when: datetime) -> bool:
        """Replace the record of ``key`` by a mark that it was cleared at ``when``; return
        whether there was a record. The mark makes the next run of a step with this key run
        it anew rather than adopt an ended run of it (which a deleted record would not)."""
        try:
            await self.read(key)
        except ArtifactNotFound:
            return False
        except Cleared:
            return False
        except (UnreadableRecord, RegistryError):
            pass  # an unreadable record is cleared too
        await self._put(key, {_CLEARED: when.isoformat()})
        return True

    async def clear_all(self, keys: Sequence[str], when: datetime) -> list[str]:
        """Clear the record of each of ``keys`` (as ``clear``); return the keys that had one.

        In a layout, every mark is written in one rewrite of index.json, and only over the
        record that was read: one a run wrote meanwhile is a result made after the clear
        began, and stays."""
        replace = getattr(self.store, "replace_manifests", None)
        if not self.local or replace is None:
            return [key for key in keys if await self.clear(key, when)]
        expected: dict[str, str] = {}
        for key in keys:
            reference = record_reference(key)
            try:
                digest = await self.store.resolve(reference)
                await self.read(key)
            except (ArtifactNotFound, Cleared):
                continue
            except (UnreadableRecord, RegistryError):
                pass  # an unreadable record is cleared too
            expected[reference] = digest
        if not expected:
            return []
        mark = _media.build_manifest([], RESULT_TYPE, {_CLEARED: when.isoformat()})
        await self._store_config(self._ref(record_reference(keys[0])))
        done = set(await replace(expected, _media.encode_manifest(mark), _media.MANIFEST))
        return [key for key in keys if record_reference(key) in done]

    async def _store_config(self, ref: Reference) -> None:
        if self._config_stored:
            return
        self.requests += 1
        if not await self.store.has_blob(ref, _media.EMPTY_CONFIG_DIGEST):
            self.requests += 1
            await self.store.put_blob_bytes(
                ref, _media.EMPTY_CONFIG_DATA, _media.EMPTY_CONFIG_DIGEST
            )
        self._config_stored = True

    async def _put(self, key: str, annotations: dict[str, str]) -> None:
        ref = self._ref(record_reference(key))
        await self._store_config(ref)
        manifest = _media.build_manifest([], RESULT_TYPE, annotations)
        self.requests += 1
        await self.store.put_manifest(ref, _media.encode_manifest(manifest), _media.MANIFEST)

    async def verify_claim(self, reference: str, layer: Descriptor) -> None:
        """Check that the directory layer ``layer`` of ``reference`` holds the files its
        ``k8sjobs.io/files-digest`` claims, by reading it (one blob GET, no file written,
        bounded by the pull limits and by ``verify_timeout()``); raise DigestMismatch if
        not, RegistryError, TimeoutError or ValueError (a bad bound) when it cannot tell."""
        claim = _claim(layer)
        # A blob's files never change: the steps reading one archive (at once, too) share
        # one read; a failed read is not remembered, so the next asks again.
        async with self._confirming.setdefault((layer.digest, claim), anyio.Lock()):
            if (layer.digest, claim) not in self._confirmed:
                await self._read_claim(reference, layer, claim)
                self._confirmed.add((layer.digest, claim))

    async def _read_claim(self, reference: str, layer: Descriptor, claim: str) -> None:
        bound = verify_timeout()
        self.requests += 1
        self.verifications += 1
        try:
            with anyio.fail_after(bound):
                found = await self.store.files_digest(reference, layer, PullLimits.from_env())
        except TimeoutError:
            raise RegistryUnavailable(
                f"layer {layer.title} was not read within {bound:g} s (raise {VERIFY_TIMEOUT_ENV})"
            ) from None
        if found != claim:
            raise DigestMismatch(
                f"layer {layer.title} ({layer.digest}) has files digest {found}, but claims {claim}"
            )

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


#: Seconds the read of one layer whose claim is checked may take (default 600).
VERIFY_TIMEOUT_ENV = "K8SJOBS_CACHE_VERIFY_TIMEOUT"
_VERIFY_TIMEOUT = 600.0


def verify_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """Return the bound on one claim check: $K8SJOBS_CACHE_VERIFY_TIMEOUT seconds, or 600."""
    text = environ.get(VERIFY_TIMEOUT_ENV, "")
    try:
        value = float(text) if text else _VERIFY_TIMEOUT
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(
            f'{VERIFY_TIMEOUT_ENV}: "{text[:40]}" is not a number of seconds; set it to one '
            f"(such as 600) or unset it."
        )
    return value


def _unpinned(reference: str) -> str:
    """Return ``reference`` without its tag or digest (its repository, with host)."""
    ref = parse_reference(reference)
    return f"{ref.registry}/{ref.repository}" if ref.registry else ref.repository


def _blob_unknown(exc: RegistryError) -> bool:
    text = str(exc)
    return "BLOB_UNKNOWN" in text or "blob unknown" in text.lower()
