"""The fake's JobSet emulation beyond the recorded scenarios: a cluster without the CRD serves
no JobSet group, the schema refuses a bad field, suspend and resume, failure policy rules."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from k8sjobs.testing import FakeCluster, KubeletConfig

from .conftest import FAST, call, wait_until

FAKE = "fake.k8sjobs.io/"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"


@pytest_asyncio.fixture
async def fake(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """A simulated cluster with the JobSet CRD established."""
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.005, default_duration=0.05)
    async with FakeCluster(directory=tmp_path, controller=FAST, kubelet_config=kubelet) as f:
        await f.install_jobset()
        yield f


def rjob(name: str, pods: int, notes: dict[str, str], **extra: Any) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": notes},
        "spec": {"restartPolicy": "Never", "containers": [{"name": name, "image": "busybox"}]},
    }
    spec = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template}
    return {"name": name, "replicas": 1, "template": {"spec": spec}, **extra}


def mpi(name: str, launcher_exit: int = 0, **spec: Any) -> dict[str, Any]:
    """Return a JobSet like the recorded ones: workers that wait, a launcher after them."""
    workers = rjob("workers", 2, {f"{FAKE}duration": "3600"})
    launcher = rjob(
        "launcher",
        1,
        {f"{FAKE}duration": "0.05", f"{FAKE}exit-code": str(launcher_exit)},
        dependsOn=[{"name": "workers", "status": "Ready"}],
    )
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
            "replicatedJobs": [workers, launcher],
            **spec,
        },
    }


def conditions(fake: FakeCluster, name: str) -> list[tuple[str, str, str]]:
    js = fake.get("jobsets", name) or {}
    return [
        (c["type"], c["status"], c["reason"])
        for c in (js.get("status") or {}).get("conditions") or []
    ]


def terminal(fake: FakeCluster, name: str) -> str | None:
    return ((fake.get("jobsets", name) or {}).get("status") or {}).get("terminalState")


async def test_without_the_crd_no_jobset_group_is_served(tmp_path: Path) -> None:
    async with FakeCluster(directory=tmp_path) as plain, aiohttp.ClientSession() as http:
        status, groups = await call(http, "GET", f"{plain.url}/apis")
        assert status == 200
        assert "jobset.x-k8s.io" not in [g["name"] for g in groups["groups"]]
        status, _ = await call(http, "POST", f"{plain.url}{JOBSETS}", mpi("x"))
        assert status == 404
        assert not plain.objects("jobs")


async def test_serve_jobset_serves_the_group(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    command = ["-m", "k8sjobs.testing", "serve", "--kubeconfig", str(kubeconfig), "--jobset"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *command, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        url = line.decode().split()[3].rstrip(";")
        async with aiohttp.ClientSession() as http:
            status, group = await call(http, "GET", f"{url}/apis/jobset.x-k8s.io")
        assert status == 200 and group["preferredVersion"]["version"] == "v1alpha2"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 60)


async def test_the_schema_refuses_a_bad_success_operator_naming_the_field(
    fake: FakeCluster,
) -> None:
    body = mpi("bad", successPolicy={"operator": "Most"})
    async with aiohttp.ClientSession() as http:
        status, error = await call(http, "POST", f"{fake.url}{JOBSETS}", body)
    assert status == 422
    assert "spec.successPolicy.operator" in error["message"]
    assert fake.get("jobsets", "bad") is None


async def test_a_suspended_jobset_waits_then_resumes_with_its_templates_changes(
    fake: FakeCluster,
) -> None:
    fake.store.create("jobsets", "default", mpi("held", suspend=True))
    await wait_until(lambda: fake.get("jobs", "held-workers-0") is not None, "the workers Job")
    workers = fake.get("jobs", "held-workers-0")
    assert workers is not None and workers["spec"]["suspend"] is True
    await wait_until(
        lambda: ("Suspended", "True", "SuspendedJobs") in conditions(fake, "held"), "Suspended"
    )
    assert not fake.objects("pods") and fake.get("jobs", "held-launcher-0") is None
    # What Kueue does on admission: a nodeSelector into the template, then unsuspend.
    js = fake.get("jobsets", "held")
    assert js is not None
    changed: dict[str, Any] = {**js, "spec": {**js["spec"], "suspend": False}}
    for each in changed["spec"]["replicatedJobs"]:
        each["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    fake.store.update("jobsets", "default", changed)
    await wait_until(lambda: fake.get("jobs", "held-launcher-0") is not None, "the launcher")
    resumed = fake.get("jobs", "held-workers-0")
    assert resumed is not None and resumed["spec"]["suspend"] is False
    pod_spec = resumed["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    await wait_until(lambda: terminal(fake, "held") == "Completed", "the JobSet completes")
    assert ("Suspended", "False", "ResumeJobs") in conditions(fake, "held")


async def test_a_failjobset_rule_fails_at_once_without_a_restart(fake: FakeCluster) -> None:
    exit_42 = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    body = mpi(
        "rule",
        launcher_exit=42,
        failurePolicy={
            "maxRestarts": 3,
            "rules": [
                {
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "targetReplicatedJobs": ["launcher"],
                }
            ],
        },
    )
    body["spec"]["replicatedJobs"][1]["template"]["spec"]["podFailurePolicy"] = exit_42
    fake.store.create("jobsets", "default", body)
    await wait_until(lambda: terminal(fake, "rule") == "Failed", "the JobSet fails")
    js = fake.get("jobsets", "rule")
    assert js is not None
    failed = js["status"]["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "FailJobSetFailurePolicyAction")
    assert failed["message"] == (
        "applying FailJobSet failure policy action (first failed job: rule-launcher-0)"
    )
    assert js["status"]["restarts"] == 0
    assert js["spec"]["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    await wait_until(lambda: fake.get("jobs", "rule-workers-0") is None, "the workers deleted")


async def test_restarts_recreate_every_job_up_to_max_restarts(fake: FakeCluster) -> None:
    attempts: set[str] = set()
    fake.store.listen(
        lambda e: (
            attempts.add(e.obj["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"])
            if e.resource == "jobs" and e.type == "ADDED"
            else None
        )
    )
    fake.store.create("jobsets", "default", mpi("again", 3, failurePolicy={"maxRestarts": 2}))
    await wait_until(lambda: terminal(fake, "again") == "Failed", "the JobSet fails")
    js = fake.get("jobsets", "again")
    assert js is not None
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (2, 2)
    assert attempts == {"0", "1", "2"}
    assert js["status"]["conditions"][-1]["reason"] == "ReachedMaxRestarts"


def _worker_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_the_launcher_starts_only_once_the_workers_sshd_port_listens(
    tmp_path: Path,
) -> None:
    """Executing kubelet: the workers' TCP readiness probe on 2222 (their agent, the local
    sshd) holds dependsOn Ready, so the launcher's Job waits for the agents to listen."""
    go = tmp_path / "go"
    serve = f'while [ ! -e "{go}" ]; do sleep 0.05; done; exec $K8SJOBS_WORKER_SERVE'
    probe = {"tcpSocket": {"port": 2222}, "periodSeconds": 1}
    body = mpi("mpi")
    workers, launcher = (
        r["template"]["spec"]["template"]["spec"] for r in body["spec"]["replicatedJobs"]
    )
    workers["containers"][0].update(command=["/bin/sh", "-c", serve], readinessProbe=probe)
    launcher["containers"][0]["command"] = ["/bin/sh", "-c", "echo launched"]
    launched_after_go: list[bool] = []
    ready_after_go: list[bool] = []

    def note(event: Any) -> None:
        name = event.obj["metadata"]["name"]
        if event.resource == "jobs" and event.type == "ADDED" and "launcher" in name:
            launched_after_go.append(go.exists())
        if event.resource == "pods" and "workers" in name and _worker_ready(event.obj):
            ready_after_go.append(go.exists())

    async with FakeCluster("execute", directory=tmp_path, controller=FAST) as fake:
        await fake.install_jobset()
        fake.store.listen(note)
        fake.store.create("jobsets", "default", body)

        def running() -> bool:
            pods = [p for p in fake.objects("pods") if "workers" in p["metadata"]["name"]]
            return len(pods) == 2 and all(
                any("running" in c["state"] for c in p["status"].get("containerStatuses") or [])
                for p in pods
            )

        await wait_until(running, "both workers run (their agents not yet started)")
        assert fake.get("jobs", "mpi-launcher-0") is None
        go.touch()
        await wait_until(lambda: terminal(fake, "mpi") == "Completed", "the JobSet completes")
    assert launched_after_go == [True]
    assert ready_after_go and all(ready_after_go)


async def test_names_that_would_pass_63_characters_are_refused_by_the_webhook(
    fake: FakeCluster,
) -> None:
    """The longest pod name is <js>-launcher-0-0-abcde: 44 characters of JobSet name fit."""
    fits, too_long = "a" * 44, "a" * 45
    async with aiohttp.ClientSession() as http:
        status, _ = await call(http, "POST", f"{fake.url}{JOBSETS}", mpi(fits))
        assert status == 201
        status, error = await call(http, "POST", f"{fake.url}{JOBSETS}", mpi(too_long))
    assert status == 422 and error["reason"] == "Invalid"
    assert error["message"].startswith('admission webhook "vjobset.kb.io" denied the request: ')
    assert "spec.replicatedJobs[1].name" in error["message"]  # the launcher's
    assert "pod names generated for this JobSet will exceed 63 characters" in error["message"]
    assert fake.get("jobsets", too_long) is None
    await wait_until(lambda: fake.get("jobs", f"{fits}-workers-0") is not None, "its Jobs")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {
                "failurePolicy": {
                    "maxRestarts": 1,
                    "rules": [{"name": "fail-at-once", "action": "FailJobSet"}],
                }
            },
            "invalid failure policy rule name 'fail-at-once', a failure policy rule name must "
            "start with an alphabetic character",
        ),
        (
            {"failurePolicy": {"rules": [{"name": "a", "action": "FailJobSet"}] * 2}},
            "rule names are not unique, rules with indices [0 1] all have the same name 'a'",
        ),
        (
            {
                "failurePolicy": {
                    "rules": [
                        {"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]}
                    ]
                }
            },
            "invalid job failure reason 'OOMKilled' in failure policy is not a recognized",
        ),
        (
            {
                "failurePolicy": {
                    "rules": [
                        {"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["driver"]}
                    ]
                }
            },
            "invalid replicatedJob name 'driver' in failure policy does not appear",
        ),
        (
            {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["driver"]}},
            "invalid replicatedJob name 'driver' does not appear in .spec.ReplicatedJobs",
        ),
    ],
)
async def test_policies_the_controller_could_not_follow_are_refused_by_the_webhook(
    fake: FakeCluster, change: dict[str, Any], words: str
) -> None:
    body = mpi("bad")
    body["spec"] |= change
    async with aiohttp.ClientSession() as http:
        status, error = await call(http, "POST", f"{fake.url}{JOBSETS}", body)
    assert status == 422 and error["reason"] == "Invalid"
    assert error["message"].startswith('admission webhook "vjobset.kb.io" denied the request: ')
    assert words in error["message"]
    assert fake.get("jobsets", "bad") is None


async def test_depends_on_the_first_or_a_later_replicated_job_is_refused(
    fake: FakeCluster,
) -> None:
    body = mpi("order")
    workers, launcher = body["spec"]["replicatedJobs"]
    body["spec"]["replicatedJobs"] = [launcher, workers]
    async with aiohttp.ClientSession() as http:
        status, error = await call(http, "POST", f"{fake.url}{JOBSETS}", body)
    assert status == 422
    assert "DependsOn can't be set for the first ReplicatedJob" in error["message"]
    assert "replicatedJob: launcher cannot depend on replicatedJob: workers" in error["message"]


async def test_depends_on_complete_waits_for_the_dependency_to_succeed(fake: FakeCluster) -> None:
    first = rjob("prepare", 1, {f"{FAKE}duration": "0.2"})
    then = rjob(
        "run", 1, {f"{FAKE}duration": "0.05"}, dependsOn=[{"name": "prepare", "status": "Complete"}]
    )
    body = mpi("chain")
    body["spec"] = {"replicatedJobs": [first, then], "network": {"enableDNSHostnames": False}}
    created_when: list[bool] = []

    def note(event: Any) -> None:
        if (
            event.resource == "jobs"
            and event.type == "ADDED"
            and event.obj["metadata"]["name"] == "chain-run-0"
        ):
            prepare = fake.get("jobs", "chain-prepare-0") or {}
            done = (prepare.get("status") or {}).get("conditions") or []
            created_when.append(any(c["type"] == "Complete" for c in done))

    fake.store.listen(note)
    fake.store.create("jobsets", "default", body)
    await wait_until(lambda: terminal(fake, "chain") == "Completed", "the JobSet completes")
    assert created_when == [True]
    assert fake.get("services", "chain") is None  # no DNS hostnames, no Service


async def test_ttl_after_finished_deletes_the_jobset_and_what_it_owns(fake: FakeCluster) -> None:
    fake.store.create("jobsets", "default", mpi("brief", ttlSecondsAfterFinished=0))
    await wait_until(lambda: fake.get("jobs", "brief-launcher-0") is not None, "the launcher")
    await wait_until(lambda: fake.get("jobsets", "brief") is None, "the JobSet deleted")
    await wait_until(
        lambda: not fake.objects("jobs") and fake.get("services", "brief") is None,
        "its Jobs and Service collected",
    )


async def test_a_restart_in_execute_mode_waits_for_the_new_workers_agents(tmp_path: Path) -> None:
    """Executing kubelet, launcher exits 3 under maxRestarts 1: each attempt's launcher Job
    is created only once that attempt's workers (new pods, the same hostnames) serve."""
    probe = {"tcpSocket": {"port": 2222}, "periodSeconds": 1}
    body = mpi("again", failurePolicy={"maxRestarts": 1})
    workers, launcher = (
        r["template"]["spec"]["template"]["spec"] for r in body["spec"]["replicatedJobs"]
    )
    workers["containers"][0].update(
        command=["/bin/sh", "-c", "exec $K8SJOBS_WORKER_SERVE"], readinessProbe=probe
    )
    launcher["containers"][0]["command"] = ["/bin/sh", "-c", "exit 3"]
    ready: dict[str, bool] = {}
    launched_with_ready_workers: list[int] = []

    def note(event: Any) -> None:
        meta = event.obj["metadata"]
        labels = meta.get("labels") or {}
        attempt = labels.get("jobset.sigs.k8s.io/restart-attempt")
        if event.resource == "pods" and "workers" in meta["name"]:
            ready[meta["name"]] = event.type != "DELETED" and _worker_ready(event.obj)
        if event.resource == "jobs" and event.type == "ADDED" and "launcher" in meta["name"]:
            current = [
                pod
                for pod in cluster.objects("pods")
                if pod["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == attempt
                and ready.get(pod["metadata"]["name"])
            ]
            launched_with_ready_workers.append(len(current))

    async with FakeCluster("execute", directory=tmp_path, controller=FAST) as cluster:
        await cluster.install_jobset()
        cluster.store.listen(note)
        cluster.store.create("jobsets", "default", body)
        await wait_until(lambda: terminal(cluster, "again") == "Failed", "the JobSet fails")
        js = cluster.get("jobsets", "again")
        assert js is not None
    assert js["status"]["restarts"] == 1
    assert js["status"]["conditions"][-1]["reason"] == "ReachedMaxRestarts"
    assert launched_with_ready_workers == [2, 2]
