"""A fake Kubernetes cluster for tests: a real HTTP API server, a Job controller, a kubelet.

    from k8sjobs.testing import FakeCluster

    async with FakeCluster(kubelet="simulate") as cluster:
        await kubernetes_asyncio.config.load_kube_config(str(cluster.kubeconfig_path))
        ...

See docs/testing.md. The pytest plugin (k8sjobs.testing.pytest_plugin) provides the
`fake_cluster` and `fake_cluster_execute` fixtures.
"""

from __future__ import annotations

from k8sjobs.testing._cluster import FakeCluster
from k8sjobs.testing._controller import ControllerConfig
from k8sjobs.testing._errors import ApiError
from k8sjobs.testing._faults import Faults, RequestKey, RequestLog
from k8sjobs.testing._kubelet import KubeletConfig, NodeConfig, PodPlan, SimulateRule
from k8sjobs.testing._store import Event, Store

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
]
