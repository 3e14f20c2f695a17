"""Fixtures for the Maestro adapter tests: a fake cluster, and maestrowf as installed.

``maestro_env`` simulates ``pip install k8sjobs``: it puts the shipped
``k8sjobs-maestro.pth`` in a directory that a ``sitecustomize`` module (found through
PYTHONPATH) adds as a site directory, so Python processes the .pth as it does in
site-packages and a plain ``maestro`` subprocess finds ``type: kubernetes`` exactly as it
would after an install. (A user site directory would be simpler, but a virtual environment
ignores it.)
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.testing import ControllerConfig, FakeCluster

PTH = Path(__file__).parents[2] / "k8sjobs" / "k8sjobs-maestro.pth"
FAST = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)


def install_pth(base: Path) -> dict[str, str]:
    """Return an environment whose Python processes the shipped .pth as if installed."""
    site = base / "site"
    site.mkdir(parents=True)
    (site / PTH.name).write_text(PTH.read_text())
    hook = base / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site)!r})\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def maestro_env(tmp_path: Path) -> dict[str, str]:
    """Return an environment in which maestrowf finds the adapter through the .pth file."""
    return install_pth(tmp_path / "install")


async def _cluster(kubelet: str, tmp_path: Path) -> AsyncIterator[FakeCluster]:
    directory = tmp_path / "cluster"
    directory.mkdir()
    async with FakeCluster(kubelet, directory=directory, controller=FAST) as fake:
        yield fake


@pytest_asyncio.fixture
async def execute_cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a fake cluster whose kubelet runs pods as local processes."""
    async for fake in _cluster("execute", tmp_path):
        yield fake


@pytest_asyncio.fixture
async def simulate_cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Yield a fake cluster whose kubelet only simulates pods."""
    async for fake in _cluster("simulate", tmp_path):
        yield fake


MaestroCli = Callable[..., Coroutine[Any, Any, tuple[int, str]]]


@pytest.fixture
def maestro_cli(maestro_env: dict[str, str]) -> MaestroCli:
    """Return ``run(*args, cwd=, timeout=)``: the installed ``maestro`` console script."""
    executable = shutil.which("maestro")
    if executable is None:
        pytest.skip("maestrowf's maestro command is not installed")

    async def run(*args: str, cwd: Path, timeout: float = 60.0) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            executable,
            *args,
            cwd=cwd,
            env=maestro_env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return proc.returncode or 0, out.decode()

    return run
