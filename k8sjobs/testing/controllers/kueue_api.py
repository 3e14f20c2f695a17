"""Kueue's API group as the fake cluster serves it: the CRDs Kueue v0.20 installs.

``kueue.x-k8s.io`` serves v1beta2 (preferred, the storage version) and v1beta1 (deprecated),
as the recorded discovery of a real v0.20 install says
(shared/k8s-reference/jobset-kueue-discovery.json). The kinds a client meets are defined:
ResourceFlavor, ClusterQueue, LocalQueue, WorkloadPriorityClass and Workload, each with a
status subresource and Kueue's short names. Their schemas keep every field (Kueue's own
schemas are thousands of lines; the fake validates none of it), and the defaults a client
reads back on a create response (a ClusterQueue's preemption, queueing strategy and flavor
fungibility, a LocalQueue's stopPolicy) are filled in by `defaults`, as Kueue's defaulting
webhook does.
"""

from __future__ import annotations

import copy
from typing import Any

from ..apiserver.store import Obj

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
DEPRECATED_VERSION = "v1beta1"

#: plural, kind, scope, short names (the recorded discovery's).
KINDS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("resourceflavors", "ResourceFlavor", "Cluster", ("flavor", "flavors", "rf")),
    ("clusterqueues", "ClusterQueue", "Cluster", ("cq",)),
    ("localqueues", "LocalQueue", "Namespaced", ("queue", "queues", "lq")),
    ("workloadpriorityclasses", "WorkloadPriorityClass", "Cluster", ()),
    ("workloads", "Workload", "Namespaced", ("wl",)),
)

_OPEN: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": _OPEN,
        "status": _OPEN,
    },
}
# Only the kinds that carry a value: a WorkloadPriorityClass has no spec, but a value.
_EXTRA = {
    "WorkloadPriorityClass": {"value": {"type": "integer"}, "description": {"type": "string"}}
}


def crds() -> list[Obj]:
    """Return the CustomResourceDefinitions of Kueue's kinds, as apiextensions objects."""
    return [_crd(plural, kind, scope, short) for plural, kind, scope, short in KINDS]


def _crd(plural: str, kind: str, scope: str, short: tuple[str, ...]) -> Obj:
    schema = copy.deepcopy(_SCHEMA)
    schema["properties"].update(copy.deepcopy(_EXTRA.get(kind, {})))
    versions = [
        {
            "name": name,
            "served": True,
            "storage": name == VERSION,
            "schema": {"openAPIV3Schema": copy.deepcopy(schema)},
            "subresources": {"status": {}},
            **({"deprecated": True} if name == DEPRECATED_VERSION else {}),
        }
        for name in (VERSION, DEPRECATED_VERSION)
    ]
    names: dict[str, Any] = {"plural": plural, "singular": kind.lower(), "kind": kind}
    if short:
        names["shortNames"] = list(short)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {"group": GROUP, "names": names, "scope": scope, "versions": versions},
    }


def defaults(kind: str, obj: Obj) -> None:
    """Fill in the defaults Kueue's webhook writes on a new ClusterQueue or LocalQueue."""
    spec = obj.setdefault("spec", {})
    if kind == "ClusterQueue":
        spec.setdefault(
            "flavorFungibility",
            {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        )
        spec.setdefault("namespaceSelector", {})
        preemption = spec.setdefault("preemption", {})
        preemption.setdefault("borrowWithinCohort", {"policy": "Never"})
        preemption.setdefault("reclaimWithinCohort", "Never")
        preemption.setdefault("withinClusterQueue", "Never")
        spec.setdefault("queueingStrategy", "BestEffortFIFO")
        spec.setdefault("stopPolicy", "None")
    elif kind == "LocalQueue":
        spec.setdefault("stopPolicy", "None")
