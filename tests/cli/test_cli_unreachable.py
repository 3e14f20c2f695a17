"""Every command that talks to a cluster ends with one line naming an API server that is not
there (nothing listens, it never answers, it refuses the credentials), exit code 1, within
the bound it was given (``--connect-timeout``): never a silent wait."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from ..kube.apiservers import answering, free_port, kubeconfig_for, silent_server

STUDY = """
name: s
steps:
  - name: one
    script: echo hi
"""
COMMANDS = {
    "run": ["run", "study.yaml", "--registry", "oci:/r"],  # a store: else refused first
    "status": ["status", "--study", "s"],
    "logs": ["logs", "--study", "s", "one"],
    "cancel": ["cancel", "--study", "s"],
}


@asynccontextmanager
async def _nothing() -> AsyncIterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


SERVERS = {
    "nothing-listens": (_nothing, "the connection was refused"),
    "never-answers": (silent_server, "it sent no answer within 1 s"),
    "refuses-credentials": (
        lambda: answering(401, "Unauthorized", "Unauthorized"),
        "it refused the credentials (401 Unauthorized)",
    ),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_a_missing_api_server_is_one_line_and_exit_code_1(
    tmp_path: Path, command: str, server: str
) -> None:
    (tmp_path / "study.yaml").write_text(STUDY)
    serve, cause = SERVERS[server]
    async with serve() as url:
        config = kubeconfig_for(tmp_path / "kubeconfig", url)
        argv = [*COMMANDS[command], "--backend", "kubernetes", "--kubeconfig", str(config)]
        # The process of its own: this loop serves the silent server meanwhile.
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "k8sjobs.cli",
            *argv,
            "--connect-timeout",
            "1",
            cwd=tmp_path,
            stdout=PIPE,
            stderr=PIPE,
        )
        _out, err = await process.communicate()  # ends: the bound is what we passed
    lines = err.decode().strip().splitlines()
    assert process.returncode == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: Kubernetes API server {url} (kubeconfig {config})")
    assert cause in lines[0]
