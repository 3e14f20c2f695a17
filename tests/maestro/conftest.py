"""Fixtures for the Maestro adapter tests: a fake cluster, and maestrowf as installed.

``maestro_cli`` runs the ``maestro`` command of the test environment as it is: an
editable install (scripts/test), whose ``k8sjobs-maestro.pth`` setup.py put in
site-packages. ``maestro_env`` simulates ``pip install k8sjobs`` from a wheel: it puts the
shipped .pth in a directory that a ``sitecustomize`` module (found through PYTHONPATH) adds
as a site directory, so Python processes the .pth as it does in site-packages. (A user
site directory would be simpler, but a virtual environment ignores it.)
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

PTH = Path(__file__).parents[2] / "k8sjobs" / "maestro" / "k8sjobs-maestro.pth"
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
def maestro_cli() -> MaestroCli:
    """Return ``run(*args, cwd=, timeout=)``: the installed ``maestro`` console script.

    It runs in the test environment unchanged (no sitecustomize): the editable install's
    own .pth file must be what shows it ``type: kubernetes``.
    """
    executable = shutil.which("maestro")
    if executable is None:
        pytest.skip("maestrowf's maestro command is not installed")
    installed = Path(sysconfig.get_paths()["purelib"]) / PTH.name
    if not installed.is_file():
        pytest.fail(
            f"{installed} is missing: this environment's k8sjobs was installed before setup.py "
            "shipped the .pth to editable installs too; reinstall it (.venv/bin/pip install -e .)"
        )

    async def run(*args: str, cwd: Path, timeout: float = 60.0) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            executable,
            *args,
            cwd=cwd,
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
