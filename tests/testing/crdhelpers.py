"""CRDs the custom-resource tests define: a MiniCluster like the Flux Operator's, and a
cluster-scoped kind without a status subresource."""

from __future__ import annotations

from typing import Any

import aiohttp

from k8sjobs.testing import FakeCluster

from .conftest import wait_until

GROUP = "flux-framework.org"
VERSION = "v1alpha2"

MINICLUSTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["containers"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "default": 1},
                "interactive": {"type": "boolean", "default": False},
                "network": {"type": "string", "enum": ["flux-service", "host"]},
                "tasks": {"x-kubernetes-int-or-string": True},
                "containers": {
                    "type": "array",
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "required": ["image"],
                        "properties": {
                            "image": {"type": "string", "minLength": 1},
                            "command": {"type": "string"},
                        },
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def minicluster_crd() -> dict[str, Any]:
    """Return a namespaced CRD with a status subresource and printer columns."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"miniclusters.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "plural": "miniclusters",
                "kind": "MiniCluster",
                "shortNames": ["mc"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": MINICLUSTER_SCHEMA},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


def widget_crd() -> dict[str, Any]:
    """Return a cluster-scoped CRD without subresources."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def minicluster(name: str, **spec: Any) -> dict[str, Any]:
    """Return a MiniCluster with one container and `spec` overrides."""
    body_spec = {"containers": [{"image": "fluxrm/flux-sched:jammy"}], **spec}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MiniCluster",
        "metadata": {"name": name},
        "spec": body_spec,
    }


def established(cluster: FakeCluster, name: str) -> bool:
    """Return whether the CRD `name` has condition Established=True."""
    crd = cluster.store.get("customresourcedefinitions", "", name)
    conditions = (crd or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


async def define(http: aiohttp.ClientSession, cluster: FakeCluster, crd: dict[str, Any]) -> None:
    """Create `crd` over HTTP and wait until it is established."""
    async with http.post(
        f"{cluster.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
    ) as response:
        assert response.status == 201, await response.text()
    await wait_until(lambda: established(cluster, crd["metadata"]["name"]))
