"""Admission of new pods: LimitRanger, Priority and RuntimeClass, as kube-apiserver v1.36 runs
them (ResourceQuota, the last validating plugin, is in `_quota`).

The store calls `mutate` before it names an object (so a refusal names the pod's
generateName, `pods "prio-" is forbidden`, as the real server's mutating plugins do) and
`validate` after naming and validation (`pods "limit-tvflm" is forbidden`), in the real
plugin order: LimitRanger's defaults, Priority, RuntimeClass; then LimitRanger's
min/max/ratio checks, then quota. A refused object is never stored. Messages are the real
plugins' words (see the job-failedcreate-* transcripts in the k8s reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from . import errors as _errors
from .podresources import (
    Quantity,
    container_resources,
    default_requests_from_limits,
    parse_list,
    pod_resources,
)
from .resources import Resource
from .store import Obj, Store

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
DEFAULT_PREEMPTION = "PreemptLowerPriority"


class AdmissionPlugin(Protocol):
    """One admission plugin: a mutating and a validating step, each may refuse."""

    def mutate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Change `obj` before it is named, or raise ApiError."""

    def validate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Refuse `obj` (named and validated) by raising ApiError."""


def _forbidden(obj: Obj, why: str) -> _errors.ApiError:
    meta = obj.get("metadata") or {}
    # Before naming, the real server names the prefix (admission.NewForbidden).
    name = meta.get("name") or meta.get("generateName") or "Unknown"
    return _errors.forbidden("pods", name, why)


class PodAdmission:
    """LimitRanger (defaults and limits), Priority and RuntimeClass, for new pods."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def mutate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Apply LimitRange defaults, resolve the PriorityClass and the RuntimeClass."""
        if res.plural != "pods" or res.group:
            return
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        default_requests_from_limits(spec)  # Pod defaulting, before any plugin
        self._limit_defaults(namespace, obj, spec)
        self._priority(obj, spec)
        self._runtime_class(obj, spec)

    def validate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Refuse a pod outside a LimitRange's min, max or limit/request ratio."""
        if res.plural != "pods" or res.group:
            return
        errors: list[str] = []
        for limit_range in self._limit_ranges(namespace):
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                errors += _limit_errors(item, obj.get("spec") or {})
        if errors:
            raise _forbidden(obj, _aggregate(errors))

    # ------------------------------------------------------------------ LimitRanger

    def _limit_ranges(self, namespace: str) -> list[Obj]:
        return list(self.store.iter("limitranges", namespace))

    def _limit_defaults(self, namespace: str, obj: Obj, spec: dict[str, Any]) -> None:
        defaults: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        for limit_range in self._limit_ranges(namespace):
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                if item.get("type") == "Container":
                    defaults[0].update(item.get("defaultRequest") or {})
                    defaults[1].update(item.get("default") or {})
        if not defaults[0] and not defaults[1]:
            return
        notes: list[str] = []
        for prefix, key in (("container", "containers"), ("init container", "initContainers")):
            for container in spec.get(key) or []:
                notes += _merge_defaults(container, defaults, prefix)
        if notes:
            meta = obj.setdefault("metadata", {})
            annotations = meta.setdefault("annotations", {})
            annotations[LIMIT_RANGER_ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)

    # ------------------------------------------------------------------ Priority

    def _priority(self, obj: Obj, spec: dict[str, Any]) -> None:
        name = spec.get("priorityClassName")
        if name:
            found = self.store.get("priorityclasses", "", str(name))
            if found is None:
                raise _forbidden(obj, f"no PriorityClass with name {name} was found")
            value = int(found.get("value") or 0)
            policy = found.get("preemptionPolicy") or DEFAULT_PREEMPTION
        else:
            default = self._global_default()
            value = int(default.get("value") or 0) if default else 0
            policy = (default or {}).get("preemptionPolicy") or DEFAULT_PREEMPTION
            if default is not None:
                spec["priorityClassName"] = default["metadata"]["name"]
        _computed(obj, spec, "priority", "the integer value of priority", value)
        _computed(obj, spec, "preemptionPolicy", "the string value of PreemptionPolicy", policy)

    def _global_default(self) -> Obj | None:
        defaults = [p for p in self.store.iter("priorityclasses") if p.get("globalDefault")]
        # Several: the one of lowest value wins, as the real plugin picks it.
        return min(defaults, key=lambda p: int(p.get("value") or 0), default=None)

    # ------------------------------------------------------------------ RuntimeClass

    def _runtime_class(self, obj: Obj, spec: dict[str, Any]) -> None:
        name = spec.get("runtimeClassName")
        if not name:
            return
        found = self.store.get("runtimeclasses", "", str(name))
        if found is None:
            raise _forbidden(obj, f'pod rejected: RuntimeClass "{name}" not found')
        overhead = (found.get("overhead") or {}).get("podFixed")
        if overhead:
            if spec.get("overhead") and parse_list(spec["overhead"]) != parse_list(overhead):
                raise _forbidden(
                    obj,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                )
            spec["overhead"] = dict(overhead)
        scheduling = found.get("scheduling") or {}
        selector = dict(spec.get("nodeSelector") or {})
        for key, value in (scheduling.get("nodeSelector") or {}).items():
            if key in selector and selector[key] != value:
                raise _forbidden(
                    obj,
                    f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                    f"pod.spec.nodeSelector[{key}] = {selector[key]}",
                )
            selector[key] = value
        if selector:
            spec["nodeSelector"] = selector
        tolerations = list(spec.get("tolerations") or [])
        for toleration in scheduling.get("tolerations") or []:
            if toleration not in tolerations:
                tolerations.append(toleration)
        if tolerations:
            spec["tolerations"] = tolerations


def _computed(obj: Obj, spec: dict[str, Any], key: str, what: str, value: Any) -> None:
    """Set `spec[key]` to what the Priority plugin computed; refuse another value given."""
    given = spec.get(key)
    if given is not None and given != value:
        raise _forbidden(
            obj,
            f"{what} ({given}) must not be provided in pod spec; priority admission controller "
            f"computed {value} from the given PriorityClass name",
        )
    spec[key] = value


def _merge_defaults(
    container: dict[str, Any], defaults: tuple[dict[str, Any], dict[str, Any]], prefix: str
) -> list[str]:
    """Fill a container's missing requests and limits from a LimitRange's defaults."""
    resources = container.setdefault("resources", {})
    notes = []
    for default, key, word in (
        (defaults[1], "limits", "limit"),
        (defaults[0], "requests", "request"),
    ):
        present = resources.setdefault(key, {})
        added = sorted(name for name in default if name not in present)
        for name in added:
            present[name] = default[name]
        if not present:
            del resources[key]
        if added:
            notes.append(f"{', '.join(added)} {word} for {prefix} {container.get('name', '')}")
    # The real plugin lists requests first.
    return sorted(notes, key=lambda note: " limit for " in note)


def _limit_errors(item: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """Return the min/max/ratio violations of one LimitRange item for a pod."""
    kind = item.get("type")
    if kind == "Container":
        containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        checked = [container_resources(c) for c in containers]
    elif kind == "Pod":
        checked = [pod_resources(spec)]
    else:
        return []
    errors = []
    for requests, limits in checked:
        for key, check in _CHECKS:
            for name, enforced in sorted(parse_list(item.get(key)).items()):
                error = check(
                    f"{name} usage per {kind} is {enforced}",
                    enforced,
                    requests.get(name),
                    limits.get(name),
                )
                errors += [error] if error else []
    return errors


Check = Callable[[str, Quantity, Quantity | None, Quantity | None], str | None]


def _min_error(
    head: str, enforced: Quantity, request: Quantity | None, limit: Quantity | None
) -> str | None:
    head = f"minimum {head}"
    if request is None:
        return f"{head}.  No request is specified"
    if request.value < enforced.value:
        return f"{head}, but request is {request}"
    if limit is not None and limit.value < enforced.value:
        return f"{head}, but limit is {limit}"
    return None


def _max_error(
    head: str, enforced: Quantity, request: Quantity | None, limit: Quantity | None
) -> str | None:
    head = f"maximum {head}"
    if limit is None:
        return f"{head}.  No limit is specified"
    if limit.value > enforced.value:
        return f"{head}, but limit is {limit}"
    if request is not None and request.value > enforced.value:
        return f"{head}, but request is {request}"
    return None


def _ratio_error(
    head: str, enforced: Quantity, request: Quantity | None, limit: Quantity | None
) -> str | None:
    # "cpu usage per Container is 2" -> "cpu max limit to request ratio per Container is 2"
    head = head.replace(" usage per ", " max limit to request ratio per ", 1)
    if request is None or request.value == 0:
        return f"{head}, but no request is specified or request is 0"
    if limit is None or limit.value == 0:
        return f"{head}, but no limit is specified or limit is 0"
    ratio = limit.value / request.value
    if ratio > enforced.value:
        try:
            shown = f"{float(ratio):f}"
        except OverflowError:  # a limit of "1e400": Go's int64 reading never overflows
            shown = "+Inf"
        return f"{head}, but provided ratio is {shown}"
    return None


_CHECKS: tuple[tuple[str, Check], ...] = (
    ("min", _min_error),
    ("max", _max_error),
    ("maxLimitRequestRatio", _ratio_error),
)


def _aggregate(errors: list[str]) -> str:
    """Join errors as Go's utilerrors.NewAggregate prints them (deduplicated, in brackets)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
