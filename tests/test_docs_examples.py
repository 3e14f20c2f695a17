"""Every code block in README.md and docs/*.md runs, parses or says why not (issue 28 item 11).

One test per block, named ``page:line`` so a failure points at the block. What a block gets
depends on its fence's info string:

- ``python``: run as a script in a fresh ``sys.executable`` subprocess, cwd a temporary
  directory, PYTHONPATH the checkout, with a timeout. A block whose first line is
  ``# test_NAME.py ...`` is a pytest file: it is written under that name and run with pytest.
- ``sh``, ``bash``, ``console``: each command (a ``console`` block's ``$ `` lines; every
  non-comment line of the others) runs with bash (``set -euo pipefail``) in a temporary
  directory holding a copy of examples/, and must exit 0. Output lines are not compared.
- ``yaml``: must parse; a mapping with ``steps`` is a study and goes through
  ``k8sjobs.load_study``. ``json``: must parse.
- ``text`` or no info string: output, diagrams, tables: nothing to run. Such a block that
  starts with a command (``$ ``, ``k8sjobs``, ``python``, ``kubectl``, ``pip``) must say
  ``console`` or ``sh`` instead, so that it runs or carries its no-run reason.

Markers: HTML comments on the lines just before the fence (blank lines between are fine;
they render as nothing)::

    <!-- docs-test: no-run: REASON -->   do not run this block (the reason is required)
    <!-- docs-test: continues -->        prepend the previous block of the same page
    <!-- docs-test: name: NAME -->       name this block, for ``continues: NAME``
    <!-- docs-test: continues: NAME -->  prepend the block of the same page named NAME
    <!-- docs-test: expect: TEXT -->     the run's stdout must contain TEXT (repeatable)
    <!-- docs-test: fake-cluster -->     run with KUBECONFIG naming a fake API server
                                         (python -m k8sjobs.testing serve --kubelet execute)

docs/design.md ("Docs that run") states the same convention for writers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from k8sjobs import load_study

from .waiting import wait_until_sync

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TIMEOUT = 60
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^`]*)$")
_MARKER = re.compile(
    r"^<!-- docs-test: (?P<kind>no-run|continues|expect|fake-cluster|name)"
    r"(?::\s*(?P<arg>.*?))? -->$"
)
_RUN = {"python", "sh", "bash", "console"}
_COMMANDS = {"$", "k8sjobs", "python", "python3", "kubectl", "pip"}


@dataclass
class Block:
    """One fenced block of a page, with the markers written just before it."""

    page: Path
    line: int  # 1-based line of the opening fence
    info: str
    code: str
    no_run: str | None = None
    continues: str | None = None  # "" for the previous block, else a block's name
    label: str | None = None
    fake_cluster: bool = False
    expect: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _markers(lines: list[str], fence_index: int, block: Block) -> None:
    index = fence_index - 1
    while index >= 0 and (not lines[index].strip() or _MARKER.match(lines[index].strip())):
        match = _MARKER.match(lines[index].strip())
        if match:
            kind, arg = match["kind"], match["arg"]
            if kind == "no-run":
                assert arg, f"{block.name}: a no-run marker needs its reason"
                block.no_run = arg
            elif kind == "continues":
                block.continues = arg or ""
            elif kind == "name":
                block.label = arg
            elif kind == "fake-cluster":
                block.fake_cluster = True
            else:
                assert arg, f"{block.name}: an expect marker needs its text"
                block.expect.append(arg)
        index -= 1


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(match["fence"]):
            end += 1
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        block = Block(page, index + 1, match["info"].strip().split(" ")[0].lower(), body)
        _markers(lines, index, block)
        if block.continues is not None:
            before = [b for b in blocks if block.continues in ("", b.label)]
            assert before, f"{block.name}: continues {block.continues!r}: no such block before it"
            block.code = before[-1].code + block.code
        blocks.append(block)
        index = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _env(kubeconfig: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("KUBECONFIG", None)  # the local backend, or the fake cluster of the marker
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


@contextmanager
def _fake_cluster(tmp_path: Path) -> Iterator[Path]:
    """A fake API server whose kubelet runs the pods as processes, for as long as the block."""
    kubeconfig = tmp_path / "fake.kubeconfig"
    command = [sys.executable, "-m", "k8sjobs.testing", "serve", "--kubeconfig", str(kubeconfig)]
    server = subprocess.Popen(
        [*command, "--kubelet", "execute"], env=_env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until_sync(
            lambda: kubeconfig.exists() or server.poll() is not None, "the fake server's kubeconfig"
        )
        assert server.poll() is None, f"the fake server ended: {server.communicate()[1]!r}"
        yield kubeconfig
    finally:
        server.terminate()
        server.communicate(timeout=TIMEOUT)


def _run_python(
    block: Block, tmp_path: Path, kubeconfig: Path | None
) -> subprocess.CompletedProcess[str]:
    first = block.code.splitlines()[0] if block.code.strip() else ""
    pytest_file = re.match(r"#\s*(test_\w+\.py)", first)
    if pytest_file:
        (tmp_path / pytest_file[1]).write_text(block.code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-o", "asyncio_mode=auto", pytest_file[1]]
    else:
        (tmp_path / "example.py").write_text(block.code)
        command = [sys.executable, "example.py"]
    return subprocess.run(
        command, cwd=tmp_path, env=_env(kubeconfig), capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip


def _shell_commands(block: Block) -> list[str]:
    lines = block.code.splitlines()
    if block.info == "console":
        return [line[2:] for line in lines if line.startswith("$ ")]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _run_shell(
    block: Block, tmp_path: Path, kubeconfig: Path | None
) -> subprocess.CompletedProcess[str]:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # commands name examples/...
    script = "set -euo pipefail\n" + "\n".join(_shell_commands(block)) + "\n"
    return subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=_env(kubeconfig), capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip


def test_every_page_is_read() -> None:
    assert len(BLOCKS) >= 80
    assert {block.page.name for block in BLOCKS} >= {"README.md", "steps.md", "api.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_block(block: Block, tmp_path: Path) -> None:
    if block.info == "yaml":
        document = yaml.safe_load(block.code)
        if isinstance(document, dict) and "steps" in document:
            (tmp_path / "study.yaml").write_text(block.code)
            load_study(tmp_path / "study.yaml")
        return
    if block.info == "json":
        json.loads(block.code)
        return
    if block.info in ("", "text"):
        first = block.code.lstrip().split(" ", 1)[0]
        assert first not in _COMMANDS, f"{block.name}: a command in a {block.info or 'bare'} block"
    if block.info not in _RUN:
        assert block.no_run is None, f"{block.name}: no-run on a block that is never run"
        return
    if block.no_run is not None:
        pytest.skip(f"no-run: {block.no_run}")
    run = _run_python if block.info == "python" else _run_shell
    if block.fake_cluster:
        with _fake_cluster(tmp_path) as kubeconfig:
            done = run(block, tmp_path, kubeconfig)
    else:
        done = run(block, tmp_path, None)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout}\n{done.stderr}"
    for text in block.expect:
        assert text in done.stdout, f"{block.name}: {text!r} not in its output:\n{done.stdout}"
