"""Build the handoff image without Docker, for sites that mirror it into their own registry.

The image is a Python base image's layers plus one layer holding k8sjobs and what it needs,
installed by pip for the base's Python and for each platform, under ``/opt/k8sjobs/site``
and found through ``PYTHONPATH`` (so any glibc Python base works, whatever its site-packages
path). The platforms' manifests are pushed as one OCI index. ``Dockerfile.handoff``, which the
release workflow builds with Docker, lays out the same files; this path needs only pip and
registry access, no container engine and no privileges.

    k8sjobs image build --push registry.example/k8sjobs/handoff:0.1.0
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .._handoffimage import DEFAULT_BASE, DEFAULT_PLATFORMS
from .._version import __version__
from ..errors import K8sJobsError
from . import Registry
from ._media import (
    DOCKER_INDEX,
    DOCKER_MANIFEST,
    INDEX,
    LAYER_TAR_GZIP,
    MANIFEST,
    Descriptor,
    sha256_digest,
)
from ._reference import Reference, parse_reference
from ._streams import VerifyingWriter

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_PLATFORMS",
    "ImageBuildError",
    "ImageSpec",
    "Platform",
    "build_commands",
    "build_image",
]

SITE_DIR = "/opt/k8sjobs/site"
ENTRYPOINT = ("python", "-m", "k8sjobs.handoff")
#: Not root: the handoff only reads and writes the step's shared emptyDir volumes.
USER = "65532:65532"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_INDEXES = (INDEX, DOCKER_INDEX)
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
_PIP_TIMEOUT = 900.0
# Wheel platform tags by OCI architecture. pip given --platform takes exactly the tags it is
# given (it does not widen manylinux_2_28 down to older glibc), so the whole ladder goes, as
# `pip download` users pass it: glibc 2.28 down to 2.5, under both spellings of the legacy
# names (cffi, needed by cryptography, ships only manylinux2014 wheels).
_GLIBC_MINORS = range(28, 4, -1)
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}


class ImageBuildError(K8sJobsError):
    """The handoff image could not be built; the message says what to change."""


@dataclass(frozen=True)
class Platform:
    """An OCI platform such as ``linux/arm64``."""

    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Platform:
        """Return the Platform ``os/arch[/variant]`` spells, or raise ImageBuildError."""
        parts = text.strip().split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ImageBuildError(f'Platform "{text}" is not os/arch, e.g. "linux/arm64".')
        if parts[0] != "linux" or parts[1] not in _MACHINES:
            known = ", ".join(f"linux/{a}" for a in _MACHINES)
            raise ImageBuildError(f'Platform "{text}" is not supported; use one of {known}.')
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    def matches(self, spec: Mapping[str, Any]) -> bool:
        """Return whether an index entry's ``platform`` object is this platform."""
        if spec.get("os") != self.os or spec.get("architecture") != self.architecture:
            return False
        return self.variant is None or spec.get("variant") == self.variant

    def wheel_tags(self) -> list[str]:
        """Return the ``pip --platform`` tags of wheels that run on this platform, newest
        glibc first: manylinux_2_28 ... manylinux2014 ... manylinux1, then linux."""
        machine = _MACHINES[self.architecture]
        tags = []
        for minor in _GLIBC_MINORS:
            tags.append(f"manylinux_2_{minor}_{machine}")
            if minor in _LEGACY:
                tags.append(f"{_LEGACY[minor]}_{machine}")
        return [*tags, f"linux_{machine}"]

    def to_json(self) -> dict[str, str]:
        """Return the platform as an OCI index entry's ``platform`` object."""
        out = {"architecture": self.architecture, "os": self.os}
        return {**out, "variant": self.variant} if self.variant else out

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


@dataclass(frozen=True)
class ImageSpec:
    """What to build: ``requirements`` (pip requirement specifiers or wheel paths) installed
    on ``base`` for each of ``platforms``; ``python_version`` defaults to the base's
    ``PYTHON_VERSION`` environment variable (set by the official Python images)."""

    base: str = DEFAULT_BASE
    platforms: tuple[Platform, ...] = tuple(Platform.parse(p) for p in DEFAULT_PLATFORMS)
    requirements: tuple[str, ...] = (f"k8sjobs=={__version__}",)
    pip_args: tuple[str, ...] = ()
    python_version: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def source_checkout() -> Path | None:
    """Return the source tree this k8sjobs runs from (a checkout or an editable install),
    or None when it is an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "k8sjobs"' in project.read_text(errors="replace"):
        return root
    return None


async def build_wheel(source: Path, into: Path) -> Path:
    """Build the wheel of the k8sjobs source tree ``source`` into ``into``; return its path.

    The image then holds the code that runs here (a development build, a fork), not the
    PyPI release of the same version, which may not exist. The build backend installed
    here is tried first (no index needed); when it is too old for pyproject.toml, pip
    builds in isolation, fetching the backend pyproject.toml names.
    """
    output = b""
    for isolation in (["--no-build-isolation"], []):
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
        argv += ["--no-deps", *isolation, "--wheel-dir", str(into), str(source)]
        code, output = await _run(argv)
        built = await asyncio.to_thread(lambda: sorted(into.glob("k8sjobs-*.whl")))
        if code == 0 and built:
            return built[-1]
    tail = output.decode("utf-8", "replace").strip()[-2000:]
    raise ImageBuildError(
        f"could not build the k8sjobs wheel from {source}:\n{tail}\n"
        "Give one with --wheel PATH (python -m pip wheel --no-deps .)."
    )


async def _run(argv: Sequence[str]) -> tuple[int, bytes]:
    """Run ``argv`` (bounded by the pip timeout); return its exit code and its output."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        async with asyncio.timeout(_PIP_TIMEOUT):
            output, _ = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return int(proc.returncode or 0), output


@dataclass(frozen=True)
class _Layer:
    """A gzip-compressed layer: its blob, the blob's digest and the uncompressed digest."""

    blob: bytes
    digest: str
    diff_id: str


@dataclass(frozen=True)
class _Base:
    """One platform's manifest and config of the base image."""

    manifest: dict[str, Any]
    media_type: str
    config: dict[str, Any]


async def build_image(
    destination: str,
    spec: ImageSpec,
    *,
    plain_http: bool = False,
    base_plain_http: bool = False,
) -> str:
    """Build the handoff image for every platform of ``spec`` and push it as one index
    tagged ``destination``; return the index digest. Reproducible: the same inputs give the
    same digests, so pushing again uploads nothing new."""
    dest_ref = parse_reference(destination)
    if dest_ref.registry is None:
        raise ImageBuildError(
            f'Destination "{destination}" names no registry; write "host[:port]/repo:tag".'
        )
    base_ref = _hub(parse_reference(spec.base))
    async with (
        Registry(base_ref.registry or "", plain_http=base_plain_http) as source,
        Registry(dest_ref.registry, plain_http=plain_http) as target,
    ):
        entries = []
        for platform in spec.platforms:
            base = await _base_for(source, base_ref, platform)
            manifest = await _build_platform(source, base_ref, target, dest_ref, base, spec)
            entries.append({**manifest, "platform": platform.to_json()})
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}
        return await target.put_manifest(dest_ref, _canonical(index), INDEX)


async def _build_platform(
    source: Registry,
    base_ref: Reference,
    target: Registry,
    dest_ref: Reference,
    base: _Base,
    spec: ImageSpec,
) -> dict[str, Any]:
    """Push one platform's blobs and manifest; return the manifest's index descriptor."""
    platform = _platform_of(base.config)
    python = spec.python_version or _python_version(base.config, spec.base)
    layer = await _site_layer(spec, platform, python)
    docker = base.media_type == DOCKER_MANIFEST
    config = image_config(base.config, layer.diff_id, spec.labels)
    config_bytes = _canonical(config)
    for desc in (Descriptor.from_json(d) for d in base.manifest.get("layers") or []):
        await _copy_blob(source, base_ref, target, dest_ref, desc)
    await _put_bytes(target, dest_ref, layer.blob, layer.digest)
    await _put_bytes(target, dest_ref, config_bytes, sha256_digest(config_bytes))
    manifest = copy.deepcopy(base.manifest)
    manifest["config"] = {
        "mediaType": base.manifest["config"]["mediaType"],
        "digest": sha256_digest(config_bytes),
        "size": len(config_bytes),
    }
    layer_type = DOCKER_LAYER_GZIP if docker else LAYER_TAR_GZIP
    new = {"mediaType": layer_type, "digest": layer.digest, "size": len(layer.blob)}
    manifest["layers"] = [*manifest.get("layers", []), new]
    manifest.pop("annotations", None)
    data = _canonical(manifest)
    digest = sha256_digest(data)
    pinned = Reference(dest_ref.repository, None, digest, dest_ref.registry)
    await target.put_manifest(pinned, data, base.media_type)
    return {"mediaType": base.media_type, "digest": digest, "size": len(data)}


def image_config(
    base: Mapping[str, Any], diff_id: str, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Return the image config: ``base``'s, plus the site layer, PYTHONPATH, the handoff
    entrypoint and a non-root user (pure: the same inputs give the same bytes)."""
    config = copy.deepcopy(dict(base))
    run = config.setdefault("config", {})
    env = [e for e in run.get("Env") or [] if not e.startswith("PYTHONPATH=")]
    old = next((e[11:] for e in run.get("Env") or [] if e.startswith("PYTHONPATH=")), "")
    run["Env"] = [*env, f"PYTHONPATH={SITE_DIR}" + (f":{old}" if old else "")]
    run["Entrypoint"] = list(ENTRYPOINT)
    run.pop("Cmd", None)
    run["User"] = USER
    run["WorkingDir"] = "/"
    run["Labels"] = {
        **(run.get("Labels") or {}),
        "org.opencontainers.image.title": "k8sjobs handoff",
        "org.opencontainers.image.version": __version__,
        **(labels or {}),
    }
    rootfs = config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    rootfs["diff_ids"] = [*rootfs.get("diff_ids", []), diff_id]
    step = {"created_by": "k8sjobs image build", "comment": f"pip install into {SITE_DIR}"}
    config["history"] = [*config.get("history", []), step]
    return config


async def _base_for(source: Registry, ref: Reference, platform: Platform) -> _Base:
    """Return the base image's manifest and config for ``platform``."""
    data, media_type, _ = await source.get_manifest(ref)
    manifest = _json(data, f"the manifest of {ref}")
    media_type = str(manifest.get("mediaType") or media_type)
    if media_type in _INDEXES:
        entries = manifest.get("manifests") or []
        found = [e for e in entries if platform.matches(e.get("platform") or {})]
        if not found:
            have = ", ".join(sorted(_described(e.get("platform")) for e in entries)) or "none"
            raise ImageBuildError(
                f"Base image {ref} has no {platform} image (it has: {have}); "
                "choose platforms it has with --platform."
            )
        pinned = Reference(ref.repository, None, str(found[0]["digest"]), ref.registry)
        return await _base_for(source, pinned, platform)
    if media_type not in (MANIFEST, DOCKER_MANIFEST):
        raise ImageBuildError(f"Base image {ref} is a {media_type}, not an image.")
    config_desc = Descriptor.from_json(manifest.get("config"))
    if config_desc.size > _MAX_CONFIG_BYTES:
        raise ImageBuildError(f"Base image {ref} has a config over 4 MiB.")
    config = _json(await _fetch_bytes(source, ref, config_desc), f"the config of {ref}")
    if not platform.matches(config):
        raise ImageBuildError(
            f"Base image {ref} is for {_platform_of(config)}, not {platform}; name an image "
            "index (a multi-platform tag) or choose its platform with --platform."
        )
    return _Base(manifest, media_type, config)


async def _site_layer(spec: ImageSpec, platform: Platform, python: str) -> _Layer:
    """Return the layer of ``spec.requirements`` installed for ``platform`` and ``python``."""
    with tempfile.TemporaryDirectory(prefix="k8sjobs-image-") as tmp:
        site = Path(tmp) / "site"
        await _pip_install(site, spec, platform, python)
        return await anyio.to_thread.run_sync(site_layer, site)


async def _pip_install(site: Path, spec: ImageSpec, platform: Platform, python: str) -> None:
    """Run pip to install the requirements for another platform into ``site``."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    argv += ["--no-compile", "--target", str(site), "--only-binary=:all:"]
    argv += ["--implementation", "cp", "--python-version", python]
    for tag in platform.wheel_tags():
        argv += ["--platform", tag]
    argv += [*spec.pip_args, *spec.requirements]
    code, output = await _run(argv)
    if code != 0:
        tail = output.decode("utf-8", "replace").strip()[-2000:]
        raise ImageBuildError(
            f"pip could not install {' '.join(spec.requirements)} for {platform} and "
            f"Python {python}:\n{tail}\nEvery requirement needs a wheel for that platform."
        )


def site_layer(site: Path, *, prefix: str = SITE_DIR) -> _Layer:
    """Return a reproducible gzip layer of the tree ``site`` placed at ``prefix``.

    Owner root, modification time 0, sorted entries, no bytecode and no ``bin/`` (pip's
    console scripts carry the building machine's interpreter path): the same tree always
    gives the same digests.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        parts = prefix.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            tar.addfile(_entry("/".join(parts[:depth]), tarfile.DIRTYPE, 0o755))
        for path in _walk(site):
            rel = path.relative_to(site).as_posix()
            name = f"{prefix.strip('/')}/{rel}"
            if path.is_symlink():
                info = _entry(name, tarfile.SYMTYPE, 0o777)
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif path.is_dir():
                tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
            else:
                mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                info = _entry(name, tarfile.REGTYPE, mode)
                info.size = path.stat().st_size
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    tar_bytes = raw.getvalue()
    blob = gzip.compress(tar_bytes, compresslevel=6, mtime=0)
    return _Layer(blob, sha256_digest(blob), "sha256:" + hashlib.sha256(tar_bytes).hexdigest())


def _walk(root: Path) -> list[Path]:
    """Return the paths under ``root`` in sorted order, without bin/ and bytecode."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if d != "__pycache__" and not (here == root and d == "bin")
        )
        found.extend(here / d for d in dirnames)
        found.extend(here / f for f in filenames if not f.endswith((".pyc", ".pyo")))
    return sorted(found)


def _entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


async def _copy_blob(
    source: Registry, src: Reference, target: Registry, dst: Reference, desc: Descriptor
) -> None:
    """Copy a base layer into the destination repository unless it is there already."""
    if await target.has_blob(dst, desc.digest):
        return
    with tempfile.TemporaryDirectory(prefix="k8sjobs-image-") as tmp:
        path = Path(tmp) / "blob"
        sink = VerifyingWriter.factory(path, desc.digest, desc.size)
        await source.fetch_blob(src, desc, sink, lambda n: None)
        await target.put_blob(dst, path, (desc.digest, desc.size), lambda n: None)


async def _fetch_bytes(source: Registry, ref: Reference, desc: Descriptor) -> bytes:
    """Return a small blob (a config), verified against its digest and size."""
    with tempfile.TemporaryDirectory(prefix="k8sjobs-image-") as tmp:
        path = Path(tmp) / "blob"
        await source.fetch_blob(
            ref, desc, VerifyingWriter.factory(path, desc.digest, desc.size), lambda n: None
        )
        return await anyio.to_thread.run_sync(path.read_bytes)


async def _put_bytes(target: Registry, ref: Reference, data: bytes, digest: str) -> None:
    if not await target.has_blob(ref, digest):
        await target.put_blob_bytes(ref, data, digest)


def _hub(ref: Reference) -> Reference:
    """Return ``ref`` with Docker Hub spelled out (``python:3.12`` is Docker Hub's
    ``library/python`` on registry-1.docker.io)."""
    if ref.registry not in (None, "docker.io", "index.docker.io"):
        return ref
    repository = ref.repository if "/" in ref.repository else f"library/{ref.repository}"
    return Reference(repository, ref.tag, ref.digest, "registry-1.docker.io")


def _python_version(config: Mapping[str, Any], base: str) -> str:
    """Return the major.minor Python version the base image says it has."""
    for item in (config.get("config") or {}).get("Env") or []:
        if isinstance(item, str) and item.startswith("PYTHON_VERSION="):
            return ".".join(item.split("=", 1)[1].split(".")[:2])
    raise ImageBuildError(
        f"Base image {base} does not say its Python version (no PYTHON_VERSION in its "
        "environment); give it with --python-version, e.g. 3.12."
    )


def _platform_of(config: Mapping[str, Any]) -> Platform:
    os_name, arch = config.get("os"), config.get("architecture")
    if not isinstance(os_name, str) or not isinstance(arch, str):
        raise ImageBuildError("The base image's config names no os and architecture.")
    variant = config.get("variant")
    return Platform(os_name, arch, variant if isinstance(variant, str) else None)


def _described(platform: Any) -> str:
    """Return an index entry's platform as ``os/arch[/variant]`` text."""
    if not isinstance(platform, dict):
        return "unknown"
    parts = (platform.get("os"), platform.get("architecture"), platform.get("variant"))
    return "/".join(str(p) for p in parts if p)


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ImageBuildError(f"{what} is not JSON.") from exc
    if not isinstance(body, dict):
        raise ImageBuildError(f"{what} is not a JSON object.")
    return body


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def build_commands(destination: str, platforms: Sequence[str] = DEFAULT_PLATFORMS) -> str:
    """Return shell commands that build and push the handoff image from a source checkout
    with Docker (buildx), Buildah or kaniko, for sites that build images their own way."""
    plats = ",".join(platforms)
    return "\n".join(
        [
            f"# In a checkout of the k8sjobs source at tag v{__version__}:",
            "# Docker (buildx, multi-platform):",
            f"docker buildx build --platform {plats} -f Dockerfile.handoff "
            f"-t {destination} --push .",
            "",
            "# Buildah:",
            f"buildah build --platform {plats} --manifest {destination} -f Dockerfile.handoff .",
            f"buildah manifest push --all {destination} docker://{destination}",
            "",
            "# kaniko (one platform per run, inside the cluster):",
            "/kaniko/executor --context dir://$PWD --dockerfile Dockerfile.handoff "
            f"--destination {destination}",
        ]
    )
