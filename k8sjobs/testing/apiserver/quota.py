"""ResourceQuota: the admission plugin that refuses what would exceed a namespace's quota, and
the controller that keeps each quota's `status.used`, as in kube-apiserver and
kube-controller-manager v1.36.

Counted: `pods` and `count/pods` (pods not Succeeded or Failed), `cpu`/`requests.cpu`,
`memory`/`requests.memory`, `limits.cpu`, `limits.memory`, ephemeral storage and extended
resources as `requests.<name>` (a pod's requests as the scheduler sums them), and object
counts: `configmaps`, `secrets`, `services`, `resourcequotas` and `count/<resource>[.<group>]`
for every kind served. Quota scopes and scope selectors are not modelled.

Usage is kept per namespace only where a quota exists, updated from each write (a pod's
contribution is added once and removed when it ends or goes), so a quota costs O(1) per
write, not a walk of the namespace. `status.used` is written after the write that changed it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from fractions import Fraction
from typing import Any

from . import errors as _errors
from .podresources import ZERO, Quantity, Resources, container_resources, pod_resources
from .resources import Resource
from .store import Event, Obj, Store

_TERMINAL = ("Succeeded", "Failed")
# The resources whose quota makes every container state a value (the pod evaluator's
# backward-compatible rule: "must specify").
_MUST_SPECIFY = ("cpu", "limits.cpu", "limits.memory", "memory", "requests.cpu", "requests.memory")
_LEGACY_COUNTS = ("configmaps", "secrets", "services", "resourcequotas", "pods")
_POD_BASICS = {"cpu", "memory", "ephemeral-storage"}


def object_usage(res: Resource, obj: Obj) -> Resources:
    """Return what one object counts against a quota (empty: nothing, e.g. an ended pod)."""
    one = Quantity(Fraction(1))
    name = f"count/{res.plural}.{res.group}" if res.group else f"count/{res.plural}"
    usage: Resources = {name: one}
    if not res.group and res.plural in _LEGACY_COUNTS:
        usage[res.plural] = one
    if res.plural == "pods" and not res.group:
        if (obj.get("status") or {}).get("phase") in _TERMINAL:
            return {}
        usage.update(_pod_compute(obj.get("spec") or {}))
    return usage


def _pod_compute(spec: dict[str, Any]) -> Resources:
    requests, limits = pod_resources(spec)
    usage: Resources = {}
    for name, quantity in requests.items():
        if name in _POD_BASICS:
            usage[name] = quantity
        if name in _POD_BASICS or "/" in name or name.startswith("hugepages-"):
            usage[f"requests.{name}"] = quantity
    for name, quantity in limits.items():
        if name in _POD_BASICS:
            usage[f"limits.{name}"] = quantity
    return usage


def _missing(spec: dict[str, Any], hard: set[str]) -> str:
    """Return the pod evaluator's "must specify ..." for containers lacking a quota'd value."""
    required = hard & set(_MUST_SPECIFY)
    missing: dict[str, set[str]] = collections.defaultdict(set)
    for container in spec.get("containers") or []:
        requests, limits = container_resources(container)
        stated = {f"requests.{n}" for n in requests} | {f"limits.{n}" for n in limits}
        stated |= {n for n in requests if n in ("cpu", "memory")}
        for name in required - stated:
            missing[name].add(str(container.get("name", "")))
    return "; ".join(f"{n} for: {','.join(sorted(missing[n]))}" for n in sorted(missing))


def _pretty(values: Resources) -> str:
    return ",".join(f"{name}={values[name]}" for name in sorted(values))


class QuotaController:
    """Refuses creates over a quota (admission) and keeps each quota's status.used."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # namespace -> uid -> the usage that object counts; and their sum.
        self._counted: dict[str, dict[str, Resources]] = {}
        self._totals: dict[str, dict[str, Quantity]] = {}
        self._dirty: set[str] = set()
        store.listen(self._on_event)

    # ------------------------------------------------------------------ admission

    def mutate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """ResourceQuota changes nothing."""

    def validate(self, res: Resource, namespace: str, obj: Obj) -> None:
        """Refuse `obj` when it would take a namespace's usage past a quota's hard limit."""
        if not res.namespaced or namespace not in self._totals or res.plural == "events":
            return
        usage = object_usage(res, obj)
        used = self._totals[namespace]
        for quota in self._quotas(namespace):
            hard = _hard(quota)
            name = quota["metadata"]["name"]
            if res.plural == "pods" and not res.group:
                missing = _missing(obj.get("spec") or {}, set(hard))
                if missing:
                    raise self._refusal(res, obj, f"failed quota: {name}: must specify {missing}")
            requested = {k: v for k, v in usage.items() if k in hard}
            exceeded = sorted(
                k for k, v in requested.items() if used.get(k, ZERO).value + v.value > hard[k].value
            )
            if exceeded:
                raise self._refusal(
                    res,
                    obj,
                    f"exceeded quota: {name}, "
                    f"requested: {_pretty({k: requested[k] for k in exceeded})}, "
                    f"used: {_pretty({k: _used(used, k, hard[k]) for k in exceeded})}, "
                    f"limited: {_pretty({k: hard[k] for k in exceeded})}",
                )

    @staticmethod
    def _refusal(res: Resource, obj: Obj, why: str) -> _errors.ApiError:
        meta = obj.get("metadata") or {}
        return _errors.forbidden(res.plural, meta.get("name") or "Unknown", why, res.group)

    # ------------------------------------------------------------------ usage

    def _quotas(self, namespace: str) -> list[Obj]:
        return list(self.store.iter("resourcequotas", namespace))

    def _on_event(self, event: Event) -> None:
        namespace = event.namespace
        if event.resource == "resourcequotas":
            self._mark(namespace)
            if namespace not in self._totals:
                self._recount(namespace)  # the first quota: counts itself too
                return
        if namespace not in self._totals or event.resource == "events":
            return
        res = self.store.resources.get(event.resource)
        if res is None:
            return
        uid = event.obj["metadata"]["uid"]
        counted = self._counted[namespace]
        usage = {} if event.type == "DELETED" else object_usage(res, event.obj)
        old = counted.get(uid)
        if old is not None and (not usage or event.resource != "pods"):
            if not usage:
                self._add(namespace, old, -1)
                del counted[uid]
                self._mark(namespace)
            return
        if old is None and usage:
            counted[uid] = usage
            self._add(namespace, usage, 1)
            self._mark(namespace)

    def _recount(self, namespace: str) -> None:
        self._counted[namespace] = {}
        self._totals[namespace] = {}
        for plural, obj in self.store.namespace_contents(namespace):
            res = self.store.resources.get(plural)
            if res is None or plural == "events":
                continue
            usage = object_usage(res, obj)
            if usage:
                self._counted[namespace][obj["metadata"]["uid"]] = usage
                self._add(namespace, usage, 1)

    def _add(self, namespace: str, usage: Resources, sign: int) -> None:
        totals = self._totals[namespace]
        for name, quantity in usage.items():
            current = totals.get(name, Quantity(Fraction(0), quantity.format))
            totals[name] = Quantity(current.value + sign * quantity.value, current.format)

    def _mark(self, namespace: str) -> None:
        if namespace in self._dirty:
            return
        self._dirty.add(namespace)
        try:
            asyncio.get_running_loop().call_soon(self._write_status, namespace)
        except RuntimeError:  # no loop: written now
            self._write_status(namespace)

    def _write_status(self, namespace: str) -> None:
        self._dirty.discard(namespace)
        quotas = self._quotas(namespace)
        if not quotas:
            self._totals.pop(namespace, None)
            self._counted.pop(namespace, None)
            return
        totals = self._totals.get(namespace, {})
        for quota in quotas:
            hard = _hard(quota)
            status = {
                "hard": dict((quota.get("spec") or {}).get("hard") or {}),
                "used": {k: str(_used(totals, k, hard[k])) for k in sorted(hard)},
            }
            if quota.get("status") == status:
                continue
            with contextlib.suppress(_errors.ApiError):  # lost a race: the next write
                self.store.update(
                    "resourcequotas",
                    namespace,
                    {**quota, "status": status},
                    subresource="status",
                    validate=False,
                )


def _hard(quota: Obj) -> dict[str, Quantity]:
    hard: dict[str, Quantity] = {}
    for name, text in ((quota.get("spec") or {}).get("hard") or {}).items():
        try:
            hard[str(name)] = Quantity.parse(text)
        except ValueError:
            continue
    return hard


def _used(totals: dict[str, Quantity], name: str, hard: Quantity) -> Quantity:
    """Return the usage of `name`, printed in the hard limit's format when there is none."""
    used = totals.get(name)
    if used is None or used.value == 0:
        return Quantity(Fraction(0), hard.format)
    return used
