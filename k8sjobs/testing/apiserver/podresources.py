"""What a pod asks for, summed as Kubernetes sums it, and quantities written as Go writes them.

One reckoning for the admission plugins (LimitRange, ResourceQuota) and the scheduler: a
container's requests default to its limits; a pod's requests are the larger of the sum over
its containers and the largest init container, plus the pod's `overhead` (RuntimeClass).

`Quantity` (the package's one reader, `steps.quantity`) keeps the value exactly and the
format the user wrote it in, and `str()` gives the canonical form kube-apiserver prints in its
messages ("1", "100m", "1536Mi", "1500"), so refusals read as the real ones.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ...steps.quantity import Quantity

__all__ = [
    "ZERO",
    "Quantity",
    "Resources",
    "container_resources",
    "default_requests_from_limits",
    "parse_list",
    "pod_resources",
]

Resources = dict[str, Quantity]


ZERO = Quantity(Fraction(0))


def parse_list(values: Any) -> Resources:
    """Return a ResourceList (`{"cpu": "1"}`) as quantities; unreadable values are skipped
    (the object's validation refuses them)."""
    result: Resources = {}
    for name, text in (values or {}).items() if isinstance(values, dict) else ():
        try:
            result[str(name)] = Quantity.parse(text)
        except ValueError:
            continue
    return result


def container_resources(container: dict[str, Any]) -> tuple[Resources, Resources]:
    """Return a container's (requests, limits); a request not given is its limit."""
    resources = container.get("resources") or {}
    limits = parse_list(resources.get("limits"))
    requests = {**limits, **parse_list(resources.get("requests"))}
    return requests, limits


def pod_resources(spec: dict[str, Any]) -> tuple[Resources, Resources]:
    """Return a pod's (requests, limits): containers summed, init containers' peak, overhead."""
    totals: list[Resources] = [{}, {}]
    for container in spec.get("containers") or []:
        for total, part in zip(totals, container_resources(container), strict=True):
            for name, quantity in part.items():
                total[name] = total[name] + quantity if name in total else quantity
    for container in spec.get("initContainers") or []:
        for total, part in zip(totals, container_resources(container), strict=True):
            for name, quantity in part.items():
                if name not in total or quantity.value > total[name].value:
                    total[name] = quantity
    for total in totals:
        for name, quantity in parse_list(spec.get("overhead")).items():
            total[name] = total[name] + quantity if name in total else quantity
    return totals[0], totals[1]


def default_requests_from_limits(spec: dict[str, Any]) -> None:
    """Give each container a request equal to its limit where it has none (Pod defaulting)."""
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources")
        if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
            continue
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in resources["limits"].items():
                requests.setdefault(name, value)
