"""kubectl (the real binary) against the fake API server over HTTPS with a bearer token."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from k8sjobs.testing import FakeCluster, KubeletConfig

from .conftest import FAST, wait_until
from .crdhelpers import GROUP, minicluster, minicluster_crd
from .test_apiserver import job_body

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


class Kubectl:
    """Runs kubectl with the cluster's kubeconfig and a discovery cache of this test's own."""

    def __init__(self, cluster: FakeCluster, directory: Path) -> None:
        self.cluster = cluster
        self.directory = directory

    async def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        """Run kubectl; return (exit code, stdout, stderr), failing on error when `check`."""
        process = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--cache-dir={self.directory / 'cache'}",
            "--request-timeout=20s",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        code = process.returncode or 0
        if check:
            assert code == 0, err.decode()
        return code, out.decode(), err.decode()

    async def __call__(self, *args: str) -> str:
        return (await self.run(*args))[1]

    def manifest(self, name: str, *objects: dict[str, Any]) -> str:
        """Write `objects` as a multi-document YAML file; return its path."""
        path = self.directory / name
        path.write_text(yaml.safe_dump_all(objects))
        return str(path)


@pytest_asyncio.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.005, default_duration=0.05)
    async with FakeCluster(
        directory=tmp_path / "cluster", controller=FAST, kubelet_config=kubelet, tls=True
    ) as fake:
        yield Kubectl(fake, tmp_path)


async def test_kubectl_creates_a_crd_and_gets_its_kind(kubectl: Kubectl) -> None:
    crd = kubectl.manifest("crd.yaml", minicluster_crd())
    assert "created" in await kubectl("create", "-f", crd)
    await kubectl("wait", "--for=condition=Established", f"crd/miniclusters.{GROUP}")
    await kubectl("create", "-f", kubectl.manifest("mc.yaml", minicluster("m1", size=2)))
    listed = await kubectl("get", "miniclusters")
    assert listed.split("\n")[0].split() == ["NAME", "SIZE", "AGE"]
    assert listed.split("\n")[1].split()[:2] == ["m1", "2"]
    assert await kubectl("get", "mc", "m1", "-o", "jsonpath={.spec.size}") == "2"

    unknown = kubectl.manifest("unknown.yaml", minicluster("m2", bogus=1))
    code, _, err = await kubectl.run("create", "-f", unknown, check=False)
    assert code == 1 and 'strict decoding error: unknown field "spec.bogus"' in err
    invalid = kubectl.manifest("invalid.yaml", minicluster("m3", size=0))
    code, _, err = await kubectl.run("create", "-f", invalid, check=False)
    assert code == 1
    assert (
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1" in err
    )

    assert "deleted" in await kubectl("delete", "crd", f"miniclusters.{GROUP}")
    await wait_until(lambda: kubectl.cluster.objects("miniclusters") == [])
    code, _, err = await kubectl.run("get", "miniclusters", check=False)
    # kubectl's discovery cache may still name the kind; the server no longer serves it.
    assert code == 1
    assert "doesn't have a resource type" in err or "(NotFound)" in err


async def test_kubectl_get_prints_the_servers_tables(kubectl: Kubectl) -> None:
    job = job_body("hello")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    await kubectl("create", "-f", kubectl.manifest("objects.yaml", job, cm))
    await wait_until(lambda: bool(kubectl.cluster.objects("pods")))
    await wait_until(
        lambda: any(
            c["type"] == "Complete"
            for c in (kubectl.cluster.get("jobs", "hello") or {})["status"].get("conditions", [])
        )
    )
    jobs = (await kubectl("get", "jobs")).splitlines()
    assert jobs[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1].split()[:3] == ["hello", "Complete", "1/1"]
    pods = (await kubectl("get", "pods", "-o", "wide")).splitlines()
    assert pods[0].split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[1:4] == ["0/1", "Completed", "0"]
    configmaps = (await kubectl("get", "configmaps")).splitlines()
    assert configmaps[0].split() == ["NAME", "DATA", "AGE"] and configmaps[1].split()[:2] == [
        "cfg",
        "1",
    ]
    namespaces = (await kubectl("get", "namespaces")).splitlines()
    assert namespaces[1].split()[:2] == ["default", "Active"]


async def test_kubectl_apply_server_side_owns_fields_and_reports_conflicts(
    kubectl: Kubectl,
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"a": "1"},
    }
    first = kubectl.manifest("first.yaml", config)
    assert "serverside-applied" in await kubectl("apply", "--server-side", "-f", first)
    assert "serverside-applied" in await kubectl("apply", "--server-side", "-f", first)
    changed = kubectl.manifest("changed.yaml", {**config, "data": {"a": "2"}})
    code, _, err = await kubectl.run(
        "apply", "--server-side", "--field-manager=other", "-f", changed, check=False
    )
    assert code == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in err
    await kubectl(
        "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", changed
    )
    stored = kubectl.cluster.get("configmaps", "cfg")
    assert stored is not None and stored["data"] == {"a": "2"}
    assert [e["manager"] for e in stored["metadata"]["managedFields"]] == ["other"]


async def test_kubectl_delete_namespace_removes_what_it_held(kubectl: Kubectl) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "scratch"}}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "scratch"},
        "data": {"a": "1"},
    }
    await kubectl("create", "-f", kubectl.manifest("ns.yaml", namespace))
    await kubectl("create", "-f", kubectl.manifest("cm.yaml", config))
    assert 'namespace "scratch" deleted' in await kubectl("delete", "ns", "scratch")
    await wait_until(lambda: kubectl.cluster.get("namespaces", "scratch") is None)
    assert kubectl.cluster.objects("configmaps", "scratch") == []


async def test_kubectl_get_watch_prints_rows_as_pods_change(kubectl: Kubectl) -> None:
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        f"--kubeconfig={kubectl.cluster.kubeconfig_path}",
        f"--cache-dir={kubectl.directory / 'cache'}",
        "get",
        "pods",
        "--watch",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    lines: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            lines.append(raw.decode())

    reader = asyncio.create_task(read())
    try:
        await wait_until(lambda: kubectl.cluster.store.watcher_count() > 0, timeout=30)
        job = job_body("w")
        await kubectl("create", "-f", kubectl.manifest("job.yaml", job))
        await wait_until(lambda: any("Completed" in line for line in lines), timeout=30)
    finally:
        process.kill()
        await process.wait()
        reader.cancel()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert sum(1 for line in lines if line.startswith("NAME")) == 1


async def test_kubectl_shows_why_a_job_has_no_pods(kubectl: Kubectl) -> None:
    """`kubectl get events`, `kubectl events` and `describe` show a FailedCreate (issue 24)."""
    cluster = kubectl.cluster
    cluster.controller.config.api_backoff_base = 0.05
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "nopods"},
        "spec": {"hard": {"pods": "0"}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "quota"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "busybox"}],
                }
            }
        },
    }
    await kubectl("create", "-f", kubectl.manifest("objects.yaml", quota, job))
    await wait_until(
        lambda: any(e["reason"] == "FailedCreate" for e in cluster.objects("events")),
        "a FailedCreate event",
    )
    events = await kubectl("get", "events")
    assert events.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "Warning" in events and "FailedCreate" in events and "job/quota" in events
    assert "exceeded quota: nopods, requested: pods=1, used: pods=0, limited: pods=0" in events
    wide = await kubectl("get", "events", "-o", "wide", "--field-selector", "type=Warning")
    assert "job-controller" in wide
    newer = await kubectl("events", "--for", "job/quota")
    assert "FailedCreate" in newer
    described = await kubectl("describe", "job", "quota")
    assert "FailedCreate" in described and "exceeded quota" in described
