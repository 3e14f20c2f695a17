"""scripts/test says what it installs and leaves no service of it running (issue 28 item
13): each package it may install is named in the README, and every apt-get install runs
under a policy-rc.d that forbids starting services."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCRIPT = (ROOT / "scripts" / "test").read_text()


def test_the_readme_names_every_package_the_test_script_installs() -> None:
    packages = set(re.findall(r"missing\+=\(([a-z0-9.+-]+)\)", SCRIPT))
    assert "openssh-server" in packages
    readme = (ROOT / "README.md").read_text()
    for package in packages:
        assert f"`{package}`" in readme, package


def test_apt_get_install_runs_with_services_forbidden() -> None:
    before, install, _ = SCRIPT.partition("apt-get install")
    assert install
    assert "policy-rc.d" in before and "exit 101" in before
    assert "systemctl disable --now ssh.service" in SCRIPT


def test_the_policy_it_writes_forbids_every_action(tmp_path: Path) -> None:
    """The printf line, run as the script runs it, makes a policy-rc.d that exits 101."""
    line = next(ln for ln in SCRIPT.splitlines() if "exit 101" in ln).strip()
    printf = line.split("|")[0].strip()
    policy = tmp_path / "policy-rc.d"
    subprocess.run(["bash", "-c", f"{printf} > {policy}"], check=True)
    policy.chmod(0o755)
    assert subprocess.run([str(policy), "ssh", "start"]).returncode == 101
