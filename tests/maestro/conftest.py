"""Fixtures for the Maestro adapter tests: a fake cluster, and maestrowf as installed.

``maestro_env`` simulates ``pip install k8sjobs``: it puts the shipped
``k8sjobs-maestro.pth`` in a user site directory (PYTHONUSERBASE), which Python processes
like site-packages, so a plain ``maestro`` subprocess finds ``type: kubernetes`` exactly
as it would after an install.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sysconfig
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.testing import ControllerConfig, FakeCluster

PTH = Path(__file__).parents[2] / "k8sjobs" / "k8sjobs-maestro.pth"
FAST = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)


def user_site(base: Path) -> Path:
    """Return the site-packages directory Python uses for PYTHONUSERBASE=``base``."""
    scheme = f"{os.name}_user"
    return Path(sysconfig.get_path("purelib", scheme, vars={"userbase": str(base)}))


@pytest.fixture
def maestro_env(tmp_path: Path) -> dict[str, str]:
    """Return an environment in which maestrowf finds the adapter through the .pth file."""
    base = tmp_path / "userbase"
    site = user_site(base)
    site.mkdir(parents=True)
    (site / PTH.name).write_text(PTH.read_text())
    env = dict(os.environ)
    env["PYTHONUSERBASE"] = str(base)
    env.pop("PYTHONNOUSERSITE", None)
    return env


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
