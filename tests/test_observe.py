"""Traces, metrics and the trace file of a study (issue 35), with the OTel SDK's in-memory
exporters, a real Prometheus endpoint scraped over HTTP, on the local backend and on the fake
cluster (its Jobs' uids and pods' nodes are the objects')."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from k8sjobs import Session
from k8sjobs.local import LocalBackend
from k8sjobs.observe.tracefile import COLUMNS, escape
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import RegistryServer

Maker = Callable[..., Session]


@pytest.fixture(params=["local", "fake-cluster"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Maker, Any]]:
    """Yield a maker of sessions on one backend (and the fake cluster, when it is one)."""
    if request.param == "local":

        def local(**options: Any) -> Session:
            backend = LocalBackend(state_dir=tmp_path / "state")
            return Session(study="obs", backend=backend, store=f"oci:{tmp_path / 's'}", **options)

        yield local, None
        return
    cluster: FakeCluster = request.getfixturevalue("fake_cluster_execute")
    registry: RegistryServer = request.getfixturevalue("docker_registry")

    def kube(**options: Any) -> Session:
        return Session(
            study="obs",
            kubeconfig=cluster.kubeconfig_path,
            store=f"{registry.location}/{tmp_path.name}",
            plain_http=True,
            keep_failed=True,  # the failed step's Job stays, to compare its uid
            **options,
        )

    yield kube, cluster


def steps(marker: Path) -> list[Step]:
    """Return the study: one reused (run once before), one retried once, one failing."""
    retry = f"if [ ! -e {marker} ]; then touch {marker}; exit 5; fi\necho ok > out.txt\n"
    return [
        Step(name="reused", script="echo r > out.txt\n", outputs={"out": "out.txt"}),
        Step(name="retried", script=retry, outputs={"out": "out.txt"}, retries=1),
        Step(name="failing", script="exit 3\n"),
    ]


def scrape(port: int) -> dict[str, float]:
    """Return each sample of the endpoint, as "name{label=value,...}" -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


async def test_a_study_with_a_failure_a_retry_and_a_reused_step_is_traced_and_counted(
    where: tuple[Maker, FakeCluster | None], tmp_path: Path
) -> None:
    make, cluster = where
    async with make() as s:  # records "reused"'s success
        await s.gather(await s.submit(steps(tmp_path / "m")[0]), check=True, timeout=240)

    creates_before = cluster.request_count("create") if cluster is not None else 0
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    trace_file = tmp_path / "trace.tsv"
    session = make(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        metrics_port=0,
        trace_file=trace_file,
    )
    tracer = tracer_provider.get_tracer("driver")
    async with session as s:
        with tracer.start_as_current_span("iteration") as iteration:
            handles = await s.submit_many(steps(tmp_path / "m"))
        assert s.observer is not None
        port = next(r for r in s.observer.recorders if hasattr(r, "sinks")).sinks[-1].port
        during = scrape(port)
        assert sum(v for k, v in during.items() if k.startswith("k8sjobs_steps{")) == 3
        results = {r.name: r for r in await s.gather(*handles, timeout=240)}
        after = scrape(port)
        natives = {h.name: h.backend.native_of(h) for h in handles}  # type: ignore[attr-defined]

    assert results["reused"].reason == "Cached"
    assert results["retried"].ok and results["failing"].exit_code == 3
    ended = {
        st: sum(1 for r in results.values() if str(r.state) == st) for st in ("SUCCEEDED", "FAILED")
    }
    assert after["k8sjobs_steps_ended_total{result=SUCCEEDED}"] == ended["SUCCEEDED"] == 2
    assert after["k8sjobs_steps_ended_total{result=FAILED}"] == ended["FAILED"] == 1
    assert after["k8sjobs_steps{state=SUCCEEDED}"] == 2
    assert after["k8sjobs_cache_hits_total{}"] == 1
    assert after["k8sjobs_cache_misses_total{}"] == 1  # "retried" (failing has no outputs)
    assert after["k8sjobs_step_duration_seconds_count{result=SUCCEEDED}"] == 1
    if cluster is not None:  # the driver's count of its requests is the server's
        requests = sum(v for k, v in after.items() if k.startswith("k8sjobs_api_requests_total{"))
        sent = sum(
            v
            for k, v in after.items()
            if k.startswith("k8sjobs_api_requests_total{") and "verb=create" in k
        )
        assert requests > sent > 0 and sent == cluster.request_count("create") - creates_before

    finished: list[ReadableSpan] = list(spans.get_finished_spans())
    by_name = {sp.name: sp for sp in finished}
    root = by_name["k8sjobs study obs"]
    for name, result in results.items():
        step = by_name[f"step {name}"]
        assert (
            step.parent is not None and step.parent.span_id == iteration.get_span_context().span_id
        )
        assert step.context.trace_id == iteration.get_span_context().trace_id
        attrs = step.attributes or {}
        assert attrs["cicd.pipeline.name"] == "obs"
        assert attrs["cicd.pipeline.run.id"] == root.attributes["cicd.pipeline.run.id"]  # type: ignore[index]
        assert attrs["cicd.pipeline.task.name"] == name
        assert attrs["cicd.pipeline.task.run.result"] == ("success" if result.ok else "failure")
        assert attrs["k8sjobs.reused"] == (name == "reused")
        children = {
            c.name for c in finished if c.parent and c.parent.span_id == step.context.span_id
        }
        states = [e.attributes["k8sjobs.state"] for e in step.events if e.name == "k8sjobs.state"]  # type: ignore[index]
        assert states[-1] == str(result.state)
        if name == "reused":
            assert children == {"reuse", "queue"}
            continue
        assert {"queue", "run"} <= children
        assert attrs["k8s.namespace.name"] == handles[0].namespace
        native = natives[name]
        assert attrs["cicd.pipeline.task.run.id"] == native.id != ""  # the Job uid, or the pid
        if cluster is not None:
            job = next(
                j for j in cluster.objects("jobs") if j["metadata"]["name"] == attrs["k8s.job.name"]
            )
            assert attrs["k8s.job.uid"] == job["metadata"]["uid"]
            pods = [
                p for p in cluster.objects("pods") if p["metadata"]["name"] == attrs["k8s.pod.name"]
            ]
            assert attrs["k8s.node.name"] == pods[0]["spec"]["nodeName"] != ""
        else:
            assert attrs["k8sjobs.pid"] == native.pid
    assert (by_name["step failing"].attributes or {})["k8sjobs.exit_code"] == 3
    retried = by_name["step retried"]
    assert (retried.attributes or {})["k8sjobs.attempts"] == 2

    data = reader.get_metrics_data()
    assert data is not None
    otel = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"k8sjobs.steps", "k8sjobs.step.duration", "k8sjobs.step.queue_wait"} <= set(otel)
    ended_otel = {
        str(p.attributes["result"]): p.value  # type: ignore[index, union-attr]
        for p in otel["k8sjobs.steps.ended"].data.data_points
    }
    assert ended_otel == {"SUCCEEDED": 2, "FAILED": 1}

    lines = trace_file.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS)
    rows = {
        r["name"]: r
        for r in (dict(zip(COLUMNS, line.split("\t"), strict=True)) for line in lines[1:])
    }
    assert {n: r["state"] for n, r in rows.items()} == {n: str(r.state) for n, r in results.items()}
    assert rows["reused"]["origin"] == "reused" and rows["failing"]["exit"] == "3"
    assert rows["retried"]["attempts"] == "2"
    assert rows["retried"]["native_id"] == natives["retried"].id


def test_with_nothing_configured_no_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from k8sjobs import Session, Step\n"
        "from k8sjobs.local import LocalBackend\n"
        "async def main():\n"
        f"    b = LocalBackend(state_dir={str(tmp_path / 'st')!r})\n"
        f"    store = {'oci:' + str(tmp_path / 'o')!r}\n"
        "    async with Session(study='q', backend=b, store=store) as s:\n"
        "        await s.gather(await s.submit(Step(name='a', script='true')), check=True)\n"
        "asyncio.run(main())\n"
        "watched = ('opentelemetry', 'prometheus_client', 'k8sjobs.observe.')\n"
        "print(sorted(m for m in sys.modules if m.startswith(watched)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    imported = json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))
    # (k8sjobs.observe's seam is the backends' and session's own, and imports no OTel.)
    assert not [m for m in imported if m.split(".")[-1] not in ("native", "observer")], imported


def test_a_port_in_use_and_an_unwritable_trace_file_are_clear_errors(tmp_path: Path) -> None:
    from k8sjobs.observe import observer_for

    first = observer_for(study="a", backend="local", metrics_port=0)
    assert first is not None
    port = first.recorders[0].sinks[0].port  # type: ignore[attr-defined]
    try:
        with pytest.raises(ValueError, match=f"metrics_port={port}: cannot listen"):
            observer_for(study="a", backend="local", metrics_port=port)
    finally:
        first.close()
    with pytest.raises(ValueError, match=r"trace file .* cannot be written"):
        observer_for(study="a", backend="local", trace_file=tmp_path / "no" / "dir" / "t.tsv")


def test_bad_otel_values_are_a_warning_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from k8sjobs.observe import observer_for

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "nonsense")
    observer = observer_for(study="a", backend="local")
    assert observer is not None
    assert "OTEL_TRACES_EXPORTER='nonsense'" in caplog.text


def test_a_recorder_that_raises_is_switched_off_and_the_step_still_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from k8sjobs.handle import StepHandle
    from k8sjobs.observe import Observer
    from k8sjobs.state import StepState

    class Closed:
        def submitted(self, track: object) -> None:
            pass

        def changed(self, track: object, previous: object, reason: str) -> None:
            raise RuntimeError("exporter closed")

        def happened(self, track: object, event: object) -> None:
            pass

        def ended(self, track: object) -> None:
            raise AssertionError("switched off: never called again")

        def close(self) -> None:
            pass

    observer = Observer([Closed()])
    handle = StepHandle(name="a", study="s", object_name="a", namespace="n", backend=LocalBackend())
    observer.watch(handle)
    assert handle.report(handle.result.evolve(state=StepState.FAILED, reason="ExitCode"))
    assert handle.done and observer.recorders == []
    assert "exporter closed" in caplog.text and "the run goes on" in caplog.text


@pytest.mark.parametrize("value", ["a\tb", "x\ny", "back\\slash", "bell\x07", "\r", "nul\x00"])
def test_escaped_values_stay_one_field(value: str) -> None:
    escaped = escape(value)
    assert "\t" not in escaped and "\n" not in escaped and "\r" not in escaped
    assert all(ord(c) >= 0x20 for c in escaped)


def local_session(tmp_path: Path, **options: Any) -> Session:
    backend = LocalBackend(state_dir=tmp_path / "state")
    return Session(study="h", backend=backend, store=f"oci:{tmp_path / 's'}", **options)


async def test_a_shut_down_provider_or_a_failing_exporter_never_fails_the_run(
    tmp_path: Path,
) -> None:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Refusing(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            raise ConnectionError("the collector hung up")

    closed = TracerProvider()
    closed.shutdown()
    refusing = TracerProvider()
    refusing.add_span_processor(SimpleSpanProcessor(Refusing()))
    for provider in (closed, refusing):
        async with local_session(tmp_path, tracer_provider=provider) as s:
            a = await s.submit(Step(name="a", script="true"))
            assert (await s.gather(a, timeout=120))[0].ok


async def test_an_unreachable_collector_does_not_hold_the_event_loop_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    session = local_session(tmp_path)
    async with session as s:
        assert s.observer is not None
        assert [type(r).__name__ for r in s.observer.recorders] == ["StepTracer"]
        await s.gather(await s.submit(Step(name="a", script="true")), timeout=120)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
    ticker.cancel()
    # The export's retries ran in a thread: the loop went on meanwhile.
    assert ticks > 1


@given(st.dictionaries(st.sampled_from(COLUMNS), st.text()))
def test_any_values_make_one_line_of_every_column(fields: dict[str, str]) -> None:
    from k8sjobs.observe.tracefile import row

    line = row(fields)
    assert line.endswith("\n") and line.count("\n") == 1
    assert len(line[:-1].split("\t")) == len(COLUMNS)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line[:-1].replace("\t", ""))
    assert len(line[:-1].splitlines()) <= 1  # no \u2028 or other line break either


async def test_a_pods_input_pull_and_output_push_are_spans_and_seconds(
    where: tuple[Maker, FakeCluster | None], tmp_path: Path
) -> None:
    make, _cluster = where
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    session = make(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        metrics_port=0,
    )
    async with session as s:
        make_step = await s.submit(
            Step(name="make", script="echo r > out.txt\n", outputs={"out": "out.txt"})
        )
        use = await s.submit(
            Step(
                name="use",
                script="cat $K8SJOBS_INPUTS/i/*\n",
                inputs={"i": make_step.output("out")},
            )
        )
        await s.gather(make_step, use, check=True, timeout=240)
        assert s.observer is not None
        port = next(r for r in s.observer.recorders if hasattr(r, "sinks")).sinks[-1].port
        scraped = scrape(port)
        natives = {h.name: h.backend.native_of(h) for h in (make_step, use)}  # type: ignore[attr-defined]

    finished = {span.name: span for span in spans.get_finished_spans()}
    for step_name, child, times in (
        ("make", "output push", natives["make"].output_push),
        ("use", "input pull", natives["use"].input_pull),
        ("use", "output push", None),
    ):
        found = [
            span
            for span in spans.get_finished_spans()
            if span.name == child
            and span.parent is not None
            and span.parent.span_id == finished[f"step {step_name}"].context.span_id
        ]
        if times is None:
            assert found == []
            continue
        assert len(found) == 1
        assert (found[0].start_time, found[0].end_time) == times
    assert natives["make"].input_pull is None
    assert scraped["k8sjobs_artifact_transfer_seconds_count{direction=pull}"] == 1
    assert scraped["k8sjobs_artifact_transfer_seconds_count{direction=push}"] == 1
    data = reader.get_metrics_data()
    assert data is not None
    transfer = next(
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "k8sjobs.artifact.transfer"
    )
    counts = {
        str(p.attributes["direction"]): p.count  # type: ignore[index, union-attr]
        for p in transfer.data.data_points
    }
    assert counts == {"pull": 1, "push": 1}
