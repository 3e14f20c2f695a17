"""One shared watch per resource, namespace and study: list, then watch, and never miss an end.

Split the anyio/lightkube way: ``Cache`` is pure (it applies events and relists, and says
what changed), ``Informer`` does the I/O (list, watch from the list's resourceVersion with
bookmarks, resume after a drop from the last resourceVersion seen, relist after 410 Gone).
A relist is diffed against the cache, so objects deleted while the watch was down come
out as deletions, and an event already seen (same resourceVersion) is never passed on
twice. Objects are slimmed to the fields ``judge`` reads, so 10,000 steps stay small.
``wait_deleted`` watches one object for its deletion, for a caller without an informer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..errors import ApiError, Gone, NotFound
from .client import Kind, KubeClient

__all__ = ["Cache", "Change", "Informer", "events", "slim", "wait_deleted"]

log = logging.getLogger("k8sjobs.kube")

Obj = dict[str, Any]

_KEEP_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
)
_KEEP_LABELS = (
    "k8sjobs.io/spec-hash",
    "k8sjobs.io/step",
    "kueue.x-k8s.io/queue-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
_KEEP_ANNOTATIONS = ("k8sjobs.io/step-name", "k8sjobs.io/study-name", "k8sjobs.io/outputs")


@dataclass(frozen=True)
class Change:
    """One object that changed: its name and its new body (None once deleted)."""

    name: str
    obj: Obj | None


def slim(obj: Mapping[str, Any]) -> Obj:
    """Return the parts of a Job or Pod that k8sjobs reads (no managedFields, no pod spec)."""
    meta = obj.get("metadata") or {}
    kept: Obj = {k: meta[k] for k in _KEEP_META if k in meta}
    labels = meta.get("labels") or {}
    kept["labels"] = {k: labels[k] for k in _KEEP_LABELS if k in labels}
    annotations = meta.get("annotations") or {}
    kept["annotations"] = {k: annotations[k] for k in _KEEP_ANNOTATIONS if k in annotations}
    owners = meta.get("ownerReferences") or []
    kept["ownerReferences"] = [{"kind": o.get("kind"), "name": o.get("name")} for o in owners]
    spec = obj.get("spec") or {}
    return {
        "metadata": kept,
        "spec": {"suspend": spec.get("suspend")},
        "status": obj.get("status") or {},
    }


class Cache:
    """The latest body of every object a watch reported, by name (pure, no I/O)."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.resource_version = ""

    def apply(self, kind: str, obj: Mapping[str, Any]) -> Change | None:
        """Apply one watch event; return the change, or None if it was already seen."""
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return None
        name = str(meta.get("name", ""))
        if kind == "DELETED":
            return Change(name, None) if self.objects.pop(name, None) is not None else None
        current = self.objects.get(name)
        if current is not None and current["metadata"].get("resourceVersion") == version:
            return None
        self.objects[name] = body = slim(obj)
        return Change(name, body)

    def replace(self, items: Iterable[Mapping[str, Any]], resource_version: str) -> list[Change]:
        """Take a full relist; return what differs, deletions included."""
        fresh = {str(i["metadata"]["name"]): i for i in items}
        changes = [Change(name, None) for name in self.objects if name not in fresh]
        for name in [c.name for c in changes]:
            del self.objects[name]
        for item in fresh.values():
            change = self.apply("MODIFIED", item)
            if change is not None:
                changes.append(change)
        self.resource_version = resource_version
        return changes


class Informer:
    """Keeps a ``Cache`` of one kind of object current and reports every change.

    ``on_change`` is called with each ``Change`` in order, from the informer's task.
    ``synced`` is set once the first list has been applied.
    """

    def __init__(
        self,
        client: KubeClient,
        kind: Kind,
        namespace: str,
        selector: str,
        on_change: Callable[[Change], None],
        *,
        watch_timeout: int = 300,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.cache = Cache()
        self.synced = asyncio.Event()
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self.relists = 0
        self.reconnects = 0

    async def run(self) -> None:
        """List and watch until cancelled, resuming after every drop."""
        failures = 0
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
                failures = 0
            except Gone:
                log.info("%s watch: history compacted (410); relisting", self.kind.plural)
                need_list = True
                continue
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                if not self.synced.is_set() and _fatal(exc):
                    raise  # no point in retrying a refusal before anything was seen
                failures += 1
                log.info("%s watch dropped (%s); resuming", self.kind.plural, type(exc).__name__)
                await asyncio.sleep(_backoff(failures))
            self.reconnects += 1

    async def _list(self) -> None:
        found = await self.client.list_all(self.kind, self.namespace, self.selector)
        items, version = found["items"], found["metadata"]["resourceVersion"]
        self.relists += 1
        for change in self.cache.replace(items, version):
            self._on_change(change)
        self.synced.set()

    async def _watch(self) -> None:
        params = {
            "allowWatchBookmarks": "true",
            "resourceVersion": self.cache.resource_version,
            "timeoutSeconds": str(self._watch_timeout + random.randint(0, 30)),
        }
        if self.selector:
            params["labelSelector"] = self.selector
        async for kind, obj in events(self.client, self.kind, self.namespace, params):
            change = self.cache.apply(kind, obj)
            if change is not None:
                self._on_change(change)


async def events(
    client: KubeClient, kind: Kind, namespace: str, params: Mapping[str, str]
) -> AsyncIterator[tuple[str, Obj]]:
    """Yield (type, object) for each event of one watch request, until the server ends it.

    An ERROR event is raised: Gone for 410 (the history from that resourceVersion was
    compacted), ApiError otherwise.
    """
    what = f'watch {kind.plural} in namespace "{namespace}"'
    query = {**params, "watch": "true"}
    lines = client.stream_lines(kind.path(namespace), query, what=what, kind=kind, verb="watch")
    async for line in lines:
        event = json.loads(line)
        event_type = str(event.get("type"))
        obj = event.get("object") or {}
        if event_type == "ERROR":
            code = int(obj.get("code") or 0)
            raise Gone(410, obj) if code == 410 else ApiError(code or 500, obj, what=what)
        yield event_type, obj


async def wait_deleted(
    client: KubeClient, kind: Kind, namespace: str, name: str, *, timeout: float
) -> None:
    """Return once the object ``name`` no longer exists (``kubectl wait --for=delete``).

    One GET, then a watch of that one name from the GET's resourceVersion: no polling. A
    dropped or expired watch starts over with a GET. Raises TimeoutError after ``timeout``.
    """
    failures = 0
    async with asyncio.timeout(timeout):
        while True:
            try:
                obj = await client.get(kind, namespace, name)
            except NotFound:
                return
            params = {
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": str(obj["metadata"].get("resourceVersion") or ""),
                "timeoutSeconds": str(max(1, math.ceil(timeout))),
            }
            try:
                async for event_type, _ in events(client, kind, namespace, params):
                    if event_type == "DELETED":
                        return
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                # (A TimeoutError in here is the stream's idle limit: the bound below
                # arrives as a cancellation, turned into TimeoutError on leaving it.)
                failures += 1
                log.info("watch for the deletion of %s dropped (%s)", name, type(exc).__name__)
                await asyncio.sleep(_backoff(failures))


def _fatal(exc: Exception) -> bool:
    """Return whether ``exc`` is a refusal that retrying cannot cure (401, 403, 404)."""
    return isinstance(exc, ApiError) and exc.status in (401, 403, 404)


def _backoff(failures: int) -> float:
    """Return the wait before reconnect number ``failures``: exponential, jittered, capped."""
    cap = min(5.0, 0.05 * 2**failures)
    return random.uniform(cap / 2, cap)
