"""ListOptions checks for list and watch requests, WatchList (`sendInitialEvents`) included.

A WatchList request (`watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan`)
gets an ADDED event per existing object, then a BOOKMARK annotated
`k8s.io/initial-events-end: "true"` carrying the resourceVersion of that snapshot, then the
live stream. Combinations the real server refuses are refused the same way: a 422 Invalid
on `ListOptions.meta.k8s.io` with one cause per field (as apimachinery's
ValidateListOptions words them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ApiError

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_NOT_OLDER = "NotOlderThan"
_EXACT = "Exact"


def send_initial_events(query: Mapping[str, str], watch: bool) -> bool | None:
    """Return the request's sendInitialEvents (None when absent), or raise 422 Invalid."""
    causes = _watch_causes(query) if watch else _list_causes(query)
    if causes:
        summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        if len(causes) > 1:
            summary = f"[{summary}]"
        details: dict[str, Any] = {"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes}
        raise ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {summary}', details)
    raw = query.get("sendInitialEvents")
    return None if raw is None else raw.lower() in ("1", "true")


def _list_causes(query: Mapping[str, str]) -> list[dict[str, str]]:
    causes = []
    match = query.get("resourceVersionMatch", "")
    if match:
        if not query.get("resourceVersion"):
            causes.append(
                _forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided")
            )
        if query.get("continue"):
            causes.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
        if match not in (_EXACT, _NOT_OLDER):
            causes.append(_not_supported(match, (_EXACT, _NOT_OLDER, "")))
        if match == _EXACT and query.get("resourceVersion") == "0":
            causes.append(
                _forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if "sendInitialEvents" in query:
        causes.append(_forbidden("sendInitialEvents is forbidden for list", "sendInitialEvents"))
    return causes


def _watch_causes(query: Mapping[str, str]) -> list[dict[str, str]]:
    causes = []
    match = query.get("resourceVersionMatch", "")
    initial = "sendInitialEvents" in query
    if initial and match != _NOT_OLDER:
        causes.append(
            _forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        )
    if match:
        if not initial:
            detail = "resourceVersionMatch is forbidden for watch unless sendInitialEvents is"
            causes.append(_forbidden(f"{detail} provided"))
        if match != _NOT_OLDER:
            causes.append(_not_supported(match, (_NOT_OLDER,)))
        if query.get("continue"):
            causes.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
    return causes


def _forbidden(detail: str, field: str = "resourceVersionMatch") -> dict[str, str]:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def _not_supported(value: str, supported: tuple[str, ...]) -> dict[str, str]:
    allowed = ", ".join(f'"{v}"' for v in supported)
    message = f'Unsupported value: "{value}": supported values: {allowed}'
    return {"reason": "FieldValueNotSupported", "message": message, "field": "resourceVersionMatch"}
