"""How kube-apiserver decodes a request, and the 400 BadRequest it answers when it cannot.

Query parameters are decoded into typed options (ListOptions, DeleteOptions, PodLogOptions):
a number that is not one is `strconv.ParseInt: parsing "abc": invalid syntax`, and a boolean
is false only for "0" and "false" (Go's `Convert_Slice_string_To_bool`). A body is decoded
into the kind's Go struct: a value of the wrong JSON type is refused with encoding/json's
words inside the handler's (`ConfigMap in version "v1" cannot be handled as a ConfigMap:
json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type
string`), checked against the v1.36 OpenAPI definitions that kubernetes-validate ships; JSON
nested deeper than encoding/json's 10,000 levels is refused as its scanner refuses it, and
so are NaN and Infinity (Python's decoder takes them, a Go client never sends them). A
quantity is read by `steps.quantity`, resource.Quantity's parser, and refused in its words
(`Pod in version "v1" cannot be handled as a Pod: quantities must match the regular
expression '...'`). Nothing here ever ends in a 500: a malformed request is the client's fault.
"""

from __future__ import annotations

import binascii
import functools
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...steps.quantity import Quantity, QuantityError
from . import errors as _errors
from .errors import ApiError

MAX_DEPTH = 10_000  # encoding/json's maxNestingDepth
# Types with their own UnmarshalJSON: what each takes.
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_STRING_TYPES = (
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
)
_ANY_TYPES = (
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
)
_FIND_KIND = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
    'Kind string "json:\\"kind,omitempty\\"" }'
)


# ---------------------------------------------------------------------- query parameters


def int_param(query: Mapping[str, str], name: str) -> int | None:
    """Return an integer query parameter (None when absent), or raise 400 as Go's ParseInt."""
    raw = query.get(name)
    if raw is None:
        return None
    digits = raw[1:] if raw[:1] in "+-" else raw
    if not (digits.isascii() and digits.isdigit()):
        raise _errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        raise _errors.bad_request(f'strconv.ParseInt: parsing "{raw}": value out of range')
    return value


def bool_param(query: Mapping[str, str], name: str) -> bool:
    """Return a boolean query parameter as the API server reads it: absent, "0" and "false"
    (any case) are false; anything else, "" included, is true."""
    raw = query.get(name)
    if raw is None:
        return False
    return not (raw == "0" or raw.lower() == "false")


# ---------------------------------------------------------------------- JSON


def loads(raw: bytes | str, kind: str = "") -> Any:
    """Decode JSON, refusing nesting deeper than Go's decoder takes with its words (400).

    With a `kind` (a create or update body), a syntax error is the 400 the real handler
    answers, in encoding/json's words; without one, JSONDecodeError is left to the caller.
    """
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except _Constant:  # NaN, Infinity: Python's extensions, which encoding/json refuses
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        exc = _constant_error(text)
        if not kind:
            raise exc from None
        message = f"couldn't get version/kind; json parse error: {_go_syntax_error(exc)}"
        raise unrecognized(kind, message, raw) from None
    except json.JSONDecodeError as exc:
        if not kind:
            raise
        message = f"couldn't get version/kind; json parse error: {_go_syntax_error(exc)}"
        raise unrecognized(kind, message, raw) from None
    except RecursionError:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        depth, char = _depth(text)
        if depth > MAX_DEPTH:
            error = f"invalid character {char!r} exceeded max depth"
            message = f"couldn't get version/kind; json parse error: {error}"
            raise unrecognized(kind, message, raw) from None
        raise _errors.bad_request(
            f"the body nests {depth} levels deep, deeper than this fake API server can decode "
            f"(kube-apiserver takes {MAX_DEPTH})"
        ) from None


class _Constant(ValueError):
    """A NaN, Infinity or -Infinity in a body (Python's decoder takes them; Go's does not)."""


def _refuse_constant(name: str) -> Any:
    raise _Constant(name)


_IN_NUMBER = "in numeric literal"


def _constant_error(text: str) -> json.JSONDecodeError:
    """Return the syntax error encoding/json finds at the first NaN or Infinity outside a
    string: a value cannot begin with N or I, and after a '-' an I is no digit."""
    for pos, _ in _outside_strings(text):
        if text.startswith("-Infinity", pos):
            return json.JSONDecodeError(_IN_NUMBER, text, pos + 1)
        elif text.startswith(("NaN", "Infinity"), pos):
            return json.JSONDecodeError("Expecting value", text, pos)
    raise AssertionError("the decoder found a constant that is not in the text")


def _go_syntax_error(exc: json.JSONDecodeError) -> str:
    """Return what encoding/json says of the syntax error Python's decoder found."""
    text, pos = exc.doc, exc.pos
    if pos >= len(text) or exc.msg.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    char = _quote_char(text[pos])
    if exc.msg == _IN_NUMBER:
        return f"invalid character {char} {_IN_NUMBER}"
    if exc.msg.startswith("Invalid control character"):
        return f"invalid character {char} in string literal"
    if exc.msg.startswith("Expecting property name"):
        return f"invalid character {char} looking for beginning of object key string"
    if exc.msg.startswith("Expecting ':'"):
        return f"invalid character {char} after object key"
    if exc.msg.startswith("Expecting ','"):
        inside = _innermost(text, pos)
        after = "object key:value pair" if inside == "{" else "array element"
        return f"invalid character {char} after {after}"
    if exc.msg.startswith("Extra data"):
        return f"invalid character {char} after top-level value"
    return f"invalid character {char} looking for beginning of value"


def _quote_char(char: str) -> str:
    """Return a character as Go's quoteChar writes it ('x', '\\'', '"', '\\n')."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    quoted = json.dumps(char)[1:-1] if not char.isprintable() else char
    return f"'{quoted}'"


def _outside_strings(text: str) -> Iterator[tuple[int, str]]:
    """Yield each character of JSON `text` that is not inside a string, with its position."""
    in_string = escaped = False
    for pos, char in enumerate(text):
        if in_string:
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            in_string = True
        else:
            yield pos, char


def _innermost(text: str, pos: int) -> str:
    """Return the bracket of the innermost object or array still open at `pos`."""
    stack: list[str] = []
    for _, char in _outside_strings(text[:pos]):
        if char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _depth(text: str) -> tuple[int, str]:
    """Return the deepest nesting in a JSON text, and the bracket that first passed the limit."""
    depth = deepest = 0
    passed = "{"
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth == MAX_DEPTH + 1:
                    passed = char
        elif char in "]}":
            depth -= 1
    return deepest, passed


def unrecognized(kind: str, error: str, raw: bytes | str) -> ApiError:
    """Return the 400 for a body whose kind could not even be read (transformDecodeError)."""
    data = raw.encode() if isinstance(raw, str) else raw
    if not data:
        summary = "<empty>"
    elif data[:1] == b"{":
        summary = data[:30].decode("utf-8", "replace") + (" ..." if len(data) > 30 else "")
    else:
        summary = data[:30].hex() + (" ..." if len(data) > 30 else "")
    return _errors.bad_request(
        f"the object provided is unrecognized (must be of type {kind}): {error} ({summary})"
    )


# ---------------------------------------------------------------------- typed bodies


def check_types(group: str, version: str, kind: str, body: Any, raw: bytes | str = b"") -> None:
    """Refuse (400) a body holding a value of the wrong JSON type for the kind's Go struct."""
    package = group.split(".", 1)[0] if group else "core"
    check_definition(f"io.k8s.api.{package}.{version}.{kind}", version, kind, body, raw)


def check_delete_options(body: Any, raw: bytes | str) -> None:
    """Refuse (400) DeleteOptions holding a value of the wrong type."""
    name = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
    check_definition(name, "v1", "DeleteOptions", body, raw)


def check_definition(name: str, version: str, kind: str, body: Any, raw: bytes | str) -> None:
    """Refuse (400) a body that does not decode into the OpenAPI definition `name`."""
    if not isinstance(body, dict):
        error = f"json: cannot unmarshal {_json_kind(body)} into Go value of type {_FIND_KIND}"
        raise unrecognized(kind, f"couldn't get version/kind; json parse error: {error}", raw)
    for key in ("apiVersion", "kind"):
        value = body.get(key)
        if value is not None and not isinstance(value, str):
            error = (
                f"json: cannot unmarshal {_json_kind(value)} into Go struct field .{key} of "
                "type string"
            )
            raise unrecognized(kind, f"couldn't get version/kind; json parse error: {error}", raw)
    mismatch = _mismatch_of(name, body)
    if mismatch is not None:
        sent_version = str(body.get("apiVersion") or version).rsplit("/", 1)[-1]
        sent_kind = str(body.get("kind") or kind)
        raise _errors.bad_request(
            f'{sent_kind} in version "{sent_version}" cannot be handled as a {kind}: {mismatch}'
        )


def patched_mismatch(group: str, version: str, kind: str, patched: Any) -> ApiError | None:
    """Return the 422 a patch answers when its result does not decode into the kind's types
    (the real patch handler's `patch: Invalid value: "<result>": <decode error>`)."""
    package = group.split(".", 1)[0] if group else "core"
    mismatch = _mismatch_of(f"io.k8s.api.{package}.{version}.{kind}", patched)
    if mismatch is None:
        return None
    shown = json.dumps(json.dumps(patched, separators=(",", ":")))
    cause = {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {shown}: {mismatch}",
        "field": "patch",
    }
    return _errors.invalid("", "", [cause])


def _mismatch_of(name: str, body: Any) -> str | None:
    definitions = _definitions()
    if name not in definitions:
        return None  # a kind the schemas do not hold (a custom resource): decoded unstructured
    if _decodes(_node(definitions[name]), body):
        return None  # the common case, checked without building field paths
    return _walk(definitions, definitions[name], body, _short(name), "")


def bad_patch(content_type: str, patch: Any) -> ApiError | None:
    """Return the 400 for a merge or strategic-merge patch that is not a JSON object."""
    if isinstance(patch, dict):
        return None
    if content_type == "application/strategic-merge-patch+json":
        if patch is None:
            return None  # decodes into an empty map: a no-op patch
        return _errors.bad_request(
            f"json: cannot unmarshal {_json_kind(patch)} into Go value of type "
            "map[string]interface {}"
        )
    return _errors.bad_request("Invalid JSON Patch")


@functools.cache
def _definitions() -> dict[str, Any]:
    from .resources import SCHEMA_VERSION, schema_validator

    kubernetes_validate = schema_validator()
    if kubernetes_validate is None:
        return {}  # without the schemas, decoding errors name no Go type
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = root / f"v{SCHEMA_VERSION}-local" / "_definitions.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())["$defs"]
    except (OSError, ValueError, KeyError):
        return {}
    return loaded


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _go_type(definitions: dict[str, Any], schema: dict[str, Any]) -> str:
    """Return the Go type a schema stands for, as reflect prints it ("v1.ObjectMeta")."""
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name == _INT_OR_STRING:
            return "int32"
        if name in _STRING_TYPES:
            return "string"
        package, short = name.rsplit(".", 2)[-2:]
        return f"{package}.{short}"
    kind = _schema_type(schema)
    if kind == "object" and "additionalProperties" in schema:
        return "map[string]" + _go_type(definitions, schema["additionalProperties"])
    if kind == "array":
        return "[]" + _go_type(definitions, schema.get("items") or {})
    if kind == "string":
        return "[]uint8" if schema.get("format") == "byte" else "string"
    if kind == "integer":
        return "int32" if schema.get("format") == "int32" else "int64"
    if kind == "number":
        return "float64"
    if kind == "boolean":
        return "bool"
    return "interface {}"


def _schema_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind and kind[0] != "null" else next((k for k in kind if k != "null"), "")
    return str(kind or "")


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# ---------------------------------------------------------------------- the fast check
#
# A schema compiled once into nodes: (kind, fields or element, format). Kinds: "struct",
# "map", "array", "string", "boolean", "number", "integer", "any", "special:<name>", "ref".


_NODES: dict[int, tuple[str, Any, Any]] = {}


def _node(schema: dict[str, Any]) -> tuple[str, Any, Any]:
    """Return the compiled node of a schema (memoised: the definitions live for good)."""
    found = _NODES.get(id(schema))
    if found is not None:
        return found
    ref = schema.get("$ref")
    node: tuple[str, Any, Any]
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name in (_QUANTITY, _INT_OR_STRING, *_STRING_TYPES):
            node = ("special:" + name, None, None)
        elif name in _ANY_TYPES or name not in _definitions():
            node = ("any", None, None)
        else:
            node = ("ref", _definitions()[name], None)
    else:
        kind = _schema_type(schema)
        if kind == "object" and "properties" in schema:
            node = ("struct", schema["properties"], None)
        elif kind == "object":
            element = schema.get("additionalProperties")
            node = ("map", element if isinstance(element, dict) else None, None)
        elif kind == "array":
            node = ("array", schema.get("items") or {}, None)
        elif kind in ("string", "boolean", "number", "integer"):
            node = (kind, None, schema.get("format"))
        else:
            node = ("any", None, None)
    _NODES[id(schema)] = node
    return node


def _decodes(node: tuple[str, Any, Any], value: Any) -> bool:
    """Return whether `value` decodes into the node's Go type (no error text: fast).

    Decoding as encoding/json does, it also leaves a null element of an array of structs
    as the empty struct, in place."""
    if value is None:
        return True
    kind, inner, fmt = node
    if kind == "ref":
        kind, inner, fmt = _node(inner)
    if kind == "struct":
        if type(value) is not dict:
            return False
        for key, item in value.items():
            schema = inner.get(key)
            if schema is not None and item is not None and not _decodes(_node(schema), item):
                return False
        return True
    if kind == "map":
        if type(value) is not dict:
            return False
        if inner is None:
            return True
        element = _node(inner)
        return all(_decodes(element, item) for item in value.values())
    if kind == "array":
        if type(value) is not list:
            return False
        element = _node(inner)
        if None in value and _is_struct(element):
            # encoding/json leaves a struct at its zero for null: a Container{} that
            # validation then names (containers[0].name: Required value), never a None
            value[:] = [{} if item is None else item for item in value]
        return all(_decodes(element, item) for item in value)
    if kind.startswith("special:"):
        return _special(kind[8:], value, "", "") is None
    if kind == "any":
        return True
    return _fits(kind, value, fmt)


def _is_struct(node: tuple[str, Any, Any]) -> bool:
    kind, inner, _ = node
    return kind == "struct" or (kind == "ref" and _node(inner)[0] == "struct")


def _walk(
    definitions: dict[str, Any], schema: dict[str, Any], value: Any, struct: str, path: str
) -> str | None:
    """Return encoding/json's error for the first value of the wrong type, or None."""
    if value is None:
        return None  # null leaves a Go value at its zero
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        special = _special(name, value, struct, path)
        if special is not None or name in (_QUANTITY, _INT_OR_STRING, *_STRING_TYPES):
            return special
        if name in _ANY_TYPES or name not in definitions:
            return None
        target = definitions[name]
        if not isinstance(value, dict):
            return _mismatch(value, struct, path, _go_type(definitions, schema))
        return _walk_struct(definitions, target, value, _short(name), path)
    kind = _schema_type(schema)
    if kind == "object":
        if not isinstance(value, dict):
            return _mismatch(value, struct, path, _go_type(definitions, schema))
        if "properties" in schema:
            return _walk_struct(definitions, schema, value, struct, path)
        element = schema.get("additionalProperties")
        if isinstance(element, dict):
            for item in value.values():
                error = _walk(definitions, element, item, struct, path)
                if error is not None:
                    return error
        return None
    if kind == "array":
        if not isinstance(value, list):
            return _mismatch(value, struct, path, _go_type(definitions, schema))
        for item in value:
            error = _walk(definitions, schema.get("items") or {}, item, struct, path)
            if error is not None:
                return error
        return None
    if _fits(kind, value, schema.get("format")):
        return None
    if kind == "string" and isinstance(value, str):
        return _base64_error(value)  # a []byte field: encoding/json's base64 error, bare
    shown = f"number {value}" if kind == "integer" and isinstance(value, int | float) else ""
    if isinstance(value, bool):
        shown = ""
    return _mismatch(value, struct, path, _go_type(definitions, schema), shown)


_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _base64_error(text: str) -> str | None:
    """Return Go's error for a string that is not standard padded base64 (None when it is).

    As base64.StdEncoding.Decode: CR and LF are skipped; the offset is of the first bad
    character, or of the quantum left incomplete at the end.
    """
    try:  # the common case, in C; the walk below only finds where it is wrong
        binascii.a2b_base64(text.replace("\r", "").replace("\n", ""), strict_mode=True)
        return None
    except (binascii.Error, ValueError):
        pass
    quantum: list[int] = []  # offsets of the current quantum's characters
    padded = ended = False
    for offset, char in enumerate(text):
        if char in "\r\n":
            continue
        if ended:
            return f"illegal base64 data at input byte {offset}"  # data after the padding
        if char == "=":
            if len(quantum) < 2:
                return f"illegal base64 data at input byte {offset}"
            padded = True
            quantum.append(offset)
        elif char in _BASE64 and not padded:
            quantum.append(offset)
        else:  # padding "=" then not "=": Go names the "=" (si - 1)
            return f"illegal base64 data at input byte {offset - 1 if padded else offset}"
        if len(quantum) == 4:
            quantum, ended = [], padded
    if quantum:
        return f"illegal base64 data at input byte {quantum[0]}"
    return None


def _fits(kind: str, value: Any, fmt: Any) -> bool:
    """Return whether a scalar JSON value decodes into the schema's Go type."""
    if kind == "string":
        return isinstance(value, str) and (fmt != "byte" or _base64_error(value) is None)
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return kind not in ("number", "integer")
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "integer":
        bound = 2**31 if fmt == "int32" else 2**63
        return isinstance(value, int) and -bound <= value < bound
    return True


def _walk_struct(
    definitions: dict[str, Any],
    schema: dict[str, Any],
    value: dict[str, Any],
    struct: str,
    path: str,
) -> str | None:
    properties = schema.get("properties") or {}
    for key, item in value.items():
        if key in properties:
            field = f"{path}.{key}" if path else key
            error = _walk(definitions, properties[key], item, struct, field)
            if error is not None:
                return error
    return None


def _special(name: str, value: Any, struct: str, path: str) -> str | None:
    """Check a value of a type with its own UnmarshalJSON (Quantity, IntOrString, Time)."""
    if name == _QUANTITY:
        return _quantity_error(value)
    if name == _INT_OR_STRING:
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return None
        return _mismatch(value, struct, path, "int32")
    if name in _STRING_TYPES and not isinstance(value, str):
        return _mismatch(value, struct, path, "string")
    return None


def _quantity_error(value: Any) -> str | None:
    """Return what resource.Quantity's UnmarshalJSON says of a value it refuses (its error,
    bare: encoding/json passes a decoder's own error on unwrapped), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None  # "1e400" as JSON: Python reads infinity, Go's parser reads the digits
    try:
        Quantity.parse(value)
    except QuantityError as error:
        return error.reason
    return None


def _mismatch(value: Any, struct: str, path: str, expected: str, shown: str = "") -> str:
    return (
        f"json: cannot unmarshal {shown or _json_kind(value)} into Go struct field "
        f"{struct}.{path} of type {expected}"
    )
