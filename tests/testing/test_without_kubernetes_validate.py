"""The fake cluster works on a plain ``pip install k8sjobs`` (issue 28 item 10): without
kubernetes_validate (the ``k8sjobs[testing]`` extra) it serves and runs Jobs, says once that
it checks no schema, and points at the extra."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import asyncio, sys
sys.modules["kubernetes_validate"] = None  # as if not installed: importing it fails
from k8sjobs import Session, Step
from k8sjobs.testing import FakeCluster

async def main():
    async with FakeCluster() as cluster:
        async with Session(backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s:
            handle = await s.submit(Step(name="hello", image="busybox", script="echo hi"))
            result = await handle.wait(timeout=60)
            print("RESULT", result.state)

asyncio.run(main())
"""


def test_the_fake_cluster_runs_a_job_without_kubernetes_validate() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "RESULT SUCCEEDED" in done.stdout
    assert done.stderr.count("kubernetes_validate is not installed") == 1
    assert "pip install 'k8sjobs[testing]'" in done.stderr


def test_the_testing_extra_names_kubernetes_validate() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    assert any(r.startswith("kubernetes-validate") for r in extras["testing"])
