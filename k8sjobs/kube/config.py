"""Where the cluster is and how to prove who we are: kubeconfig or in-cluster config.

kubernetes_asyncio's loader reads the kubeconfig (contexts, CA, client certificates,
tokens, exec plugins); we keep only the facts an HTTP client needs, and never its models.
The token lives in a field that no repr, log line or exception text shows.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["ClusterConfig", "kubeconfig_path", "load_config"]

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ClusterConfig:
    """The API server's address, TLS settings, credentials and default namespace.

    ``reload`` returns a fresh config (a new exec-plugin or service-account token); the
    client calls it once when the server answers 401.
    """

    host: str
    ssl: ssl.SSLContext | bool = True
    namespace: str | None = None
    authorization: str | None = field(default=None, repr=False)
    reload: Callable[[], Awaitable[ClusterConfig]] | None = field(default=None, repr=False)


async def load_config(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> ClusterConfig:
    """Return the cluster config: ``kubeconfig`` (or $KUBECONFIG, ~/.kube/config), else in-cluster.

    Raises ``ConfigError`` (a ``FileNotFoundError``) naming the places looked at when there
    is neither, and naming the file and what is wrong with it when it cannot be used.
    """
    path = kubeconfig_path(kubeconfig)
    if path is not None:
        return await _from_kubeconfig(path, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (_SA_DIR / "token").exists():
        return await _in_cluster()
    raise ConfigError(
        "No Kubernetes configuration found: pass kubeconfig=..., set KUBECONFIG, create "
        "~/.kube/config, or run inside a pod with a service account."
    )


def kubeconfig_path(explicit: str | os.PathLike[str] | None) -> str | None:
    """Return the kubeconfig file ``load_config`` reads (None: in-cluster, or none at all)."""
    if explicit is not None:
        return os.fspath(explicit)
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    if first:
        return first
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


async def _from_kubeconfig(path: str, context: str | None) -> ClusterConfig:
    import yaml
    from kubernetes_asyncio import config as kconfig
    from kubernetes_asyncio.client import Configuration

    if not await asyncio.to_thread(os.path.isfile, path):
        raise ConfigError(f"kubeconfig {path}: no such file.")
    target = Configuration()
    try:
        loader = await kconfig.load_kube_config(
            config_file=path, context=context, client_configuration=target, persist_config=False
        )
    except (kconfig.ConfigException, yaml.YAMLError) as exc:
        why = " ".join(str(exc).split())  # the loader's own words, on one line
        raise ConfigError(f"kubeconfig {path} cannot be used: {why}") from None
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        # A field of the wrong shape (clusters: 3) fails deep inside the loader.
        raise ConfigError(
            f"kubeconfig {path} is malformed: a field has the wrong shape ({exc}); "
            "kubectl config view --kubeconfig FILE shows it"
        ) from None
    current = loader.current_context or {}
    namespace = (current.get("context") or {}).get("namespace")

    async def reload() -> ClusterConfig:
        return await _from_kubeconfig(path, context)

    return _from_configuration(target, namespace, reload)


async def _in_cluster() -> ClusterConfig:
    from kubernetes_asyncio import config as kconfig
    from kubernetes_asyncio.client import Configuration

    target = Configuration()
    kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
        client_configuration=target, try_refresh_token=False
    )
    namespace = (_SA_DIR / "namespace").read_text().strip() or None
    return _from_configuration(target, namespace, _in_cluster)


def _from_configuration(
    target: Any, namespace: str | None, reload: Callable[[], Awaitable[ClusterConfig]]
) -> ClusterConfig:
    token = (getattr(target, "api_key", None) or {}).get("BearerToken") or (
        getattr(target, "api_key", None) or {}
    ).get("authorization")
    if token and not str(token).lower().startswith("bearer "):
        token = f"Bearer {token}"
    return ClusterConfig(
        host=str(target.host).rstrip("/"),
        ssl=_ssl_context(target),
        namespace=namespace,
        authorization=token or None,
        reload=reload,
    )


def _ssl_context(target: Any) -> ssl.SSLContext | bool:
    if not str(target.host).startswith("https"):
        return False
    context = ssl.create_default_context(cafile=target.ssl_ca_cert or None)
    if target.cert_file:
        context.load_cert_chain(target.cert_file, target.key_file or None)
    if not target.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
