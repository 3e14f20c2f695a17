"""The OpenAPI v3 subset that CustomResourceDefinition schemas use: prune, default, validate.

A real API server treats a custom object in three passes, and so does this module: unknown
fields are pruned (unless `x-kubernetes-preserve-unknown-fields`), `default`s are filled in,
then the object is validated. Errors come back as `StatusCause`s worded the way kube-openapi's
validator and apiextensions-apiserver word them (`spec.size in body must be of type integer:
"string"`), because users read these messages and clients match on the field.

Supported keywords: type, properties, additionalProperties, items, required, enum, nullable,
minimum/maximum (and exclusive), minLength/maxLength, pattern, minItems/maxItems, format is
ignored, x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields,
x-kubernetes-embedded-resource. allOf/anyOf/oneOf/not and CEL rules are not evaluated.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

Schema = dict[str, Any]
Cause = dict[str, str]

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}
_EMBEDDED_META = ("apiVersion", "kind", "metadata")


def json_type(value: Any) -> str:
    """Return the JSON type name of `value` as Go's OpenAPI validator reports it."""
    if value is None:
        return "null"
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def go_value(value: Any) -> str:
    """Return `value` printed the way field errors print it (strings quoted, numbers bare)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def prune_and_default(obj: Any, schema: Schema, *, root: bool = True) -> Any:
    """Return `obj` with fields the schema does not know removed and defaults filled in."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return obj
    if isinstance(obj, dict) and (schema.get("type") == "object" or "properties" in schema):
        return _prune_object(obj, schema, root)
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(item, schema["items"], root=False) for item in obj]
    return obj


def _prune_object(obj: dict[str, Any], schema: Schema, root: bool) -> dict[str, Any]:
    properties: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    kept = set(_EMBEDDED_META) if root or schema.get("x-kubernetes-embedded-resource") else set()
    result: dict[str, Any] = {}
    for key, value in obj.items():
        if key in kept:
            result[key] = value
        elif key in properties:
            if value is None and not properties[key].get("nullable"):
                continue  # null in a non-nullable field is pruned, so its default applies
            result[key] = prune_and_default(value, properties[key], root=False)
        elif isinstance(extra, dict):
            result[key] = prune_and_default(value, extra, root=False)
        elif preserve or extra is True:
            result[key] = value
    for key, sub in properties.items():
        if key not in result and "default" in sub:
            result[key] = prune_and_default(copy.deepcopy(sub["default"]), sub, root=False)
    return result


def unknown_fields(obj: Any, schema: Schema, path: str = "", *, root: bool = True) -> list[str]:
    """Return the paths of fields the schema does not declare (what Strict validation rejects)."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return []
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        found: list[str] = []
        for index, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]", root=False)
        return found
    if not isinstance(obj, dict) or not (schema.get("type") == "object" or "properties" in schema):
        return []
    return _unknown_in_object(obj, schema, path, root)


def _unknown_in_object(obj: dict[str, Any], schema: Schema, path: str, root: bool) -> list[str]:
    properties: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    kept = set(_EMBEDDED_META) if root or schema.get("x-kubernetes-embedded-resource") else set()
    found: list[str] = []
    for key, value in obj.items():
        child = f"{path}.{key}" if path else key
        if key in kept:
            continue
        if key in properties:
            found += unknown_fields(value, properties[key], child, root=False)
        elif isinstance(extra, dict):
            found += unknown_fields(value, extra, child, root=False)
        elif not (schema.get("x-kubernetes-preserve-unknown-fields") or extra):
            found.append(child)
    return found


def validate(obj: Any, schema: Schema, path: str = "") -> list[Cause]:
    """Return the causes for which `obj` does not satisfy `schema` (empty when it does)."""
    if obj is None:
        if schema.get("nullable"):
            return []
        if "type" in schema or schema.get("x-kubernetes-int-or-string"):
            return [_type_cause(path, obj, _type_names(schema))]
        return []
    types = _type_names(schema)
    if types and not any(_TYPES[t](obj) for t in types if t in _TYPES):
        return [_type_cause(path, obj, types)]
    causes = _value_causes(obj, schema, path)
    if isinstance(obj, dict):
        causes += _object_causes(obj, schema, path)
    elif isinstance(obj, list):
        causes += _array_causes(obj, schema, path)
    return causes


def _type_names(schema: Schema) -> list[str]:
    if schema.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    return [schema["type"]] if schema.get("type") else []


def _type_cause(path: str, value: Any, types: list[str]) -> Cause:
    found = json_type(value)
    message = f"{_name(path)} in body must be of type {','.join(types)}: {json.dumps(found)}"
    return _cause("FieldValueTypeInvalid", f"Invalid value: {json.dumps(found)}: {message}", path)


def _value_causes(obj: Any, schema: Schema, path: str) -> list[Cause]:
    if "enum" in schema and obj not in schema["enum"]:
        allowed = ", ".join(json.dumps(v) for v in schema["enum"])
        message = f"Unsupported value: {go_value(obj)}: supported values: {allowed}"
        return [_cause("FieldValueNotSupported", message, path)]
    if isinstance(obj, str):
        return _string_causes(obj, schema, path)
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return _number_causes(obj, schema, path)
    return []


def _string_causes(value: str, schema: Schema, path: str) -> list[Cause]:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        message = f"Too long: may not be more than {schema['maxLength']} bytes"
        return [_cause("FieldValueTooLong", message, path)]
    if "minLength" in schema and len(value) < schema["minLength"]:
        detail = f"should be at least {schema['minLength']} chars long"
        return [_invalid(path, value, detail)]
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        return [_invalid(path, value, f"should match '{schema['pattern']}'")]
    return []


def _number_causes(value: float, schema: Schema, path: str) -> list[Cause]:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            return [_invalid(path, value, f"should be greater than {low}")]
        if value < low:
            return [_invalid(path, value, f"should be greater than or equal to {low}")]
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            return [_invalid(path, value, f"should be less than {high}")]
        if value > high:
            return [_invalid(path, value, f"should be less than or equal to {high}")]
    return []


def _object_causes(obj: dict[str, Any], schema: Schema, path: str) -> list[Cause]:
    causes = [
        _cause("FieldValueRequired", "Required value", _join(path, key))
        for key in schema.get("required", [])
        if key not in obj
    ]
    properties: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, value in obj.items():
        sub = properties.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None:
            causes += validate(value, sub, _join(path, key))
    return causes


def _array_causes(obj: list[Any], schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if "maxItems" in schema and len(obj) > schema["maxItems"]:
        message = f"Too many: {len(obj)}: must have at most {schema['maxItems']} items"
        causes.append(_cause("FieldValueTooMany", message, path))
    if "minItems" in schema and len(obj) < schema["minItems"]:
        causes.append(_invalid(path, obj, f"should have at least {schema['minItems']} items"))
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(obj):
            causes += validate(item, items, f"{path}[{index}]")
    return causes


def _invalid(path: str, value: Any, detail: str) -> Cause:
    message = f"Invalid value: {go_value(value)}: {_name(path)} in body {detail}"
    return _cause("FieldValueInvalid", message, path)


def _cause(reason: str, message: str, field: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _name(path: str) -> str:
    return path or "body"
