"""Events: how the fake cluster's components record them, and their events.k8s.io/v1 view.

`record_event` is the one way a component (job-controller, kubelet, default-scheduler)
writes an Event, with the rules of the recorder it would use on a real cluster:

- core/v1 (client-go's tools/record, used by the job controller and the kubelet): an Event
  that repeats one already written exactly (same source, object, type, reason and message)
  raises that Event's `count` and `lastTimestamp` (a MODIFIED event); a new message is a new
  Event object (so a message naming a generated pod name is a new object every time); the
  tenth distinct message of one (source, object, type, reason) within 10 minutes turns into
  one "(combined from similar events): ..." Event whose count grows; and at most 25 Events
  per source and object pass at once, refilled one per 5 minutes (the spam filter).
- events.k8s.io/v1 (the new recorder, used by kube-scheduler; `action` given): the first
  Event is created, the first repeat (same action, reason, controller and object,
  resourceVersion included) adds `series: {count: 2}`, later repeats are counted in memory
  only (the real recorder writes them on a 30-minute heartbeat).

Each Event is named `<object>.<nanoseconds in hex>`, as client-go names them.

The same stored Events are served as core/v1 and as events.k8s.io/v1; `to_v1` and
`from_v1` convert between the two, as the real API server's conversion does.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import errors as _errors
from .errors import ApiError
from .store import Obj, Store, now_rfc3339

GROUP = "events.k8s.io"
_SIMILAR_MAX = 10  # distinct messages before they are combined (EventAggregator)
_SIMILAR_WINDOW = 600.0
_SPAM_BURST = 25
_SPAM_REFILL = 300.0  # seconds per token
_COMBINED = "(combined from similar events): "


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Recorders:
    """The recorders' caches of one cluster (a real component keeps them in memory)."""

    written: dict[tuple[Any, ...], str] = field(default_factory=dict)  # event key -> name
    similar: dict[tuple[Any, ...], _Similar] = field(default_factory=dict)
    tokens: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    series: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    last_ns: int = 0


_RECORDERS: weakref.WeakKeyDictionary[Store, _Recorders] = weakref.WeakKeyDictionary()


def record_event(
    store: Store,
    obj: Obj,
    kind: str,
    reason: str,
    message: str,
    component: str,
    *,
    host: str = "",
    action: str = "",
    instance: str = "",
) -> Obj | None:
    """Write (or count) an Event of type `kind` about `obj`; return what was stored.

    `host` is the kubelet's node (source.host). With `action` the Event is written as the
    events.k8s.io recorder does (kube-scheduler: action "Scheduling", instance
    "default-scheduler-<host>"). Returns None when the Event was only counted in memory or
    dropped by the spam filter; a failed write (namespace gone) is ignored, as a recorder's.
    """
    state = _RECORDERS.setdefault(store, _Recorders())
    report = _Report(_reference(obj), kind, reason, message, component)
    with contextlib.suppress(ApiError):
        if action:
            return _record_series(store, state, report, action, instance)
        return _record_core(store, state, report, host)
    return None


@dataclass(frozen=True)
class _Report:
    """What a component reports: about which object, of which type, why and by whom."""

    ref: Obj
    kind: str
    reason: str
    message: str
    component: str


def _reference(obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {
        "kind": obj["kind"],
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": obj["apiVersion"],
        "resourceVersion": meta["resourceVersion"],
    }


def _record_core(store: Store, state: _Recorders, report: _Report, host: str) -> Obj | None:
    ref, kind, reason, component = report.ref, report.kind, report.reason, report.component
    message = report.message
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    who: tuple[Any, ...] = (component, host, ref["kind"], ref["namespace"], ref["name"])
    who += (ref["uid"], ref["apiVersion"])
    if not _allowed(state, (*who, kind, reason)):
        return None
    now = time.monotonic()
    similar_key = (*who, kind, reason, component, "")
    similar = state.similar.get(similar_key)
    if similar is None or now - similar.last > _SIMILAR_WINDOW:
        similar = state.similar[similar_key] = _Similar()
    similar.messages.add(message)
    similar.last = now
    key: tuple[Any, ...] = (*who, kind, reason, message)
    if len(similar.messages) >= _SIMILAR_MAX:
        similar.messages.pop()  # the set does not grow past the threshold
        message, key = _COMBINED + message, similar_key
    namespace = ref["namespace"] or "default"
    stamp = now_rfc3339()
    name = state.written.get(key)
    existing = store.get("events", namespace, name) if name else None
    if existing is not None:
        updated = dict(existing, message=message, lastTimestamp=stamp)
        updated["count"] = int(existing.get("count") or 1) + 1
        stored = store.update("events", namespace, updated, validate=False)
        return stored
    event = {
        "metadata": {"name": _name(state, ref["name"]), "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": kind,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    created = store.create("events", namespace, event, validate=False)
    state.written[key] = created["metadata"]["name"]
    return created


def _record_series(
    store: Store, state: _Recorders, report: _Report, action: str, instance: str
) -> Obj | None:
    ref, kind, reason, component = report.ref, report.kind, report.reason, report.component
    key = (action, reason, component, tuple(sorted(ref.items())))
    namespace = ref["namespace"] or "default"
    seen = state.series.get(key)
    if seen is not None:
        name, count = seen
        seen[1] = count + 1
        if count > 1:
            return None  # counted; the real recorder writes it on its heartbeat
        existing = store.get("events", namespace, name)
        if existing is None:
            return None
        series = {"count": 2, "lastObservedTime": _micro_now()}
        updated = _ordered_core({**existing, "series": series})
        stored = store.update("events", namespace, updated, validate=False)
        return stored
    event = _ordered_core(
        {
            "metadata": {"name": _name(state, ref["name"]), "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": report.message,
            "source": {},
            "firstTimestamp": None,
            "lastTimestamp": None,
            "type": kind,
            "eventTime": _micro_now(),
            "action": action,
            "reportingComponent": component,
            "reportingInstance": instance or component,
        }
    )
    created = store.create("events", namespace, event, validate=False)
    state.series[key] = [created["metadata"]["name"], 1]
    return created


def _allowed(state: _Recorders, key: tuple[Any, ...]) -> bool:
    """Take a token of the (source, object) bucket: 25 at once, one more per 5 minutes."""
    now = time.monotonic()
    tokens, last = state.tokens.get(key, (float(_SPAM_BURST), now))
    tokens = min(float(_SPAM_BURST), tokens + (now - last) / _SPAM_REFILL)
    if tokens < 1.0:
        state.tokens[key] = (tokens, now)
        return False
    state.tokens[key] = (tokens - 1.0, now)
    return True


def _name(state: _Recorders, involved: str) -> str:
    """Return `<name>.<hex nanoseconds>`, strictly increasing so that names never collide."""
    stamp = max(time.time_ns(), state.last_ns + 1)
    state.last_ns = stamp
    return f"{involved}.{stamp:x}"


def _micro_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The order Go writes a core/v1 Event's fields in.
_CORE_ORDER = (
    "kind",
    "apiVersion",
    "metadata",
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)


def _ordered_core(event: Obj) -> Obj:
    ordered = {k: event[k] for k in _CORE_ORDER if k in event}
    ordered.update({k: v for k, v in event.items() if k not in ordered})
    return ordered


# ---------------------------------------------------------------------- events.k8s.io/v1


def to_v1(event: Obj) -> Obj:
    """Return a stored core/v1 Event as events.k8s.io/v1 serves it."""
    out: Obj = {"kind": "Event", "apiVersion": f"{GROUP}/v1", "metadata": event["metadata"]}
    out["eventTime"] = event.get("eventTime")
    if event.get("series"):
        out["series"] = event["series"]
    for core, v1 in (
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    ):
        if event.get(core):
            out[v1] = event[core]
    out["regarding"] = event.get("involvedObject") or {}
    if event.get("related"):
        out["related"] = event["related"]
    for core, v1 in (("message", "note"), ("type", "type")):
        if event.get(core):
            out[v1] = event[core]
    out["deprecatedSource"] = event.get("source") or {}
    out["deprecatedFirstTimestamp"] = event.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = event.get("lastTimestamp")
    if event.get("count"):
        out["deprecatedCount"] = event["count"]
    return out


# ValidateEventCreate's bounds (k8s.io/kubernetes pkg/apis/core/validation/events.go); Go's
# len() counts bytes, so these do too.
_V1_LIMITS = (("reportingInstance", 128), ("action", 128), ("reason", 128), ("note", 1024))
_V1_TYPES = ("Normal", "Warning")


def check_v1_create(event: Any) -> None:
    """Raise the 422 kube-apiserver gives an events.k8s.io/v1 Event it refuses to create: a
    type other than Normal or Warning, or a text field past its length bound."""
    if not isinstance(event, dict):
        return
    causes = []
    kind = event.get("type")
    if kind not in _V1_TYPES:
        message = f'Invalid value: "": has invalid value: {"" if kind is None else kind}'
        causes.append(_errors_cause("type", message))
    for name, limit in _V1_LIMITS:
        value = event.get(name)
        if isinstance(value, str) and len(value.encode()) > limit:
            message = f'Invalid value: "": can have at most {limit} characters'
            causes.append(_errors_cause(name, message))
    if causes:
        name = (event.get("metadata") or {}).get("name", "")
        raise _errors.invalid("Event", str(name), causes, GROUP)


def _errors_cause(field: str, message: str) -> dict[str, str]:
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


def from_v1(event: Any) -> Any:
    """Return an events.k8s.io/v1 Event body as the core/v1 Event the store keeps."""
    if not isinstance(event, dict):
        return event
    core: Obj = {"kind": "Event", "apiVersion": "v1", "metadata": event.get("metadata") or {}}
    core["involvedObject"] = event.get("regarding") or {}
    for v1, name in (
        ("reason", "reason"),
        ("note", "message"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ):
        if v1 in event:
            core[name] = event[v1]
    core.setdefault("source", {})
    return _ordered_core(core)
