"""The handoff entry point, as a subprocess and in-process: pull inputs, then push outputs
after the marker. Every test runs on both paths (``handoff_path``) and must see the same."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from k8sjobs.artifacts import Registry
from k8sjobs.artifacts.handoff import read_push_report
from k8sjobs.local._handoff import InProcessHandoff, recognise
from k8sjobs.render.manifests import PULL_CONTAINER, PUSH_CONTAINER
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import make_tree, same_tree

ROOT = Path(__file__).resolve().parents[2]


async def _run(
    path: str,
    args: list[str],
    env: dict[str, str],
    main_ended: Callable[[], Awaitable[object]] | None = None,
) -> tuple[int, str, str]:
    """Run ``python -m k8sjobs.handoff args`` on ``path``; return (exit code, stdout, stderr).

    In-process, stdout and stderr are one log, as they are in a local container's log file;
    ``main_ended`` is when the runner would start the push (a subprocess polls instead).
    """
    if path == "subprocess":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "k8sjobs.handoff", *args, env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()
    name = PULL_CONTAINER if args[0] == "pull" else PUSH_CONTAINER
    # A pod given no registry secret has no DOCKER_CONFIG; the fixture's stays in os.environ.
    env = {k: v for k, v in env.items() if k != "DOCKER_CONFIG"}
    call = recognise(name, ["python", "-m", "k8sjobs.handoff", *args], env)
    assert call is not None
    runner = InProcessHandoff()
    log = Path(env["K8SJOBS_STATUS_DIR"]).parent / f"{name}.log"
    try:
        code = await asyncio.wait_for(runner.run(call, env, log, main_ended), 30)
    finally:
        await runner.aclose()
    text = log.read_text()
    return code, text, text


@pytest.fixture
def pod(tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("work", "inputs", "status")}
    for d in dirs.values():
        d.mkdir()
    return dirs


def _env(pod: dict[str, Path]) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "K8SJOBS_WORKDIR": str(pod["work"]),
        "K8SJOBS_INPUTS": str(pod["inputs"]),
        "K8SJOBS_STATUS_DIR": str(pod["status"]),
    }


def _config(tmp_path: Path, server: RegistryServer, **extra: object) -> Path:
    config = {
        "store": server.location,
        "plain_http": True,
        "ca_file": None,
        "inputs": {},
        "outputs": {},
        "annotations": {"k8sjobs.step": "b"},
        **extra,
    }
    path = tmp_path / "handoff.json"
    path.write_text(json.dumps(config))
    return path


async def test_pull_then_push_with_marker(
    handoff_path: str,
    registry: Registry,
    plain_registry: RegistryServer,
    tmp_path: Path,
    pod: dict[str, Path],
) -> None:
    tree = make_tree(tmp_path / "upstream")
    async with registry:
        await registry.push("study/a:out", [tree])
    outputs = {
        "model": {"path": "model.bin", "reference": "study/b:model"},
        "logs": {"path": "logs", "reference": "study/b:logs"},
    }
    config = _config(tmp_path, plain_registry, inputs={"data": "study/a:out"}, outputs=outputs)

    code, out, err = await _run(handoff_path, ["pull", "--config", str(config)], _env(pod))
    assert code == 0, err
    assert same_tree(tree, pod["inputs"] / "data" / "upstream")
    assert set(json.loads(out.strip().splitlines()[-1])) == {"data"}

    main_ended = asyncio.Event()
    args = ["push", "--config", str(config), "--timeout", "30"]
    push = asyncio.create_task(_run(handoff_path, args, _env(pod), main_ended.wait))
    await asyncio.sleep(0.5)  # the "main container" runs now
    (pod["work"] / "model.bin").write_bytes(b"weights")
    (pod["work"] / "logs").mkdir()
    (pod["work"] / "logs" / "train.log").write_text("ok\n")
    (pod["status"] / "exitcode").write_text("0\n")
    main_ended.set()
    code, out, err = await push
    assert code == 0, err
    written = json.loads((pod["status"] / "outputs.json").read_text())
    assert json.loads(out.strip().splitlines()[-1]) == written
    assert set(written) == {"model", "logs"}
    # Both backends read the same report: the Kubernetes one from the log, the local one
    # from the file.
    pinned = read_push_report(out)
    assert pinned == read_push_report((pod["status"] / "outputs.json").read_text())
    assert pinned["model"] == f"study/b@{written['model']['digest']}"
    async with registry:
        await registry.pull(pinned["model"], tmp_path / "pinned")
        assert await registry.resolve("study/b:model") == written["model"]["digest"]
        await registry.pull(written["logs"]["reference"], tmp_path / "check")
    assert (tmp_path / "check" / "logs" / "train.log").read_text() == "ok\n"


async def test_failed_step_pushes_nothing_and_exits_0(
    handoff_path: str, plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"m": {"path": "m", "reference": "x/y:never"}}
    )
    (pod["status"] / "exitcode").write_text("3")
    code, _, err = await _run(handoff_path, ["push", "--config", str(config)], _env(pod))
    assert code == 0 and "exited with 3" in err
    assert not (pod["status"] / "outputs.json").exists()


async def test_only_index_0_of_a_multi_node_step_pushes(
    handoff_path: str, plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"m": {"path": "absent", "reference": "x/y:once"}}
    )
    (pod["status"] / "exitcode").write_text("0")
    env = {**_env(pod), "JOB_COMPLETION_INDEX": "1"}
    code, _, err = await _run(handoff_path, ["push", "--config", str(config)], env)
    assert code == 0 and "index 0 pushes" in err  # "absent" was never looked for
    assert not (pod["status"] / "outputs.json").exists()


async def test_missing_output_fails_naming_it(
    handoff_path: str, plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"model": {"path": "nope.bin", "reference": "x/y:z"}}
    )
    (pod["status"] / "exitcode").write_text("0")
    code, _, err = await _run(handoff_path, ["push", "--config", str(config)], _env(pod))
    assert code == 1
    assert 'Output "model"' in err and "nope.bin" in err and len(err.strip().splitlines()) == 1


async def test_pull_of_missing_input_fails_in_one_line(
    handoff_path: str, plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(tmp_path, plain_registry, inputs={"data": "no/such:thing"})
    code, _, err = await _run(handoff_path, ["pull", "--config", str(config)], _env(pod))
    assert code == 1
    assert "no/such:thing" in err and len(err.strip().splitlines()) == 1


async def test_a_step_that_left_no_marker_pushes_nothing(
    plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    """In-process, the push reads the marker once the main container ended: a step killed
    before it wrote one pushes nothing (the polling container would wait for ever)."""
    config = _config(tmp_path, plain_registry, outputs={"m": {"path": "m", "reference": "x/y:z"}})
    (pod["work"] / "m").write_text("half written")
    code, _, err = await _run("in-process", ["push", "--config", str(config)], _env(pod))
    assert code == 0 and "wrote no exit code" in err
    assert not (pod["status"] / "outputs.json").exists()


def _modules_after(code: str) -> set[str]:
    """Return the heavy modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split()) & {"aiohttp", "pydantic", "yaml", "k8sjobs.steps.spec"}


def test_the_handoff_entry_point_imports_only_what_its_work_needs() -> None:
    """A pod's handoff container starts fast: no pydantic, yaml or spec at all, and the
    registry stack (aiohttp) only when a registry is opened."""
    assert _modules_after("import k8sjobs.handoff, k8sjobs.artifacts.handoff") == set()
    layout = "from k8sjobs.artifacts import open_store; open_store('oci:/nonexistent')"
    assert _modules_after(layout) == set()
    registry = "from k8sjobs.artifacts import open_store; open_store('127.0.0.1:1')"
    assert _modules_after(registry) == {"aiohttp"}


def test_the_package_keeps_render_the_function_once_the_module_is_imported() -> None:
    code = "import k8sjobs.render, k8sjobs; assert callable(k8sjobs.render), k8sjobs.render"
    assert "pydantic" in _modules_after(code)
