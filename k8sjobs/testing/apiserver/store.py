"""The fake cluster's object store: etcd plus the API server's registry semantics.

One global resourceVersion counter orders every write, as etcd's revision does. Objects are
kept by (resource, namespace, name) with indexes by uid and by owner uid, so that no request
scans every object. Each write becomes an `Event` kept in a bounded history window (older
resourceVersions answer 410 Gone) and is fanned out to watchers through per-watcher bounded
buffers: a watcher that falls too far behind is closed, the way a real server ends a slow
watch, and writers never wait. In-process controllers subscribe through `listen`.

Stored objects are never mutated in place: every write stores a fresh dict, so readers (the
HTTP layer, controllers) may keep references without copying.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import datetime as _dt
import json
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import errors as _errors
from .resources import RESOURCES, Resource, Validator, apply_defaults

Obj = dict[str, Any]
Key = tuple[str, str, str]

_intern = sys.intern
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL_PHASES = ("Succeeded", "Failed")


def now_rfc3339(offset: float = 0.0) -> str:
    """Return the current UTC time (plus `offset` seconds) as Kubernetes writes it."""
    moment = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=offset)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_obj(obj: Obj) -> Obj:
    """Return a deep copy of a JSON-shaped object, its keys and strings interned.

    A decoded request has its own copy of every key and of each repeated value ("Never",
    "True", an image name): interned, 100,000 stored Jobs and pods share them (a third of an
    object's size). The walk is also twice as fast as a JSON round trip.
    """
    copied: Obj = _copy_value(obj)
    return copied


def _copy_value(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {_intern(k): _copy_value(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_copy_value(v) for v in value]
    if kind is str:
        return _intern(value)
    return value


@dataclass
class Event:
    """One change to one object, as a watcher sees it."""

    rv: int
    type: str
    resource: str
    namespace: str
    obj: Obj
    _line: bytes | None = None
    # Watchers that queued this event and have not sent it yet: the line is kept only while
    # one of them still needs it, so the history window does not hold every line sent.
    _holders: int = 0

    def line(self) -> bytes:
        """Return the watch-stream line for this event, serialised once for every watcher."""
        if self._line is None:
            self._line = json.dumps({"type": self.type, "object": self.obj}).encode() + b"\n"
        return self._line

    def sent(self) -> None:
        """Note that one watcher that queued this event has sent it."""
        self._holders -= 1
        if self._holders <= 0:
            self._line = None


@dataclass(eq=False)
class Watcher:
    """One open watch: its filter and the bounded buffer of events not yet sent."""

    resource: str
    namespace: str | None
    matches: Callable[[Obj], bool]
    limit: int
    pending: collections.deque[Event] = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    close_reason: str = ""
    silenced: bool = False
    # How the HTTP layer writes an event, when not as its shared JSON line (Table watches).
    encode: Callable[[Event], bytes] | None = None

    def offer(self, event: Event) -> None:
        """Queue `event`, or close this watcher when it has fallen too far behind."""
        if self.closed or self.silenced:
            return
        if len(self.pending) >= self.limit:
            self.close("watcher too slow")
            return
        event._holders += 1
        self.pending.append(event)
        self.wakeup.set()

    def close(self, reason: str = "closed") -> None:
        """End this watch; the HTTP layer finishes the stream once the buffer is drained."""
        self.closed = True
        self.close_reason = reason
        self.wakeup.set()


class Store:
    """All objects of the fake cluster, with Kubernetes write semantics and watch fan-out."""

    def __init__(
        self,
        *,
        history: int = 50_000,
        watch_buffer: int = 20_000,
        validator: Validator | None = None,
    ) -> None:
        self.rv = 1
        # Built-in kinds plus those CustomResourceDefinitions add at run time.
        self.resources: dict[str, Resource] = dict(RESOURCES)
        self.validator = validator or Validator()
        self.watch_buffer = watch_buffer
        self._objects: dict[tuple[str, str], dict[str, Obj]] = collections.defaultdict(dict)
        # The names of each bucket, kept sorted: a page of a paged list starts by bisection,
        # where sorting and walking every object for each page made a list of 100,000
        # objects in pages of 500 quadratic.
        self._names: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
        self._by_uid: dict[str, Key] = {}
        self._dependents: dict[str, set[Key]] = collections.defaultdict(set)
        self._history: collections.deque[Event] = collections.deque(maxlen=history)
        self._floor = 0
        self._silent_through = 0
        self._watchers: dict[str, set[Watcher]] = collections.defaultdict(set)
        self._listeners: list[Callable[[Event], None]] = []
        self._pending_gc: set[str] = set()
        self._orphaning: set[str] = set()
        #: Admission plugins run on every create, in order (see `_admission.AdmissionPlugin`).
        self.admission: list[Any] = []

    # ------------------------------------------------------------------ reads

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Return the stored object, or None."""
        return self._objects[(resource, namespace)].get(name)

    def require(self, resource: str, namespace: str, name: str) -> Obj:
        """Return the stored object or raise 404 NotFound."""
        obj = self.get(resource, namespace, name)
        if obj is None:
            res = self.resources[resource]
            raise _errors.not_found(resource, name, res.group)
        return obj

    def by_uid(self, uid: str) -> Obj | None:
        """Return the object with this uid, or None."""
        key = self._by_uid.get(uid)
        return self.get(*key) if key else None

    def dependents(self, owner_uid: str) -> list[Obj]:
        """Return the objects whose ownerReferences name `owner_uid`."""
        found = (self.get(*key) for key in self._dependents.get(owner_uid, ()))
        return [obj for obj in found if obj is not None]

    def iter(self, resource: str, namespace: str | None = None, after: str = "") -> Iterator[Obj]:
        """Yield the objects of `resource`, in one namespace or in all, sorted by key; in one
        namespace, only those named after `after` (found by bisection: a page of a paged
        list costs its own objects, not all before it)."""
        buckets = (
            [namespace]
            if namespace is not None
            else sorted(ns for res, ns in self._objects if res == resource)
        )
        for ns in buckets:
            bucket = self._objects.get((resource, ns), {})
            names = self._names.get((resource, ns), [])
            yield from (bucket[n] for n in names[bisect.bisect_right(names, after) :])

    def count_after(self, resource: str, namespace: str, after: str) -> int:
        """Return how many objects of `resource` in `namespace` are named after `after`."""
        names = self._names.get((resource, namespace), [])
        return len(names) - bisect.bisect_right(names, after)

    def count(self, resource: str) -> int:
        """Return how many objects of `resource` exist."""
        return sum(len(v) for (res, _), v in self._objects.items() if res == resource)

    @property
    def floor(self) -> int:
        """Return the oldest resourceVersion a watch may still start from."""
        return self._floor

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        resource: str,
        namespace: str | None,
        matches: Callable[[Obj], bool],
        since: int | None,
    ) -> Watcher:
        """Open a watch; `since=None` first replays the current objects as ADDED events."""
        # A watch from the current version has nothing to replay, so history is not needed.
        if since is not None and since < self._floor and since != self.rv:
            raise _errors.gone(f"too old resource version: {since} ({self._floor + 1})")
        replay: list[Event] = []
        if since is None:
            for obj in self.iter(resource, namespace):
                if matches(obj):
                    rv = int(obj["metadata"]["resourceVersion"])
                    ns = obj["metadata"].get("namespace", "")
                    replay.append(Event(rv, "ADDED", resource, ns, obj))
        else:
            replay = [
                e
                for e in self._history
                if e.rv > since
                and e.resource == resource
                and (namespace is None or e.namespace == namespace)
                and matches(e.obj)
            ]
        watcher = Watcher(resource, namespace, matches, self.watch_buffer + len(replay))
        if since is not None and since <= self._silent_through:
            watcher.silenced = True
        else:
            for event in replay:
                event._holders += 1
            watcher.pending.extend(replay)
        self._watchers[resource].add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        """Forget a watcher whose stream has ended."""
        self._watchers[watcher.resource].discard(watcher)

    def watcher_count(self) -> int:
        """Return how many watches are open."""
        return sum(len(w) for w in self._watchers.values())

    def drop_watches(self) -> int:
        """End every open watch now, as an API server restart would; return how many."""
        dropped = 0
        for watchers in self._watchers.values():
            for watcher in list(watchers):
                watcher.close("dropped")
                dropped += 1
            watchers.clear()
        return dropped

    def silence_watches(self, *, resumed: bool = False) -> int:
        """Make every open watch deliver nothing more, bookmarks included; return how many.

        The streams stay open (until `drop_watches` or their timeout) while objects keep
        changing: what a client sees of an API server that stopped feeding its watches.
        With `resumed`, a later watch from a resourceVersion at or before this moment is
        silent too: only a watch from a fresh list's version gets events.
        """
        if resumed:
            self._silent_through = self.rv
        silenced = 0
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.silenced = True
                watcher.pending.clear()
                silenced += 1
        return silenced

    def compact(self) -> None:
        """Forget the whole history: every resourceVersion handed out so far now gets 410."""
        self._history.clear()
        self._floor = self.rv + 1

    def listen(self, callback: Callable[[Event], None]) -> None:
        """Call `callback` synchronously after every write (for in-process controllers)."""
        self._listeners.append(callback)

    # ------------------------------------------------------------------ writes

    def create(
        self,
        resource: str,
        namespace: str,
        obj: Obj,
        *,
        validate: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        """Store a new object with server-set metadata and defaults; return it.

        `dry_run` does everything but store it: no resourceVersion, no event.
        """
        res = self.resources[resource]
        obj = copy_obj(obj)  # also interns its strings, shared by every stored object
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.setdefault("metadata", {})
        if res.namespaced:  # admission (NamespaceLifecycle) comes before naming and validation
            self._require_namespace(namespace, res, obj)
        for plugin in self.admission:  # mutating admission: the object has no name yet
            plugin.mutate(res, namespace, obj)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(resource, namespace, meta["generateName"])
        if res.hooks is not None:
            res.hooks.prepare(obj, None)
            meta = obj["metadata"]
        if validate:
            self.validator.validate_create(res, obj)
        for plugin in self.admission:  # validating admission: named, validated, not stored
            plugin.validate(res, namespace, obj)
        name = meta["name"]
        found = self.get(resource, namespace, name)
        if found is not None:
            error = _errors.already_exists(resource, name, res.group)
            if found["metadata"].get("deletionTimestamp"):  # as the apiserver's registry says
                message = f"object is being deleted: {error.message}"
                error = _errors.ApiError(409, error.reason, message, error.details)
            raise error
        uid = str(uuid.uuid4())
        obj = self._with_server_metadata(res, obj, namespace, uid)
        apply_defaults(res, obj, uid)
        if dry_run:
            del obj["metadata"]["resourceVersion"]
            return obj
        return self._put(res, namespace, obj, "ADDED")

    def update(
        self,
        resource: str,
        namespace: str,
        obj: Obj,
        *,
        subresource: str = "",
        validate: bool = True,
        dry_run: bool = False,
        owned: bool = False,
    ) -> Obj:
        """Replace an object, enforcing optimistic concurrency; return the stored object.

        A main-resource update keeps the old status and a status update keeps everything
        but the status, as the real registry does. A no-op write does not bump the
        resourceVersion and emits no event. `subresource="*"` (in-process only) replaces spec
        and status at once, as a scheduler's binding plus status write would. `dry_run`
        validates and returns what would be stored, storing nothing. `owned`: the caller does
        not touch `obj` again; its nested values may be shared with stored objects (never
        mutated in place), so only what the store changes is copied, not the whole object.
        """
        res = self.resources[resource]
        name = obj.get("metadata", {}).get("name", "")
        old = self.require(resource, namespace, name)
        sent_rv = obj.get("metadata", {}).get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise _errors.conflict(resource, name, res.group)
        new = self._merge_update(res, old, _taken(obj, subresource, owned), subresource)
        if res.hooks is not None:
            res.hooks.prepare(new, old)
        # Status writes skip validation, except a custom kind's: its schema covers status too.
        if validate and (subresource != "status" or res.hooks is not None):
            self.validator.validate_update(res, old, new)
        if new == old:
            return old
        if res.has_generation and subresource != "*" and _spec_changed(res, old, new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if dry_run:
            return new
        meta = new["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return self._remove(res, namespace, new)
        return self._put(res, namespace, new, "MODIFIED")

    def delete(
        self,
        resource: str,
        namespace: str,
        name: str,
        *,
        grace_seconds: int | None = None,
        propagation: str | None = None,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete (or start deleting) an object; return it and whether it is gone now.

        `dry_run` checks the preconditions and returns what the deletion would answer.
        """
        res = self.resources[resource]
        obj = self.require(resource, namespace, name)
        meta = obj["metadata"]
        if precondition_uid and precondition_uid != meta["uid"]:
            raise _errors.conflict(resource, name, res.group)
        if precondition_rv and precondition_rv != meta["resourceVersion"]:
            raise _errors.conflict(resource, name, res.group)
        if dry_run:
            return self._deletion_preview(res, obj, grace_seconds)
        if resource == "namespaces":
            return self._terminate_namespace(obj), False
        propagation = propagation or ("Orphan" if resource == "jobs" else "Background")
        if propagation == "Orphan":
            self._orphan_dependents(meta["uid"])
        grace = self._grace_seconds(res, obj, grace_seconds)
        finalizers = list(meta.get("finalizers") or [])
        if propagation == "Foreground" and self.dependents(meta["uid"]):
            finalizers = (
                [*finalizers, "foregroundDeletion"]
                if ("foregroundDeletion" not in finalizers)
                else finalizers
            )
            self._pending_gc.add(meta["uid"])
            asyncio.get_running_loop().call_soon(self._collect, meta["uid"], "Background")
        if grace > 0 or finalizers:
            return self._mark_deleting(res, namespace, obj, grace, finalizers), False
        return self._remove(res, namespace, obj, propagation), True

    def close_watches(self, resource: str) -> None:
        """End every watch of `resource` (its CustomResourceDefinition is gone)."""
        for watcher in self._watchers.pop(resource, set()):
            watcher.close("resource removed")

    def namespace_contents(self, namespace: str) -> list[tuple[str, Obj]]:
        """Return (resource, object) for everything stored in `namespace`."""
        return [
            (resource, obj)
            for (resource, ns), bucket in self._objects.items()
            if ns == namespace and namespace
            for obj in bucket.values()
        ]

    def finalize_namespace(self, name: str) -> None:
        """Remove a Terminating namespace for good (its content must be gone)."""
        ns = self.get("namespaces", "", name)
        if ns is not None:
            self._remove(self.resources["namespaces"], "", ns)

    # ------------------------------------------------------------------ internals

    def _deletion_preview(
        self, res: Resource, obj: Obj, grace_seconds: int | None
    ) -> tuple[Obj, bool]:
        grace = self._grace_seconds(res, obj, grace_seconds)
        if grace == 0 and not obj["metadata"].get("finalizers"):
            return obj, True
        meta = dict(obj["metadata"])
        meta.setdefault("deletionTimestamp", now_rfc3339(grace))
        meta.setdefault("deletionGracePeriodSeconds", grace)
        return dict(obj, metadata=meta), False

    def _terminate_namespace(self, ns: Obj) -> Obj:
        """Mark a namespace Terminating; the namespace controller empties and removes it."""
        if ns["metadata"].get("deletionTimestamp"):
            return ns
        new = dict(ns)
        new["metadata"] = dict(ns["metadata"], deletionTimestamp=now_rfc3339())
        ordered = {k: new["metadata"][k] for k in _META_ORDER if k in new["metadata"]}
        ordered.update({k: v for k, v in new["metadata"].items() if k not in ordered})
        new["metadata"] = ordered
        new["status"] = dict(ns.get("status") or {}, phase="Terminating")
        return self._put(self.resources["namespaces"], "", new, "MODIFIED")

    def _require_namespace(self, namespace: str, res: Resource, obj: Obj) -> None:
        ns = self.get("namespaces", "", namespace)
        if ns is None:
            raise _errors.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            meta = obj.get("metadata") or {}
            # Admission runs before the name is generated: it names the prefix.
            name = meta.get("name") or meta.get("generateName") or "Unknown"
            raise _errors.namespace_terminating(res.plural, name, namespace, res.group)

    def _generate_name(self, resource: str, namespace: str, prefix: str) -> str:
        for _ in range(16):
            suffix = "".join(random.choices(_NAME_SUFFIX_ALPHABET, k=5))
            if self.get(resource, namespace, prefix + suffix) is None:
                return prefix + suffix
        return prefix + uuid.uuid4().hex[:10]

    def _with_server_metadata(self, res: Resource, obj: Obj, namespace: str, uid: str) -> Obj:
        given = obj["metadata"]
        meta: Obj = {"name": given["name"]}
        if "generateName" in given:
            meta["generateName"] = given["generateName"]
        if res.namespaced:
            meta["namespace"] = namespace
        meta["uid"] = uid
        meta["resourceVersion"] = ""
        if res.has_generation:
            meta["generation"] = 1
        meta["creationTimestamp"] = now_rfc3339()
        for key in ("labels", "annotations", "ownerReferences", "finalizers", "managedFields"):
            if given.get(key):
                meta[key] = given[key]
        obj = {
            "kind": res.kind,
            "apiVersion": res.api_version,
            "metadata": meta,
            **{k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "metadata")},
        }
        return obj

    def _merge_update(self, res: Resource, old: Obj, new: Obj, subresource: str) -> Obj:
        old_meta = old["metadata"]
        if subresource == "status":
            merged = dict(old)
            merged["metadata"] = dict(old_meta)
            merged["status"] = new.get("status", {})
            if "managedFields" in new.get("metadata", {}):  # a status write's own field owners
                merged["metadata"]["managedFields"] = new["metadata"]["managedFields"]
            return merged
        meta = new.setdefault("metadata", {})
        for key in (
            "uid",
            "creationTimestamp",
            "namespace",
            "generateName",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        for key in list(meta):
            if meta[key] in (None, {}, []) and key not in old_meta:
                del meta[key]
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        if res.has_status and "status" in old and subresource != "*":
            new["status"] = old["status"]
        ordered = {k: meta[k] for k in _META_ORDER if k in meta}
        ordered.update({k: v for k, v in meta.items() if k not in ordered})
        new["metadata"] = ordered
        return new

    def _grace_seconds(self, res: Resource, obj: Obj, requested: int | None) -> int:
        if res.plural != "pods":
            return 0
        if not obj["spec"].get("nodeName") or obj["status"].get("phase") in _TERMINAL_PHASES:
            return 0
        if requested is not None:
            return max(requested, 0)
        return int(obj["spec"].get("terminationGracePeriodSeconds", 30))

    def _mark_deleting(
        self, res: Resource, namespace: str, obj: Obj, grace: int, finalizers: list[str]
    ) -> Obj:
        meta = obj["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        unchanged = finalizers == meta.get("finalizers", [])
        if meta.get("deletionTimestamp") and (current is None or current <= grace) and unchanged:
            return obj
        new = dict(obj)
        new_meta = dict(meta)
        new_meta["deletionTimestamp"] = now_rfc3339(grace)
        new_meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            new_meta["finalizers"] = finalizers
        if res.has_generation:
            new_meta["generation"] = meta.get("generation", 1) + 1
        new["metadata"] = {k: new_meta[k] for k in _META_ORDER if k in new_meta}
        new["metadata"].update({k: v for k, v in new_meta.items() if k not in new["metadata"]})
        if grace == 0 and not finalizers:
            return self._remove(res, namespace, new)
        return self._put(res, namespace, new, "MODIFIED")

    def _put(self, res: Resource, namespace: str, obj: Obj, kind: str) -> Obj:
        _sort_maps(obj)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        name = obj["metadata"]["name"]
        old = self._objects[(res.plural, namespace)].get(name)
        self._objects[(res.plural, namespace)][name] = obj
        if old is None:
            bisect.insort(self._names[(res.plural, namespace)], name)
        key = (res.plural, namespace, name)
        self._by_uid[obj["metadata"]["uid"]] = key
        self._index_owners(key, old, obj)
        self._emit(Event(self.rv, kind, res.plural, namespace, obj))
        refs = obj["metadata"].get("ownerReferences")
        if refs and old is None and all(self.by_uid(r.get("uid", "")) is None for r in refs):
            # Created naming only owners that are gone: the garbage collector deletes it,
            # as it does a dependent whose owners go after it (a Job deleted between
            # k8sjobs' create of it and of its ConfigMap).
            with contextlib.suppress(RuntimeError):  # no loop: a store used offline
                asyncio.get_running_loop().call_soon(self._collect_dangling, key, refs)
        return obj

    def _collect_dangling(self, key: Key, refs: list[Obj]) -> None:
        obj = self.get(*key)
        if obj is None or obj["metadata"].get("ownerReferences") != refs:
            return
        if any(self.by_uid(r.get("uid", "")) is not None for r in refs):
            return
        with contextlib.suppress(_errors.ApiError):
            self.delete(*key, propagation="Background")

    def _remove(
        self, res: Resource, namespace: str, obj: Obj, propagation: str = "Background"
    ) -> Obj:
        self.rv += 1
        obj = dict(obj)
        obj["metadata"] = dict(obj["metadata"], resourceVersion=str(self.rv))
        name = obj["metadata"]["name"]
        if self._objects[(res.plural, namespace)].pop(name, None) is not None:
            names = self._names[(res.plural, namespace)]
            del names[bisect.bisect_left(names, name)]
        uid = obj["metadata"]["uid"]
        self._by_uid.pop(uid, None)
        self._index_owners((res.plural, namespace, name), obj, None)
        self._emit(Event(self.rv, "DELETED", res.plural, namespace, obj))
        if res.plural == "namespaces":
            self._empty_namespace(name)
        if self._dependents.get(uid):
            # Background propagation: the garbage collector removes dependents after the owner.
            asyncio.get_running_loop().call_soon(self._collect, uid, propagation)
        return obj

    def _index_owners(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            for ref in (obj or {}).get("metadata", {}).get("ownerReferences", []) or []:
                if add:
                    self._dependents[ref["uid"]].add(key)
                else:
                    self._dependents[ref["uid"]].discard(key)
                    if not self._dependents[ref["uid"]]:
                        del self._dependents[ref["uid"]]

    def _emit(self, event: Event) -> None:
        self._history.append(event)
        if len(self._history) == self._history.maxlen:
            self._floor = max(self._floor, self._history[0].rv - 1)
        for watcher in self._watchers.get(event.resource, ()):
            if watcher.namespace not in (None, event.namespace):
                continue
            if watcher.matches(event.obj):
                watcher.offer(event)
        for watcher in [w for w in self._watchers.get(event.resource, ()) if w.closed]:
            self._watchers[event.resource].discard(watcher)
        for listener in self._listeners:
            listener(event)

    def _collect(self, owner_uid: str, propagation: str) -> None:
        """Garbage-collect the dependents of an owner that is gone or being foreground-deleted."""
        owner = self.by_uid(owner_uid)
        for dependent in self.dependents(owner_uid):
            meta = dependent["metadata"]
            live_owners = [
                r
                for r in meta.get("ownerReferences", [])
                if r["uid"] != owner_uid and self.by_uid(r["uid"]) is not None
            ]
            if live_owners or meta.get("deletionTimestamp"):
                continue
            res = self.resources[self._by_uid[meta["uid"]][0]]
            ns = meta.get("namespace", "")
            try:
                self.delete(res.plural, ns, meta["name"], propagation=propagation)
            except _errors.ApiError:
                continue
        if owner is not None and owner_uid in self._pending_gc:
            self._finish_foreground(owner)

    def _finish_foreground(self, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        if self.dependents(uid):
            asyncio.get_running_loop().call_later(0.05, self._collect, uid, "Background")
            return
        self._pending_gc.discard(uid)
        finalizers = [
            f for f in owner["metadata"].get("finalizers", []) if f != "foregroundDeletion"
        ]
        res = self.resources[self._by_uid[uid][0]]
        updated = dict(owner)
        updated["metadata"] = dict(owner["metadata"], finalizers=finalizers)
        if not finalizers:
            del updated["metadata"]["finalizers"]
        self.update(res.plural, owner["metadata"].get("namespace", ""), updated, validate=False)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dependent in self.dependents(owner_uid):
            meta = dependent["metadata"]
            refs = [r for r in meta.get("ownerReferences", []) if r["uid"] != owner_uid]
            updated = dict(dependent)
            updated["metadata"] = dict(meta, ownerReferences=refs)
            if not refs:
                del updated["metadata"]["ownerReferences"]
            res = self.resources[self._by_uid[meta["uid"]][0]]
            self.update(res.plural, meta.get("namespace", ""), updated, validate=False)

    def _empty_namespace(self, namespace: str) -> None:
        for (resource, ns), bucket in list(self._objects.items()):
            if ns != namespace:
                continue
            for name in list(bucket):
                obj = bucket.get(name)
                if obj is None:
                    continue
                self._remove(self.resources[resource], ns, obj)


def _taken(obj: Obj, subresource: str, owned: bool) -> Obj:
    """Return what an update keeps of `obj`: a status write only its status (and field owners).

    An owned object's nested values are kept as they are: only its top level and metadata,
    which `Store._merge_update` changes, are copied. Anything else is deep-copied, as the
    caller may change it later.
    """
    if subresource == "status":
        meta = obj.get("metadata") or {}
        part: Obj = {"status": obj.get("status", {})}
        if "managedFields" in meta:
            part["metadata"] = {"managedFields": meta["managedFields"]}
        return part if owned else copy_obj(part)
    if owned:
        return {**obj, "metadata": dict(obj.get("metadata") or {})}
    return copy_obj(obj)


def _spec_changed(res: Resource, old: Obj, new: Obj) -> bool:
    """Return whether a write changes what `metadata.generation` counts (the spec)."""
    if res.hooks is None:
        return new.get("spec") != old.get("spec")
    # A custom kind counts every field but metadata (and status when it is a subresource).
    ignored = ("metadata", "status") if res.has_status else ("metadata",)
    return any(new.get(k) != old.get(k) for k in new.keys() | old.keys() if k not in ignored)


def _sort_maps(obj: Obj) -> None:
    """Sort string maps by key, as Go's JSON encoder writes them."""
    meta = obj["metadata"]
    for key in ("labels", "annotations"):
        if meta.get(key):
            meta[key] = dict(sorted(meta[key].items()))
    for key in ("data", "binaryData", "stringData"):
        if isinstance(obj.get(key), dict):
            obj[key] = dict(sorted(obj[key].items()))


_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
)
