"""The public face of k8sjobs.testing stays small, sorted and import-light."""

from __future__ import annotations

import subprocess
import sys

import k8sjobs.testing


def test_all_is_sorted_and_exported() -> None:
    names = k8sjobs.testing.__all__
    assert names == sorted(names)
    assert all(hasattr(k8sjobs.testing, name) for name in names)


def test_the_pytest_plugin_does_not_import_the_cluster() -> None:
    code = (
        "import sys, k8sjobs.testing.pytest_plugin; "
        "print('k8sjobs.testing._cluster' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == "False"
