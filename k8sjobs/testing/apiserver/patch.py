"""The three patch formats the API server accepts: JSON merge, strategic merge, JSON patch.

Strategic merge is implemented for the lists k8sjobs and kubectl patch in practice: lists
with a merge key (ownerReferences by uid, containers/env/volumes by name, conditions by type)
merge item by item, `finalizers` merges as a set, and `$patch: delete|replace` directives
are honoured; every other list is replaced, as in a JSON merge patch.
"""

from __future__ import annotations

import copy
from typing import Any

from . import errors as _errors

_MERGE_KEYS = {
    "ownerReferences": "uid",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}
_SET_LISTS = {"finalizers"}
# Server-side apply merges lists the same way (see _apply).
MERGE_KEYS = _MERGE_KEYS
SET_LISTS = _SET_LISTS


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch and return the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Apply a strategic merge patch (for the fields listed in this module) and return it."""
    if isinstance(patch, list):
        return _merge_list(target, patch, field)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name, []) if v not in value]
        elif key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def _merge_list(target: Any, patch: list[Any], field: str) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if field in _SET_LISTS:
        return current + [v for v in patch if v not in current]
    key = _MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return copy.deepcopy(patch)
    for item in patch:
        index = next(
            (
                i
                for i, c in enumerate(current)
                if isinstance(c, dict) and c.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
        elif index is None:
            current.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            current[index] = strategic_merge_patch(current[index], item)
    return current


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = copy.deepcopy(target)
    for op in operations:
        kind = op.get("op")
        path = _pointer(op.get("path", ""))
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op["from"])
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _errors.ApiError(422, "Invalid", f"the test operation failed at {op['path']}")
        else:
            raise _errors.bad_request(f"Unexpected kind of JSON patch operation: {kind!r}")
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _get(doc: Any, path: list[str]) -> Any:
    for part in path:
        try:
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
        except (KeyError, IndexError, ValueError) as exc:
            raise _errors.ApiError(422, "Invalid", f"path /{'/'.join(path)} not found") from exc
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    last = path[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def _remove(doc: Any, path: list[str]) -> None:
    parent = _get(doc, path[:-1])
    _get(doc, path)
    if isinstance(parent, list):
        del parent[int(path[-1])]
    else:
        del parent[path[-1]]
