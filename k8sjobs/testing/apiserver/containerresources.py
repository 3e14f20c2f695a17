"""What a container's resources may say: kube-apiserver v1.36's ValidateResourceRequirements
for each container and init container of a PodSpec (a Pod's, a Job's pod template's) and for
the Pod's overhead, with the real field paths and words.

Each limit and each request names a resource a container may ask for (`resourcelists`'
container_resource_name) and is never negative, whole for an extended resource and a whole
number of pages for hugepages; a request is at most its limit, and exactly its limit for a
resource that may not be overcommitted (an extended one, hugepages), which must have a limit;
hugepages come only beside cpu or memory. A request above its limit is refused at the
`requests` list (``spec.containers[0].resources.requests: Invalid value: "2": must be less
than or equal to cpu limit of 1``), a value at its own key (``...requests[cpu]``).

A Pod is judged as the real server judges it, after its defaulting (SetDefaults_Pod) gave each
container a request equal to its limit where it had none, so a negative limit is a negative
request too; a pod template is not defaulted so. Go walks the limits, then the requests, in
random map order; the causes here come sorted by resource name within each, the order a real
run gives one time in n!.
"""

from __future__ import annotations

import math
from typing import Any

from ...steps.quantity import QuantityError
from .errors import cause
from .podresources import Quantity, Resources, parse_list
from .resourcelists import container_resource_name, overcommit_allowed, quantity_value_causes

Cause = dict[str, str]

_HUGEPAGES = "hugepages-"
_QOS_RESOURCES = frozenset({"cpu", "memory"})


def pod_spec_resource_causes(
    spec: dict[str, Any], path: str, *, requests_from_limits: bool = False
) -> list[Cause]:
    """Return the causes of a PodSpec's containers, then init containers, then overhead, in
    ValidatePodSpec's order; `requests_from_limits` for a Pod (defaulted), not a template."""
    causes: list[Cause] = []
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict):
                resources = _mapping(container.get("resources"))
                where = f"{path}.{key}[{index}].resources"
                causes += requirements_causes(resources, where, requests_from_limits)
    if isinstance(spec.get("overhead"), dict):  # validateOverhead: checked as limits
        causes += requirements_causes({"limits": spec["overhead"]}, f"{path}.overhead")
    return causes


def requirements_causes(
    resources: dict[str, Any], path: str, requests_from_limits: bool = False
) -> list[Cause]:
    """Return ValidateContainerResourceRequirements' causes for one `resources` at `path`."""
    limits = parse_list(resources.get("limits"))
    requests = parse_list(resources.get("requests"))
    if requests_from_limits:
        requests = {**limits, **requests}
    causes: list[Cause] = []
    for name in sorted(limits):
        field = f"{path}.limits[{name}]"
        causes += _value_causes(name, limits[name], field) + _page_causes(name, limits[name], field)
    for name in sorted(requests):
        field, request = f"{path}.requests[{name}]", requests[name]
        causes += _value_causes(name, request, field)
        causes += _against_limit(name, request, limits.get(name), path)
        causes += _page_causes(name, request, field)
    return causes + _hugepages_alone(limits, requests, path)


def _value_causes(name: str, quantity: Quantity, field: str) -> list[Cause]:
    """validateContainerResourceName and ValidateResourceQuantityValue: a name a container
    may ask for, a quantity never negative (and whole for an extended resource)."""
    return container_resource_name(name, field) + quantity_value_causes(name, quantity, field)


def _against_limit(name: str, request: Quantity, limit: Quantity | None, path: str) -> list[Cause]:
    """Return the cause of a request above its limit (or unequal to it, or without one,
    for a resource that may not be overcommitted); shown at the whole requests list."""
    if limit is None:
        if overcommit_allowed(name):
            return []
        message = "Required value: Limit must be set for non overcommitable resources"
        return [cause("FieldValueRequired", message, f"{path}.limits")]
    if request.value != limit.value and not overcommit_allowed(name):
        detail = f"must be equal to {name} limit of {limit}"
    elif request.value > limit.value:
        detail = f"must be less than or equal to {name} limit of {limit}"
    else:
        return []
    # a quantity's canonical text needs no escaping: "..." is Go's %q of it
    return [cause("FieldValueInvalid", f'Invalid value: "{request}": {detail}', f"{path}.requests")]


def _page_causes(name: str, quantity: Quantity, field: str) -> list[Cause]:
    """validateResourceQuantityHugePageValue: hugepages-<size> asked in whole pages (a page
    size that is no whole positive quantity divides nothing)."""
    if not name.startswith(_HUGEPAGES):
        return []
    page = _page_size(name)
    whole = page is not None and page.value > 0 and math.ceil(page.value * 1000) % 1000 == 0
    if page is not None and whole and math.ceil(quantity.value) % int(page.value) == 0:
        return []  # Go's Value() rounds the quantity up to a whole number
    detail = f"{quantity} is not positive integer multiple of {name}"
    return [cause("FieldValueInvalid", f'Invalid value: "{quantity}": {detail}', field)]


def _page_size(name: str) -> Quantity | None:
    """HugePageSizeFromResourceName: the quantity after the prefix, None when it is none."""
    try:
        return Quantity.read(name.removeprefix(_HUGEPAGES))
    except QuantityError:
        return None


def _hugepages_alone(limits: Resources, requests: Resources, path: str) -> list[Cause]:
    """Hugepages asked without cpu or memory beside them, refused at the whole resources."""
    names = {*limits, *requests}
    if any(n.startswith(_HUGEPAGES) for n in names) and not names & _QOS_RESOURCES:
        return [cause("FieldValueForbidden", "Forbidden: HugePages require cpu or memory", path)]
    return []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
