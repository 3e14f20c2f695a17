"""How ``maestro`` finds the adapter: the .pth line, the import hook, both installs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import k8sjobs
from k8sjobs.maestro import _hook

ROOT = Path(__file__).parents[2]
PTH = ROOT / "k8sjobs" / "maestro" / "k8sjobs-maestro.pth"


def test_shipped_pth_file_is_the_hook_line() -> None:
    assert PTH.read_text() == _hook.PTH_LINE
    assert PTH.read_text().startswith("import ") and PTH.read_text().count("\n") == 1


def test_plain_python_finds_the_adapter_through_the_pth_file(
    maestro_env: dict[str, str],
) -> None:
    probe = (
        "import sys\n"
        "assert 'k8sjobs' not in sys.modules and 'maestrowf' not in sys.modules\n"
        "from maestrowf.interfaces import ScriptAdapterFactory\n"
        "cls = ScriptAdapterFactory.get_adapter('kubernetes')\n"
        "print(cls.__module__, cls.__name__, sorted(ScriptAdapterFactory.get_valid_adapters()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=maestro_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["k8sjobs.maestro", "KubernetesScriptAdapter"]
    assert "'slurm'" in done.stdout and "'local'" in done.stdout
    assert done.stderr == ""


def test_the_editable_install_carries_the_pth_file_and_finds_the_adapter() -> None:
    """The suite runs from ``pip install -e`` (scripts/test): there, too, maestro finds it."""
    if Path(k8sjobs.__file__).parents[1] != ROOT:
        pytest.skip("k8sjobs is not installed in editable mode from this checkout")
    installed = Path(sysconfig.get_paths()["purelib"]) / PTH.name
    assert installed.read_text() == _hook.PTH_LINE
    probe = (
        "from maestrowf.interfaces import ScriptAdapterFactory\n"
        "print(ScriptAdapterFactory.get_adapter('kubernetes').__module__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no sitecustomize help
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "k8sjobs.maestro", done.stderr


def test_install_is_idempotent_and_extends_a_loaded_package() -> None:
    import maestrowf.interfaces.script as script_package

    had = _hook.installed()
    try:
        _hook.install()
        _hook.install()
        marks = [f for f in sys.meta_path if getattr(f, "_k8sjobs_maestro_hook", False)]
        assert len(marks) == 1
        assert script_package.__path__.count(_hook.ADAPTER_DIR) == 1
    finally:
        if not had:
            _hook.uninstall()
        if _hook.ADAPTER_DIR in script_package.__path__:
            script_package.__path__.remove(_hook.ADAPTER_DIR)


def test_pth_line_run_twice_installs_one_finder() -> None:
    probe = (
        "import sys\n"
        f"exec({_hook.PTH_LINE!r})\n"
        f"exec({_hook.PTH_LINE!r})\n"
        "print(sum(getattr(f, '_k8sjobs_maestro_hook', False) for f in sys.meta_path))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "1", done.stderr
