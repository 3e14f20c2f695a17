"""A pod's volumes in its sandbox, and the rule that maps container paths onto them.

Volumes
-------
configMap, secret, projected, downwardAPI and emptyDir volumes are materialised in the sandbox
``<root>/<namespace>/<pod>/volumes/<volume>/`` (items, ``mode`` and ``defaultMode`` honoured;
secret files keep only the owner's bits, so 0644 becomes 0600); hostPath volumes are the host
path itself; persistentVolumeClaim and nfs volumes are the directories ``VolumeDirs`` maps them
to (``_volumedirs``), shared by every pod that names them. configMap, secret, projected and
downwardAPI volumes, and emptyDirs every mount of which is readOnly, are made read-only (mode
bits only: root, or the owner with chmod, can still write). Reading a volume's data
(``plan_volume``) is apart from writing it (``materialise``, in a worker thread), so a missing
ConfigMap is found before anything is written. A mount's ``subPath`` directory is created in a
writable volume, as the kubelet does. A mount nested in another mount of the same container
(a claim at ``/work/data`` under the work directory ``/work``) is also linked into the outer
volume's sandbox directory, so a relative path (``data/x`` from ``/work``) reaches it as in
the container.

The path translation rule
-------------------------
Any string in a container's ``command``, ``args``, ``env`` values and ``workingDir`` that equals
a volumeMount's ``mountPath``, or starts with ``mountPath + "/"``, is rewritten to the sandbox
path of that volume (``subPath`` honoured); the longest matching mountPath wins. Nothing else is
rewritten: a script that finds its files through the environment the pod gives it runs
unchanged, and a script with hard-coded container paths elsewhere sees them as they are.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._sources import ConfigError, Sources, all_containers, field_value
from ._volumedirs import VolumeDirs

__all__ = [
    "PathMap",
    "VolumePlan",
    "link_nested_mounts",
    "materialise",
    "plan_volume",
    "volumes_with_access",
]


def volumes_with_access(spec: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    """Return each volume of a pod spec with whether every mount of it is readOnly."""
    mounts = [m for c in all_containers(spec) for m in c.get("volumeMounts") or []]
    volumes = []
    for volume in spec.get("volumes") or []:
        own = [m for m in mounts if m.get("name") == volume["name"]]
        volumes.append((volume, bool(own) and all(m.get("readOnly") for m in own)))
    return volumes


@dataclass(frozen=True)
class VolumePlan:
    """A volume as it will exist here: its directory and the files to write in it."""

    name: str
    path: Path
    files: tuple[tuple[str, bytes, int], ...] = ()
    create: bool = True
    read_only: bool = False
    sub_paths: tuple[str, ...] = ()


_DEFAULT_MODE = 0o644


def plan_volume(
    volume: Mapping[str, Any],
    mounted_read_only: bool,
    pod: Mapping[str, Any],
    sandbox: Path,
    sources: Sources,
    dirs: VolumeDirs | None = None,
) -> VolumePlan:
    """Return how to materialise one volume, reading its data from the sources."""
    name = volume["name"]
    path = sandbox / "volumes" / name
    sub_paths = _sub_paths(pod.get("spec") or {}, name)
    if "emptyDir" in volume:
        return VolumePlan(name, path, read_only=mounted_read_only, sub_paths=sub_paths)
    if "hostPath" in volume:
        return VolumePlan(name, Path(volume["hostPath"]["path"]), create=False, sub_paths=sub_paths)
    if dirs is not None and "persistentVolumeClaim" in volume:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        claim = dirs.claim(namespace, volume["persistentVolumeClaim"]["claimName"])
        return VolumePlan(name, claim, sub_paths=sub_paths)
    if dirs is not None and "nfs" in volume:
        nfs = volume["nfs"]
        share = dirs.nfs(name, nfs["server"], nfs["path"])
        return VolumePlan(name, share, create=False, sub_paths=sub_paths)
    if "projected" in volume:
        projected = volume["projected"]
        mode = projected.get("defaultMode", _DEFAULT_MODE)
        files = [
            f for s in projected.get("sources") or [] for f in _source_files(s, mode, pod, sources)
        ]
        return VolumePlan(name, path, tuple(files), read_only=True)
    for kind in ("configMap", "secret", "downwardAPI"):
        if kind in volume:
            mode = volume[kind].get("defaultMode", _DEFAULT_MODE)
            files = _source_files({kind: volume[kind]}, mode, pod, sources)
            return VolumePlan(name, path, tuple(files), read_only=True)
    raise ConfigError(
        f'volume "{name}": only emptyDir, configMap, secret, projected, downwardAPI, hostPath, '
        "persistentVolumeClaim and nfs volumes run locally"
    )


def _sub_paths(spec: Mapping[str, Any], volume: str) -> tuple[str, ...]:
    """Return the subPaths the pod's containers mount of ``volume``, each safely relative."""
    found = []
    for container in all_containers(spec):
        for mount in container.get("volumeMounts") or []:
            sub = mount.get("subPath")
            if mount.get("name") == volume and sub:
                if Path(sub).is_absolute() or ".." in Path(sub).parts:
                    raise ConfigError(f'volume "{volume}": subPath "{sub}" must be relative')
                found.append(sub)
    return tuple(found)


def _source_files(
    source: Mapping[str, Any], mode: int, pod: Mapping[str, Any], sources: Sources
) -> list[tuple[str, bytes, int]]:
    """Return the (relative path, data, mode) files one volume source projects."""
    if "configMap" in source:
        ref = source["configMap"]
        data = sources.configmap(ref["name"], optional=bool(ref.get("optional")))
        return _items(data or {}, ref.get("items"), mode, f'configmap "{ref["name"]}"')
    if "secret" in source:
        ref = source["secret"]
        name = ref.get("secretName") or ref.get("name", "")
        data = sources.secret(name, optional=bool(ref.get("optional")))
        files = _items(data or {}, ref.get("items"), mode, f'secret "{name}"')
        # Kubernetes' 0644 default is safe inside a container; on a shared machine keep
        # secrets to their owner.
        return [(path, value, file_mode & 0o700) for path, value, file_mode in files]
    if "downwardAPI" in source:
        items = source["downwardAPI"].get("items") or []
        return [
            (i["path"], field_value(i["fieldRef"]["fieldPath"], pod).encode(), i.get("mode", mode))
            for i in items
            if "fieldRef" in i
        ]
    if "serviceAccountToken" in source:
        # No API server to authenticate to locally; an empty token keeps readers from crashing.
        return [(source["serviceAccountToken"].get("path", "token"), b"", mode)]
    return []


def _items(
    data: Mapping[str, bytes], items: Iterable[Mapping[str, Any]] | None, mode: int, what: str
) -> list[tuple[str, bytes, int]]:
    if items is None:
        return [(key, value, mode) for key, value in data.items()]
    files = []
    for item in items:
        if item["key"] not in data:
            raise ConfigError(f"couldn't find key {item['key']} in {what}")
        files.append((item["path"], data[item["key"]], item.get("mode", mode)))
    return files


def materialise(sandbox: Path, plans: Iterable[VolumePlan]) -> None:
    """Create a fresh sandbox and write every volume into it (runs in a worker thread)."""
    if sandbox.exists():
        _remove_tree(sandbox)  # a new pod of the same name is a new pod
    for sub in ("volumes", "home", "tmp", "logs"):
        (sandbox / sub).mkdir(parents=True)
    for plan in plans:
        if not plan.read_only and not plan.files:
            for sub in plan.sub_paths:
                (plan.path / sub).mkdir(parents=True, exist_ok=True)
        if not plan.create:
            continue
        plan.path.mkdir(parents=True, exist_ok=True)
        for relative, data, mode in plan.files:
            _write_file(plan.path, relative, data, mode)
        if plan.read_only:
            for directory in [plan.path, *(p for p in plan.path.rglob("*") if p.is_dir())]:
                directory.chmod(0o555)


def link_nested_mounts(spec: Mapping[str, Any], volumes: Mapping[str, Path], sandbox: Path) -> None:
    """Link each mount nested in another of its container into the outer sandbox directory.

    Only outer volumes in the sandbox get links: a hostPath or claim is the user's own
    directory, which a pod must not change behind their back. Runs in a worker thread.
    """
    for container in all_containers(spec):
        mounts = [
            (m["mountPath"].rstrip("/") or "/", volumes[m["name"]] / m.get("subPath", ""))
            for m in container.get("volumeMounts") or []
            if m.get("name") in volumes
        ]
        for inner, inner_host in mounts:
            outers = [(p, h) for p, h in mounts if inner.startswith(p.rstrip("/") + "/")]
            if not outers:
                continue
            outer, outer_host = max(outers, key=lambda mount: len(mount[0]))
            if not outer_host.is_relative_to(sandbox):
                continue
            link = outer_host / inner[len(outer) :].lstrip("/")
            if link.exists() or link.is_symlink():
                continue
            try:
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(inner_host, target_is_directory=True)
            except OSError:
                continue  # a read-only outer volume: reachable through its mount path only


def _write_file(directory: Path, relative: str, data: bytes, mode: int) -> None:
    target = directory / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ValueError(f'volume item path "{relative}" must be relative, without ".."')
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    target.chmod(mode)  # after writing, so a read-only mode does not stop the write


def _remove_tree(path: Path) -> None:
    """Remove a sandbox, read-only volume directories included."""
    for directory, _, _ in os.walk(path):
        os.chmod(directory, 0o700)
    shutil.rmtree(path)


class PathMap:
    """The path translation rule: container mount paths to sandbox paths, longest first."""

    def __init__(self, mounts: Iterable[tuple[str, str]]) -> None:
        self._mounts = sorted(mounts, key=lambda mount: len(mount[0]), reverse=True)

    @classmethod
    def for_container(
        cls, container: Mapping[str, Any], volumes: Mapping[str, Path], sandbox: Path
    ) -> PathMap:
        """Return the rule for one container's volumeMounts (``subPath`` honoured)."""
        mounts = []
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in volumes:
                raise ConfigError(
                    f'container "{container["name"]}" mounts volume "{mount["name"]}", '
                    "which the pod does not declare"
                )
            host = volumes[mount["name"]] / mount.get("subPath", "")
            mount_path = mount["mountPath"].rstrip("/") or "/"
            mounts.append((mount_path, str(host).rstrip("/")))
        return cls(mounts)

    def translate(self, value: str) -> str:
        """Return ``value`` with a leading mount path replaced by its sandbox path."""
        for mount_path, host in self._mounts:
            prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
            if value == mount_path:
                return host
            if value.startswith(prefix):
                return host + "/" + value[len(prefix) :]
        return value
