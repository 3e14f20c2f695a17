"""What a pod reads from around it: its ConfigMaps and Secrets, and the downward API.

A missing ConfigMap, Secret, key or unsupported field is a ``ConfigError``: the kubelet's
``CreateContainerConfigError``, which leaves the container waiting and the pod Pending. The
sources given to ``PodRunner.run`` signal a missing object by raising ``LookupError``
(``KeyError``). The pod's own address, as the downward API and its status report it, is this
machine's loopback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "HOST_IP",
    "ConfigError",
    "ConfigMapSource",
    "SecretSource",
    "Sources",
    "all_containers",
    "field_value",
]

ConfigMapSource = Callable[[str], Mapping[str, str]]
SecretSource = Callable[[str], Mapping[str, bytes]]

HOST_IP = "127.0.0.1"
_FIELD_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")
_T = TypeVar("_T")


class ConfigError(Exception):
    """A ConfigMap, Secret, key or field the pod needs is missing: CreateContainerConfigError."""


@dataclass(frozen=True)
class Sources:
    """Where ConfigMaps and Secrets come from, turning a missing one into a config error."""

    configmap_source: ConfigMapSource
    secret_source: SecretSource
    namespace: str

    def configmap(self, name: str, *, optional: bool = False) -> dict[str, bytes] | None:
        """Return a ConfigMap's data as bytes (None for a missing optional one)."""
        data = _fetch("configmap", self.configmap_source, name, optional)
        return None if data is None else {key: value.encode() for key, value in data.items()}

    def secret(self, name: str, *, optional: bool = False) -> dict[str, bytes] | None:
        """Return a Secret's data (None for a missing optional one)."""
        data = _fetch("secret", self.secret_source, name, optional)
        return None if data is None else dict(data)


def _fetch(
    kind: str, source: Callable[[str], Mapping[str, _T]], name: str, optional: bool
) -> Mapping[str, _T] | None:
    """Return an object's data, None for a missing optional one, or raise ConfigError."""
    try:
        return source(name)
    except LookupError:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found') from None


def field_value(path: str, pod: Mapping[str, Any]) -> str:
    """Return the value of a downward API fieldPath for this pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    subscript = _FIELD_SUBSCRIPT.match(path)
    if subscript:
        return str((meta.get(subscript[1]) or {}).get(subscript[2], ""))
    if path in ("metadata.labels", "metadata.annotations"):
        pairs = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join(f'{key}="{value}"' for key, value in pairs)
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace") or "default",
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or "localhost",
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
        "status.podIP": HOST_IP,
        "status.podIPs": HOST_IP,
    }
    if path not in simple:
        raise ConfigError(f'fieldRef "{path}" is not supported by the local runner')
    return str(simple[path])


def all_containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return a pod spec's init containers, then its containers."""
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
