"""Hostile trace paths (issue 35): a path that is not a regular file is refused at once,
naming it, instead of blocking the driver (a FIFO with no reader blocked ``open`` forever)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Bound on the child: a hang is the defect, so the child must end well inside this.
_BOUND_S = 120


def _open_trace_file(path: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from k8sjobs.observe.tracefile import TraceFile\n"
        "try:\n"
        "    TraceFile(sys.argv[1]).close()\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=_BOUND_S,
        env=os.environ.copy(),
    )


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_a_trace_path_that_is_not_a_regular_file_is_refused_not_waited_on(
    tmp_path: Path, kind: str
) -> None:
    import socket

    path = tmp_path / f"trace-{kind}"
    held: socket.socket | None = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        held = socket.socket(socket.AF_UNIX)
        held.bind(str(path))
    try:
        done = _open_trace_file(path)
    finally:
        if held is not None:
            held.close()
    assert done.returncode == 3, done.stderr
    assert str(path) in done.stdout
    assert "cannot be written" in done.stdout


def test_a_fifo_with_a_reader_is_refused_too(tmp_path: Path) -> None:
    """A pipe's writes would block the event loop whenever the reader lags."""
    path = tmp_path / "trace-fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        done = _open_trace_file(path)
    finally:
        os.close(reader)
    assert done.returncode == 3, done.stderr
    assert "not a regular file" in done.stdout
    assert "cannot be written" in done.stdout


@pytest.mark.parametrize(
    ("sampler", "arg", "named"),
    [
        ("bogus", None, "OTEL_TRACES_SAMPLER='bogus'"),
        ("traceidratio", "abc", "OTEL_TRACES_SAMPLER_ARG='abc'"),
        ("parentbased_traceidratio", "7", "OTEL_TRACES_SAMPLER_ARG='7'"),
        ("traceidratio", "-0.5", "OTEL_TRACES_SAMPLER_ARG='-0.5'"),
        ("traceidratio", "nan", "OTEL_TRACES_SAMPLER_ARG='nan'"),
    ],
)
def test_a_bad_sampler_or_ratio_is_named_not_silently_sampled_at_one(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    sampler: str,
    arg: str | None,
    named: str,
) -> None:
    """The SDK fell back to sampling every trace, saying only 'could not convert to float'
    (for 7, a float) or 'couldn't recognize sampler'; k8sjobs names the variable and the fix."""
    from k8sjobs.observe import observer_for

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is None:
        monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    else:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    observer = observer_for(study="a", backend="local")
    assert observer is not None
    try:
        assert named in caplog.text
        assert "traces are off" in caplog.text
    finally:
        observer.close()


@pytest.mark.parametrize("arg", ["0", "0.25", "1"])
def test_a_good_ratio_is_kept(monkeypatch: pytest.MonkeyPatch, arg: str) -> None:
    from k8sjobs.observe import observer_for
    from k8sjobs.observe.otel import StepTracer

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    observer = observer_for(study="a", backend="local")
    assert observer is not None
    try:
        assert isinstance(observer.recorders[0], StepTracer)
    finally:
        observer.close()


@pytest.mark.parametrize("signal", ["TRACES", "METRICS"])
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "notaurl"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
        ("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "ftp://collector:4318"),
        ("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "http://collector:notaport"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://:4318"),
    ],
)
def test_an_otlp_endpoint_that_is_not_a_url_is_named_at_the_start(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    signal: str,
    variable: str,
    value: str,
) -> None:
    """The exporter took it and said 'Invalid URL' at each export, naming no variable."""
    from k8sjobs.observe import observer_for

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    variable = variable.format(signal=signal)
    monkeypatch.setenv(variable, value)
    observer = observer_for(study="a", backend="local")
    assert observer is not None
    try:
        assert f"{variable}={value!r} is not an http(s) URL" in caplog.text
    finally:
        observer.close()
