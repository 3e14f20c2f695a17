"""Kubernetes `Status` error bodies, shaped exactly as a real API server writes them.

Every failure the fake API server reports is an `ApiError` carrying the HTTP code and the
`Status` object; the HTTP layer only serialises it. The wording follows the recorded
transcripts in the k8s reference (errors.json), because clients match on `reason` and users
read `message`.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the fake API server refuses, with the `Status` body to send back."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}

    def status(self) -> dict[str, Any]:
        """Return the `Status` object a real API server sends for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # a storage error carries none, and the real server omits it
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    """Return the 404 NotFound error for a missing object."""
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(plural, group)} "{name}" not found',
        _details(name, plural, group),
    )


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    """Return the 409 AlreadyExists error for a create that collides with an existing name."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(plural, group)} "{name}" already exists',
        _details(name, plural, group),
    )


def conflict(plural: str, name: str, group: str = "") -> ApiError:
    """Return the 409 Conflict error for a write carrying a stale resourceVersion."""
    message = (
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    return ApiError(409, "Conflict", message, _details(name, plural, group))


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """Return the 422 Invalid error listing each field cause, as the real validator words it."""
    qualified_kind = f"{kind}.{group}" if group else kind
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"
    details: dict[str, Any] = {"name": name} if name else {}  # Go omits an empty name
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def gone(message: str) -> ApiError:
    """Return the 410 Expired error for a resourceVersion older than the kept history."""
    return ApiError(410, "Expired", message)


def bad_request(message: str) -> ApiError:
    """Return a 400 BadRequest error."""
    return ApiError(400, "BadRequest", message)


def forbidden(plural: str, name: str, why: str, group: str = "") -> ApiError:
    """Return the 403 Forbidden error an admission plugin gives (NewForbidden's wording)."""
    message = f'{_qualified(plural, group)} "{name}" is forbidden: {why}'
    return ApiError(403, "Forbidden", message, _details(name, plural, group))


def namespace_terminating(plural: str, name: str, namespace: str, group: str = "") -> ApiError:
    """Return the 403 for a create in a namespace being deleted (NamespaceLifecycle's)."""
    why = f"unable to create new content in namespace {namespace} because it is being terminated"
    error = forbidden(plural, name, why, group)
    assert error.details is not None
    error.details["causes"] = [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {namespace} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    return error


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def _details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def cause(reason: str, message: str, field: str) -> dict[str, str]:
    """Return one `StatusCause` in the real server's key order."""
    return {"reason": reason, "message": message, "field": field}
