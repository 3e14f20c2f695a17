"""The push-and-pull example of docs/artifacts.md runs, unchanged, with no registry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_examples_in_artifacts_doc_run(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "artifacts.md").read_text()
    # The push-and-pull example; the page's other blocks run in tests/test_docs_examples.py.
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "pushed.pinned" in b]
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
