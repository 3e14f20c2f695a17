"""What a LimitRange and a ResourceQuota may say: the LimitRange defaults, and kube-apiserver
v1.36's ValidateLimitRange and ValidateResourceQuota, their field paths and words.

A resource name is checked as the real validation checks it (a qualified name; without a
"/" one of the standard names; in a Pod or Container limit a container resource or an
extended one), and the quantities against each other: min <= default request <= default <=
max, a limit/request ratio of at least 1 and at most max/min, a quota never negative and a
count (pods, secrets, an extended resource) whole. The LimitRange is checked after its
defaults are filled (default from max, default request from default or min), as the real
server decodes, defaults, then validates. Go walks its maps in random order; the causes here
come sorted by resource name, the order a real run gives one time in n!.

A quantity shown as the value of a cause is printed as Go's %#v prints one
(`resource.Quantity{i:resource.int64Amount{value:2, scale:0}, ...}`), as the real messages do.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from ...steps.quantity import Quantity, QuantityError
from .errors import cause
from .names import qualified_name_errors

Cause = dict[str, str]

_STANDARD_QUOTA = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_STANDARD = _STANDARD_QUOTA | {"storage"}
_INTEGER = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_CONTAINER = frozenset({"cpu", "memory", "ephemeral-storage"})
_LIMIT_TYPES = ("Pod", "Container", "PersistentVolumeClaim")
_MAX_MILLI_VALUE = (2**63 - 1) // 1000
_NOT_NEGATIVE = "must be greater than or equal to 0"


def _invalid(field: str, shown: str, detail: str) -> Cause:
    return cause("FieldValueInvalid", f"Invalid value: {shown}: {detail}", field)


def _quoted(text: str) -> str:
    """Return a string as Go's %q (and %#v) print it."""
    return json.dumps(text, ensure_ascii=False)


# ---------------------------------------------------------------------- resource names


def _native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _extended(name: str) -> bool:
    """Return whether `name` is an extended resource ("example.com/gpu")."""
    if _native(name) or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


def overcommit_allowed(name: str) -> bool:
    """IsOvercommitAllowed: whether a request may be below its limit. So for a native
    resource (cpu, memory) but hugepages; an extended one is asked exactly, request = limit."""
    return _native(name) and not name.startswith("hugepages-")


def _hugepages(name: str) -> bool:
    return name.startswith("hugepages-") or name.startswith("requests.hugepages-")


def _resource_name(name: str, field: str) -> list[Cause]:
    """validateResourceName: a qualified name, standard when unprefixed."""
    errors = qualified_name_errors(name)
    if errors:
        return [_invalid(field, _quoted(name), error) for error in errors]
    if "/" not in name and not (name in _STANDARD or _hugepages(name)):
        return [
            _invalid(field, _quoted(name), "must be a standard resource type or fully qualified")
        ]
    return []


def container_resource_name(name: str, field: str) -> list[Cause]:
    """validateContainerResourceName: also a container's resource, or an extended one (in a
    container's limits and requests, a Pod's overhead, a Pod or Container LimitRange)."""
    causes = _resource_name(name, field)
    if "/" not in name:
        if not (name in _CONTAINER or name.startswith("hugepages-")):
            detail = "must be a standard resource for containers"
            return [*causes, _invalid(field, _quoted(name), detail)]
    elif not _native(name) and not _extended(name):
        detail = "doesn't follow extended resource name standard"
        return [*causes, _invalid(field, _quoted(name), detail)]
    return causes


def _quota_resource_name(name: str, field: str) -> list[Cause]:
    """ValidateResourceQuotaResourceName: unprefixed, one the quota system tracks."""
    causes = _resource_name(name, field)
    if "/" not in name and not (name in _STANDARD_QUOTA or _hugepages(name)):
        return [*causes, _invalid(field, _quoted(name), "must be a standard resource for quota")]
    return causes


# ---------------------------------------------------------------------- ResourceQuota


def resource_quota_causes(quota: dict[str, Any]) -> list[Cause]:
    """Return ValidateResourceQuota's causes for a quota's spec.hard (and status on create)."""
    causes = []
    for part, key in (("spec", "hard"), ("status", "hard"), ("status", "used")):
        values = _mapping(_mapping(quota.get(part)).get(key))
        for name in sorted(values):
            field = f"{part}.{key}[{name}]"
            causes += _quota_resource_name(str(name), field)
            quantity = _quantity(values[name])
            if quantity is not None:
                causes += quantity_value_causes(str(name), quantity, field)
    return causes


def quantity_value_causes(name: str, quantity: Quantity, field: str) -> list[Cause]:
    """ValidateResourceQuantityValue: never negative, whole for a counted resource (a
    quota's count, an extended resource wherever it is asked)."""
    causes = []
    if quantity.value < 0:
        causes.append(_invalid(field, _quoted(str(quantity)), _NOT_NEGATIVE))
    if (name in _INTEGER or _extended(name)) and math.ceil(quantity.value * 1000) % 1000:
        causes.append(_invalid(field, quantity.go_syntax(), "must be an integer"))
    return causes


# ---------------------------------------------------------------------- LimitRange


def default_limit_range(obj: dict[str, Any]) -> None:
    """Fill a LimitRange's Container defaults as the API server does on create: a default
    limit from max, a default request from the default limit, else from min."""
    for item in (obj.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        for name, value in (item.get("max") or {}).items():
            default.setdefault(name, value)
        for name, value in default.items():
            request.setdefault(name, value)
        for name, value in (item.get("min") or {}).items():
            request.setdefault(name, value)
        ordered = {k: item[k] for k in _LIMIT_ITEM_ORDER if item.get(k)}
        ordered.update({k: v for k, v in item.items() if k not in ordered and k not in _EMPTY})
        item.clear()
        item.update(ordered)


_LIMIT_ITEM_ORDER = ("type", "max", "min", "default", "defaultRequest", "maxLimitRequestRatio")
_EMPTY = ("default", "defaultRequest")


def limit_range_causes(limit_range: dict[str, Any]) -> list[Cause]:
    """Return ValidateLimitRange's causes, for the LimitRange with its defaults filled."""
    defaulted = copy.deepcopy(limit_range)
    default_limit_range(defaulted)
    causes: list[Cause] = []
    seen: set[str] = set()
    items = _mapping(defaulted.get("spec")).get("limits")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            causes += _limit_item_causes(item, f"spec.limits[{index}]", seen)
    return causes


def _limit_item_causes(item: dict[str, Any], path: str, seen: set[str]) -> list[Cause]:
    kind = str(item.get("type") or "")
    causes = _limit_type_causes(kind, f"{path}.type")
    if kind in seen:
        causes.append(
            cause("FieldValueDuplicate", f"Duplicate value: {_quoted(kind)}", f"{path}.type")
        )
    seen.add(kind)
    values: dict[str, dict[str, Quantity]] = {}
    for key in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
        given = _mapping(item.get(key))
        if kind == "Pod" and key in ("default", "defaultRequest"):
            if given:
                detail = "Forbidden: may not be specified when `type` is 'Pod'"
                causes.append(cause("FieldValueForbidden", detail, f"{path}.{key}"))
            continue
        if key == "maxLimitRequestRatio" and kind == "PersistentVolumeClaim":
            causes += _storage_required(item, path)
        values[key] = {}
        for name, text in sorted(given.items()):
            causes += _limit_resource_name(kind, str(name), f"{path}.{key}[{name}]")
            quantity = _quantity(text)
            if quantity is not None:
                values[key][str(name)] = quantity
    for name in sorted({name for found in values.values() for name in found}):
        causes += _order_causes(name, {k: v.get(name) for k, v in values.items()}, path)
    return causes


def _limit_resource_name(kind: str, name: str, field: str) -> list[Cause]:
    """validateLimitRangeResourceName: a container's resource in a Pod or Container limit."""
    if kind in ("Pod", "Container"):
        return container_resource_name(name, field)
    return _resource_name(name, field)


def _storage_required(item: dict[str, Any], path: str) -> list[Cause]:
    if "storage" in _mapping(item.get("min")) or "storage" in _mapping(item.get("max")):
        return []
    detail = (
        "Required value: either minimum or maximum storage value is required, but neither was "
        "provided"
    )
    return [cause("FieldValueRequired", detail, f"{path}.limits")]


def _limit_type_causes(kind: str, field: str) -> list[Cause]:
    errors = qualified_name_errors(kind)
    if errors:
        return [_invalid(field, _quoted(kind), error) for error in errors]
    if "/" not in kind and kind not in _LIMIT_TYPES:
        return [_invalid(field, _quoted(kind), "must be a standard limit type or fully qualified")]
    return []


def _order_causes(name: str, found: dict[str, Quantity | None], path: str) -> list[Cause]:
    """Return the min <= default request <= default <= max and ratio causes of one resource."""
    low, high = found.get("min"), found.get("max")
    limit, request = found.get("default"), found.get("defaultRequest")
    ratio = found.get("maxLimitRequestRatio")
    causes = []

    def check(
        key: str, shown: Quantity, small: Quantity | None, big: Quantity | None, words: str
    ) -> None:
        if small is not None and big is not None and small.value > big.value:
            detail = words.format(small, big)
            causes.append(_invalid(f"{path}.{key}[{name}]", shown.go_syntax(), detail))

    if low is not None:
        check("min", low, low, high, "min value {} is greater than max value {}")
    if request is not None:
        check(
            "defaultRequest",
            request,
            low,
            request,
            "min value {} is greater than default request value {}",
        )
        check(
            "defaultRequest",
            request,
            request,
            high,
            "default request value {} is greater than max value {}",
        )
        check(
            "defaultRequest",
            request,
            request,
            limit,
            "default request value {} is greater than default limit value {}",
        )
    if low is not None:
        check("default", low, low, limit, "min value {} is greater than default value {}")
    if high is not None:
        check("default", high, limit, high, "default value {} is greater than max value {}")
    if ratio is not None:
        causes += _ratio_causes(name, ratio, low, high, f"{path}.maxLimitRequestRatio[{name}]")
    if (
        not overcommit_allowed(name)
        and limit is not None
        and request is not None
        and limit.value != request.value
    ):
        detail = f"default value {limit} must equal to defaultRequest value {request} in {name}"
        causes.append(_invalid(f"{path}.defaultRequest[{name}]", request.go_syntax(), detail))
    return causes


def _ratio_causes(
    name: str, ratio: Quantity, low: Quantity | None, high: Quantity | None, field: str
) -> list[Cause]:
    causes = []
    if ratio.value < 1:
        causes.append(_invalid(field, ratio.go_syntax(), f"ratio {ratio} is less than 1"))
    if low is None or high is None:
        return causes
    # Go reads each as an int64 (Value(), MilliValue()); one beyond it is taken as the
    # largest here (Go keeps its low 64 bits), so that 1e400 is no float overflow (a 500).
    bound, low_value, high_value = (
        float(_int64(math.ceil(ratio.value))),
        _int64(math.ceil(low.value)),
        _int64(math.ceil(high.value)),
    )
    if max(math.ceil(ratio.value), low_value, high_value) < _MAX_MILLI_VALUE:
        bound = math.ceil(ratio.value * 1000) / 1000
        low_value, high_value = math.ceil(low.value * 1000), math.ceil(high.value * 1000)
    if not low_value:
        return causes  # Go divides by zero into +Inf or NaN: nothing is greater
    allowed = high_value / low_value
    if bound > allowed:
        detail = f"ratio {ratio} is greater than max/min = {allowed:f}"
        causes.append(_invalid(field, ratio.go_syntax(), detail))
    return causes


def _int64(value: int) -> int:
    return max(-(2**63), min(value, 2**63 - 1))


def _quantity(value: Any) -> Quantity | None:
    try:
        return Quantity.parse(value)
    except QuantityError:
        return None  # refused at decoding; reached only by objects made in-process


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
