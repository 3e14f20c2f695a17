"""Step metrics: what a dashboard of a long study shows, fed by the observer's tracks.

``StepMetrics`` turns the steps' changes into counts and durations and hands them to its
``Sink``s: the OpenTelemetry metrics API (``otel.OtelSink``) and a Prometheus endpoint
(``PrometheusSink``, prometheus-client, bound to 127.0.0.1 unless told). Gauges (steps by
state, the watches' reconnects) are read when collected, so a change costs a dict update.

Prometheus names (the OTel names in docs/observability.md):

    k8sjobs_steps{state}                         gauge: steps of this session in each state
    k8sjobs_steps_ended_total{result}            counter: steps ended, by terminal state
    k8sjobs_step_duration_seconds{result}        histogram: start to end of ended steps
    k8sjobs_step_queue_wait_seconds              histogram: submit to start
    k8sjobs_step_cpu_seconds_total               counter: CPU the ended steps used
    k8sjobs_artifact_transfer_seconds{direction} histogram: a pod's input pull / output push
    k8sjobs_cache_hits_total / _misses_total     counter: keyed steps reused / run
    k8sjobs_watch_reconnects_total{reason}       counter: watch requests after the first
    k8sjobs_watch_relists_total{reason}          counter: LISTs (an outage ends in one)
    k8sjobs_api_requests_total{verb,code}        counter: Kubernetes API requests sent
    k8sjobs_api_outages_total                    counter: times the API server was lost
    k8sjobs_api_outage_seconds_total             counter: seconds it was unreachable
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..state import StepState

if TYPE_CHECKING:
    from ..events import StepEvent
    from ..kube.watch import WatchStats
    from .observer import Track

__all__ = ["DURATION_BUCKETS", "PrometheusSink", "Sink", "StepMetrics"]

#: Seconds: a tenth of a second to a day, for step durations and queue waits alike.
DURATION_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400)


class Sink(Protocol):
    """Where metrics go: counters and histograms by name (``COUNTERS``, ``HISTOGRAMS``)."""

    def count(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Add ``value`` to counter ``name``."""

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Record ``value`` in histogram ``name``."""

    def close(self) -> None:
        """Let go of what the sink holds."""


class StepMetrics:
    """A recorder keeping step counts by state and handing ended steps' figures to sinks."""

    def __init__(
        self,
        sinks: list[Sink],
        watch_stats: Callable[[], WatchStats] | None = None,
        api_requests: Callable[[], Mapping[tuple[str, str], int]] | None = None,
        api_outages: Callable[[], tuple[int, float]] | None = None,
    ) -> None:
        self.sinks = sinks
        self.states: collections.Counter[str] = collections.Counter()
        self._watch_stats = watch_stats
        self._api_requests = api_requests
        self._api_outages = api_outages

    def outages(self) -> tuple[int, float]:
        """Return the API server's outages and the seconds it was unreachable (any thread)."""
        return (0, 0.0) if self._api_outages is None else self._api_outages()

    def requests(self) -> dict[tuple[str, str], int]:
        """Return the API requests sent by (verb, code) (a copy, for any thread)."""
        return {} if self._api_requests is None else dict(self._api_requests())

    def watches(self) -> tuple[Mapping[str, int], Mapping[str, int]]:
        """Return the watches' reconnects and relists by reason (copies, for any thread)."""
        if self._watch_stats is None:
            return {}, {}
        stats = self._watch_stats()
        return dict(stats.reconnects), dict(stats.relists)

    @property
    def metrics_url(self) -> str | None:
        """Return the Prometheus endpoint's address, if this serves one."""
        for sink in self.sinks:
            if isinstance(sink, PrometheusSink):
                return f"http://{sink.addr}:{sink.port}/metrics"
        return None

    def by_state(self) -> dict[str, int]:
        """Return the session's steps by state, every state named (0 where none)."""
        counts = dict(self.states)
        return {str(s): counts.get(str(s), 0) for s in StepState}

    def submitted(self, track: Track) -> None:
        """Count the step as PENDING."""
        self.states[str(StepState.PENDING)] += 1

    def changed(self, track: Track, previous: StepState, reason: str) -> None:
        """Move the step's count to its new state."""
        if track.state is not previous:
            self.states[str(previous)] -= 1
            self.states[str(track.state)] += 1

    def happened(self, track: Track, event: StepEvent) -> None:
        """Pod events are not metrics (the trace has them)."""

    def ended(self, track: Track) -> None:
        """Count the ended step and record its figures."""
        result = track.handle.result
        labels = {"result": str(result.state)}
        cached = result.reason == "Cached"
        self._count("k8sjobs_steps_ended_total", 1, labels)
        if track.key:
            self._count("k8sjobs_cache_hits_total" if cached else "k8sjobs_cache_misses_total", 1)
        if result.duration is not None and not cached:
            self._observe("k8sjobs_step_duration_seconds", result.duration, labels)
        if track.start_ns is not None and not cached:
            self._observe("k8sjobs_step_queue_wait_seconds", track.wait_seconds or 0.0)
        usage = result.usage
        if usage is not None and usage.cpu_seconds is not None and not cached:
            self._count("k8sjobs_step_cpu_seconds_total", usage.cpu_seconds)
        for direction, times in (
            ("pull", track.native.input_pull),
            ("push", track.native.output_push),
        ):
            if times is not None and not cached:
                seconds = (times[1] - times[0]) / 1e9
                self._observe(
                    "k8sjobs_artifact_transfer_seconds", seconds, {"direction": direction}
                )

    def close(self) -> None:
        """Close the sinks."""
        for sink in self.sinks:
            sink.close()

    def _count(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        for sink in self.sinks:
            sink.count(name, value, labels or {})

    def _observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        for sink in self.sinks:
            sink.observe(name, value, labels or {})


#: Counters and histograms: Prometheus name -> (help, label names).
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "k8sjobs_steps_ended_total": ("Steps ended, by terminal state.", ("result",)),
    "k8sjobs_step_cpu_seconds_total": ("CPU seconds the ended steps used.", ()),
    "k8sjobs_cache_hits_total": ("Keyed steps reused from the cache.", ()),
    "k8sjobs_cache_misses_total": ("Keyed steps that ran (no recorded success).", ()),
}
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "k8sjobs_step_duration_seconds": ("Start to end of ended steps.", ("result",)),
    "k8sjobs_step_queue_wait_seconds": ("Submit to start of steps that ran.", ()),
    "k8sjobs_artifact_transfer_seconds": (
        "A pod's input pull (pull) or output push (push), from its containers' states.",
        ("direction",),
    ),
}


class PrometheusSink:
    """Serves the metrics for Prometheus to scrape (http://ADDR:PORT/metrics).

    ``port`` 0 takes a free port: ``port`` then says which. A port in use raises
    ``ValueError`` naming it, before any step is sent.
    """

    def __init__(self, metrics: StepMetrics, port: int, addr: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"metrics_port={port!r} is not a port; give 0..65535 (0: any free)")
        self.registry = CollectorRegistry()
        self._counters = {
            name: Counter(name.removesuffix("_total"), doc, labels, registry=self.registry)
            for name, (doc, labels) in COUNTERS.items()
        }
        self._histograms = {
            name: Histogram(name, doc, labels, registry=self.registry, buckets=DURATION_BUCKETS)
            for name, (doc, labels) in HISTOGRAMS.items()
        }
        self.registry.register(_Gauges(metrics))
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            raise ValueError(
                f"metrics_port={port}: cannot listen on {addr}:{port} ({exc.strerror or exc}); "
                "choose a free port, or 0 for any"
            ) from None
        self.port: int = self._server.server_port
        self.addr = addr

    def count(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Add ``value`` to counter ``name``."""
        counter = self._counters[name]
        (counter.labels(**labels) if labels else counter).inc(value)

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Record ``value`` in histogram ``name``."""
        histogram = self._histograms[name]
        (histogram.labels(**labels) if labels else histogram).observe(value)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Gauges:
    """Read at scrape time: the steps by state and the watches' counts."""

    def __init__(self, metrics: StepMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        steps = GaugeMetricFamily(
            "k8sjobs_steps", "Steps of this session in each state.", labels=["state"]
        )
        for state, count in self._metrics.by_state().items():
            steps.add_metric([state], count)
        yield steps
        reconnects, relists = self._metrics.watches()
        for name, doc, counts in (
            ("k8sjobs_watch_reconnects", "Watch requests after the first, by why.", reconnects),
            ("k8sjobs_watch_relists", "LISTs of the watched objects, by why.", relists),
        ):
            family = CounterMetricFamily(name, doc, labels=["reason"])
            for reason, count in counts.items():
                family.add_metric([reason], count)
            yield family
        requests = CounterMetricFamily(
            "k8sjobs_api_requests", "Kubernetes API requests sent.", labels=["verb", "code"]
        )
        for (verb, code), count in self._metrics.requests().items():
            requests.add_metric([verb, code], count)
        yield requests
        outages, seconds = self._metrics.outages()
        yield CounterMetricFamily(
            "k8sjobs_api_outages", "Times the Kubernetes API server was lost.", value=outages
        )
        yield CounterMetricFamily(
            "k8sjobs_api_outage_seconds",
            "Seconds the Kubernetes API server was unreachable (the current outage too).",
            value=seconds,
        )
