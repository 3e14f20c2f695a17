"""Media types, annotations and manifests of the ORAS artifact format (pure, no I/O)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidReference, LimitExceeded, RegistryError

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_SCHEMA1 = "application/vnd.docker.distribution.manifest.v1+json"
DOCKER_SCHEMA1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"
_MANIFESTS = (MANIFEST, DOCKER_MANIFEST)
_INDEXES = (INDEX, DOCKER_INDEX)
_SCHEMA1 = (DOCKER_SCHEMA1, DOCKER_SCHEMA1_SIGNED)
MANIFEST_ACCEPT = ", ".join([MANIFEST, INDEX, DOCKER_MANIFEST, DOCKER_INDEX])
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG_DATA = b"{}"
EMPTY_CONFIG_DIGEST = "sha256:" + hashlib.sha256(EMPTY_CONFIG_DATA).hexdigest()
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DEFAULT_ARTIFACT_TYPE = "application/vnd.k8sjobs.artifact.v1"

TITLE = "org.opencontainers.image.title"
REF_NAME = "org.opencontainers.image.ref.name"
UNPACK = "io.deis.oras.content.unpack"
#: A directory layer's digest over its files without their times (names, kinds, modes,
#: links, bytes): what the step cache keys a directory input by.
FILES_DIGEST = "k8sjobs.io/files-digest"
CONTENT_DIGEST = "io.deis.oras.content.digest"

# A manifest larger than this is refused: the OCI distribution spec lets a registry refuse
# one over 4 MiB, and reading one whole into memory must stay cheap against a hostile server.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# The OCI digest grammar, restricted to the registered algorithms: a digest names a file
# (blobs/<algorithm>/<encoded>) and a URL path, so nothing else may pass.
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")


def sha256_digest(data: bytes) -> str:
    """Return the ``sha256:<hex>`` digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(digest: object, what: str) -> str:
    """Return ``digest`` if it is ``sha256:<64 hex>`` or ``sha512:<128 hex>`` (lowercase),
    else raise InvalidReference naming ``what`` carries it. Called before a digest is used
    to build any path or URL."""
    if isinstance(digest, str) and _DIGEST.fullmatch(digest):
        return digest
    raise InvalidReference(
        f"{what}: {str(digest)[:80]!r} is not a valid digest; "
        'write "sha256:<64 lowercase hex>" (or "sha512:<128 lowercase hex>").'
    )


def new_hasher(digest: str) -> hashlib._Hash:
    """Return a fresh hasher of the algorithm ``digest`` (already checked) names."""
    return hashlib.sha512() if digest.startswith("sha512:") else hashlib.sha256()


def digest_like(data: bytes, expected: str) -> str:
    """Return the digest of ``data`` in the algorithm of ``expected`` (a checked digest)."""
    hasher = new_hasher(expected)
    hasher.update(data)
    return f"{expected.partition(':')[0]}:{hasher.hexdigest()}"


def check_manifest_size(size: int, where: str) -> None:
    """Raise LimitExceeded when a manifest of ``size`` bytes is over the spec's 4 MiB."""
    if size > MAX_MANIFEST_BYTES:
        raise LimitExceeded(
            f"The manifest of {where} is larger than 4 MiB ({size} bytes or more), the most the "
            "OCI distribution spec requires a registry to accept; k8sjobs refuses it."
        )


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a blob is, its digest and size."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str | None:
        """Return the file name ORAS stores the blob under, if any."""
        return self.annotations.get(TITLE)

    @property
    def unpack(self) -> bool:
        """Return True when the blob is a directory archive to extract on pull.

        ORAS marks directories with the unpack annotation; oras-py marks them only by the
        tar+gzip media type, so that counts too when the annotation is absent.
        """
        if UNPACK in self.annotations:
            return self.annotations[UNPACK].lower() == "true"
        return self.media_type == LAYER_TAR_GZIP

    def to_json(self) -> dict[str, Any]:
        """Return the descriptor as an OCI JSON object."""
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest}
        out["size"] = self.size
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "a manifest") -> Descriptor:
        """Return the Descriptor in an OCI JSON object, or raise RegistryError: its digest
        must follow the OCI grammar and its size be a non-negative integer."""
        if not isinstance(data, dict) or not isinstance(data.get("mediaType"), str):
            raise RegistryError(f"{where}: malformed OCI descriptor {data!r:.200}.")
        size, annotations = data.get("size"), data.get("annotations") or {}
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RegistryError(f"{where}: descriptor size {size!r:.40} is not a size in bytes.")
        if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            raise RegistryError(f"{where}: descriptor annotations must map strings to strings.")
        digest = check_digest(data.get("digest"), f"{where}: descriptor digest")
        return cls(data["mediaType"], digest, size, annotations)


EMPTY_CONFIG_DESCRIPTOR = Descriptor(EMPTY_CONFIG, EMPTY_CONFIG_DIGEST, len(EMPTY_CONFIG_DATA))


@dataclass(frozen=True)
class Manifest:
    """An OCI image manifest as ORAS uses it for artifacts."""

    layers: tuple[Descriptor, ...]
    config: Descriptor = EMPTY_CONFIG_DESCRIPTOR
    artifact_type: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def blobs(self) -> tuple[Descriptor, ...]:
        """Return every blob the manifest references: the config, then the layers."""
        return (self.config, *self.layers)


def encode_manifest(manifest: Manifest) -> bytes:
    """Return the canonical JSON bytes of an OCI image manifest v1.1."""
    body: dict[str, Any] = {"schemaVersion": 2, "mediaType": MANIFEST}
    if manifest.artifact_type:
        body["artifactType"] = manifest.artifact_type
    body["config"] = manifest.config.to_json()
    body["layers"] = [layer.to_json() for layer in manifest.layers]
    if manifest.annotations:
        body["annotations"] = dict(manifest.annotations)
    return json.dumps(body, separators=(",", ":"), sort_keys=False).encode()


def declared_type(data: bytes) -> str:
    """Return the ``mediaType`` a manifest's body declares, or "" when it declares none."""
    try:
        declared = json.loads(data).get("mediaType")
    except (ValueError, AttributeError):
        return ""
    return declared if isinstance(declared, str) else ""


def _kind(media_type: str | None) -> str | None:
    """Return "manifest", "index" or "schema1" for a media type that says which, else None."""
    if media_type in _MANIFESTS:
        return "manifest"
    if media_type in _INDEXES:
        return "index"
    if media_type in _SCHEMA1:
        return "schema1"
    return None


def _body_kind(body: dict[str, Any]) -> str | None:
    """Return what a manifest's body shows it is, by its fields (as containerd's
    validateMediaType reads them), or None when they do not tell."""
    if "fsLayers" in body or "signatures" in body or body.get("schemaVersion") == 1:
        return "schema1"
    if "manifests" in body:
        return "index"
    if "layers" in body or "config" in body:
        return "manifest"
    return None


_REFUSED = {
    "index": (
        "an image index (a list of manifests, one per platform), not an artifact; pull one "
        "of its manifests by digest"
    ),
    "schema1": (
        "a Docker schema 1 manifest, which k8sjobs does not read (nor does containerd); "
        "push it again with a current client"
    ),
}


def decode_manifest(data: bytes, where: str, content_type: str | None = None) -> Manifest:
    """Return the Manifest in ``data``, or raise RegistryError naming ``where`` it came from.

    What the document is comes from its Content-Type, its ``mediaType`` field and its other
    fields together, as containerd decides: they must not disagree, and only an image
    manifest (OCI or Docker v2) is an artifact that can be unpacked. An index or a schema 1
    manifest is refused by name, never read as a manifest with no layers.
    """
    try:
        body = json.loads(data)
    except RecursionError:
        raise RegistryError(f"The manifest of {where} nests too deep to read.") from None
    except ValueError as exc:
        raise RegistryError(f"The manifest of {where} is not JSON.") from exc
    if not isinstance(body, dict):
        raise RegistryError(f"{where} is a JSON {type(body).__name__}, not a manifest.")
    declared = body.get("mediaType")
    header = (content_type or "").partition(";")[0].strip().lower() or None
    said = {
        name: kind
        for name, kind in (
            (f'Content-Type "{header}"', _kind(header)),
            (f'mediaType "{declared}"', _kind(declared) if isinstance(declared, str) else None),
            ("its fields", _body_kind(body)),
        )
        if kind is not None
    }
    kinds = set(said.values())
    if len(kinds) > 1:
        claims = ", ".join(f"{name} says {kind}" for name, kind in said.items())
        raise RegistryError(f"{where}: the manifest contradicts itself ({claims}); refused.")
    kind = kinds.pop() if kinds else None
    if kind in _REFUSED:
        named = declared if isinstance(declared, str) else header or kind
        raise RegistryError(f"{where} is {_REFUSED[kind]} ({named}).")
    if declared is not None and declared not in _MANIFESTS:
        raise RegistryError(f"{where} is a {str(declared)[:120]}, not an artifact manifest.")
    if kind is None:
        raise RegistryError(
            f"{where}: the registry's answer (Content-Type {header or 'none'}) has neither "
            "a known mediaType nor layers; it is not an artifact manifest."
        )
    raw_layers = body.get("layers") or []
    if not isinstance(raw_layers, list):
        raise RegistryError(f'The manifest of {where}: "layers" is not a list.')
    layers = tuple(Descriptor.from_json(layer, f"The manifest of {where}") for layer in raw_layers)
    config = body.get("config") or EMPTY_CONFIG_DESCRIPTOR.to_json()
    annotations = body.get("annotations") or {}
    artifact_type = body.get("artifactType")
    if not isinstance(annotations, dict) or not isinstance(artifact_type, str | None):
        raise RegistryError(f"The manifest of {where} has malformed annotations or artifactType.")
    return Manifest(
        layers=layers,
        config=Descriptor.from_json(config, f"The manifest of {where}"),
        artifact_type=artifact_type,
        annotations=annotations,
    )


def build_manifest(
    layers: Sequence[Descriptor], artifact_type: str | None, annotations: Mapping[str, str]
) -> Manifest:
    """Return an ORAS artifact manifest with the empty config."""
    return Manifest(tuple(layers), EMPTY_CONFIG_DESCRIPTOR, artifact_type, dict(annotations))
