"""An API server that is not there: a session's start says so in one line, an outage is said
once and waited out, and a step is never failed or lost because the driver lost the server."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.errors import ClusterUnreachable
from k8sjobs.kube import KubernetesBackend
from k8sjobs.session import Session
from k8sjobs.state import StepState
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .apiservers import answering, free_port, kubeconfig_for, silent_server
from .kubehelpers import session, step


def _session(kubeconfig: Path, tmp_path: Path, **options: object) -> Session:
    return Session(study="s", kubeconfig=kubeconfig, log_dir=tmp_path / "logs", options=options)


async def _start_error(kubeconfig: Path, tmp_path: Path, **options: object) -> str:
    s = _session(kubeconfig, tmp_path, **options)
    with pytest.raises(ClusterUnreachable) as caught:
        await s.start()
    await s.aclose()
    text = str(caught.value)
    assert "\n" not in text
    return text


async def test_nothing_listening_fails_the_start_naming_the_server(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    config = kubeconfig_for(tmp_path / "kubeconfig", server)
    text = await _start_error(config, tmp_path, connect_timeout=2)
    assert text.startswith(f"Kubernetes API server {server} (kubeconfig {config})")
    assert "the connection was refused (nothing listens there)" in text
    assert "server address in the kubeconfig" in text


async def test_a_server_that_never_answers_fails_the_start_at_the_bound(tmp_path: Path) -> None:
    async with silent_server() as server:
        config = kubeconfig_for(tmp_path / "kubeconfig", server)
        text = await _start_error(config, tmp_path, connect_timeout=0.5)
    assert f"Kubernetes API server {server}" in text
    assert "it sent no answer within 0.5 s" in text and "--connect-timeout" in text


async def test_refused_credentials_fail_the_start_at_once(tmp_path: Path) -> None:
    async with answering(401, "Unauthorized", "Unauthorized") as server:
        config = kubeconfig_for(tmp_path / "kubeconfig", server)
        # A bound far above the test's: a 401 is not retried until it runs out.
        text = await _start_error(config, tmp_path, connect_timeout=3600)
    assert "it refused the credentials (401 Unauthorized)" in text
    assert "get fresh credentials" in text


async def test_forbidden_names_the_verb_the_resource_and_k8sjobs_rbac(tmp_path: Path) -> None:
    message = 'jobs.batch is forbidden: User "u" cannot list resource "jobs" in API group "batch"'
    async with answering(403, "Forbidden", message) as server:
        config = kubeconfig_for(tmp_path / "kubeconfig", server)
        text = await _start_error(config, tmp_path, connect_timeout=3600)
    assert 'grant verb "list" on resource "jobs" (apiGroup "batch")' in text
    assert "`k8sjobs rbac`" in text


async def test_an_untrusted_certificate_fails_the_start_at_once(tmp_path: Path) -> None:
    async with FakeCluster("simulate", directory=tmp_path / "fake", tls=True) as fake:
        config = kubeconfig_for(tmp_path / "kubeconfig", fake.url, token=fake.token or "")
        text = await _start_error(config, tmp_path, connect_timeout=3600)
    assert "its TLS certificate was not accepted" in text
    assert "certificate-authority-data" in text


async def test_an_outage_is_said_once_and_the_step_still_succeeds(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="k8sjobs")
    async with session(cluster, tmp_path) as s:
        handle = await s.submit(step("long", duration=1.0))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend) and backend.health is not None
        health = backend.health
        port = cluster.server.port
        await cluster.server.stop()
        await wait_until(lambda: not health.reachable, "the outage is noticed")
        notice = health.notice()
        assert notice is not None and notice.startswith("API server unreachable since ")
        assert notice.count(":") >= 2 and "retrying" in notice
        await wait_until(lambda: health.outages == 1)
        await cluster.server.start(port=port)
        result = await handle.wait(60)
    assert result.state is StepState.SUCCEEDED
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "is unreachable" in warnings[0].getMessage()
    assert cluster.url.split("//")[1] in warnings[0].getMessage()
    assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_an_outage_past_its_bound_stops_the_wait_not_the_step(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with session(cluster, tmp_path, outage_timeout=0.5) as s:
        handle = await s.submit(step("long", duration=3600))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        await cluster.server.stop()
        with pytest.raises(ClusterUnreachable) as caught:
            await handle.wait(60)
        assert "outage_timeout (0.5 s)" in str(caught.value)
        assert "The steps were not stopped" in str(caught.value)
        assert handle.state is StepState.RUNNING  # not failed, not lost: not known


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"outage_timeout": -5}, "outage_timeout"),
        ({"pending_timeout": 0}, "pending_timeout"),
    ],
)
def test_bounds_that_fail_at_once_or_never_are_refused_naming_the_option(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be a number of seconds above 0"):
        KubernetesBackend(**options)


async def test_an_outage_is_counted_with_its_seconds_in_both_metric_apis(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ..test_observe import scrape

    reader = InMemoryMetricReader()
    s = Session(
        study="s",
        kubeconfig=cluster.kubeconfig_path,
        log_dir=tmp_path / "logs",
        options={"pending_grace": 0.5},
        meter_provider=MeterProvider(metric_readers=[reader]),
        metrics_port=0,
    )
    async with s:
        handle = await s.submit(step("long", duration=1.0))
        await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
        backend = s.backends["kubernetes"]
        assert isinstance(backend, KubernetesBackend) and backend.health is not None
        health = backend.health
        assert s.observer is not None
        port = next(r for r in s.observer.recorders if hasattr(r, "sinks")).sinks[-1].port
        assert scrape(port)["k8sjobs_api_outages_total{}"] == 0
        server_port = cluster.server.port
        await cluster.server.stop()
        await wait_until(lambda: health.outages == 1, "the outage is noticed")
        await wait_until(lambda: health.unreachable_seconds() > 0, "the outage lasts")
        during = scrape(port)
        assert during["k8sjobs_api_outages_total{}"] == 1
        assert during["k8sjobs_api_outage_seconds_total{}"] > 0
        await cluster.server.start(port=server_port)
        assert (await handle.wait(60)).state is StepState.SUCCEEDED
        await wait_until(lambda: health.reachable, "the server answers again")
        after = scrape(port)
        lasted = health.outage_seconds
        data = reader.get_metrics_data()
    assert after["k8sjobs_api_outages_total{}"] == 1
    assert (
        after["k8sjobs_api_outage_seconds_total{}"]
        == lasted
        >= during["k8sjobs_api_outage_seconds_total{}"]
    )
    assert data is not None
    points = {
        m.name: sum(p.value for p in m.data.data_points)  # type: ignore[union-attr, misc]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name.startswith("k8sjobs.api.outage")
    }
    assert points["k8sjobs.api.outages"] == 1
    assert points["k8sjobs.api.outage.duration"] == lasted
