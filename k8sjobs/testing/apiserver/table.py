"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for.

kubectl sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...` and prints the
columns the server returns, so the columns and cell values here follow the API server's
printers: Jobs (Status, Completions, Duration), Pods (Ready, Status, Restarts), ConfigMaps
(Data), Namespaces (Status), Events (Last Seen, Type, Reason, Object, Message), custom
kinds (their CRD's additionalPrinterColumns, Age by
default), and Name/Created At for every other kind, as the default table convertor does.
Columns of priority 1 are what `-o wide` adds.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from typing import Any

from .resources import Resource

Obj = dict[str, Any]
Column = dict[str, Any]

_NAME = "the object's name, unique within its namespace"
_AGE = "time since the object was created (metadata.creationTimestamp)"


def wants_table(accept: str) -> bool:
    """Return whether an Accept header asks for a meta.k8s.io Table (v1 or v1beta1)."""
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def table(
    res: Resource, objects: list[Obj], resource_version: str, include: str, cont: str = ""
) -> Obj:
    """Return the Table for `objects` of `res`; `include` is the includeObject parameter."""
    columns, cells = _printer(res)
    now = _dt.datetime.now(_dt.UTC)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj, now)}
        if res.plural == "pods" and obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            row["conditions"] = [{"type": "Completed", "status": "True"}]
        if include != "None":
            row["object"] = obj if include == "Object" else _partial(obj)
        rows.append(row)
    metadata: Obj = {"resourceVersion": resource_version}
    if cont:
        metadata["continue"] = cont
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }


def watch_encoder(res: Resource, include: str) -> Callable[[Any], bytes]:
    """Return a writer of watch events whose objects are one-row Tables (`kubectl get -w`).

    As on a real server, only the first event carries the column definitions.
    """
    first = True

    def encode(event: Any) -> bytes:
        nonlocal first
        obj = event.obj
        rendered = table(res, [obj], obj["metadata"]["resourceVersion"], include)
        if not first:
            rendered["columnDefinitions"] = []
        first = False
        return json.dumps({"type": event.type, "object": rendered}).encode() + b"\n"

    return encode


def _partial(obj: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def _column(name: str, description: str, kind: str = "string", priority: int = 0) -> Column:
    column: Column = {"name": name, "type": kind, "format": "", "description": description}
    if name == "Name":
        column["format"] = "name"
    column["priority"] = priority
    return column


Cells = Callable[[Obj, _dt.datetime], list[Any]]


def _printer(res: Resource) -> tuple[list[Column], Cells]:
    columns = getattr(res.hooks, "columns", None)
    if columns is not None:
        return _custom_printer(list(columns))
    if res.plural in _PRINTERS:
        return _PRINTERS[res.plural]
    return _DEFAULT


# ---------------------------------------------------------------------- time


def _parse_time(value: str | None) -> _dt.datetime | None:
    if not value:
        return None
    try:
        return _dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Return a duration the way kubectl's AGE column shows it (5s, 3m20s, 4h, 12d)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 120:
        return f"{max(whole, 0)}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(obj: Obj, now: _dt.datetime) -> str:
    created = _parse_time(obj["metadata"].get("creationTimestamp"))
    return "<unknown>" if created is None else human_duration((now - created).total_seconds())


# ---------------------------------------------------------------------- built-in kinds


def _job_cells(job: Obj, now: _dt.datetime) -> list[Any]:
    spec, status = job.get("spec", {}), job.get("status", {})
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start = _parse_time(status.get("startTime"))
    end = _parse_time(status.get("completionTime")) or now
    duration = "" if start is None else human_duration((end - start).total_seconds())
    containers = spec.get("template", {}).get("spec", {}).get("containers", [])
    return [
        job["metadata"]["name"],
        _job_status(job),
        completions,
        duration,
        _age(job, now),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        _selector(spec.get("selector") or {}),
    ]


def _job_status(job: Obj) -> str:
    true = {
        c["type"] for c in job.get("status", {}).get("conditions", []) if c.get("status") == "True"
    }
    if "Complete" in true:
        return "Complete"
    if "Failed" in true:
        return "Failed"
    if job["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if kind in true:
            return kind
    return "Running"


def _selector(selector: Obj) -> str:
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values", []))
        operator = expression["operator"]
        key = expression["key"]
        if operator in ("In", "NotIn"):
            terms.append(f"{key} {operator.lower()} ({values})")
        else:
            terms.append(key if operator == "Exists" else f"!{key}")
    return ",".join(terms) or "<none>"


def _pod_cells(pod: Obj, now: _dt.datetime) -> list[Any]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    statuses = status.get("containerStatuses", [])
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers', []))}",
        _pod_status(pod),
        str(restarts),
        _age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _pod_status(pod: Obj) -> str:
    status = pod.get("status", {})
    reason = status.get("reason") or status.get("phase", "")
    init = _init_status(pod)
    if init is not None:
        reason = init
    else:
        running = False
        for container in reversed(status.get("containerStatuses", [])):
            state = container.get("state", {})
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                signal = terminated.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode')}"
            elif "running" in state and container.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        return "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _init_status(pod: Obj) -> str | None:
    statuses = pod.get("status", {}).get("initContainerStatuses", [])
    total = len(pod.get("spec", {}).get("initContainers", []))
    for index, container in enumerate(statuses):
        state = container.get("state", {})
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            detail = terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}"
            return f"Init:{detail}"
        if waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return f"Init:{waiting['reason']}"
        return f"Init:{index}/{total}"
    return None


def _configmap_cells(cm: Obj, now: _dt.datetime) -> list[Any]:
    count = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [cm["metadata"]["name"], count, _age(cm, now)]


def _namespace_cells(ns: Obj, now: _dt.datetime) -> list[Any]:
    return [ns["metadata"]["name"], ns.get("status", {}).get("phase", ""), _age(ns, now)]


def _since(value: str | None, now: _dt.datetime) -> str:
    """Return how long ago a timestamp (seconds or microseconds) was, as kubectl shows it."""
    stamp = _parse_time(value.split(".")[0] + "Z" if value and "." in value else value)
    return "<unknown>" if stamp is None else human_duration((now - stamp).total_seconds())


def _event_cells(event: Obj, now: _dt.datetime) -> list[Any]:
    """Return the event printer's cells (for core/v1 and events.k8s.io/v1 Events alike)."""

    def field(core: str, v1: str) -> Any:
        return event.get(core, event.get(v1))

    first_stamp = field("firstTimestamp", "deprecatedFirstTimestamp") or event.get("eventTime")
    first = _since(first_stamp, now)
    last_stamp = field("lastTimestamp", "deprecatedLastTimestamp")
    last = _since(last_stamp, now) if last_stamp else first
    count = field("count", "deprecatedCount") or 1
    series = event.get("series")
    if series:
        last, count = _since(series.get("lastObservedTime"), now), series.get("count", count)
    involved = field("involvedObject", "regarding") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = field("source", "deprecatedSource") or {}
    component = source.get("component") or field("reportingComponent", "reportingController")
    instance = source.get("host") or event.get("reportingInstance")
    origin = f"{component or ''}, {instance}" if instance else component or ""
    message = str(field("message", "note") or "").strip()
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        origin,
        message,
        first,
        int(count),
        event["metadata"]["name"],
    ]


def _default_cells(obj: Obj, now: _dt.datetime) -> list[Any]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


_WIDE_TEMPLATE = "names and images of each container in the pod template"
_PRINTERS: dict[str, tuple[list[Column], Cells]] = {
    "jobs": (
        [
            _column("Name", _NAME),
            _column("Status", "status of the job"),
            _column("Completions", "succeeded pods out of the completions wanted"),
            _column("Duration", "time the job took, or has been running"),
            _column("Age", _AGE),
            _column("Containers", _WIDE_TEMPLATE, priority=1),
            _column("Images", _WIDE_TEMPLATE, priority=1),
            _column("Selector", "the job's pod selector", priority=1),
        ],
        _job_cells,
    ),
    "pods": (
        [
            _column("Name", _NAME),
            _column("Ready", "ready containers out of all containers"),
            _column("Status", "aggregate status of the pod's containers"),
            _column("Restarts", "container restarts"),
            _column("Age", _AGE),
            _column("IP", "the pod's IP address", priority=1),
            _column("Node", "the node the pod is bound to", priority=1),
            _column("Nominated Node", "the node nominated by preemption", priority=1),
            _column("Readiness Gates", "readiness gates met out of all", priority=1),
        ],
        _pod_cells,
    ),
    "configmaps": (
        [
            _column("Name", _NAME),
            _column("Data", "number of keys", "integer"),
            _column("Age", _AGE),
        ],
        _configmap_cells,
    ),
    "namespaces": (
        [_column("Name", _NAME), _column("Status", "the namespace's phase"), _column("Age", _AGE)],
        _namespace_cells,
    ),
    "events": (
        [
            _column("Last Seen", "the time the event was last seen"),
            _column("Type", "the event's type (Normal, Warning)"),
            _column("Reason", "why the action was taken"),
            _column("Object", "the object the event is about"),
            _column("Subobject", "the part of the object (fieldPath)", priority=1),
            _column("Source", "the component that reported it", priority=1),
            _column("Message", "a human-readable description"),
            _column("First Seen", "the time the event was first seen", priority=1),
            _column("Count", "how many times it occurred", priority=1),
            _column("Name", _NAME, priority=1),
        ],
        _event_cells,
    ),
}
_DEFAULT: tuple[list[Column], Cells] = (
    [_column("Name", _NAME), _column("Created At", _AGE, "date")],
    _default_cells,
)


# ---------------------------------------------------------------------- custom kinds


def _custom_printer(printer_columns: list[Obj]) -> tuple[list[Column], Cells]:
    if not printer_columns:
        printer_columns = [
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
        ]
    columns = [_column("Name", _NAME)]
    for spec in printer_columns:
        column = _column(spec["name"], spec.get("description", ""), spec.get("type", "string"))
        column["format"] = spec.get("format", "")
        column["priority"] = spec.get("priority", 0)
        columns.append(column)

    def cells(obj: Obj, now: _dt.datetime) -> list[Any]:
        row: list[Any] = [obj["metadata"]["name"]]
        for spec in printer_columns:
            row.append(
                _custom_cell(_json_path(obj, spec["jsonPath"]), spec.get("type", "string"), now)
            )
        return row

    return columns, cells


_MISSING = object()


def _json_path(obj: Any, path: str) -> Any:
    """Follow a simple JSONPath (`.a.b`, `.a[0].b`) as CRD printer columns use them."""
    current = obj
    for part in path.strip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]") and isinstance(current, list):
            index = int(part[1:-1])
            current = current[index] if -len(current) <= index < len(current) else _MISSING
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            return _MISSING
    return current


def _custom_cell(value: Any, kind: str, now: _dt.datetime) -> Any:
    if value is _MISSING or value is None:
        return None
    if kind == "date" and isinstance(value, str):
        moment = _parse_time(value)
        return "<invalid>" if moment is None else human_duration((now - moment).total_seconds())
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return value
