"""The Job controller, the kubelet and faults, driven through kubernetes_asyncio."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from k8sjobs.testing import ControllerConfig, FakeCluster, KubeletConfig, NodeConfig

from .conftest import FAST, api_client, batch_api, core_api, wait_until


def job_body(
    name: str,
    annotations: dict[str, str] | None = None,
    image: str = "busybox",
    resources: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "command": ["true"]}
    if resources:
        container["resources"] = resources
    template = {
        "metadata": {"annotations": annotations or {}},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def conditions(cluster: FakeCluster, name: str) -> list[tuple[str, str, str]]:
    job = cluster.get("jobs", name) or {}
    return [
        (c["type"], c["status"], c["reason"])
        for c in (job.get("status") or {}).get("conditions", [])
    ]


def finished(cluster: FakeCluster, name: str) -> bool:
    return any(t in ("Complete", "Failed") and s == "True" for t, s, _ in conditions(cluster, name))


async def test_parallel_jobs_run_completions_pods(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch = batch_api(api)
    await batch.create_namespaced_job("default", job_body("par", parallelism=2, completions=4))
    await wait_until(lambda: finished(cluster, "par"))
    job = await batch.read_namespaced_job("par", "default")
    assert (job.status.succeeded, job.status.failed, job.status.active) == (4, None, None)
    assert job.status.completion_time is not None


async def test_indexed_pods_get_index_env_hostname_and_subdomain(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch, core = batch_api(api), core_api(api)
    body = job_body(
        "ix",
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        annotations={"fake.k8sjobs.io/duration": "5"},
    )
    body["spec"]["template"]["spec"]["subdomain"] = "svc"
    await batch.create_namespaced_job("default", body)
    await wait_until(lambda: len(cluster.objects("pods")) == 2)
    pods = sorted(
        (await core.list_namespaced_pod("default", label_selector="job-name=ix")).items,
        key=lambda p: p.spec.hostname,
    )
    assert [p.spec.hostname for p in pods] == ["ix-0", "ix-1"]
    assert {p.spec.subdomain for p in pods} == {"svc"}
    assert [p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods] == [
        "0",
        "1",
    ]
    env = pods[0].spec.containers[0].env[0]
    assert env.name == "JOB_COMPLETION_INDEX"
    assert "job-completion-index" in env.value_from.field_ref.field_path


async def test_backoff_limit_recreates_failed_pods_after_a_delay(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch = batch_api(api)
    await batch.create_namespaced_job(
        "default", job_body("bo", backoffLimit=2, annotations={"fake.k8sjobs.io/exit-code": "1"})
    )
    started = asyncio.get_running_loop().time()
    await wait_until(lambda: finished(cluster, "bo"))
    elapsed = asyncio.get_running_loop().time() - started
    assert conditions(cluster, "bo")[-1] == ("Failed", "True", "BackoffLimitExceeded")
    assert (cluster.get("jobs", "bo") or {})["status"]["failed"] == 3
    assert elapsed >= FAST.backoff_base * (1 + 2) * 0.9  # 0.2 s then 0.4 s between pods


async def test_pod_failure_policy_ignore_and_count(tmp_path: Path) -> None:
    async with (
        FakeCluster(directory=tmp_path, controller=FAST) as fake,
        await api_client(fake) as api,
    ):
        policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}
        await batch_api(api).create_namespaced_job(
            "default",
            job_body(
                "ig",
                backoffLimit=0,
                podFailurePolicy=policy,
                annotations={"fake.k8sjobs.io/exit-code": "7"},
            ),
        )
        await wait_until(lambda: len(fake.objects("pods")) >= 3)
        job = fake.get("jobs", "ig") or {}
        assert not job["status"].get("failed") and not job["status"].get("conditions")


async def test_pod_failure_policy_failjob_on_disruption_condition(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch, core = batch_api(api), core_api(api)
    policy = {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    await batch.create_namespaced_job(
        "default",
        job_body(
            "dis",
            backoffLimit=5,
            podFailurePolicy=policy,
            annotations={"fake.k8sjobs.io/duration": "30"},
        ),
    )
    await wait_until(
        lambda: any(p["status"].get("phase") == "Running" for p in cluster.objects("pods"))
    )
    pod = cluster.objects("pods")[0]
    status = dict(
        pod["status"],
        phase="Failed",
        conditions=[
            *pod["status"]["conditions"],
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ],
    )
    await core.patch_namespaced_pod_status(pod["metadata"]["name"], "default", {"status": status})
    await wait_until(lambda: finished(cluster, "dis"))
    assert conditions(cluster, "dis")[-1] == ("Failed", "True", "PodFailurePolicy")


async def test_suspend_deletes_active_pods_and_resume_restarts(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    batch = batch_api(api)
    # The pod outlives any delay before the suspension (a 0.3 s pod could finish first on a
    # loaded machine); the suspended job's template (mutable then) makes the resumed one short.
    await batch.create_namespaced_job(
        "default", job_body("sr", annotations={"fake.k8sjobs.io/duration": "600"})
    )
    await wait_until(lambda: bool(cluster.objects("pods")), "the job's pod exists")
    await batch.patch_namespaced_job("sr", "default", {"spec": {"suspend": True}})
    await wait_until(
        lambda: (
            ("Suspended", "True", "JobSuspended") in conditions(cluster, "sr")
            and not cluster.objects("pods")
        )
    )
    assert "startTime" not in (cluster.get("jobs", "sr") or {})["status"]
    short = {"metadata": {"annotations": {"fake.k8sjobs.io/duration": "0.05"}}}
    await batch.patch_namespaced_job(
        "sr", "default", {"spec": {"suspend": False, "template": short}}
    )
    await wait_until(lambda: finished(cluster, "sr"))
    assert conditions(cluster, "sr")[0] == ("Suspended", "False", "JobResumed")


async def test_ttl_after_finished_deletes_the_job(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    await batch_api(api).create_namespaced_job(
        "default", job_body("ttl", ttlSecondsAfterFinished=0)
    )
    await wait_until(lambda: cluster.get("jobs", "ttl") is None and not cluster.objects("pods"))


async def test_pods_that_do_not_fit_stay_pending_until_room_frees(tmp_path: Path) -> None:
    node = NodeConfig(cpu="1", memory="1Gi", gpu=1)
    async with (
        FakeCluster(directory=tmp_path, controller=FAST, node=node) as fake,
        await api_client(fake) as api,
    ):
        batch, core = batch_api(api), core_api(api)
        gpu = {"limits": {"nvidia.com/gpu": "1"}}
        await batch.create_namespaced_job(
            "default",
            job_body("g1", resources=gpu, annotations={"fake.k8sjobs.io/duration": "0.4"}),
        )
        await batch.create_namespaced_job("default", job_body("g2", resources=gpu))
        await batch.create_namespaced_job(
            "default", job_body("big", resources={"requests": {"cpu": "2"}})
        )
        await wait_until(lambda: len(fake.objects("events")) >= 2)
        pods = {
            p.metadata.labels["job-name"]: p
            for p in (await core.list_namespaced_pod("default")).items
        }
        unschedulable = pods["big"].status.conditions[0]
        assert (unschedulable.type, unschedulable.status, unschedulable.reason) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )
        assert "Insufficient cpu" in unschedulable.message
        events = (await core.list_namespaced_event("default")).items
        assert {e.reason for e in events} >= {"FailedScheduling"}
        await wait_until(lambda: finished(fake, "g2"))  # runs once g1 frees the GPU
        assert not finished(fake, "big")


async def test_bad_images_fail_to_pull_then_back_off(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    await batch_api(api).create_namespaced_job(
        "default", job_body("img", image="registry.example/does-not-exist:1")
    )

    def waiting_reason() -> str | None:
        pods = cluster.objects("pods")
        statuses = pods[0]["status"].get("containerStatuses", []) if pods else []
        return statuses[0]["state"].get("waiting", {}).get("reason") if statuses else None

    await wait_until(lambda: waiting_reason() == "ErrImagePull")
    await wait_until(lambda: waiting_reason() == "ImagePullBackOff")
    reasons = {e["reason"] for e in cluster.objects("events")}
    assert {"Failed", "BackOff"} <= reasons


@pytest.mark.parametrize("kind", ["configMap", "secret"])
async def test_a_pod_waits_containercreating_for_its_missing_volume(
    tmp_path: Path, kind: str
) -> None:
    # As a real kubelet (k8s-reference/job-configmap-created-after-job.json): Pending,
    # ContainerCreating, one FailedMount Event whose count grows at each doubling retry;
    # the pod mounts and runs once the object exists.
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.005, mount_retry=0.02)
    async with FakeCluster(directory=tmp_path, controller=FAST, kubelet_config=kubelet) as fake:
        body = job_body("late", backoffLimit=0)
        source = {"name": "late"} if kind == "configMap" else {"secretName": "late"}
        body["spec"]["template"]["spec"]["volumes"] = [{"name": "e", kind: source}]
        fake.store.create("jobs", "default", body)
        resource = "configmaps" if kind == "configMap" else "secrets"
        message = f'MountVolume.SetUp failed for volume "e" : {resource[:-1]} "late" not found'

        def failed_mounts() -> list[dict[str, Any]]:
            return [e for e in fake.objects("events") if e["reason"] == "FailedMount"]

        await wait_until(lambda: any(e.get("count", 0) >= 3 for e in failed_mounts()))
        (event,) = failed_mounts()
        assert (event["type"], event["message"]) == ("Warning", message)
        assert event["involvedObject"]["kind"] == "Pod"
        (pod,) = fake.objects("pods")
        assert pod["status"]["phase"] == "Pending"
        (status,) = pod["status"]["containerStatuses"]
        assert status["state"] == {"waiting": {"reason": "ContainerCreating"}}
        assert not finished(fake, "late")
        fake.store.create(resource, "default", {"metadata": {"name": "late"}})
        await wait_until(lambda: finished(fake, "late"))
        assert conditions(fake, "late")[-1][:2] == ("Complete", "True")


async def test_memory_over_the_limit_ends_oomkilled(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    await batch_api(api).create_namespaced_job(
        "default",
        job_body(
            "oom",
            backoffLimit=0,
            resources={"limits": {"memory": "64Mi"}},
            annotations={"fake.k8sjobs.io/memory-usage": "1Gi"},
        ),
    )
    await wait_until(lambda: finished(cluster, "oom"))
    pod = (await core_api(api).list_namespaced_pod("default")).items[0]
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


async def test_injected_errors_latency_and_request_counts(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core = core_api(api)
    cluster.faults.fail("list", "configmaps", status=429, retry_after=3)
    with pytest.raises(client.ApiException) as caught:
        await core.list_namespaced_config_map("default")
    assert caught.value.status == 429 and caught.value.headers is not None
    assert caught.value.headers["Retry-After"] == "3"
    cluster.faults.fail("create", status=503, times=2)
    for _ in range(2):
        with pytest.raises(client.ApiException):
            await core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    await core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    cluster.faults.latency(0.2, "get")
    started = asyncio.get_running_loop().time()
    await core.read_namespaced_config_map("x", "default")
    assert asyncio.get_running_loop().time() - started >= 0.2
    assert cluster.request_count("create", "configmaps") == 3
    assert cluster.request_count("list") == 1 and cluster.request_count("watch") == 0


async def test_restart_keeps_state_and_port_and_paused_kubelet_freezes_pods(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    core, batch = core_api(api), batch_api(api)
    await core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    url = cluster.url
    await cluster.faults.restart_server()
    assert cluster.url == url
    assert (await core.read_namespaced_config_map("kept", "default")).metadata.name == "kept"
    cluster.faults.pause_kubelet()
    await batch.create_namespaced_job("default", job_body("frozen"))
    await wait_until(lambda: cluster.objects("pods"), "the controller created the pod")
    await asyncio.sleep(0.3)  # the time an unpaused kubelet would take to start the pod
    assert [p["status"]["phase"] for p in cluster.objects("pods")] == ["Pending"]
    cluster.faults.resume_kubelet()
    await wait_until(lambda: finished(cluster, "frozen"))


async def test_execute_mode_runs_the_pod_as_processes(tmp_path: Path) -> None:
    pytest.importorskip("k8sjobs.local.podrunner")
    kubelet = KubeletConfig(kill_grace=0.5)
    async with (
        FakeCluster("execute", directory=tmp_path, controller=FAST, kubelet_config=kubelet) as fake,
        await api_client(fake) as api,
    ):
        core, batch = core_api(api), batch_api(api)
        await core.create_namespaced_config_map(
            "default", {"metadata": {"name": "script"}, "data": {"run.sh": "echo hi $X\n"}}
        )
        body = job_body("ex", backoffLimit=0)
        spec = body["spec"]["template"]["spec"]
        spec["containers"][0].update(
            command=["sh", "/script/run.sh"],
            env=[{"name": "X", "value": "there"}],
            volumeMounts=[{"name": "s", "mountPath": "/script"}],
        )
        spec["volumes"] = [{"name": "s", "configMap": {"name": "script"}}]
        await batch.create_namespaced_job("default", body)
        await wait_until(lambda: finished(fake, "ex"), timeout=20)
        assert conditions(fake, "ex")[-1][0] == "Complete"
        pod = fake.objects("pods")[0]["metadata"]["name"]
        assert await core.read_namespaced_pod_log(pod, "default") == "hi there\n"
        slow = job_body("slow", backoffLimit=0, activeDeadlineSeconds=1)
        slow["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "30"]
        await batch.create_namespaced_job("default", slow)
        await wait_until(lambda: finished(fake, "slow"), timeout=20)
        assert conditions(fake, "slow")[-1] == ("Failed", "True", "DeadlineExceeded")


async def test_many_jobs_finish_without_polling(tmp_path: Path) -> None:
    timings = ControllerConfig(batch_period=0.05)
    async with (
        FakeCluster(directory=tmp_path, controller=timings) as fake,
        await api_client(fake) as api,
    ):
        batch = batch_api(api)
        await asyncio.gather(
            *(batch.create_namespaced_job("default", job_body(f"m{i}")) for i in range(100))
        )
        await wait_until(lambda: all(finished(fake, f"m{i}") for i in range(100)), timeout=20)
        assert fake.request_count("get") == 0 and fake.request_count("list") == 0


async def test_stopping_the_controller_as_a_job_arrives_ends_it(cluster: FakeCluster) -> None:
    """A stop in the same turn as the wake-up a new Job gives the controller still ends it.
    asyncio.wait_for (Python 3.11) returned the finished wake-up and lost the cancellation,
    so the controller ran on and a cluster's teardown waited forever (seen under load)."""
    cluster.store.create("jobs", "default", job_body("far", activeDeadlineSeconds=600))
    # Its deadline is queued: the controller now sleeps with a timeout, as between syncs.
    await wait_until(lambda: "startTime" in (cluster.get("jobs", "far") or {}).get("status", {}))
    cluster.store.create("jobs", "default", job_body("late"))  # wakes it, in this turn
    await asyncio.wait_for(cluster.controller.stop(), 10)
