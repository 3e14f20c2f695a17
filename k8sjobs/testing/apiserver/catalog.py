"""What the server says it serves, computed from the live resource registry.

The built-in discovery documents are recorded ones (`_discovery`); groups and kinds that
CustomResourceDefinitions add appear in `/apis` and `/apis/<group>/<version>` as soon as the
CRD is established, as on a real server. `/openapi/v3` is served minimally: one document per
group/version whose PATCH operations declare the `fieldValidation`, `dryRun`, `fieldManager`
and `force` parameters, which is what kubectl reads to decide that the server validates
(`kubectl create`/`apply` otherwise refuse to run without `--validate=false`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from .crd import CustomKind
from .discovery import DISCOVERY
from .resources import Resource

_CUSTOM_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
_ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_STATUS_VERBS = ["get", "patch", "update"]
_PATCH_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def discovery(path: str, resources: dict[str, Resource]) -> dict[str, Any] | None:
    """Return the discovery document for `/apis` or `/apis/<group>[/<version>]`, or None."""
    parts = path.strip("/").split("/")
    if parts == ["apis"]:
        return _group_list(resources.values())
    if len(parts) == 2:
        group = _group(parts[1], resources.values())
        return None if group is None else {"kind": "APIGroup", "apiVersion": "v1", **group}
    if len(parts) == 3 and path not in DISCOVERY:
        return _resource_list(parts[1], parts[2], resources.values())
    return None


def _group_list(resources: Iterable[Resource]) -> dict[str, Any]:
    static = DISCOVERY["/apis"]
    names = [g["name"] for g in static["groups"]]
    extra = sorted({r.group for r in resources if r.group and r.group not in names})
    groups = [*static["groups"]]
    listed = list(resources)
    for name in extra:
        group = _group(name, listed)
        if group is not None:
            groups.append(group)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _group(name: str, resources: Iterable[Resource]) -> dict[str, Any] | None:
    members = [r for r in resources if r.group == name]
    if not members:
        return None
    versions = sorted({v for r in members for v in _served(r)}, key=_version_priority)
    preferred = versions[0]  # the highest by Kubernetes version priority, as the real server
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{preferred}", "version": preferred},
    }


def _resource_list(
    group: str, version: str, resources: Iterable[Resource]
) -> dict[str, Any] | None:
    members = sorted(
        (r for r in resources if r.group == group and version in _served(r)),
        key=lambda r: r.plural,
    )
    if not members:
        return None
    entries: list[dict[str, Any]] = []
    for res in members:
        entries.append(_resource_entry(res))
        if res.has_status:
            entries.append(
                {
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": _STATUS_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": entries,
    }


def _resource_entry(res: Resource) -> dict[str, Any]:
    hooks = res.hooks
    custom = isinstance(hooks, CustomKind)
    entry: dict[str, Any] = {
        "name": res.plural,
        "singularName": getattr(hooks, "singular", res.kind.lower()),
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": _CUSTOM_VERBS if custom else _ALL_VERBS,
    }
    short_names = list(getattr(hooks, "short_names", ()))
    if short_names:
        entry["shortNames"] = short_names
    categories = list(getattr(hooks, "categories", ()))
    if categories:
        entry["categories"] = categories
    # The real server's: the first 8 bytes of sha256("group/version/Kind") of the storage
    # version (events.k8s.io Events are stored as core/v1 ones).
    group = "" if res.plural == "events" else res.group
    digest = hashlib.sha256(f"{group}/{res.version}/{res.kind}".encode()).digest()
    entry["storageVersionHash"] = base64.b64encode(digest[:8]).decode()
    return entry


def _served(res: Resource) -> tuple[str, ...]:
    return res.hooks.served if res.hooks is not None else (res.version,)


def _version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting GA before beta before alpha, then higher numbers first (kube-like)."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {"": 0, "beta": 1, "alpha": 2}[stage or ""]
    return (rank, -int(major), -int(minor or 0), version)


# ---------------------------------------------------------------------- OpenAPI v3


def openapi_v3(path: str, resources: dict[str, Resource]) -> dict[str, Any] | None:
    """Return `/openapi/v3` (the index) or one group/version document, or None."""
    documents = _openapi_documents(resources.values())
    if path == "/openapi/v3":
        return {
            "paths": {
                key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(json.dumps(doc))}"}
                for key, doc in documents.items()
            }
        }
    return documents.get(path.removeprefix("/openapi/v3/"))


def _openapi_documents(resources: Iterable[Resource]) -> dict[str, dict[str, Any]]:
    documents: dict[str, dict[str, Any]] = {}
    for res in resources:
        for version in _served(res):
            prefix = f"apis/{res.group}/{version}" if res.group else f"api/{version}"
            doc = documents.setdefault(
                prefix,
                {
                    "openapi": "3.0.0",
                    "info": {"title": "Kubernetes", "version": "v1.36.2"},
                    "paths": {},
                },
            )
            scope = "namespaces/{namespace}/" if res.namespaced else ""
            doc["paths"][f"/{prefix}/{scope}{res.plural}/{{name}}"] = {
                "patch": _patch_op(res, version)
            }
    return documents


def _patch_op(res: Resource, version: str) -> dict[str, Any]:
    return {
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "version": version,
            "kind": res.kind,
        },
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _PATCH_PARAMETERS
        ],
    }


def _hash(text: str) -> str:
    return hashlib.sha512(text.encode()).hexdigest().upper()
