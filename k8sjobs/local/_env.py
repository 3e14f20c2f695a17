"""A container's environment, resolved as a kubelet resolves it.

The container's ``envFrom`` and ``env`` (value, configMapKeyRef, secretKeyRef, fieldRef), plus
HOME, TMPDIR, HOSTNAME, and from the driver only PATH, LANG and LC_*; then the runner's
``extra_env``. Nothing else of the driver's environment leaks in, so no driver secret reaches a
step. Kubernetes' own ``$(VAR)`` expansion of command, args and env values happens here, before
the path translation rule (``_volumes``), so ``$(WORKDIR)/out`` is translated too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._sources import ConfigError, Sources, field_value

__all__ = ["base_env", "declared_env", "expand"]

_EXPANSION = re.compile(r"\$(\$|\(([^)]*)\))")


def base_env(pod: Mapping[str, Any], sandbox: Path) -> dict[str, str]:
    """Return what every container gets before its own env: PATH, locale, HOME, TMPDIR, HOSTNAME."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if name in ("PATH", "LANG") or name.startswith("LC_")
    }
    meta = pod.get("metadata") or {}
    return {
        "PATH": os.defpath,
        **inherited,
        "HOME": str(sandbox / "home"),
        "TMPDIR": str(sandbox / "tmp"),
        "HOSTNAME": str((pod.get("spec") or {}).get("hostname") or meta.get("name", "")),
    }


def expand(value: str, env: Mapping[str, str]) -> str:
    """Return ``value`` with Kubernetes' ``$(VAR)`` references expanded and ``$$`` unescaped."""

    def replace(match: re.Match[str]) -> str:
        if match[1] == "$":
            return "$"
        return env.get(match[2], match[0])

    return _EXPANSION.sub(replace, value)


def declared_env(
    container: Mapping[str, Any], pod: Mapping[str, Any], sources: Sources
) -> dict[str, str]:
    """Return the container's envFrom and env, resolved as a kubelet would (container paths)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for key, value in _env_source(source, sources).items():
            env[prefix + key] = value
    for item in container.get("env") or []:
        if "valueFrom" in item:
            resolved = _value_from(item["valueFrom"], pod, sources)
            if resolved is not None:
                env[item["name"]] = resolved
        else:
            env[item["name"]] = expand(item.get("value", ""), env)
    return env


def _env_source(source: Mapping[str, Any], sources: Sources) -> dict[str, str]:
    """Return the variables one envFrom entry (configMapRef or secretRef) brings."""
    if "configMapRef" in source:
        ref = source["configMapRef"]
        data = sources.configmap(ref["name"], optional=bool(ref.get("optional")))
    else:
        ref = source.get("secretRef") or {}
        data = sources.secret(ref.get("name", ""), optional=bool(ref.get("optional")))
    return {key: value.decode(errors="replace") for key, value in (data or {}).items()}


def _value_from(
    value_from: Mapping[str, Any], pod: Mapping[str, Any], sources: Sources
) -> str | None:
    """Return an env value from a fieldRef or key reference; None for a missing optional one."""
    if "fieldRef" in value_from:
        return field_value(value_from["fieldRef"]["fieldPath"], pod)
    for kind, read in (("configMapKeyRef", sources.configmap), ("secretKeyRef", sources.secret)):
        if kind in value_from:
            ref = value_from[kind]
            optional = bool(ref.get("optional"))
            data = read(ref["name"], optional=optional)
            if data is not None and ref["key"] in data:
                return data[ref["key"]].decode(errors="replace")
            if optional:
                return None
            what = "ConfigMap" if kind == "configMapKeyRef" else "Secret"
            namespace = sources.namespace
            raise ConfigError(f"couldn't find key {ref['key']} in {what} {namespace}/{ref['name']}")
    raise ConfigError(f"env valueFrom {dict(value_from)} is not supported by the local runner")
