"""Media types, annotations and manifests of the ORAS artifact format (pure, no I/O)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RegistryError

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
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
CONTENT_DIGEST = "io.deis.oras.content.digest"

# A manifest larger than this is refused: manifests are small, and reading one whole into
# memory must stay cheap even against a hostile server.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def sha256_digest(data: bytes) -> str:
    """Return the ``sha256:<hex>`` digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


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
    def from_json(cls, data: Any) -> Descriptor:
        """Return the Descriptor in an OCI JSON object, or raise RegistryError."""
        try:
            annotations = data.get("annotations") or {}
            return cls(str(data["mediaType"]), str(data["digest"]), int(data["size"]), annotations)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RegistryError(f"Malformed OCI descriptor {data!r:.200}.") from exc


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


def decode_manifest(data: bytes, where: str) -> Manifest:
    """Return the Manifest in ``data``, or raise RegistryError naming ``where`` it came from."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise RegistryError(f"The manifest of {where} is not JSON.") from exc
    if not isinstance(body, dict) or body.get("mediaType", MANIFEST) not in (
        MANIFEST,
        DOCKER_MANIFEST,
    ):
        kind = body.get("mediaType") if isinstance(body, dict) else type(body).__name__
        raise RegistryError(f"{where} is a {kind}, not an artifact manifest.")
    layers = tuple(Descriptor.from_json(layer) for layer in body.get("layers") or [])
    return Manifest(
        layers=layers,
        config=Descriptor.from_json(body.get("config") or EMPTY_CONFIG_DESCRIPTOR.to_json()),
        artifact_type=body.get("artifactType"),
        annotations=body.get("annotations") or {},
    )


def build_manifest(
    layers: Sequence[Descriptor], artifact_type: str | None, annotations: Mapping[str, str]
) -> Manifest:
    """Return an ORAS artifact manifest with the empty config."""
    return Manifest(tuple(layers), EMPTY_CONFIG_DESCRIPTOR, artifact_type, dict(annotations))
