"""What a running study tells the systems people watch it with (docs/observability.md).

``observer_for`` builds a session's ``Observer`` from what it was asked for: OpenTelemetry
traces and metrics (a provider given, or the standard ``OTEL_*`` variables), a Prometheus
endpoint (``metrics_port``), a trace file. With none of it, it returns None and nothing is
imported: the session then costs what it did before (docs/performance.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .native import Native, NativeSource, native
from .observer import Observer, Recorder, Track

if TYPE_CHECKING:
    from ..kube.watch import WatchStats

__all__ = [
    "Native",
    "NativeSource",
    "Observer",
    "Recorder",
    "Track",
    "native",
    "observer_for",
    "otel_wanted",
]

_log = logging.getLogger("k8sjobs.observe")


def otel_wanted(environ: dict[str, str] | None = None) -> tuple[bool, bool]:
    """Return whether the ``OTEL_*`` variables ask for traces, and for metrics.

    Asked for by an exporter named (``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER``, not
    "none") or an OTLP endpoint set; ``OTEL_SDK_DISABLED=true`` turns both off.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, False
    endpoint = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))

    def asked(signal: str) -> bool:
        exporter = env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower()
        if exporter:
            return exporter != "none"
        return endpoint or bool(env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))

    return asked("TRACES"), asked("METRICS")


def observer_for(
    *,
    study: str,
    backend: str,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    metrics_port: int | None = None,
    trace_file: str | os.PathLike[str] | None = None,
    watch_stats: Callable[[], WatchStats] | None = None,
    api_requests: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    api_outages: Callable[[], tuple[int, float]] | None = None,
) -> Observer | None:
    """Return the session's observer, or None when nothing was asked for.

    A trace file that cannot be written or a port in use raises ValueError (before any step
    is sent); ``OTEL_*`` values the SDK refuses, or a missing ``k8sjobs[otel]`` extra for
    them, are a logged warning and that signal is off.
    """
    traces, otel_metrics = otel_wanted()
    recorders: list[Recorder] = []
    if trace_file is not None:
        from .tracefile import TraceFile

        recorders.append(TraceFile(trace_file))
    try:
        if tracer_provider is not None or traces:
            recorders.append(_tracer(tracer_provider, study, backend))
        if meter_provider is not None or otel_metrics or metrics_port is not None:
            recorders.append(
                _metrics(
                    meter_provider,
                    otel_metrics,
                    metrics_port,
                    watch_stats,
                    api_requests,
                    api_outages,
                )
            )
    except BaseException:
        Observer(recorders).close()
        raise
    return Observer(recorders) if recorders else None


def _tracer(provider: Any, study: str, backend: str) -> Recorder:
    try:
        from .otel import StepTracer, env_tracer_provider
    except ImportError as exc:
        if provider is not None:
            raise
        return _off("traces", f"install k8sjobs[otel] ({exc})")
    if provider is not None:
        return StepTracer(provider, study, backend)
    try:
        return StepTracer(env_tracer_provider(), study, backend, owned=True)
    except Exception as exc:  # the SDK's refusal of a bad OTEL_* value
        return _off("traces", str(exc))


def _metrics(
    provider: Any,
    from_env: bool,
    port: int | None,
    watch_stats: Callable[[], WatchStats] | None,
    api_requests: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    api_outages: Callable[[], tuple[int, float]] | None = None,
) -> Recorder:
    from .metrics import PrometheusSink, Sink, StepMetrics

    step_metrics = StepMetrics([], watch_stats, api_requests, api_outages)
    sinks: list[Sink] = []
    if provider is not None or from_env:
        try:
            from .otel import OtelSink, env_meter_provider

            owned = provider is None
            made = env_meter_provider() if owned else provider
            sinks.append(OtelSink(made, step_metrics, owned=owned))
        except ImportError as exc:
            if provider is not None:
                raise
            _log.warning("k8sjobs: OTel metrics are off: install k8sjobs[otel] (%s)", exc)
        except Exception as exc:
            _log.warning("k8sjobs: OTel metrics are off: %s", exc)
    if port is not None:
        try:
            sinks.append(PrometheusSink(step_metrics, port))
        except ImportError as exc:
            raise ValueError(
                f"metrics_port={port} needs prometheus-client: pip install 'k8sjobs[otel]' ({exc})"
            ) from None
    step_metrics.sinks = sinks
    return step_metrics


class _Off:
    """A recorder that records nothing (a signal switched off with a warning)."""

    def submitted(self, track: Track) -> None:
        """Nothing."""

    def changed(self, track: Track, previous: Any, reason: str) -> None:
        """Nothing."""

    def happened(self, track: Track, event: Any) -> None:
        """Nothing."""

    def ended(self, track: Track) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""


def _off(signal: str, why: str) -> Recorder:
    _log.warning("k8sjobs: OTel %s are off (the run goes on): %s", signal, why)
    return _Off()
