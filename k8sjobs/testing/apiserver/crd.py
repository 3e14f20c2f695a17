"""CustomResourceDefinitions: defining a kind at run time, as apiextensions-apiserver does.

Creating a CRD (apiextensions.k8s.io/v1) makes the store serve its kind once the CRD controller
has accepted the names and marked it `Established` (a moment later, as on a real server, so
clients wait for the condition). Custom objects are pruned, defaulted and validated against
the storage version's `openAPIV3Schema` (see `_openapi`); with the `status` subresource, spec
writes ignore status and status writes ignore the rest, and `metadata.generation` moves on
spec changes only. Deleting a CRD puts the `customresourcecleanup` finalizer and a
`Terminating` condition on it, deletes every custom object, then removes the CRD.

The store keys resources by plural, so a CRD whose plural is already served (by a built-in
resource or another CRD) is not accepted: `NamesAccepted` and `Established` stay False.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from . import errors as _errors
from . import openapi as _openapi
from .resources import Resource, cause
from .store import Event, Obj, Store, now_rfc3339

CRD_PLURAL = "customresourcedefinitions"
CRD_GROUP = "apiextensions.k8s.io"
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
_SCOPES = ("Cluster", "Namespaced")


class CrdHooks:
    """Defaults and validation of CustomResourceDefinition objects themselves."""

    served: tuple[str, ...] = ("v1",)
    builtin_schema: bool = True
    singular = "customresourcedefinition"
    short_names = ("crd", "crds")

    def prepare(self, obj: Obj, old: Obj | None) -> None:
        """Fill in the defaults the API server writes on a CRD (singular, listKind, status)."""
        spec = obj.setdefault("spec", {})
        names = spec.setdefault("names", {})
        if names.get("kind"):
            names.setdefault("singular", str(names["kind"]).lower())
            names.setdefault("listKind", f"{names['kind']}List")
        spec.setdefault("conversion", {"strategy": "None"})
        if old is None:
            storage = [v.get("name") for v in spec.get("versions", []) if v.get("storage")]
            obj["status"] = {
                "acceptedNames": {"kind": "", "plural": ""},
                "storedVersions": storage[:1],
            }

    def causes(self, obj: Obj, old: Obj | None) -> list[dict[str, str]]:
        """Return why the API server would refuse this CRD (names, scope, versions, schemas)."""
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        found = [
            cause("FieldValueRequired", "Required value", field)
            for field, value in (
                ("spec.group", spec.get("group")),
                ("spec.names.plural", names.get("plural")),
                ("spec.names.kind", names.get("kind")),
            )
            if not value
        ]
        if found:
            return found
        expected = f"{names['plural']}.{spec['group']}"
        name = obj.get("metadata", {}).get("name", "")
        if name != expected:
            message = f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
            found.append(cause("FieldValueInvalid", message, "metadata.name"))
        if spec.get("scope") not in _SCOPES:
            message = (
                f'Unsupported value: "{spec.get("scope", "")}": supported values: '
                '"Cluster", "Namespaced"'
            )
            found.append(cause("FieldValueNotSupported", message, "spec.scope"))
        return found + _version_causes(spec.get("versions") or [])


def _version_causes(versions: list[dict[str, Any]]) -> list[dict[str, str]]:
    if not versions:
        return [
            cause(
                "FieldValueRequired",
                "Required value: must have at least one version",
                "spec.versions",
            )
        ]
    found = []
    if sum(1 for v in versions if v.get("storage")) != 1:
        message = (
            f"Invalid value: {_openapi.go_value(versions)}: must have exactly one version "
            "marked as storage version"
        )
        found.append(cause("FieldValueInvalid", message, "spec.versions"))
    for index, version in enumerate(versions):
        if not (version.get("schema") or {}).get("openAPIV3Schema"):
            field = f"spec.versions[{index}].schema.openAPIV3Schema"
            found.append(cause("FieldValueRequired", "Required value: schemas are required", field))
    return found


CRD_RESOURCE = Resource(
    CRD_PLURAL,
    "CustomResourceDefinition",
    CRD_GROUP,
    "v1",
    False,
    has_generation=True,
    has_status=True,
    hooks=CrdHooks(),
)


@dataclass(frozen=True, eq=False)
class CustomKind:
    """What a CRD says about its kind beyond the REST names: schema, versions, printing."""

    crd: str
    schema: dict[str, Any]
    served: tuple[str, ...]
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    list_kind: str
    columns: tuple[dict[str, Any], ...]
    status_subresource: bool
    builtin_schema = False

    def prepare(self, obj: Obj, old: Obj | None) -> None:
        """Prune unknown fields and fill in schema defaults, as the real server does on write."""
        pruned = _openapi.prune_and_default(obj, self.schema)
        if old is None and self.status_subresource:
            pruned.pop("status", None)  # a create cannot set status when it is a subresource
        obj.clear()
        obj.update(pruned)

    def causes(self, obj: Obj, old: Obj | None) -> list[dict[str, str]]:
        """Return the schema violations of `obj`, each with its field path.

        On an update, a violation at a field the update left as it was is not one: the
        real server ratchets (CRDValidationRatcheting, on since v1.30), so an object written
        before its schema tightened, or by a controller through /status, can still be
        patched elsewhere (a label, an annotation)."""
        body = {k: v for k, v in obj.items() if k != "metadata"}
        found = _openapi.validate(body, self.schema)
        if old is not None:
            found = [c for c in found if _value_at(obj, c["field"]) != _value_at(old, c["field"])]
        return sorted(found, key=lambda c: c["field"])


_ABSENT = object()


def _value_at(obj: Obj, field: str) -> Any:
    """Return the value at a cause's field path (`spec.tasks[0].name`); a missing one, and a
    path this cannot follow, are the same absent value (so a field missing before and after
    counts as unchanged)."""
    value: Any = obj
    for part in field.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]") and isinstance(value, list):
            index = part[1:-1]
            if not index.isdigit() or int(index) >= len(value):
                return _ABSENT
            value = value[int(index)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _ABSENT
    return value


def check_unknown_fields(res: Resource, body: Obj, directive: str) -> list[str]:
    """Return warnings for fields a custom kind's schema does not declare.

    With `fieldValidation=Strict` (kubectl's default) they are a 400 BadRequest instead, as
    the real server's strict decoding reports them; `Ignore` says nothing.
    """
    hooks = res.hooks
    if not isinstance(hooks, CustomKind) or directive == "Ignore":
        return []
    unknown = [f'unknown field "{path}"' for path in _openapi.unknown_fields(body, hooks.schema)]
    if unknown and directive == "Strict":
        message = (
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
            f"strict decoding error: {', '.join(unknown)}"
        )
        raise _errors.bad_request(message)
    return unknown


def custom_resource(crd: Obj) -> Resource:
    """Return the `Resource` a CRD defines, at its storage version."""
    spec = crd["spec"]
    names = spec["names"]
    versions = spec["versions"]
    storage = next(v for v in versions if v.get("storage"))
    kind = CustomKind(
        crd=crd["metadata"]["name"],
        schema=storage["schema"]["openAPIV3Schema"],
        served=tuple(v["name"] for v in versions if v.get("served")),
        singular=names.get("singular", names["kind"].lower()),
        short_names=tuple(names.get("shortNames", [])),
        categories=tuple(names.get("categories", [])),
        list_kind=names.get("listKind", f"{names['kind']}List"),
        columns=tuple(storage.get("additionalPrinterColumns", [])),
        status_subresource="status" in (storage.get("subresources") or {}),
    )
    return Resource(
        names["plural"],
        names["kind"],
        spec["group"],
        storage["name"],
        spec["scope"] == "Namespaced",
        has_generation=True,
        has_status=kind.status_subresource,
        hooks=kind,
    )


class CrdController:
    """Accepts CRD names, marks CRDs Established, and cleans up after a CRD is deleted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.resources[CRD_PLURAL] = CRD_RESOURCE
        store.listen(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource != CRD_PLURAL or event.type == "DELETED":
            return
        name = event.obj["metadata"]["name"]
        # Later: a listener must not write while the store is still fanning out this event.
        loop = asyncio.get_running_loop()
        if event.obj["metadata"].get("deletionTimestamp"):
            loop.call_soon(self._clean_up, name)
        else:
            loop.call_soon(self._sync, name)

    def _sync(self, name: str) -> None:
        crd = self.store.get(CRD_PLURAL, "", name)
        if crd is None or crd["metadata"].get("deletionTimestamp"):
            return
        resource = custom_resource(crd)
        owner = self.store.resources.get(resource.plural)
        clash = owner is not None and getattr(owner.hooks, "crd", None) != name
        if not clash:
            self.store.resources[resource.plural] = resource
        self._write_status(crd, resource, clash)

    def _write_status(self, crd: Obj, resource: Resource, clash: bool) -> None:
        old = {c["type"]: c for c in crd.get("status", {}).get("conditions", [])}
        if clash:
            conditions = [
                _condition(
                    old,
                    "NamesAccepted",
                    "False",
                    "PluralConflict",
                    f'"{resource.plural}" is already in use',
                ),
                _condition(
                    old, "Established", "False", "NotAccepted", "not all names are accepted"
                ),
            ]
        else:
            conditions = [
                _condition(old, "NamesAccepted", "True", "NoConflicts", "no conflicts found"),
                _condition(
                    old,
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                ),
            ]
        status = dict(crd.get("status", {}))
        unaccepted = {"plural": "", "kind": ""}
        status["acceptedNames"] = unaccepted if clash else _accepted_names(crd["spec"]["names"])
        status["conditions"] = conditions
        updated = dict(crd, status=status)
        self.store.update(CRD_PLURAL, "", updated, subresource="status", validate=False)

    def delete(self, name: str) -> None:
        """Prepare a CRD for deletion: the cleanup finalizer and a Terminating condition."""
        crd = self.store.require(CRD_PLURAL, "", name)
        if crd["metadata"].get("deletionTimestamp"):
            return
        meta = dict(crd["metadata"])
        meta["finalizers"] = [*meta.get("finalizers", []), CLEANUP_FINALIZER]
        old = {c["type"]: c for c in crd.get("status", {}).get("conditions", [])}
        terminating = _condition(
            old,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        )
        conditions = [c for c in old.values() if c["type"] != "Terminating"] + [terminating]
        status = dict(crd.get("status", {}), conditions=conditions)
        self.store.update(CRD_PLURAL, "", dict(crd, metadata=meta, status=status), subresource="*")

    def _clean_up(self, name: str) -> None:
        crd = self.store.get(CRD_PLURAL, "", name)
        if crd is None or CLEANUP_FINALIZER not in crd["metadata"].get("finalizers", []):
            return
        plural = crd["spec"]["names"]["plural"]
        resource = self.store.resources.get(plural)
        if resource is not None and getattr(resource.hooks, "crd", None) == name:
            if self._delete_instances(plural):
                asyncio.get_running_loop().call_later(0.05, self._clean_up, name)
                return
            del self.store.resources[plural]
            self.store.close_watches(plural)
        finalizers = [f for f in crd["metadata"]["finalizers"] if f != CLEANUP_FINALIZER]
        meta = dict(crd["metadata"], finalizers=finalizers)
        if not finalizers:
            del meta["finalizers"]
        self.store.update(CRD_PLURAL, "", dict(crd, metadata=meta), validate=False)

    def _delete_instances(self, plural: str) -> bool:
        """Delete every object of `plural`; return whether some are still being deleted."""
        remaining = False
        for obj in list(self.store.iter(plural)):
            meta = obj["metadata"]
            with contextlib.suppress(_errors.ApiError):
                _, gone = self.store.delete(plural, meta.get("namespace", ""), meta["name"])
                remaining = remaining or not gone
        return remaining


def _condition(old: dict[str, Obj], kind: str, status: str, reason: str, message: str) -> Obj:
    previous = old.get(kind)
    when = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == status
        else now_rfc3339()
    )
    return {
        "type": kind,
        "status": status,
        "lastTransitionTime": when,
        "reason": reason,
        "message": message,
    }


def _accepted_names(names: dict[str, Any]) -> dict[str, Any]:
    accepted = {
        "plural": names["plural"],
        "singular": names.get("singular", ""),
        "kind": names["kind"],
        "listKind": names.get("listKind", ""),
    }
    for key in ("shortNames", "categories"):
        if names.get(key):
            accepted[key] = names[key]
    return dict(sorted(accepted.items(), key=lambda kv: _NAME_ORDER.index(kv[0])))


_NAME_ORDER = ("plural", "singular", "shortNames", "kind", "listKind", "categories")
