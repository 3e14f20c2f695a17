"""The ConfigMaps and Secrets a local run stands in for: what a step's volumes read.

On a cluster, a step's ``config_map`` and ``secret`` volumes name objects that already exist
in its namespace. Locally there is no API server, so the program hands their data to
``LocalBackend(configmaps=..., secrets=...)``; a name not given is missing, as on a cluster
(the pod waits with ``CreateContainerConfigError``, and the step fails naming it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["LocalObjects"]


@dataclass(frozen=True)
class LocalObjects:
    """ConfigMap data (text) and Secret data (bytes), by object name."""

    configmaps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict, repr=False)

    @classmethod
    def given(
        cls,
        configmaps: Mapping[str, Mapping[str, str]] | None,
        secrets: Mapping[str, Mapping[str, str | bytes]] | None,
    ) -> LocalObjects:
        """Return the objects, each Secret value as bytes (text is encoded as UTF-8)."""
        encoded = {
            name: {k: v.encode() if isinstance(v, str) else bytes(v) for k, v in data.items()}
            for name, data in (secrets or {}).items()
        }
        return cls({k: dict(v) for k, v in (configmaps or {}).items()}, encoded)

    def configmap(self, name: str) -> Mapping[str, str]:
        """Return a ConfigMap's data; KeyError when none of that name was given."""
        return self.configmaps[name]

    def secret(self, name: str) -> Mapping[str, bytes]:
        """Return a Secret's data; KeyError when none of that name was given."""
        return self.secrets[name]
