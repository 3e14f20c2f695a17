"""The runnable examples in docs/artifacts.md run, unchanged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_examples_in_artifacts_doc_run(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "artifacts.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        env = {
            "PYTHONPATH": str(ROOT),
            "K8SJOBS_CACHE_DIR": str(tmp_path / "cache"),
            "PATH": "/usr/bin:/bin",
        }
        done = subprocess.run(
            [sys.executable, "-c", block], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "study/train@sha256:" in done.stdout
