"""Server-side apply and `metadata.managedFields`, as structured-merge-diff does them.

An apply (`PATCH`, `Content-Type: application/apply-patch+yaml`, `fieldManager` required) sends
the fields its manager wants to own. The server:

1. works out the applied field set (leaves, associative-list items, set members);
2. finds conflicts: fields another manager owns whose live value differs from the applied one,
   answered as 409 Conflict with one cause per field, unless `force=true` takes them over;
3. removes the fields this manager applied before and no longer applies (when nobody else
   owns them), merges the applied object into the live one, and records the new field set in
   `managedFields` (operation Apply).

Ordinary writes that name a `fieldManager` (kubectl always does), or that touch an object
already carrying managedFields, record the fields they changed under that manager (operation
Update), so that a later apply conflicts with them as on a real server. Writes without either
(the driver's own Job and ConfigMap creates) skip all of this, which keeps them cheap.

Lists merge per item where the schema says so: for built-in kinds the same merge keys as
strategic merge patch (`containers` by name, `conditions` by type...), for custom kinds the
CRD's `x-kubernetes-list-type`/`x-kubernetes-list-map-keys`; other lists are atomic.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from . import errors as _errors
from . import patch as _patch
from .resources import Resource
from .store import Obj, now_rfc3339

Element = tuple[str, str]  # ("f", field) | ("k", json of the item's keys) | ("v", json value)
Path = tuple[Element, ...]
Schema = dict[str, Any] | None  # None: a built-in kind, lists typed by field name

_SERVER_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "generateName",
    "selfLink",
)


# ---------------------------------------------------------------------- field sets


def _root_schema(res: Resource) -> Schema:
    schema = getattr(res.hooks, "schema", None)
    return schema if isinstance(schema, dict) else None


def _child(schema: Schema, key: str) -> Schema:
    if schema is None:
        return None
    properties = schema.get("properties") or {}
    if key in properties:
        return dict(properties[key])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else {}


def _list_rule(name: str, schema: Schema) -> tuple[str, tuple[str, ...]]:
    """Return ("map", keys), ("set", ()) or ("atomic", ()) for the list under field `name`."""
    if schema is None:
        if name in _patch.SET_LISTS:
            return "set", ()
        key = _patch.MERGE_KEYS.get(name)
        return ("map", (key,)) if key else ("atomic", ())
    kind = schema.get("x-kubernetes-list-type", "atomic")
    if kind == "map":
        return "map", tuple(schema.get("x-kubernetes-list-map-keys", []))
    return ("set", ()) if kind == "set" else ("atomic", ())


def _item_key(item: Any, keys: tuple[str, ...]) -> str:
    return json.dumps(
        {k: item.get(k) for k in keys if isinstance(item, dict)}, separators=(",", ":")
    )


def field_set(obj: Any, schema: Schema, prefix: Path = ()) -> set[Path]:
    """Return the paths of every leaf, associative-list item and set member in `obj`."""
    if isinstance(obj, dict) and not obj:
        return set()  # an empty map owns nothing (and so conflicts with nothing)
    if not isinstance(obj, dict):
        return {prefix} if prefix else set()
    paths: set[Path] = set()
    for key, value in obj.items():
        path = (*prefix, ("f", key))
        child = _child(schema, key)
        if isinstance(value, list):
            paths |= _list_set(value, key, child, path)
        else:
            paths |= field_set(value, child, path)
    return paths


def _list_set(items: list[Any], name: str, schema: Schema, path: Path) -> set[Path]:
    kind, keys = _list_rule(name, schema)
    if kind == "set":
        return {(*path, ("v", json.dumps(v))) for v in items}
    if kind == "atomic" or not all(isinstance(i, dict) for i in items):
        return {path}
    item_schema = (
        dict(schema["items"])
        if schema is not None and "items" in schema
        else (None if schema is None else {})
    )
    paths: set[Path] = set()
    for item in items:
        item_path = (*path, ("k", _item_key(item, keys)))
        paths.add(item_path)
        paths |= field_set(item, item_schema, item_path)
    return paths


def owned_part(obj: Obj, res: Resource, subresource: str) -> Obj:
    """Return the part of `obj` a manager can own through this endpoint."""
    part = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    if res.has_status:
        if subresource == "status":
            part = {"status": obj["status"]} if "status" in obj else {}
        else:
            part.pop("status", None)
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_META}
    if meta and subresource != "status":
        part["metadata"] = meta
    return part


# ---------------------------------------------------------------------- reading paths


_ABSENT = object()


def value_at(obj: Any, path: Path) -> Any:
    """Return the value at `path` in `obj`, or _ABSENT."""
    current = obj
    for kind, token in path:
        if kind == "f":
            if not isinstance(current, dict) or token not in current:
                return _ABSENT
            current = current[token]
        elif kind == "k":
            wanted = json.loads(token)
            current = (
                next(
                    (
                        i
                        for i in current or []
                        if isinstance(i, dict) and all(i.get(k) == v for k, v in wanted.items())
                    ),
                    _ABSENT,
                )
                if isinstance(current, list)
                else _ABSENT
            )
            if current is _ABSENT:
                return _ABSENT
        else:
            value = json.loads(token)
            return value if isinstance(current, list) and value in current else _ABSENT
    return current


def path_string(path: Path) -> str:
    """Return a path as structured-merge-diff prints it: `.spec.containers[name="x"].image`."""
    out = ""
    for kind, token in path:
        if kind == "f":
            out += f".{token}"
        elif kind == "k":
            keys = json.loads(token)
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        else:
            out += f"[={token}]"
    return out


# ---------------------------------------------------------------------- FieldsV1


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """Return the FieldsV1 tree for a set of paths (`f:`, `k:`, `v:` keys, `.` for items)."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for kind, token in path:
            node = node.setdefault(f"{kind}:{token}", {})
        if path and path[-1][0] == "k":
            node["."] = {}
    return _sorted_tree(tree)


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_tree(v) for k, v in sorted(tree.items())}


def from_fields_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """Return the set of paths a FieldsV1 tree names."""
    paths: set[Path] = set()
    for key, sub in tree.items():
        if key == ".":
            paths.add(prefix)
            continue
        kind, _, token = key.partition(":")
        path = (*prefix, (kind, token))
        if sub:
            paths |= from_fields_v1(sub, path)
        else:
            paths.add(path)
    return paths


# ---------------------------------------------------------------------- managers


class Managers:
    """The managedFields of one object, as (manager, operation, subresource) -> field set."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = [dict(e) for e in entries]
        self.sets = [from_fields_v1(e.get("fieldsV1") or {}) for e in self.entries]

    def find(self, manager: str, operation: str, subresource: str) -> int | None:
        """Return the index of the entry for this manager and operation, or None."""
        for index, entry in enumerate(self.entries):
            if (entry["manager"], entry["operation"], entry.get("subresource", "")) == (
                manager,
                operation,
                subresource,
            ):
                return index
        return None

    def give(
        self, manager: str, operation: str, api_version: str, subresource: str, paths: set[Path]
    ) -> None:
        """Record that `manager` owns `paths` (replacing its set for an Apply)."""
        index = self.find(manager, operation, subresource)
        if index is None:
            entry: dict[str, Any] = {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
            }
            if subresource:
                entry["subresource"] = subresource
            self.entries.append(entry)
            self.sets.append(set())
            index = len(self.entries) - 1
        merged = paths if operation == "Apply" else self.sets[index] | paths
        self.sets[index] = merged
        self.entries[index]["time"] = now_rfc3339()

    def take(self, paths: set[Path], keep: int | None = None) -> None:
        """Remove `paths` from every entry but `keep`."""
        for index, owned in enumerate(self.sets):
            if index != keep:
                owned -= paths

    def serialise(self) -> list[dict[str, Any]]:
        """Return the managedFields list, entries that own nothing dropped."""
        out = []
        for entry, owned in zip(self.entries, self.sets, strict=True):
            if not owned:
                continue
            keys = ("manager", "operation", "apiVersion", "time")
            item: dict[str, Any] = {k: entry[k] for k in keys if k in entry}
            item["fieldsType"] = "FieldsV1"
            item["fieldsV1"] = to_fields_v1(owned)
            if entry.get("subresource"):
                item["subresource"] = entry["subresource"]
            out.append(item)
        return out


def _label(entry: dict[str, Any]) -> str:
    if entry["operation"] == "Update":
        return f"{json.dumps(entry['manager'])} using {entry['apiVersion']}"
    return json.dumps(entry["manager"])


# ---------------------------------------------------------------------- apply


def apply(
    res: Resource,
    live: Obj | None,
    applied: Obj,
    manager: str,
    subresource: str,
    force: bool,
) -> Obj:
    """Return the object after `manager` applies `applied` to `live` (None: create)."""
    schema = _root_schema(res)
    base = (
        copy.deepcopy(live)
        if live is not None
        else {"apiVersion": applied["apiVersion"], "kind": applied["kind"], "metadata": {}}
    )
    managers = Managers(base.get("metadata", {}).get("managedFields") or [])
    wanted_part = owned_part(applied, res, subresource)
    wanted = field_set(wanted_part, schema)
    mine = managers.find(manager, "Apply", subresource)
    conflicts = _conflicts(managers, mine, wanted, base, wanted_part)
    if conflicts and not force:
        raise _conflict_error(conflicts)
    if conflicts:
        managers.take({path for path, _ in conflicts}, keep=mine)
    previous = managers.sets[mine] if mine is not None else set()
    others = set().union(*(s for i, s in enumerate(managers.sets) if i != mine))
    for path in sorted(previous - wanted - others, key=len, reverse=True):
        if not any(owned[: len(path)] == path for owned in others):
            _remove(base, path)  # only when nobody else owns something inside it
    merged: Obj = _merge(base, wanted_part, schema, "")
    managers.give(manager, "Apply", res.api_version, subresource, wanted)
    merged.setdefault("metadata", {})
    if live is None:
        merged["metadata"]["name"] = applied["metadata"]["name"]
    merged["metadata"]["managedFields"] = managers.serialise()
    if live is not None and _untimed(merged) == _untimed(live):
        # A no-op apply writes nothing, as the real server's field manager ignores a change of
        # managedFields timestamps alone: else a re-apply a second later bumps resourceVersion.
        return copy.deepcopy(live)
    return merged


def _untimed(obj: Obj) -> Obj:
    """Return a copy of `obj` without the managedFields timestamps."""
    copied = copy.deepcopy(obj)
    for entry in copied.get("metadata", {}).get("managedFields") or []:
        entry.pop("time", None)
    return copied


def _conflicts(
    managers: Managers, mine: int | None, wanted: set[Path], live: Obj, applied: Obj
) -> list[tuple[Path, str]]:
    found = []
    for index, owned in enumerate(managers.sets):
        if index == mine:
            continue
        for path in sorted(owned & wanted):
            if path[-1][0] == "k":
                continue  # owning an item is shared; its fields decide
            if value_at(_owned_view(live), path) != value_at(applied, path):
                found.append((path, _label(managers.entries[index])))
    return found


def _owned_view(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _conflict_error(conflicts: list[tuple[Path, str]]) -> _errors.ApiError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {who}",
            "field": path_string(path),
        }
        for path, who in conflicts
    ]
    if len(conflicts) == 1:
        path, who = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who}: {path_string(path)}"
    else:
        lines: list[str] = []
        for who in sorted({w for _, w in conflicts}):
            lines.append(f"conflicts with {who}:")
            lines += [f"- {path_string(p)}" for p, w in conflicts if w == who]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return _errors.ApiError(409, "Conflict", message, {"causes": causes})


def _remove(obj: Any, path: Path) -> None:
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    if parent is _ABSENT:
        return
    kind, token = path[-1]
    if kind == "f" and isinstance(parent, dict):
        parent.pop(token, None)
    elif isinstance(parent, list):
        target = value_at(obj, path)
        if target is not _ABSENT:
            parent.remove(target)


def _merge(live: Any, applied: Any, schema: Schema, name: str) -> Any:
    if isinstance(applied, dict) and isinstance(live, dict):
        merged = dict(live)
        for key, value in applied.items():
            merged[key] = _merge(live.get(key), value, _child(schema, key), key)
        return merged
    if isinstance(applied, list) and isinstance(live, list):
        return _merge_list(live, applied, schema, name)
    return copy.deepcopy(applied)


def _merge_list(live: list[Any], applied: list[Any], schema: Schema, name: str) -> list[Any]:
    kind, keys = _list_rule(name, schema)
    if kind == "set":
        return list(live) + [v for v in applied if v not in live]
    if kind == "atomic" or not all(isinstance(i, dict) for i in [*live, *applied]):
        return copy.deepcopy(applied)
    item_schema = (
        dict(schema["items"])
        if schema is not None and "items" in schema
        else (None if schema is None else {})
    )
    merged = list(live)
    for item in applied:
        key = _item_key(item, keys)
        index = next((i for i, c in enumerate(merged) if _item_key(c, keys) == key), None)
        if index is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[index] = _merge(merged[index], item, item_schema, "")
    return merged


# ---------------------------------------------------------------------- updates


def record_update(res: Resource, old: Obj | None, new: Obj, manager: str, subresource: str) -> None:
    """Record in `new` the fields an ordinary write by `manager` set or changed."""
    schema = _root_schema(res)
    old_meta = (old or {}).get("metadata", {})
    managers = Managers(
        new.get("metadata", {}).get("managedFields") or old_meta.get("managedFields") or []
    )
    before = _owned_view(owned_part(old, res, subresource)) if old is not None else {}
    after = owned_part(new, res, subresource)
    old_paths = field_set(before, schema)
    new_paths = field_set(after, schema)
    changed = {
        p for p in new_paths if p not in old_paths or value_at(before, p) != value_at(after, p)
    }
    managers.take(old_paths - new_paths)
    if changed:
        index = managers.find(manager, "Update", subresource)
        managers.take(changed, keep=index)
        managers.give(manager, "Update", res.api_version, subresource, changed)
    new.setdefault("metadata", {})["managedFields"] = managers.serialise()
