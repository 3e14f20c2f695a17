"""One shared watch per resource, namespace and study: list, then watch, and never miss an end.

Split the anyio/lightkube way: ``Cache`` is pure (it applies events and relists, and says
what changed), ``Informer`` does the I/O (list, watch from the list's resourceVersion with
bookmarks, resume after a drop from the last resourceVersion seen, relist after 410 Gone).
A relist is diffed against the cache, so objects deleted while the watch was down come
out as deletions, and an event already seen (same resourceVersion) is never passed on
twice. Objects are slimmed to the fields ``judge`` reads, so 10,000 steps stay small.
``wait_deleted`` watches one object for its deletion, for a caller without an informer.

A watch cannot go silent unnoticed: a healthy server sends a bookmark about once a minute
on an idle watch (``allowWatchBookmarks``), so a watch with neither event nor bookmark for
``idle`` seconds, or one the server ends cleanly before its ``timeoutSeconds``, is taken
for dead: the informer relists (the diff brings out what it missed) and watches again. A
restarted API server can otherwise accept a resumed watch and never send on it. A slow,
jittered periodic relist catches whatever no signal reveals. ``WatchStats`` counts it all.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import random
import sys
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from ..errors import ApiError, Gone, NotFound
from .client import Kind, KubeClient

__all__ = [
    "CANCELLED_BY",
    "Cache",
    "Change",
    "Informer",
    "WatchStats",
    "events",
    "slim",
    "slim_event",
    "slim_jobset",
    "wait_deleted",
]

log = logging.getLogger("k8sjobs.kube")

Obj = dict[str, Any]

# Why a watch ended, when it calls for a relist rather than a resume from its resourceVersion.
_RELIST_REASONS = ("gone", "silent", "ended early", "periodic")
# A clean end this close to the timeoutSeconds asked for is the server keeping its word.
_EXPIRY_SLACK = 1.0


@dataclass(frozen=True)
class Change:
    """One object that changed: its name, its new body (None once deleted) and the event type.

    ``type`` is ADDED (new to the cache), MODIFIED or DELETED, whether it came from a watch
    event or from diffing a relist against the cache.
    """

    name: str
    obj: Obj | None
    type: str = "MODIFIED"


@dataclass
class WatchStats:
    """How a backend's watches fared, for users and tests to read (counts, by reason).

    ``reconnects``: each new watch request after the first, by why the last one ended:
    "expired" (the server ended it at its timeoutSeconds, the normal case), "error" (the
    connection broke or a request failed; resumed from the last resourceVersion), "gone"
    (410), "silent" (no event and no bookmark for the idle bound), "ended early" (ended
    cleanly before its timeoutSeconds) or "periodic" (the safety-net relist).
    ``relists``: each completed LIST by reason: "initial", then the relisting reasons above.
    """

    reconnects: collections.Counter[str] = field(default_factory=collections.Counter)
    relists: collections.Counter[str] = field(default_factory=collections.Counter)


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
    # An allocation's objects (k8sjobs.render.allocation.LABEL_ALLOCATION): no step's.
    "k8sjobs.io/allocation",
    "kueue.x-k8s.io/queue-name",
    "batch.kubernetes.io/job-name",
    "job-name",
    "batch.kubernetes.io/job-completion-index",
    # A JobSet's child Jobs and pods: whose they are, of which attempt (k8sjobs.jobsetstatus).
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/restart-attempt",
    "jobset.sigs.k8s.io/global-replicas",
)
#: Set by ``cancel`` on a step's Job or JobSet that another driver may be running, just
#: before deleting it: that driver ends the step CANCELLED, not LOST.
CANCELLED_BY = "k8sjobs.io/cancelled-by"
_KEEP_ANNOTATIONS = (
    CANCELLED_BY,
    "k8sjobs.io/step-name",
    "k8sjobs.io/study-name",
    "k8sjobs.io/outputs",
    "k8sjobs.io/failed-outputs",
    "k8sjobs.io/pending-timeout",
    # judge() names the index of a multi-node step's failed pod.
    "batch.kubernetes.io/job-completion-index",
)
# Spec fields read after submission: suspension, and the rules that name a failure's cause.
# nodeName: a pod's node, for observers' k8s.node.name (k8sjobs.observe; no request).
_KEEP_SPEC = ("successPolicy", "podFailurePolicy", "activeDeadlineSeconds", "nodeName")


# Status fields no verdict reads: dropped from the cached copies (a cached pod and Job cost the
# driver ~12 KB a step as decoded, ~5 KB kept; it holds every step's for the whole run).
_DROP_STATUS = frozenset(
    {
        "lastProbeTime",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "qosClass",
        "image",
        "imageID",
        "containerID",
    }
)


def _compact(value: Any, share: bool = True) -> Any:
    """Return ``value`` rebuilt with interned keys and strings, without nulls and the fields
    in ``_DROP_STATUS``: each decoded event has its own copy of every key and of repeated
    values ("True", "Completed", a timestamp), which at 100,000 steps is most of the cache.
    With ``share``, maps of plain values (a condition, a terminated state) are shared, see
    ``_shared``; without, for the maps unique to one object (its metadata, its labels)."""
    if isinstance(value, dict):
        return _compact_map(value, share)
    if isinstance(value, list):
        return [_compact(v, share) for v in value]
    if isinstance(value, str):
        return sys.intern(value)
    return value


def _compact_map(value: Mapping[str, Any], share: bool) -> Obj:
    """``_compact`` of one map. Strings and integers are taken in the loop, not by a call
    each, and whether the map is shareable is learnt while building it: this runs on every
    watch event, and a call per leaf was most of the driver's CPU per event."""
    kept: Obj = {}
    plain = True  # only strings and integers so far: shareable
    intern = sys.intern
    for k, v in value.items():
        if v is None or k in _DROP_STATUS:
            continue
        kind = type(v)
        if kind is str:
            v = intern(v)
        elif kind is not int:
            plain = False
            if isinstance(v, (dict, list, str)):
                v = _compact(v, share)
        kept[intern(k)] = v
    if not share or not plain:
        return kept
    return _shared(kept)


# One copy of each map of plain values the cache holds: steps that changed in the same second
# have equal conditions and states (a pod's five conditions are ~1.5 KB). Cached bodies are
# never changed in place, so sharing is safe; the table is emptied when full (sharing is
# only a saving).
_SHARED: dict[tuple[tuple[str, Any], ...], Obj] = {}
_SHARED_LIMIT = 1 << 16


def _shared(leaf: Obj) -> Obj:
    """Return the shared copy of ``leaf``, whose values are all strings and integers."""
    key = tuple(leaf.items())
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        _SHARED[key] = found = leaf
    return found


def slim(obj: Mapping[str, Any]) -> Obj:
    """Return the parts of a Job or Pod that k8sjobs reads (no managedFields, no pod spec)."""
    meta = obj.get("metadata") or {}
    kept: Obj = {k: meta[k] for k in _KEEP_META if k in meta}
    labels = meta.get("labels") or {}
    kept["labels"] = {k: labels[k] for k in _KEEP_LABELS if k in labels}
    # A Flux Operator's Job carries no annotations; its pod template has the step's.
    template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    annotations = {**(template.get("annotations") or {}), **(meta.get("annotations") or {})}
    kept["annotations"] = {k: annotations[k] for k in _KEEP_ANNOTATIONS if k in annotations}
    owners = meta.get("ownerReferences") or []
    kept["ownerReferences"] = [{"kind": o.get("kind"), "name": o.get("name")} for o in owners]
    spec = obj.get("spec") or {}
    kept_spec = {"suspend": spec.get("suspend")}
    # judge() reads who decides a multi-node launch, and the rules that name a failure.
    kept_spec |= {k: spec[k] for k in _KEEP_SPEC if k in spec}
    # Interned: a Job's name is also its pods' owner name and two labels of each.
    return {
        "metadata": _compact(kept, share=False),
        "spec": kept_spec,
        "status": _compact(obj.get("status") or {}),
    }


def slim_jobset(obj: Mapping[str, Any]) -> Obj:
    """Return the parts of a JobSet that k8sjobs reads: ``slim``'s, its kind (what deletes
    the step) and the bound of its restarts."""
    kept = slim(obj)
    kept["kind"] = obj.get("kind", "JobSet")
    policy = (obj.get("spec") or {}).get("failurePolicy") or {}
    if "maxRestarts" in policy:
        kept["spec"]["failurePolicy"] = {"maxRestarts": policy["maxRestarts"]}
    return kept


_EVENT_FIELDS = (
    "reason",
    "message",
    "type",
    "count",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
)


def slim_event(obj: Mapping[str, Any]) -> Obj:
    """Return the parts of a core/v1 Event that ``k8sjobs.pending`` reads: what it is about,
    why, and when (no managedFields, no source)."""
    meta = obj.get("metadata") or {}
    involved = obj.get("involvedObject") or {}
    kept: Obj = {
        "metadata": _compact({k: meta[k] for k in _KEEP_META if k in meta}, share=False),
        "involvedObject": _compact(
            {k: involved[k] for k in ("kind", "name", "uid") if k in involved}, share=False
        ),
    }
    kept.update({k: obj[k] for k in _EVENT_FIELDS if obj.get(k) is not None})
    series = obj.get("series") or {}
    if series:
        kept["series"] = {k: series[k] for k in ("count", "lastObservedTime") if k in series}
    return kept


class Cache:
    """The latest body of every object a watch reported, by name (pure, no I/O).

    ``slimmer`` keeps of each object what is read of it (``slim`` for Jobs and Pods,
    ``slim_event`` for Events).
    """

    def __init__(self, slimmer: Callable[[Mapping[str, Any]], Obj] = slim) -> None:
        self.objects: dict[str, Obj] = {}
        self.resource_version = ""
        self.slim = slimmer

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
            gone = self.objects.pop(name, None) is not None
            return Change(name, None, "DELETED") if gone else None
        current = self.objects.get(name)
        if current is not None and current["metadata"].get("resourceVersion") == version:
            return None
        self.objects[name] = body = self.slim(obj)
        return Change(name, body, "ADDED" if current is None else "MODIFIED")

    def replace(self, items: Iterable[Mapping[str, Any]], resource_version: str) -> list[Change]:
        """Take a full relist; return what differs from the cache, deletions first.

        An object the cache lacks comes out ADDED, one with another resourceVersion
        MODIFIED, one the list lacks DELETED; an unchanged one not at all.
        """
        relist = Relist(self)
        relist.take(items)
        return relist.finish(resource_version)


class Relist:
    """A full list taken page by page into a ``Cache`` (pure): ``Cache.replace`` in parts.

    Only what differs from the cache is kept, slimmed, until ``finish``: a relist of 100,000
    unchanged objects costs a name each, not a second copy of the cache.
    """

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._fresh: dict[str, Obj | None] = {}  # name -> slim body, None when unchanged
        self.count = 0

    def take(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Take one page of the list."""
        objects = self._cache.objects
        for item in items:
            meta = item.get("metadata") or {}
            name = str(meta.get("name", ""))
            current = objects.get(name)
            version = str(meta.get("resourceVersion") or "")
            same = current is not None and current["metadata"].get("resourceVersion") == version
            self._fresh[name] = None if same else self._cache.slim(item)
            self.count += 1

    def finish(self, resource_version: str) -> list[Change]:
        """Apply the whole list to the cache; return the changes, deletions first."""
        objects = self._cache.objects
        changes = [Change(name, None, "DELETED") for name in objects if name not in self._fresh]
        for gone in changes:
            del objects[gone.name]
        for name, body in self._fresh.items():
            if body is not None:
                kind = "MODIFIED" if name in objects else "ADDED"
                objects[name] = body
                changes.append(Change(name, body, kind))
        self._cache.resource_version = resource_version
        return changes


class Informer:
    """Keeps a ``Cache`` of one kind of object current and reports every change.

    ``on_change`` is called with each ``Change`` in order, from the informer's task.
    ``synced`` is set once the first list has been applied. ``idle``: seconds without an
    event or a bookmark after which the watch is taken for dead (above the minute a real
    server leaves between bookmarks; up to ``idle / 20`` later, see ``_watch``).
    ``relist_every``: mean seconds between safety-net relists (each jittered by +-20%),
    None for none. ``stats`` is shared by a backend's
    informers. ``fields`` is a field selector (``type=Warning``), ``slimmer`` what the
    cache keeps of each object.
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
        idle: float = 120.0,
        relist_every: float | None = None,
        stats: WatchStats | None = None,
        fields: str = "",
        slimmer: Callable[[Mapping[str, Any]], Obj] = slim,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.fields = fields
        self.cache = Cache(slimmer)
        self.synced = asyncio.Event()
        self.stats = stats if stats is not None else WatchStats()
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._idle = idle
        self._relist_every = relist_every
        self._relist_due: float | None = None
        self._heard = False
        self.relists = 0
        self.reconnects = 0

    async def run_or_do_without(self, what: str, loss: str) -> None:
        """Run until cancelled; a watch refused before it listed (403) costs only ``loss``.

        One WARNING names ``what`` could not be followed, why and ``loss``; the informer
        then counts as synced, so whoever waits for its first list goes on without it.
        """
        try:
            await self.run()
        except ApiError as exc:
            log.warning(
                '%s in namespace "%s" cannot be followed (%s): %s', what, self.namespace, exc, loss
            )
            self.synced.set()

    async def run(self) -> None:
        """List and watch until cancelled, resuming after every drop, relisting when needed."""
        failures = churn = 0
        relist = "initial"
        while True:
            try:
                if relist:
                    await self._list(relist)
                    relist = ""
                reason = await self._watch()
                failures = 0
            except Gone:
                reason = "gone"
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                if not self.synced.is_set() and _fatal(exc):
                    raise  # no point in retrying a refusal before anything was seen
                failures += 1
                reason = "error"
                self._reconnecting(reason, f"{type(exc).__name__}: {exc}", relist)
                await asyncio.sleep(_backoff(failures))
                continue
            if reason in _RELIST_REASONS:
                relist = reason
            self._reconnecting(reason, _WHY[reason].format(idle=self._idle), relist)
            # Relists in a row with nothing heard in between (a 410 right after each list,
            # say) back off as failures do, rather than spin on LIST and WATCH.
            churn = 0 if self._heard or not relist else churn + 1
            if churn > 1:
                await asyncio.sleep(_backoff(churn))

    def _reconnecting(self, reason: str, why: str, relist: str) -> None:
        """Count and log one reconnect (at INFO: a user should see why a watch restarted)."""
        self.reconnects += 1
        self.stats.reconnects[reason] += 1
        log.info(
            '%s watch in namespace "%s" %s; reconnecting%s',
            self.kind.plural,
            self.namespace,
            why,
            f" with a relist ({relist})" if relist else "",
        )

    async def _list(self, reason: str) -> None:
        relist, version = Relist(self.cache), ""
        # Page by page, each slimmed before the next: never the whole list decoded at once.
        pages = self.client.list_pages(self.kind, self.namespace, self.selector, fields=self.fields)
        async for page in pages:
            relist.take(page.get("items") or ())
            version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        self.relists += 1
        self.stats.relists[reason] += 1
        self._schedule_relist()
        changes = relist.finish(version)
        if reason != "initial":
            log.info(
                '%s in namespace "%s" relisted (%s): %d objects, %d changed while unseen',
                self.kind.plural,
                self.namespace,
                reason,
                relist.count,
                len(changes),
            )
        for change in changes:
            self._on_change(change)
        self.synced.set()

    def _schedule_relist(self) -> None:
        if self._relist_every is not None:
            jitter = random.uniform(0.8, 1.2)
            self._relist_due = asyncio.get_running_loop().time() + self._relist_every * jitter

    async def _watch(self) -> str:
        """Watch until the stream ends; return why: a relisting reason or "expired"."""
        timeout = self._watch_timeout + random.randint(0, self._watch_timeout // 10)
        params = {
            "allowWatchBookmarks": "true",
            "resourceVersion": self.cache.resource_version,
            "timeoutSeconds": str(timeout),
        }
        if self.selector:
            params["labelSelector"] = self.selector
        if self.fields:
            params["fieldSelector"] = self.fields
        loop = asyncio.get_running_loop()
        started = loop.time()
        streaming = self._heard = False
        due = self._relist_due

        # Moving the timer costs a cancel and a new loop timer: on a busy watch it is moved
        # only once the idle bound has caught up with it, then past it by ``slack``, so a
        # silent watch is still taken for dead after between ``idle`` and ``idle + slack``.
        slack = self._idle / 20

        def heard(extra: float = 0.0) -> float | None:
            """Return the new deadline: the idle bound from now, or the relist if sooner."""
            bound = loop.time() + self._idle + extra
            return bound if due is None else min(bound, due)

        try:
            async with asyncio.timeout_at(due) as timer:

                def opened() -> None:
                    nonlocal streaming
                    streaming = True
                    timer.reschedule(heard())

                stream = events(self.client, self.kind, self.namespace, params, opened=opened)
                async with contextlib.aclosing(stream):
                    async for kind, obj in stream:
                        deadline = timer.when()
                        if deadline is None or (
                            deadline != due and deadline < loop.time() + self._idle
                        ):
                            timer.reschedule(heard(slack))
                        change = self.cache.apply(kind, obj)
                        if change is not None:
                            self._on_change(change)
                        self._heard = True
        except TimeoutError:
            # Ours, or aiohttp's read timeout on the same bound: either way, nothing came.
            if due is not None and loop.time() >= due:
                return "periodic"
            if not streaming:
                raise
            return "silent"
        if loop.time() < started + timeout - _EXPIRY_SLACK:
            return "ended early"
        return "expired"


_WHY = {
    "expired": "reached its timeoutSeconds",
    "gone": "answered 410 Gone (history compacted)",
    "silent": "was silent for {idle:g} s (no event, no bookmark)",
    "ended early": "was ended cleanly by the server before its timeoutSeconds",
    "periodic": "is due for its periodic relist",
}


async def events(
    client: KubeClient,
    kind: Kind,
    namespace: str,
    params: Mapping[str, str],
    *,
    opened: Callable[[], None] | None = None,
) -> AsyncGenerator[tuple[str, Obj], None]:
    """Yield (type, object) for each event of one watch request, until the server ends it.

    An ERROR event is raised: Gone for 410 (the history from that resourceVersion was
    compacted), ApiError otherwise. ``opened`` is called once the server has answered.
    """
    what = f'watch {kind.plural} in namespace "{namespace}"'
    query = {**params, "watch": "true"}
    lines = client.stream_lines(
        kind.path(namespace), query, what=what, kind=kind, verb="watch", opened=opened
    )
    async with contextlib.aclosing(lines):
        async for line in lines:
            event = orjson.loads(line)  # orjson: JSON was a tenth of the driver CPU (profiled)
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
