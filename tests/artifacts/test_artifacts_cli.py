"""The artifact commands, wired into a bare argparse parser as the main CLI will do."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from artifact_helpers import make_tree, same_tree

from k8sjobs.artifacts.cli import add_artifact_commands


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="k8sjobs")
    add_artifact_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


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
        == 1
    )
    assert "key=value" in capsys.readouterr().err
