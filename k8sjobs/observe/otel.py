"""OpenTelemetry traces and metrics of a session's steps (the ``k8sjobs[otel]`` extra).

Imported only when tracing or metrics are asked for (a tracer or meter provider given, or
the standard ``OTEL_*`` variables set): a session with none of it imports no OpenTelemetry.

One trace per session: its span "k8sjobs study NAME" is the parent of every step's span
("step NAME", submit to end), unless the step was submitted inside a span of the caller's
(a notebook cell, a MuMMI iteration): that span is then its parent. A step's span has child
spans for what it waited on, as far as its backend knows: "queue" (submit to start, the
reason the step waited in its events), "image pull" (while the pod said so), "run" (start to
end), "reuse" (a result taken from the cache). Each change of state is an event
"k8sjobs.state" with the state, reason and message; each pod event an event "k8sjobs.pod".
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..state import StepState
from .metrics import COUNTERS, HISTOGRAMS, StepMetrics

if TYPE_CHECKING:
    from ..events import StepEvent
    from .observer import Track

__all__ = ["OtelSink", "StepTracer", "env_meter_provider", "env_tracer_provider"]

_log = logging.getLogger("k8sjobs.observe")
_SCOPE = "k8sjobs"
_PULLING = frozenset({"ContainerCreating", "PodInitializing", "Pulling", "ErrImagePull"})
_PULLING_TOO = frozenset({"ImagePullBackOff"})


def env_tracer_provider() -> trace.TracerProvider:
    """Return an SDK tracer provider set up from the ``OTEL_*`` variables.

    The SDK reads the service name, resource attributes and sampler itself; the exporter is
    OTLP over HTTP (``OTEL_EXPORTER_OTLP_*``) unless ``OTEL_TRACES_EXPORTER=console``. A bad
    value raises ValueError naming the variable.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    exporter: SpanExporter
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        _check_endpoints("TRACES")
        exporter = OTLPSpanExporter()
    else:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER={name!r} is not one k8sjobs sets up; use otlp, console or "
            "none, or pass Session(tracer_provider=...)"
        )
    _check_sampler()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "k8sjobs"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


_SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)


def _check_sampler() -> None:
    """Raise ValueError naming ``OTEL_TRACES_SAMPLER(_ARG)`` when the SDK would not honour it.

    The SDK falls back to sampling every trace on an unknown name or a ratio outside 0..1,
    with a message that names neither the variable nor the fix (for 7: "could not convert
    to float"). A sampler a package registers by entry point is accepted.
    """
    from importlib.metadata import entry_points

    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return
    registered = {e.name for e in entry_points(group="opentelemetry_traces_sampler")}
    if name not in _SAMPLERS and name not in registered:
        raise ValueError(
            f"OTEL_TRACES_SAMPLER={name!r} is not a sampler; use one of "
            f"{', '.join(sorted(_SAMPLERS | registered))}"
        )
    arg = os.environ.get("OTEL_TRACES_SAMPLER_ARG")
    if name.endswith("traceidratio") and arg is not None:
        try:
            ratio = float(arg)
        except ValueError:
            ratio = math.nan
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(
                f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a ratio; give a number from 0 to 1 "
                "(0.1: one trace in ten)"
            )


def env_meter_provider() -> metrics.MeterProvider:
    """Return an SDK meter provider exporting by OTLP over HTTP (``OTEL_EXPORTER_OTLP_*``)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    _check_endpoints("METRICS")
    return MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])


def _check_endpoints(signal: str) -> None:
    """Raise ValueError naming an OTLP endpoint variable that is not an http(s) URL.

    The exporter took "localhost:4318" or "notaurl" and failed each export later with
    "Invalid URL", naming no variable; this says so before any step is sent.
    """
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"):
        value = os.environ.get(variable)
        if not value:
            continue
        try:
            parts = urlsplit(value.strip())
            ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a port that is not a number, or out of range
            ok = False
        if not ok:
            raise ValueError(
                f"{variable}={value!r} is not an http(s) URL; give e.g. http://localhost:4318"
            )


class StepTracer:
    """A recorder making the session's trace (see the module's docstring)."""

    def __init__(
        self, provider: trace.TracerProvider, study: str, backend: str, *, owned: bool = False
    ) -> None:
        self.provider = provider
        #: Made from the OTEL_* variables for this session: shut down when it closes.
        self.owned = owned
        self.tracer = provider.get_tracer(_SCOPE)
        self.study = study
        # The caller's current span (if any) is the session's parent.
        self.root = self.tracer.start_span(
            f"k8sjobs study {study}",
            kind=SpanKind.INTERNAL,
            attributes={"cicd.pipeline.name": study, "k8sjobs.backend": backend},
        )
        run_id = format(self.root.get_span_context().trace_id, "032x")
        self.root.set_attribute("cicd.pipeline.run.id", run_id)
        self.run_id = run_id
        self._root_context = trace.set_span_in_context(self.root)

    def submitted(self, track: Track) -> None:
        """Open the step's span (a child of the caller's span if it is in one)."""
        handle = track.handle
        current = trace.get_current_span()
        parent = (
            otel_context.get_current()
            if current.get_span_context().is_valid and current is not self.root
            else self._root_context
        )
        span = self.tracer.start_span(
            f"step {handle.name}",
            context=parent,
            start_time=track.submit_ns,
            attributes={
                "cicd.pipeline.name": self.study,
                "cicd.pipeline.run.id": self.run_id,
                "cicd.pipeline.task.name": handle.name,
                "k8s.namespace.name": handle.namespace,
                "k8s.job.name": handle.object_name,
                "k8sjobs.backend": handle.backend.kind,
            },
        )
        queue = self._child(span, "queue", track.submit_ns)
        track.slots[id(self)] = _Spans(span, queue)

    def changed(self, track: Track, previous: StepState, reason: str) -> None:
        """Add the change as an event; open and close the child spans it starts and ends."""
        spans = self._spans(track)
        if spans is None:
            return
        result = track.handle.result
        now = track.since_ns
        spans.step.add_event(
            "k8sjobs.state",
            {
                "k8sjobs.state": str(result.state),
                "k8sjobs.reason": result.reason,
                "k8sjobs.message": result.message,
            },
            timestamp=now,
        )
        pulling = result.reason in _PULLING or result.reason in _PULLING_TOO
        if spans.pull is None and pulling and not result.state.terminal:
            spans.pull = self._child(spans.step, "image pull", now)
        elif spans.pull is not None and not pulling:
            spans.pull.end(end_time=now)
            spans.pull = None
        if result.state is not StepState.PENDING and spans.queue is not None:
            spans.queue.end(end_time=now)
            spans.queue = None
        if result.state is StepState.RUNNING and spans.run is None:
            spans.run = self._child(spans.step, "run", now)

    def happened(self, track: Track, event: StepEvent) -> None:
        """Add the pod event (a failed attempt, an eviction) to the step's span."""
        spans = self._spans(track)
        if spans is not None:
            spans.step.add_event(
                "k8sjobs.pod",
                {
                    "k8s.pod.name": event.pod,
                    "k8sjobs.reason": event.reason,
                    "k8sjobs.message": event.message,
                    "k8sjobs.action": event.action,
                },
            )

    def ended(self, track: Track) -> None:
        """Close the step's spans with its result's attributes."""
        spans = self._spans(track)
        if spans is None:
            return
        del track.slots[id(self)]
        result = track.handle.result
        end = track.end_ns
        cached = result.reason == "Cached"
        if cached:
            self._child(spans.step, "reuse", track.submit_ns).end(end_time=end)
        for child in (spans.pull, spans.queue, spans.run):
            if child is not None:
                child.end(end_time=end)
        for name, times in (
            ("input pull", track.native.input_pull),
            ("output push", track.native.output_push),
        ):
            if times is not None and not cached:
                self._child(spans.step, name, times[0]).end(end_time=times[1])
        spans.step.set_attributes(_ended_attributes(track))
        if result.state is not StepState.SUCCEEDED:
            spans.step.set_status(Status(StatusCode.ERROR, result.message or result.reason))
        spans.step.end(end_time=end)

    def close(self) -> None:
        """End the session's span and flush what an SDK provider holds (ours: shut it down)."""
        self.root.end()
        _flush(self.provider, self.owned)

    def _child(self, parent: trace.Span, name: str, start: int | None) -> trace.Span:
        return self.tracer.start_span(
            name, context=trace.set_span_in_context(parent), start_time=start
        )

    def _spans(self, track: Track) -> _Spans | None:
        spans = track.slots.get(id(self))
        return spans if isinstance(spans, _Spans) else None


class _Spans:
    """A step's open spans."""

    __slots__ = ("pull", "queue", "run", "step")

    def __init__(self, step: trace.Span, queue: trace.Span) -> None:
        self.step = step
        self.queue: trace.Span | None = queue
        self.pull: trace.Span | None = None
        self.run: trace.Span | None = None


def _ended_attributes(track: Track) -> dict[str, Any]:
    """Return the attributes an ended step's span gets (none of them None)."""
    result = track.handle.result
    native = track.native
    attributes: dict[str, Any] = {
        "cicd.pipeline.task.run.result": _RESULTS.get(result.state, "failure"),
        "k8sjobs.state": str(result.state),
        "k8sjobs.reason": result.reason,
        "k8sjobs.reused": result.reason == "Cached",
        "k8sjobs.adopted": track.handle.adopted,
        "k8sjobs.attempts": max(len(result.pods), len(result.memory_attempts), 1),
    }
    optional: dict[str, Any] = {
        "k8sjobs.step.key": track.key,
        "cicd.pipeline.task.run.id": native.id,
        "k8s.job.uid": native.job_uid,
        "k8s.pod.name": native.pod,
        "k8s.node.name": native.node,
        "k8sjobs.pid": native.pid,
        "k8s.container.restart_count": native.restarts,
        "k8sjobs.exit_code": result.exit_code,
    }
    usage = result.usage
    if usage is not None:
        optional |= {
            "k8sjobs.usage.cpu_seconds": usage.cpu_seconds,
            "k8sjobs.usage.memory_peak_bytes": usage.memory_peak,
            "k8sjobs.usage.wall_seconds": usage.wall_seconds,
            "k8sjobs.usage.gpu_seconds": usage.gpu_seconds,
            "k8sjobs.usage.gpu_memory_peak_bytes": usage.gpu_memory_peak,
        }
    attributes |= {k: v for k, v in optional.items() if v is not None and v != ""}
    return attributes


#: The CI/CD semantic conventions' task run results.
_RESULTS = {
    StepState.SUCCEEDED: "success",
    StepState.FAILED: "failure",
    StepState.CANCELLED: "cancellation",
    StepState.LOST: "error",
}


class OtelSink:
    """Hands the step metrics to the OpenTelemetry metrics API (OTel names: dots, units)."""

    def __init__(
        self, provider: metrics.MeterProvider, step_metrics: StepMetrics, *, owned: bool = False
    ) -> None:
        meter = provider.get_meter(_SCOPE)
        self.provider = provider
        self.owned = owned
        self._counters = {
            name: meter.create_counter(_otel_name(name), unit=_unit(name), description=doc)
            for name, (doc, _) in COUNTERS.items()
        }
        self._histograms = {
            name: meter.create_histogram(_otel_name(name), unit="s", description=doc)
            for name, (doc, _) in HISTOGRAMS.items()
        }

        def steps(_: Any) -> list[metrics.Observation]:
            counts = step_metrics.by_state()
            return [metrics.Observation(n, {"state": s}) for s, n in counts.items()]

        def watch(which: int) -> Any:
            def read(_: Any) -> list[metrics.Observation]:
                counts = step_metrics.watches()[which]
                return [metrics.Observation(n, {"reason": r}) for r, n in counts.items()]

            return read

        meter.create_observable_gauge("k8sjobs.steps", [steps], unit="{step}")
        meter.create_observable_counter("k8sjobs.watch.reconnects", [watch(0)])
        meter.create_observable_counter("k8sjobs.watch.relists", [watch(1)])

        def requests(_: Any) -> list[metrics.Observation]:
            counts = step_metrics.requests()
            return [metrics.Observation(n, {"verb": v, "code": c}) for (v, c), n in counts.items()]

        meter.create_observable_counter("k8sjobs.api.requests", [requests], unit="{request}")

        def outages(which: int) -> Any:
            def read(_: Any) -> list[metrics.Observation]:
                return [metrics.Observation(step_metrics.outages()[which])]

            return read

        meter.create_observable_counter("k8sjobs.api.outages", [outages(0)], unit="{outage}")
        meter.create_observable_counter("k8sjobs.api.outage.duration", [outages(1)], unit="s")

    def count(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Add ``value`` to counter ``name``."""
        self._counters[name].add(value, dict(labels))

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Record ``value`` in histogram ``name``."""
        self._histograms[name].record(value, dict(labels))

    def close(self) -> None:
        """Flush what an SDK provider holds (ours: shut it down)."""
        _flush(self.provider, self.owned)


#: Milliseconds a flush may take (the SDK's own bound; the session waits in a thread).
FLUSH_MILLIS = 10_000


def _flush(provider: object, owned: bool) -> None:
    """Flush ``provider`` (an SDK one; the API's no-op has nothing), shut it down if ours."""
    shutdown = getattr(provider, "shutdown", None)
    if owned and callable(shutdown):
        shutdown()
        return
    flush = getattr(provider, "force_flush", None)
    if callable(flush):
        flush(FLUSH_MILLIS)


def _otel_name(name: str) -> str:
    """Return the OTel name of a Prometheus one: k8sjobs_step_duration_seconds ->
    k8sjobs.step.duration (the unit is the instrument's, _total is implied)."""
    for suffix in ("_total", "_seconds"):
        name = name.removesuffix(suffix)
    return name.replace("_", ".").replace("queue.wait", "queue_wait").replace("cpu.", "cpu_")


def _unit(name: str) -> str:
    return "s" if "_seconds" in name else "{step}"
