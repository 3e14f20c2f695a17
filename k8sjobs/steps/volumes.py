"""A step's volumes: claims, NFS shares, ConfigMaps, Secrets, emptyDirs, host paths (pure).

``Step.volumes`` lists ``Volume`` models, each with a name, a mount path and exactly one
source; ``Step.shm`` is the shorthand for a memory-backed ``/dev/shm`` (MPI and PyTorch need a
large one, and a container's default is 64 MiB). ``check_volumes`` holds the rules that need
the rest of the step (its work directory, outputs and security level); ``pod_volumes`` and
``volume_mounts`` render them into the pod. Nothing here does I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .names import check_object_name
from .quantity import parse_bytes

__all__ = [
    "NFS",
    "RESERVED_MOUNT_ROOT",
    "RESERVED_NAMES",
    "SHM_PATH",
    "SHM_VOLUME",
    "EmptyDir",
    "Volume",
    "check_volumes",
    "pod_volumes",
    "shm_volume",
    "volume_mounts",
]

#: The names of k8sjobs' own volumes in a step's pod (render.py): a user's volume may not
#: take one, nor any name starting with "k8sjobs-".
RESERVED_NAMES = frozenset(
    {"entrypoint", "work", "status", "tmp", "handoff-tmp", "registry-auth", "ssh", "sshd"}
)
RESERVED_PREFIX = "k8sjobs-"
#: k8sjobs mounts its entrypoint, status and registry credentials under this directory.
RESERVED_MOUNT_ROOT = "/k8sjobs"
SHM_PATH = "/dev/shm"
SHM_VOLUME = "k8sjobs-shm"
SOURCES = ("claim", "nfs", "config_map", "secret", "empty_dir", "host_path")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _object_name(value: str, what: str) -> str:
    return check_object_name(value, what)


def _absolute(value: str, what: str) -> str:
    normal = posixpath.normpath(value) if value else ""
    if not value.startswith("/") or normal == "/" or "\0" in value:
        raise ValueError(f'{what} "{value}" must be an absolute path other than "/"')
    return normal


def _relative(value: str, what: str) -> str:
    normal = posixpath.normpath(value) if value else ""
    if not value or value.startswith("/") or normal == ".." or normal.startswith("../"):
        raise ValueError(f'{what} "{value}" must be a relative path without ".."')
    return normal


def _size(value: str | int | None) -> str | int | None:
    if value is not None and parse_bytes(value) <= 0:
        raise ValueError(f'"{value}" must be a quantity of more than zero bytes, e.g. "8Gi"')
    return value


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NFS(_Model):
    """An NFS export: the server's host name or address and the exported path."""

    server: str = Field(min_length=1)
    path: str

    @field_validator("server")
    @classmethod
    def _server_is_host(cls, value: str) -> str:
        if any(c.isspace() or c in "/:" for c in value) and not value.startswith("["):
            raise ValueError(f'"{value}" is not a host name or address, e.g. "nfs.example.org"')
        return value

    @field_validator("path")
    @classmethod
    def _path_is_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f'NFS path "{value}" must be absolute, e.g. "/export/data"')
        return value


class EmptyDir(_Model):
    """A scratch directory that lives as long as the pod: on disk, or in memory (tmpfs)."""

    medium: Literal["", "Memory"] = ""
    size_limit: str | int | None = None

    @field_validator("size_limit")
    @classmethod
    def _size_is_quantity(cls, value: str | int | None) -> str | int | None:
        return _size(value)


class Volume(_Model):
    """One volume of a step: a name, where the step sees it, and exactly one source.

    Sources: ``claim`` (a PersistentVolumeClaim's name), ``nfs`` (server and path),
    ``config_map`` or ``secret`` (an existing object's keys as files; ``items`` maps chosen
    keys to file paths, ``mode`` sets the files' permission bits), ``empty_dir`` (scratch;
    ``medium: Memory`` for tmpfs, with ``size_limit``) and ``host_path`` (a directory of the
    node; refused under ``security: restricted``). ``read_only`` mounts it read-only;
    ``sub_path`` mounts a directory inside it.
    """

    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str | None = None
    claim: str | None = None
    nfs: NFS | None = None
    config_map: str | None = None
    secret: str | None = None
    items: dict[str, str] | None = None
    mode: int | None = Field(None, ge=0, le=0o777)
    empty_dir: EmptyDir | None = None
    host_path: str | None = None

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        if len(value) > 63 or not _DNS_LABEL.match(value):
            raise ValueError(
                f'"{value}" is not a valid volume name; use at most 63 lowercase letters, '
                'digits and "-", starting and ending with a letter or digit'
            )
        if value in RESERVED_NAMES or value.startswith(RESERVED_PREFIX):
            raise ValueError(
                f'"{value}" is the name of a volume k8sjobs adds itself ('
                + ", ".join(sorted(RESERVED_NAMES))
                + f", {RESERVED_PREFIX}*); choose another name"
            )
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount_path_is_free(cls, value: str) -> str:
        normal = _absolute(value, "mount path")
        if _within(normal, RESERVED_MOUNT_ROOT):
            raise ValueError(
                f'mount path "{value}" is under {RESERVED_MOUNT_ROOT}, where k8sjobs mounts '
                "its entrypoint and handoff files; choose another directory"
            )
        return normal

    @field_validator("sub_path")
    @classmethod
    def _sub_path_is_relative(cls, value: str | None) -> str | None:
        return None if value is None else _relative(value, "sub path")

    @field_validator("claim")
    @classmethod
    def _claim_is_name(cls, value: str | None) -> str | None:
        return None if value is None else _object_name(value, "PersistentVolumeClaim")

    @field_validator("config_map")
    @classmethod
    def _config_map_is_name(cls, value: str | None) -> str | None:
        return None if value is None else _object_name(value, "ConfigMap")

    @field_validator("secret")
    @classmethod
    def _secret_is_name(cls, value: str | None) -> str | None:
        return None if value is None else _object_name(value, "Secret")

    @field_validator("host_path")
    @classmethod
    def _host_path_is_absolute(cls, value: str | None) -> str | None:
        return None if value is None else _absolute(value, "host path")

    @field_validator("items")
    @classmethod
    def _items_are_files(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("list at least one key, or leave items out to take every key")
        for key, path in value.items():
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                raise ValueError(f'"{key}" is not a ConfigMap or Secret key ([-._a-zA-Z0-9])')
            _relative(path, f'"{key}": file path')
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        given = [name for name in SOURCES if getattr(self, name) is not None]
        if len(given) != 1:
            shown = ", ".join(given) if given else "none"
            raise ValueError(
                f'volume "{self.name}" needs exactly one source of {", ".join(SOURCES)} '
                f"(given: {shown})"
            )
        if (self.items is not None or self.mode is not None) and given[0] not in (
            "config_map",
            "secret",
        ):
            raise ValueError(
                f'volume "{self.name}": items and mode apply to config_map and secret '
                f"volumes only, not {given[0]}"
            )
        return self

    @property
    def source(self) -> str:
        """Return which source this volume has: one of ``SOURCES``."""
        return next(name for name in SOURCES if getattr(self, name) is not None)


def shm_volume(size: str | int) -> Volume:
    """Return the memory-backed ``/dev/shm`` volume ``Step.shm`` asks for."""
    return Volume.model_construct(
        name=SHM_VOLUME,
        mount_path=SHM_PATH,
        read_only=False,
        sub_path=None,
        claim=None,
        nfs=None,
        config_map=None,
        secret=None,
        items=None,
        mode=None,
        empty_dir=EmptyDir(medium="Memory", size_limit=_size(size)),
        host_path=None,
    )


def _within(path: str, root: str) -> bool:
    """Return whether ``path`` is ``root`` or lies under it (both normalised, absolute)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_volumes(
    volumes: Sequence[Volume],
    *,
    workdir: str,
    outputs: Mapping[str, str],
    restricted: bool,
    shm: str | int | None = None,
    taken: Mapping[str, str] | None = None,
) -> tuple[tuple[str | int, ...], str] | None:
    """Return ``(location, message)`` of the first rule a step's volumes break, else None.

    The rules need the rest of the step: no two volumes on one path, none on the work
    directory or over k8sjobs' inputs or /tmp, no output inside a volume (the output push
    does not see the step's volumes), and no hostPath or NFS under the restricted level.
    ``taken`` maps other paths k8sjobs mounts for this step to what they hold. The location
    is a field path of the step (``("volumes", 2, "mount_path")``).
    """
    if shm is not None and any(v.mount_path == SHM_PATH for v in volumes):
        return ("shm",), f'shm and a volume both mount "{SHM_PATH}"; keep one of them'
    found = _check(volumes, workdir=workdir, outputs=outputs, restricted=restricted)
    if found is None:
        for index, volume in enumerate(volumes):
            if volume.mount_path in (taken or {}):
                what = (taken or {})[volume.mount_path]
                found = (
                    (index, "mount_path"),
                    f'"{volume.mount_path}" is where k8sjobs mounts {what}',
                )
                break
    return None if found is None else (("volumes", *found[0]), found[1])


def _check(
    volumes: Sequence[Volume], *, workdir: str, outputs: Mapping[str, str], restricted: bool
) -> tuple[tuple[str | int, ...], str] | None:
    inputs = posixpath.join(workdir, "inputs")
    seen_names: dict[str, int] = {}
    seen_paths: dict[str, int] = {}
    for index, volume in enumerate(volumes):
        path = volume.mount_path
        where: tuple[str | int, ...] = (index, "mount_path")
        if volume.name in seen_names:
            return (index, "name"), f'two volumes are named "{volume.name}"; rename one'
        if path in seen_paths:
            other = volumes[seen_paths[path]].name
            return where, f'volumes "{other}" and "{volume.name}" are both mounted at "{path}"'
        if path == workdir:
            return where, (
                f'mount path "{path}" is the work directory; mount the volume elsewhere '
                f'(e.g. "{posixpath.join(workdir, volume.name)}") or change workdir'
            )
        if _within(path, inputs):
            return where, f'mount path "{path}" is where k8sjobs puts the inputs ("{inputs}")'
        if restricted and path == "/tmp":
            return where, 'under security "restricted", k8sjobs mounts its own "/tmp"'
        for key, output in outputs.items():
            target = posixpath.normpath(posixpath.join(workdir, output))
            if _within(target, path) or _within(path, target):
                return where, (
                    f'output "{key}" ({output}) and this volume overlap, and the output push '
                    "does not see the step's volumes; write the output elsewhere in the work "
                    "directory, or copy it out of the volume"
                )
        if restricted and volume.source in ("host_path", "nfs"):
            return (index, volume.source), (
                f'volume "{volume.name}": {volume.source} volumes break the restricted Pod '
                'Security level; use a claim instead, or security "default"'
            )
        seen_names[volume.name], seen_paths[path] = index, index
    return None


def pod_volumes(volumes: Iterable[Volume]) -> list[dict[str, Any]]:
    """Return the pod's ``volumes`` entries for a step's volumes (Kubernetes' spelling)."""
    return [{"name": v.name, **_source(v)} for v in volumes]


def _source(volume: Volume) -> dict[str, Any]:
    if volume.claim is not None:
        claim: dict[str, Any] = {"claimName": volume.claim}
        return {"persistentVolumeClaim": claim | ({"readOnly": True} if volume.read_only else {})}
    if volume.nfs is not None:
        nfs: dict[str, Any] = {"server": volume.nfs.server, "path": volume.nfs.path}
        return {"nfs": nfs | ({"readOnly": True} if volume.read_only else {})}
    if volume.empty_dir is not None:
        empty: dict[str, Any] = {}
        if volume.empty_dir.medium:
            empty["medium"] = volume.empty_dir.medium
        if volume.empty_dir.size_limit is not None:
            empty["sizeLimit"] = str(volume.empty_dir.size_limit)
        return {"emptyDir": empty}
    if volume.host_path is not None:
        return {"hostPath": {"path": volume.host_path}}
    if volume.config_map is not None:
        return {"configMap": {"name": volume.config_map, **_files(volume)}}
    assert volume.secret is not None
    return {"secret": {"secretName": volume.secret, **_files(volume)}}


def _files(volume: Volume) -> dict[str, Any]:
    files: dict[str, Any] = {}
    if volume.items is not None:
        files["items"] = [{"key": k, "path": p} for k, p in volume.items.items()]
    if volume.mode is not None:
        files["defaultMode"] = volume.mode
    return files


def volume_mounts(volumes: Iterable[Volume]) -> list[dict[str, Any]]:
    """Return the main container's ``volumeMounts`` entries for a step's volumes."""
    mounts = []
    for volume in volumes:
        mount: dict[str, Any] = {"name": volume.name, "mountPath": volume.mount_path}
        if volume.read_only:
            mount["readOnly"] = True
        if volume.sub_path is not None:
            mount["subPath"] = volume.sub_path
        mounts.append(mount)
    return mounts
