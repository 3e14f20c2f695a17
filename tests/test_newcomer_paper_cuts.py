"""Small things a newcomer meets (issue 28 item 14): the notebook uses only public names,
its state folder is ignored by git, docs/cli.md names the run record's real file names, and
the multi-node success message does not claim Kubernetes on the local backend."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import k8sjobs
from k8sjobs.runrecord import record_paths

ROOT = Path(__file__).parents[1]


def test_the_examples_import_no_private_module() -> None:
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.suffix in (".py", ".ipynb"):
            assert not re.search(r"k8sjobs\._\w", path.read_text()), path


def test_result_table_is_public() -> None:
    assert "result_table" in k8sjobs.__all__
    assert callable(k8sjobs.result_table)


def test_the_notebooks_state_folder_is_ignored_by_git() -> None:
    done = subprocess.run(["git", "check-ignore", "-q", "examples/.k8sjobs/steps/x.json"], cwd=ROOT)
    assert done.returncode == 0


def test_docs_cli_md_names_the_run_records_real_files() -> None:
    record, journal = record_paths(Path("runs"), "pipeline")
    assert re.fullmatch(r"pipeline-[0-9a-f]+\.json", record.name)
    assert re.fullmatch(r"pipeline-[0-9a-f]+\.jsonl", journal.name)
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert "`runs/<study>-<hash>.json`" in docs and "`runs/<study>-<hash>.jsonl`" in docs
    assert "`runs/<study>.json`" not in docs


def test_no_message_says_kubernetes_stops_the_workers() -> None:
    for path in [*(ROOT / "k8sjobs").rglob("*.py"), *(ROOT / "docs").glob("*.md")]:
        assert "Kubernetes stops the workers" not in path.read_text(), path
