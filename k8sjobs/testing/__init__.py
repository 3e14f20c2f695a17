"""A fake Kubernetes cluster for tests: a real HTTP API server, a Job controller, a kubelet.

    from k8sjobs.testing import FakeCluster

    async with FakeCluster(kubelet="simulate") as cluster:
        await kubernetes_asyncio.config.load_kube_config(str(cluster.kubeconfig_path))
        ...

See docs/testing.md. The pytest plugin (k8sjobs.testing.pytest_plugin) provides the
`fake_cluster` and `fake_cluster_execute` fixtures.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._cluster import FakeCluster
    from ._faults import Faults, RequestKey, RequestLog
    from ._kubelet import KubeletConfig, NodeConfig, PodPlan, SimulateRule
    from .apiserver.errors import ApiError
    from .apiserver.store import Event, Store
    from .controllers.job import ControllerConfig
    from .controllers.jobset import jobset_crd

# Where each public name lives. Imported on first use, so that the pytest plugin (loaded in
# every pytest run of every project that installs k8sjobs) does not pay for aiohttp & co.
_HOMES = {
    "ApiError": "apiserver.errors",
    "ControllerConfig": "controllers.job",
    "Event": "apiserver.store",
    "FakeCluster": "_cluster",
    "Faults": "_faults",
    "KubeletConfig": "_kubelet",
    "NodeConfig": "_kubelet",
    "PodPlan": "_kubelet",
    "RequestKey": "_faults",
    "RequestLog": "_faults",
    "SimulateRule": "_kubelet",
    "Store": "apiserver.store",
    "jobset_crd": "controllers.jobset",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its private module on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "ApiError",
    "ControllerConfig",
    "Event",
    "FakeCluster",
    "Faults",
    "KubeletConfig",
    "NodeConfig",
    "PodPlan",
    "RequestKey",
    "RequestLog",
    "SimulateRule",
    "Store",
    "jobset_crd",
]
