"""Where a pod's PersistentVolumeClaims and NFS shares are on this machine.

A claim is a directory that outlives its pods: ``<claims>/<namespace>/<claim name>/`` by
default, so two steps (or two runs) naming the same claim share its files, or a directory the
user maps to the claim's name. An NFS share has no default (guessing one would hide data
that is elsewhere): it is the directory mapped to ``server:path`` or to the volume's name,
else a ``ConfigError`` that says how to map it. Mappings come from ``LocalBackend(volumes=)``
or ``K8SJOBS_LOCAL_VOLUMES`` (``name=/dir`` pairs, comma-separated).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._sources import ConfigError

__all__ = ["ENV_VOLUMES", "VolumeDirs", "parse_volume_map"]

ENV_VOLUMES = "K8SJOBS_LOCAL_VOLUMES"


def parse_volume_map(text: str, what: str = ENV_VOLUMES) -> dict[str, Path]:
    """Return the mapping written as ``name=/dir,server:/export=/dir`` (as in the env)."""
    mapping: dict[str, Path] = {}
    for pair in filter(str.strip, text.split(",")):
        name, sep, directory = pair.strip().rpartition("=")
        if not sep or not name or not directory:
            raise ValueError(
                f'{what}: "{pair.strip()}" is not name=/directory; write e.g. '
                '"scratch=/data/scratch,nfs.example:/export=/mnt/export"'
            )
        mapping[name] = Path(directory).expanduser().absolute()
    return mapping


@dataclass(frozen=True)
class VolumeDirs:
    """The directories that stand for claims and NFS shares (``paths``: a name to a dir)."""

    claims: Path
    paths: Mapping[str, Path] = field(default_factory=dict)

    @classmethod
    def configured(
        cls, claims: Path, paths: Mapping[str, str | os.PathLike[str]] | None
    ) -> VolumeDirs:
        """Return the directories given, or those of ``K8SJOBS_LOCAL_VOLUMES`` when None."""
        if paths is None:
            return cls(claims, parse_volume_map(os.environ.get(ENV_VOLUMES, "")))
        return cls(claims, {k: Path(v).expanduser().absolute() for k, v in paths.items()})

    def claim(self, namespace: str, claim: str) -> Path:
        """Return the directory of a claim (created by the runner if missing)."""
        return self.paths.get(claim) or self.claims / namespace / claim

    def nfs(self, volume: str, server: str, path: str) -> Path:
        """Return the directory mapped to an NFS share, or raise ConfigError saying how."""
        share = f"{server}:{path}"
        found = self.paths.get(share) or self.paths.get(volume)
        if found is None:
            raise ConfigError(
                f'volume "{volume}": the NFS share {share} has no directory on this machine; '
                f'map it with LocalBackend(volumes={{"{share}": "/local/dir"}}) or '
                f'{ENV_VOLUMES}="{share}=/local/dir"'
            )
        return found
