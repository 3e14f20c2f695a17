"""The examples run as written: the notebook's cells in order, and the MuMMI-style driver."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import CodeType
from typing import Any

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


async def run_cell(source: str, namespace: dict[str, Any], name: str) -> Any:
    """Run a cell as Jupyter does (top-level await allowed); return its last expression."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        last = None
    else:
        tree.body.pop()
    await run_code(compile(tree, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
    if last is None:
        return None
    expression = ast.Expression(last.value)
    return await run_code(
        compile(expression, name, "eval", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace
    )


async def run_code(code: CodeType, namespace: dict[str, Any]) -> Any:
    """Evaluate ``code``, awaiting it when it holds a top-level ``await``."""
    if code.co_flags & inspect.CO_COROUTINE:
        return await eval(code, namespace)
    return eval(code, namespace)


async def test_notebook_cells_run_in_order_and_display_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the notebook keeps its state in ./.k8sjobs
    namespace: dict[str, Any] = {"__name__": "notebook"}
    shown = []
    for index, source in enumerate(code_cells(EXAMPLES / "notebook.ipynb")):
        value = await run_cell(source, namespace, f"notebook.ipynb[cell {index + 1}]")
        if value is not None:
            shown.append(value)
    tables = [v._repr_html_() for v in shown if hasattr(v, "_repr_html_")]
    assert len(tables) >= 4 and all(t.startswith("<table>") for t in tables)
    assert tables[-1].count("SUCCEEDED") == 2  # produce and total, handed over
    assert {"square-0": 0, "square-1": 1, "square-2": 4, "square-3": 9} in shown
    printed = capsys.readouterr().out
    assert "hello: SUCCEEDED" in printed
    assert "\n45\n" in printed  # the sum of 0..9, computed from the handed-over file
    assert re.search(r"broken: FAILED after \S+ \(the script exited with code 3", printed)
    assert namespace["session"].closed


def test_mummi_driver_runs_on_the_local_backend(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "mummi_driver.py"), "--sims", "8", "--slots", "4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(" energy " in line for line in lines[:-1]) == 8
    assert lines[-1].startswith("best patch of 8 simulations: (")
    assert not (tmp_path / ".k8sjobs").exists()  # its state went to a temporary directory


LOCAL_PAGE = Path(__file__).parent.parent / "docs" / "local.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_local_page_examples_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = _BLOCK.findall(LOCAL_PAGE.read_text())
    assert len(blocks) == 5
    for index, code in enumerate(blocks):
        exec(compile(code, f"local.md[example {index + 1}]", "exec"), {"__name__": "docs"})
        printed = capsys.readouterr().out
        for comment in re.findall(r"# (\w+: [A-Z]+ .*)$", code, re.MULTILINE):
            shown = comment.split("...")[0]  # "..." stands for what varies
            assert shown in printed, f"example {index + 1} did not print {shown!r}"
    assert (tmp_path / ".k8sjobs" / "steps").is_dir()


def test_mpi_study_runs_on_the_local_backend(tmp_path: Path) -> None:
    """examples/mpi: a real mpirun across two local "nodes", then the summary of its ranks."""

    def k8sjobs(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "k8sjobs.cli", *argv]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    # Two pods of two cores each; --cpu lets a smaller machine run them (mpirun uses slots).
    done = k8sjobs("run", str(EXAMPLES / "mpi" / "study.yaml"), "--cpu", "4", "--plain")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 succeeded" in done.stdout
    log = k8sjobs("logs", "--study", "mpi-hello", "hello").stdout.splitlines()
    # Open MPI 4.1 may add a line of its own ("plm:rsh: Warning: setpgid(...) failed").
    ranks = [line.split(" on ")[0] for line in log if line.startswith("rank ")]
    assert ranks == [f"rank {i} of 4" for i in range(4)]
    summary = k8sjobs("logs", "--study", "mpi-hello", "summary").stdout.split()
    # Two ranks on each pod: index 0 (the launcher) and index 1 (the worker).
    assert summary[0::2] == ["2", "2"]
    assert [name.rsplit("-", 1)[1] for name in summary[1::2]] == ["0", "1"]


def test_mummi_driver_serves_metrics_and_writes_a_row_per_simulation(tmp_path: Path) -> None:
    args = ["--sims", "6", "--slots", "3", "--metrics-port", "0", "--trace", "sims.tsv"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "mummi_driver.py"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("metrics: http://127.0.0.1:")
    rows = (tmp_path / "sims.tsv").read_text().splitlines()
    assert len(rows) == 1 + 6 and all(r.split("\t")[4] == "SUCCEEDED" for r in rows[1:])


async def test_mummi_driver_waves_are_the_parents_of_their_simulations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from k8sjobs import Session
    from k8sjobs.local import LocalBackend

    spec = importlib.util.spec_from_file_location("mummi_driver", EXAMPLES / "mummi_driver.py")
    assert spec is not None and spec.loader is not None
    driver = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mummi_driver", driver)  # its dataclasses look it up
    spec.loader.exec_module(driver)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("mummi")
    backend = LocalBackend(state_dir=tmp_path, cpu=2)
    async with Session(study="mm", backend=backend, tracer_provider=provider) as s:
        await driver.drive(s, 4, 2, lambda name: tracer.start_as_current_span(name))
    finished = spans.get_finished_spans()
    waves = {sp.context.span_id: sp.name for sp in finished if sp.name.startswith("wave ")}
    sims = [sp for sp in finished if sp.name.startswith("step sim-")]
    assert len(sims) == 4
    assert all(sp.parent is not None and sp.parent.span_id in waves for sp in sims)
    assert {waves[sp.parent.span_id] for sp in sims if sp.parent} == {"wave 1", "wave 2"}
