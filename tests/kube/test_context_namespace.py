"""A kubeconfig context's namespace: steps go there, and the session, attach and the CLI
look there, without anyone naming it (issue 17 item 7)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from k8sjobs.session import Session
from k8sjobs.testing import FakeCluster

from .conftest import FAST
from .kubehelpers import step


async def _cli(*args: str) -> tuple[int, str]:
    """Run the ``k8sjobs`` command in another process, as a person would."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from k8sjobs.cli import main; sys.exit(main())",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_steps_go_to_the_context_namespace_and_are_found_there(tmp_path: Path) -> None:
    async with FakeCluster(
        "simulate", directory=tmp_path / "cluster", controller=FAST, namespaces=("default", "hpc")
    ) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "hpc.kubeconfig", namespace="hpc")

        def session() -> Session:  # no namespace given: the context's is used
            return Session(study="ctx", kubeconfig=kubeconfig, log_dir=tmp_path / "logs")

        async with session() as s:
            assert s.namespace == "hpc"
            handle = await s.submit(step("a"))
            assert handle.namespace == "hpc"
            assert (await handle.wait(10)).ok
        assert cluster.get("jobs", handle.object_name, namespace="hpc") is not None
        assert cluster.objects("jobs", "default") == []

        async with session() as again:
            found = await again.attach()
        assert [(h.name, h.namespace, h.state.value) for h in found] == [("a", "hpc", "SUCCEEDED")]

        target = ["--backend", "kubernetes", "--kubeconfig", str(kubeconfig)]
        state = ["--state-dir", str(tmp_path / "state")]
        code, out = await _cli(*state, "status", "--study", "ctx", *target)
        assert code == 0, out
        assert "a" in out and "SUCCEEDED" in out
        code, out = await _cli(
            *state, "status", "--study", "ctx", "--namespace", "default", *target
        )
        assert code == 1 and out.strip().startswith('no study "ctx" in namespace default'), out
