"""What the real API server's handlers check before a request reaches storage.

The body's size (3 MiB, the apiserver's MaxRequestBodyBytes) and media type (JSON or YAML;
protobuf is refused with 415 so that kubectl and client-go fall back to JSON), the query's
numbers (`timeoutSeconds`, `resourceVersion`), and that an object's namespace is the URL's.
Each failure is the Status the real server sends, measured on v1.36.
"""

from __future__ import annotations

from typing import Any

import yaml

from . import decoding as _decoding
from . import errors as _errors
from .errors import ApiError

MAX_BODY_BYTES = 3 * 1024 * 1024
JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
_OBJECT_TYPES = (JSON, YAML, "", "application/octet-stream", "text/plain")


def truthy(value: str | None) -> bool:
    """Return whether a boolean query parameter is set, as the API server reads it: anything
    but absent, "0" and "false" is true."""
    return value is not None and not (value == "0" or value.lower() == "false")


def check_size(raw: bytes) -> None:
    """Refuse a body over 3 MiB with 413 RequestEntityTooLarge."""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(
            413,
            "RequestEntityTooLarge",
            f"Request entity too large: limit is {MAX_BODY_BYTES}",
        )


def decode_object(raw: bytes, content_type: str, kind: str = "") -> Any:
    """Return the object a create/update body holds, as JSON or YAML; 415 for protobuf.

    Nesting deeper than Go's decoder takes is a 400 (`_decoding.loads`), in YAML too.
    """
    check_size(raw)
    if content_type not in _OBJECT_TYPES:
        raise unsupported_media_type(content_type, f"{JSON}, {YAML}")
    if not raw:
        return {}
    if content_type == YAML:
        try:
            return yaml.safe_load(raw.decode())
        except yaml.YAMLError as exc:
            raise _errors.bad_request(f"the body is not valid YAML: {exc}") from exc
        except RecursionError:
            raise _errors.bad_request(
                f"the YAML body nests deeper than this fake API server can decode "
                f"(kube-apiserver takes {_decoding.MAX_DEPTH} levels)"
            ) from None
    return _decoding.loads(raw, kind)


def unsupported_media_type(content_type: str, accepted: str) -> ApiError:
    """Return the 415 for a body in a format this server does not read."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{accepted}",
    )


def check_namespace(body: Any, namespace: str | None) -> None:
    """Refuse an object whose metadata.namespace is not the URL's (400, as the handlers do)."""
    given = (body.get("metadata") or {}).get("namespace") if isinstance(body, dict) else None
    if namespace and given and given != namespace:
        raise _errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


def timeout_seconds(query: Any, default: float) -> float:
    """Return `timeoutSeconds`, or 400 as the parameter codec answers a non-integer."""
    raw = query.get("timeoutSeconds")
    if not raw:
        return default
    if not _is_integer(raw):
        raise _errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    return float(int(raw))


def _is_integer(text: str) -> bool:
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit()


def watch_resource_version(raw: str) -> int | None:
    """Return a watch's starting resourceVersion (None: from now).

    A value that is not a number is, on v1.36, a 500 Status without a reason: the storage
    layer's parse error reaches the client unconverted.
    """
    if raw in ("", "0"):
        return None
    if not (raw.isascii() and raw.isdigit()):
        parse = f'strconv.ParseUint: parsing "{raw}": invalid syntax'
        raise ApiError(500, "", f'resourceVersion: Invalid value: "{raw}": {parse}')
    return int(raw)
