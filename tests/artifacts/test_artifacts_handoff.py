"""The handoff entry point as a subprocess: pull inputs, then push outputs after the marker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from artifact_helpers import make_tree, same_tree

from k8sjobs.artifacts import Registry
from k8sjobs.testing.registry import RegistryServer

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "k8sjobs.handoff", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )  # type: ignore[call-overload]


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
    registry: Registry, plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    tree = make_tree(tmp_path / "upstream")
    async with registry:
        await registry.push("study/a:out", [tree])
    outputs = {
        "model": {"path": "model.bin", "reference": "study/b:model"},
        "logs": {"path": "logs", "reference": "study/b:logs"},
    }
    config = _config(tmp_path, plain_registry, inputs={"data": "study/a:out"}, outputs=outputs)

    pull = _run(["pull", "--config", str(config)], _env(pod))
    out, err = pull.communicate(timeout=30)
    assert pull.returncode == 0, err
    assert same_tree(tree, pod["inputs"] / "data" / "upstream")

    push = _run(["push", "--config", str(config), "--timeout", "30"], _env(pod))
    await asyncio.sleep(0.5)  # the "main container" runs now
    (pod["work"] / "model.bin").write_bytes(b"weights")
    (pod["work"] / "logs").mkdir()
    (pod["work"] / "logs" / "train.log").write_text("ok\n")
    (pod["status"] / "exitcode").write_text("0\n")
    out, err = push.communicate(timeout=30)
    assert push.returncode == 0, err
    written = json.loads((pod["status"] / "outputs.json").read_text())
    assert json.loads(out.strip().splitlines()[-1]) == written
    assert set(written) == {"model", "logs"}
    async with registry:
        assert await registry.resolve("study/b:model") == written["model"]["digest"]
        await registry.pull(written["logs"]["reference"], tmp_path / "check")
    assert (tmp_path / "check" / "logs" / "train.log").read_text() == "ok\n"


def test_failed_step_pushes_nothing_and_exits_0(
    plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"m": {"path": "m", "reference": "x/y:never"}}
    )
    (pod["status"] / "exitcode").write_text("3")
    push = _run(["push", "--config", str(config)], _env(pod))
    _, err = push.communicate(timeout=30)
    assert push.returncode == 0 and "exited with 3" in err
    assert not (pod["status"] / "outputs.json").exists()


def test_only_index_0_of_a_multi_node_step_pushes(
    plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"m": {"path": "absent", "reference": "x/y:once"}}
    )
    (pod["status"] / "exitcode").write_text("0")
    push = _run(["push", "--config", str(config)], {**_env(pod), "JOB_COMPLETION_INDEX": "1"})
    _, err = push.communicate(timeout=30)
    assert push.returncode == 0 and "index 0 pushes" in err  # "absent" was never looked for
    assert not (pod["status"] / "outputs.json").exists()


def test_missing_output_fails_naming_it(
    plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(
        tmp_path, plain_registry, outputs={"model": {"path": "nope.bin", "reference": "x/y:z"}}
    )
    (pod["status"] / "exitcode").write_text("0")
    push = _run(["push", "--config", str(config)], _env(pod))
    _, err = push.communicate(timeout=30)
    assert push.returncode == 1
    assert 'Output "model"' in err and "nope.bin" in err and len(err.strip().splitlines()) == 1


def test_pull_of_missing_input_fails_in_one_line(
    plain_registry: RegistryServer, tmp_path: Path, pod: dict[str, Path]
) -> None:
    config = _config(tmp_path, plain_registry, inputs={"data": "no/such:thing"})
    pull = _run(["pull", "--config", str(config)], _env(pod))
    _, err = pull.communicate(timeout=30)
    assert pull.returncode == 1
    assert "no/such:thing" in err and len(err.strip().splitlines()) == 1
