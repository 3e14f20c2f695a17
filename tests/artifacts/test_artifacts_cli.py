"""`k8sjobs artifact push|pull|tags|rm`, through the real command-line entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k8sjobs.cli.main import main

from .artifact_helpers import make_tree, same_tree


def _run(argv: list[str]) -> int:
    return main(argv)


def test_push_pull_tags_rm_on_a_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", f"oci:{tmp_path / 'layout'}"]
    tree = make_tree(tmp_path / "tree")
    assert (
        _run(
            [
                "artifact",
                "push",
                "study/a:v1",
                str(tree),
                "-a",
                "k=v",
                "--compression",
                "zstd",
                *store,
            ]
        )
        == 0
    )
    pushed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert pushed["digest"].startswith("sha256:")
    assert (
        _run(["artifact", "pull", pushed["pinned"], str(tmp_path / "out"), "--progress", *store])
        == 0
    )
    assert same_tree(tree, tmp_path / "out" / "tree")
    capsys.readouterr()
    assert _run(["artifact", "tags", "study/a", *store]) == 0
    assert capsys.readouterr().out.split() == ["v1"]
    assert _run(["artifact", "rm", "study/a:v1", *store]) == 0
    assert _run(["artifact", "pull", "study/a:v1", str(tmp_path / "gone"), *store]) == 1
    assert "study/a:v1" in capsys.readouterr().err


def test_bad_annotation_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    assert (
        _run(["artifact", "push", "a/b:c", str(f), "-a", "novalue", "--store", f"oci:{tmp_path}/l"])
        == 2  # bad input, as for every command
    )
    assert "key=value" in capsys.readouterr().err
