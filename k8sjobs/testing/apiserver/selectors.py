"""Label and field selectors, parsed once per request into a predicate over objects."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from . import errors as _errors

Predicate = Callable[[dict[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*(!?)\s*([\w./-]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside an `in (...)` set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    if match := _SET_TERM.match(term):
        _, key, op, raw = match.groups()
        values = {v.strip() for v in raw.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ_TERM.match(term):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS_TERM.match(term):
        negate, key = match.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise _errors.bad_request(f"unable to parse requirement: {term!r}")


def label_predicate(selector: str | None) -> Predicate:
    """Return a predicate for a labelSelector (=, ==, !=, in, notin, exists, !exists)."""
    if not selector:
        return _always
    checks = [_label_term(t) for t in _split_terms(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return matches


def _field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


# The field labels each resource's registry converts (v1.36); others are refused with 400.
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ),
    "jobs": ("status.successful",),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "events.events.k8s.io": (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "nodes": ("spec.unschedulable",),
    "configmaps": (),
    "services": ("spec.clusterIP", "spec.type"),
}
# Where a field label's value lives when it is not the label's own path.
_FIELD_PATHS = {
    "status.successful": "status.succeeded",
    "source": "source.component",
    # events.k8s.io/v1 names the stored core/v1 Event's fields its own way.
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
}


def field_predicate(selector: str | None, resource: str | None = None) -> Predicate:
    """Return a predicate for a fieldSelector.

    For a resource in FIELD_LABELS only the labels its real registry supports are accepted
    (400 "field label not supported" otherwise); for others any path is.
    """
    if not selector:
        return _always
    supported = None if resource not in FIELD_LABELS else (*_COMMON_FIELDS, *FIELD_LABELS[resource])
    checks: list[tuple[str, bool, str]] = []
    for term in _split_terms(selector):
        match = _EQ_TERM.match(term)
        if not match:
            raise _errors.bad_request(f"invalid field selector: {term!r}")
        path, op, value = match.groups()
        if supported is not None and path not in supported:
            raise _errors.bad_request(f"field label not supported: {path}")
        checks.append((_FIELD_PATHS.get(path, path), op == "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, p) == v) != negate for p, negate, v in checks)

    return matches


def exact_name(selector: str | None) -> str | None:
    """Return the name a fieldSelector pins with metadata.name=NAME, for an indexed lookup."""
    if not selector:
        return None
    for term in _split_terms(selector):
        match = _EQ_TERM.match(term)
        if match and match.group(1) == "metadata.name" and match.group(2) != "!=":
            return match.group(3)
    return None


def both(first: Predicate, second: Predicate) -> Predicate:
    """Return a predicate true when both are."""
    if first is _always:
        return second
    if second is _always:
        return first
    return lambda obj: first(obj) and second(obj)


def from_query(query: Mapping[str, str], resource: str | None = None) -> Predicate:
    """Return the predicate of a request's ``labelSelector`` and ``fieldSelector``."""
    return both(
        label_predicate(query.get("labelSelector")),
        field_predicate(query.get("fieldSelector"), resource),
    )


def _always(obj: dict[str, Any]) -> bool:
    return True
