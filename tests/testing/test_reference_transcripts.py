"""Replay each recorded v1.36.2 scenario against the fake cluster and compare Job statuses
and Warning Events.

The reference transcripts (../shared/k8s-reference/job-*.json) hold every Job watch event a
real API server and job controller produced, and for some the namespace's Event watch. Each
scenario runs here with all durations scaled by TIME_SCALE (the controller's batching,
backoff and deadlines, and the pods' sleeps; the API retry backoff by API_SCALE), in a
namespace holding the recorded extras (a ResourceQuota, a LimitRange). The sequence of Job
statuses seen through a watch must equal the recorded one, and so must the Warning Events
(watch type, reason, object, message, count), with timestamps, uids and generated names
abstracted away; the retries must come no sooner than the recorded doubling delays.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch

from k8sjobs.testing import ControllerConfig, FakeCluster, KubeletConfig, PodPlan

from .conftest import api_client, batch_api, core_api, wait_until

REFERENCE = Path(os.environ.get("K8S_REFERENCE", "/work/shared/k8s-reference"))
SCENARIOS = sorted(p.stem for p in REFERENCE.glob("job-*.json"))
# A pod that exits at once must be done within the 1 s status batch, scaled, even when a
# loaded machine stalls the event loop for a while: 0.1 proved too tight on two cores.
TIME_SCALE = 0.25
SLEEP_SCALE = 0.3  # pods that sleep must outlive one status batch, as they did when recorded
# FailedCreate retries: 1, 2, 4, 8, 16 s recorded; 0.05 s, doubling, here.
API_SCALE = 0.05

pytestmark = pytest.mark.skipif(not SCENARIOS, reason="k8s reference transcripts not found")


# What the recording did to the Job's first pod once it ran (`kubectl drain`, `kubectl delete`).
DISRUPTIONS = {
    "job-evicted-pod-failure-policy-ignore": "evict",
    "job-running-pod-deleted": "delete",
}
_IF_INDEX = re.compile(
    r'if \[ "\$JOB_COMPLETION_INDEX" = (\d+) \]; then (.*?);(?: else (.*?);)? fi'
)


def shell_rule(pod: dict[str, Any], files: dict[str, str] | None = None) -> PodPlan:
    """Simulate `/bin/sh -c SCRIPT` (or `/bin/sh FILE`, ``files`` mapping the paths the pod
    mounts to their text) for the scripts used in the transcripts."""
    script = pod["spec"]["containers"][0]["command"][-1]
    script = (files or {}).get(script, script).strip().replace("\n", ";")
    index = (pod["metadata"].get("annotations") or {}).get(
        "batch.kubernetes.io/job-completion-index", ""
    )
    script = _IF_INDEX.sub(lambda m: m[2] if m[1] == index else (m[3] or ":"), script)
    plan = PodPlan(duration=0.02)
    for step in (s.strip() for s in script.split(";")):
        if step.startswith("echo "):
            text = re.sub(r"\s*>&2$", "", step[5:]).replace("$JOB_COMPLETION_INDEX", index)
            plan.logs += text + "\n"
        elif step.startswith("sleep "):
            plan.duration += float(step[6:]) * SLEEP_SCALE
        elif step.startswith("exit "):
            plan.exit_code = int(step[5:])
            break
    return plan


def normalise(status: dict[str, Any]) -> dict[str, Any]:
    """Return a Job status without timestamps and uids, keeping which fields are present."""
    result: dict[str, Any] = {}
    for key, value in status.items():
        if key == "conditions":
            result[key] = [
                (c["type"], c["status"], c.get("reason"), _message(c.get("message"))) for c in value
            ]
        elif key in ("startTime", "completionTime"):
            result[key] = "<time>"
        elif key == "uncountedTerminatedPods":
            result[key] = {k: len(v) for k, v in value.items()}
        else:
            result[key] = value
    return result


def _message(message: str | None) -> str | None:
    return re.sub(r"pod \S+/\S+", "pod <pod>", message) if message else message


def recorded_statuses(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        normalise(e["object"]["status"])
        for e in scenario["job_watch_events"]
        if e["type"] != "BOOKMARK"
    ]


def strip_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Return a copy without the values that differ per run (uids, times, versions)."""
    text = json.dumps(obj)
    uid = obj["metadata"]["uid"]
    text = text.replace(uid, "<uid>")
    copy: dict[str, Any] = json.loads(text)
    meta = copy["metadata"]
    for key in ("resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    meta["namespace"] = "<ns>"
    return copy


def pod_histories(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Return what happened to each pod, whatever its name: phases, deletion, disruption.

    Sorted, so that the fake's pods compare with the recorded ones as a multiset.
    """
    pods: dict[str, dict[str, Any]] = {}
    for kind, obj in events:
        meta, status = obj["metadata"], obj.get("status") or {}
        if "name" not in meta:
            continue  # a BOOKMARK
        pod = pods.setdefault(meta["name"], {"phases": [], "deleted": False, "disruption": None})
        if status.get("phase") and status.get("phase") not in pod["phases"][-1:]:
            pod["phases"].append(status["phase"])
        pod["deleted"] = pod["deleted"] or kind == "DELETED"
        for condition in status.get("conditions") or []:
            if condition["type"] == "DisruptionTarget":
                pod["disruption"] = (condition["status"], condition.get("reason"))
        annotations = meta.get("annotations") or {}
        pod["index"] = annotations.get("batch.kubernetes.io/job-completion-index")
        pod["index_failures"] = annotations.get("batch.kubernetes.io/job-index-failure-count")
        pod["exit_codes"] = [
            ((c.get("state") or {}).get("terminated") or {}).get("exitCode")
            for c in status.get("containerStatuses") or []
        ]
    return sorted(json.dumps(p, sort_keys=True) for p in pods.values())


def recorded_warnings(scenario: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        normalise_event(e["type"], e["object"])
        for e in scenario.get("event_watch_events", [])
        if e["object"].get("type") == "Warning"
    ]


def normalise_event(kind: str, event: dict[str, Any]) -> tuple[Any, ...]:
    """Return what a user reads of an Event, generated pod names and times abstracted away."""
    involved = event["involvedObject"]
    message = re.sub(r'pods "([a-z0-9-]+-)[a-z0-9]{5}"', r'pods "\1<suffix>"', event["message"])
    named_after = event["metadata"]["name"].rsplit(".", 1)[0]
    if involved["kind"] == "Pod":  # a Job's pod: its name ends in a generated suffix
        named_after = re.sub(r"-[a-z0-9]{5}$", "-<suffix>", named_after)
    return (
        kind,
        event["type"],
        event["reason"],
        involved["kind"],
        named_after,
        message,
        event.get("count"),
        event["source"].get("component"),
    )


async def create_extras(api: Any, scenario: dict[str, Any]) -> None:
    """Create what the recording put in the namespace first (a ResourceQuota, a LimitRange)."""
    for extra in scenario.get("namespace_extras") or []:
        kind, body = extra["kind"], extra["object"]
        if kind == "resourcequotas":
            await core_api(api).create_namespaced_resource_quota("demo", body)
        elif kind == "limitranges":
            await core_api(api).create_namespaced_limit_range("demo", body)
        else:
            raise AssertionError(f"the transcript has an extra this test cannot create: {kind}")


async def collect_warnings(core: Any, rv: str, into: list[tuple[float, tuple[Any, ...]]]) -> None:
    """Append each Warning Event watched in "demo" from `rv`, with when it arrived."""
    async with watch.Watch() as watcher:
        stream = watcher.stream(
            core.list_namespaced_event, "demo", resource_version=rv, timeout_seconds=60
        )
        async for event in stream:
            if event["raw_object"].get("type") == "Warning":
                normalised = normalise_event(event["type"], event["raw_object"])
                into.append((asyncio.get_running_loop().time(), normalised))


def finishes(scenario: dict[str, Any]) -> bool:
    """Return whether the recorded Job ended (the failed creations never do)."""
    last = scenario["job_watch_events"][-1]["object"]["status"]
    return any(c["type"] in ("Complete", "Failed") for c in last.get("conditions", []))


async def run_scenario(name: str, tmp_path: Path) -> tuple[dict[str, Any], list[Any], Any, Any]:
    scenario = json.loads((REFERENCE / f"{name}.json").read_text())
    timings = ControllerConfig(
        batch_period=1.0 * TIME_SCALE,
        backoff_base=10.0 * TIME_SCALE,
        time_scale=TIME_SCALE,
        api_backoff_base=1.0 * API_SCALE,
    )
    kubelet = KubeletConfig(
        schedule_delay=0.001,
        start_delay=0.003,
        mount_retry=0.5 * TIME_SCALE,
        rule=lambda pod: shell_rule(pod, mounted_files(fake, pod)),
    )
    fake = FakeCluster(directory=tmp_path, controller=timings, kubelet_config=kubelet)
    warnings: list[tuple[float, tuple[Any, ...]]] = []
    written: list[float] = []
    async with fake, await api_client(fake) as api:
        core, batch = core_api(api), batch_api(api)
        await core.create_namespace({"metadata": {"name": "demo"}})
        await create_extras(api, scenario)
        pod_events: list[tuple[str, dict[str, Any]]] = []
        fake.store.listen(
            lambda e: pod_events.append((e.type, e.obj)) if e.resource == "pods" else None
        )
        fake.store.listen(lambda e: note_write(e, written))
        job = scenario["job_as_submitted"]
        if disruption := DISRUPTIONS.get(name):
            disrupt_first_running_pod(fake, disruption)
        event_task = asyncio.ensure_future(collect_warnings(core, str(fake.store.rv), warnings))
        await wait_until(lambda: fake.store.watcher_count() == 1, "the Event watch is open")
        want_warnings = len(recorded_warnings(scenario))
        # Watch() builds an SSL context (~75 ms): not between the create and the watch.
        async with watch.Watch() as watcher:
            created = await batch.create_namespaced_job("demo", job, _preload_content=False)
            created_body = json.loads(await created.read())
            if "configmap_as_submitted" in scenario:  # created later, as recorded
                delay = scenario["configmap_created_at_t"] * TIME_SCALE
                configmap = scenario["configmap_as_submitted"]
                asyncio.get_running_loop().call_later(
                    delay, fake.store.create, "configmaps", "demo", configmap
                )
            statuses = [normalise(created_body["status"])]
            job_task = asyncio.ensure_future(
                collect_statuses(watcher, batch, job, created_body, statuses)
            )
            if finishes(scenario):
                await job_task
            else:  # no end to wait for: until what was recorded has been seen
                want = len(recorded_statuses(scenario))
                await wait_until(lambda: len(statuses) >= want, "the recorded Job statuses")
                await wait_until(lambda: len(warnings) >= want_warnings, "the Warning Events")
                job_task.cancel()
        await wait_until(lambda: len(warnings) >= want_warnings, "the recorded Warning Events")
        event_task.cancel()
        await wait_until(lambda: not any(deleting(p) for p in fake.objects("pods", "demo")))
        pods = await core.list_namespaced_pod("demo")
        logs = {
            p.metadata.name: await core.read_namespaced_pod_log(p.metadata.name, "demo")
            for p in pods.items
        }
    return scenario, statuses, (created_body, logs, pod_histories(pod_events)), (warnings, written)


def note_write(event: Any, written: list[float]) -> None:
    """Note when the fake wrote a Warning Event (its controller's clock, not a watcher's)."""
    if event.resource == "events" and event.obj.get("type") == "Warning":
        written.append(time.monotonic())


def mounted_files(fake: FakeCluster, pod: dict[str, Any]) -> dict[str, str]:
    """Return the text of each file the pod's first container sees from its ConfigMaps."""
    namespace, files = pod["metadata"]["namespace"], {}
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or ()}
    for mount in pod["spec"]["containers"][0].get("volumeMounts") or ():
        source = volumes.get(mount["name"], {}).get("configMap")
        configmap = fake.get("configmaps", source["name"], namespace) if source else None
        for key, text in ((configmap or {}).get("data") or {}).items():
            files[f"{mount['mountPath']}/{key}"] = text
    return files


def deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def disrupt_first_running_pod(fake: FakeCluster, how: str) -> None:
    """Evict or delete the first pod of the scenario as soon as it runs, as recorded."""
    done: list[str] = []

    def act(event: Any) -> None:
        pod = event.obj
        if event.resource != "pods" or done or pod["status"].get("phase") != "Running":
            return
        done.append(pod["metadata"]["name"])
        loop = asyncio.get_running_loop()
        if how == "evict":
            loop.call_soon(fake.evict, pod["metadata"]["name"], "demo")
        else:
            loop.call_soon(fake.store.delete, "pods", "demo", pod["metadata"]["name"])

    fake.store.listen(act)


async def collect_statuses(
    watcher: watch.Watch,
    batch: client.BatchV1Api,
    job: dict[str, Any],
    created: dict[str, Any],
    statuses: list[dict[str, Any]],
) -> None:
    """Append each Job status watched until the Job ends (resuming a suspended one)."""
    resumed = False
    rv = created["metadata"]["resourceVersion"]
    async with asyncio.timeout(30):
        stream = watcher.stream(
            batch.list_namespaced_job, "demo", timeout_seconds=30, resource_version=rv
        )
        async for event in stream:
            status = event["raw_object"]["status"]
            statuses.append(normalise(status))
            types = {c["type"] for c in status.get("conditions", []) if c["status"] == "True"}
            if "Suspended" in types and not resumed:
                resumed = True
                await asyncio.sleep(0.2)
                await batch.patch_namespaced_job(
                    job["metadata"]["name"], "demo", {"spec": {"suspend": False}}
                )
            if types & {"Complete", "Failed"}:
                break


@pytest.mark.parametrize("name", SCENARIOS)
async def test_job_statuses_match_the_recorded_transcript(name: str, tmp_path: Path) -> None:
    scenario, statuses, _, (warnings, _) = await run_scenario(name, tmp_path)
    assert statuses == recorded_statuses(scenario)
    want = recorded_warnings(scenario)
    assert [w for _, w in warnings[: len(want)]] == want


FAILED_CREATE = [name for name in SCENARIOS if name.startswith("job-failedcreate-")]


@pytest.mark.parametrize("name", FAILED_CREATE)
async def test_refused_pods_are_retried_after_the_recorded_doubling_delays(
    name: str, tmp_path: Path
) -> None:
    """Each retry comes no sooner than recorded (1, 2, 4, 8, 16 s, scaled): a lower bound on
    the times the fake wrote the Events (a late sync only delays the next one further), which
    a loaded machine cannot break."""
    scenario, _, _, (_, written) = await run_scenario(name, tmp_path)
    recorded = [e["t"] for e in scenario["event_watch_events"]]
    seen = written[: len(recorded)]
    for k in range(1, len(recorded)):
        recorded_gap = recorded[k] - recorded[k - 1]
        assert round(recorded_gap) == 2 ** (k - 1)  # what the transcript says, checked
        assert seen[k] - seen[k - 1] >= 0.9 * API_SCALE * 2 ** (k - 1)


@pytest.mark.parametrize("name", SCENARIOS)
async def test_create_response_logs_and_pods_match_the_transcript(
    name: str, tmp_path: Path
) -> None:
    """The create response, the logs, and each pod's history: it goes through the recorded
    phases, is deleted (or kept), carries the same index, index failure count, exit codes
    and DisruptionTarget condition."""
    scenario, _, (created, logs, histories), _ = await run_scenario(name, tmp_path)
    assert strip_server_fields(created) == strip_server_fields(scenario["create_response"])
    assert sorted(logs.values()) == sorted(scenario.get("pod_logs", {}).values())
    recorded = [(e["type"], e["object"]) for e in scenario.get("pod_watch_events", [])]
    assert histories == pod_histories(recorded)
