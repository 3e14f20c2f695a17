"""What a pod asks for, summed as Kubernetes sums it, and quantities written as Go writes them.

One reckoning for the admission plugins (LimitRange, ResourceQuota) and the scheduler: a
container's requests default to its limits; a pod's requests are the larger of the sum over
its containers and the largest init container, plus the pod's `overhead` (RuntimeClass).

`Quantity` keeps the value exactly and the format the user wrote it in (binary "Gi",
decimal "m"/"k"/"", or an exponent), and `str()` gives the canonical form kube-apiserver
prints in its messages ("1", "100m", "1536Mi", "1500"), so refusals read as the real ones.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ...steps.quantity import parse_quantity

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
_DECIMAL_SUFFIXES[18] = "E"
_BINARY_WRITTEN = re.compile(r"[KMGTPE]i\s*$")
_EXPONENT_WRITTEN = re.compile(r"[0-9][eE][+-]?[0-9]+\s*$")

Resources = dict[str, "Quantity"]


@dataclass(frozen=True)
class Quantity:
    """An exact quantity and the format it prints in (binary, decimal or exponent)."""

    value: Fraction
    format: str = "decimal"

    @classmethod
    def parse(cls, text: Any) -> Quantity:
        """Return the quantity `text` stands for; raise ValueError when it is none."""
        raw = str(text)
        if _BINARY_WRITTEN.search(raw):
            kind = "binary"
        elif _EXPONENT_WRITTEN.search(raw):
            kind = "exponent"
        else:
            kind = "decimal"
        return cls(parse_quantity(text), kind)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)  # Go keeps the left format

    def __str__(self) -> str:
        value, kind = self.value, self.format
        if kind == "binary" and (abs(value) < 1024 or value.denominator != 1):
            kind = "decimal"  # as Go's CanonicalizeBytes: small or fractional -> decimal
        if kind == "binary":
            number, power = int(value), 0
            while number and number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_SUFFIXES[power]}"
        nanos = math.ceil(value * 10**9)  # rounded up to the smallest unit, as Go does
        if nanos == 0:
            return "0"
        exponent = -9
        while nanos % 1000 == 0 and exponent < 18:
            nanos, exponent = nanos // 1000, exponent + 3
        if kind == "exponent":
            return f"{nanos}e{exponent}" if exponent else str(nanos)
        return f"{nanos}{_DECIMAL_SUFFIXES[exponent]}"


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
