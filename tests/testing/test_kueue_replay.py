"""Replay each recorded Kueue scenario (shared/k8s-reference/kueue-*.json) on the fake's Kueue.

Each transcript's setup (ResourceFlavor, WorkloadPriorityClasses, ClusterQueue, LocalQueue)
and Jobs are sent over HTTP to a `FakeCluster(kueue=True)`, with the recorder's actions done
on the same cues (the high-priority Job once the low one's pod runs, the missing LocalQueue
once the Workload says it is missing), pods simulated from their shell scripts. What a client
relies on is compared with what the real Kueue v0.20 wrote, field for field: each Workload's
condition history (types, statuses, reasons, messages, their order; PodsReady apart, whose
place among the others depends on which real controller wrote first), its name, labels,
owner, finalizer, podSets and priority; Kueue's Events; each Job's suspend history, the
labels, annotation and nodeSelector admission injects, and what status.failed does; the pods'
fates (the preempted one deleted, exit 143).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.testing import ControllerConfig, FakeCluster, KubeletConfig
from k8sjobs.testing.controllers.kueue import workload_name

from .conftest import api_client, batch_api, core_api, custom_api, wait_until
from .test_reference_transcripts import shell_rule

REFERENCE = Path(os.environ.get("K8S_REFERENCE", "/work/shared/k8s-reference"))
SCENARIOS = sorted(p.stem for p in REFERENCE.glob("kueue-*.json"))
TIME_SCALE = 0.25
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_WAITED = re.compile(r"wait time since queued was \d+s")

pytestmark = pytest.mark.skipif(not SCENARIOS, reason="k8s reference transcripts not found")

Seen = dict[str, list[tuple[str, dict[str, Any]]]]


def load(name: str) -> dict[str, Any]:
    scenario: dict[str, Any] = json.loads((REFERENCE / f"{name}.json").read_text())
    return scenario


def jobs_of(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the scenario's Jobs in the order they were posted."""
    if "job_as_submitted" in scenario:
        return [scenario["job_as_submitted"]]
    jobs = scenario["jobs_as_submitted"]
    return list(jobs.values()) if isinstance(jobs, dict) else list(jobs)


def scrub(text: str) -> str:
    """Return Kueue's words with the uids and the seconds waited abstracted away."""
    return _WAITED.sub("wait time since queued was <n>s", _UID.sub("<uid>", text))


def condition_history(events: list[tuple[str, dict[str, Any]]], name: str) -> list[Any]:
    """Return a Workload's distinct successive conditions, PodsReady left out."""
    history: list[Any] = []
    for _, obj in events:
        if obj["metadata"]["name"] != name:
            continue
        snapshot = [
            (c["type"], c["status"], c["reason"], scrub(c["message"]))
            for c in (obj.get("status") or {}).get("conditions") or []
            if c["type"] != "PodsReady"
        ]
        if snapshot and snapshot not in history[-1:]:
            history.append(snapshot)
    return history


def pods_ready_history(events: list[tuple[str, dict[str, Any]]], name: str) -> list[Any]:
    """Return a Workload's PodsReady history: each True, and each run of False with its reasons.

    While a preempted Job stops, real Kueue's two writers of PodsReady flip it between
    WaitForRecovery and WaitForStart a few times (a race); a run of False is one entry here.
    """
    history: list[Any] = []
    for _, obj in events:
        if obj["metadata"]["name"] != name:
            continue
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c["type"] != "PodsReady":
                continue
            if c["status"] == "True":
                if history[-1:] != ["True"]:
                    history.append("True")
            elif history and isinstance(history[-1], set):
                history[-1].add(c["reason"])
            else:
                history.append({c["reason"]})
    return history


def kueue_events(events: list[tuple[str, dict[str, Any]]]) -> set[tuple[str, str, str, str, str]]:
    """Return Kueue's Events (not the job controller's): type, reason, about what, message."""
    found = set()
    for _, obj in events:
        if obj.get("reportingComponent", "").startswith(("kueue", "batch/job-kueue")):
            involved = obj["involvedObject"]
            found.add(
                (
                    obj["type"],
                    obj["reason"],
                    involved["kind"],
                    involved["name"],
                    scrub(obj["message"]),
                )
            )
    return found


def recorded(scenario: dict[str, Any]) -> Seen:
    return {
        kind: [(e["type"], e["object"]) for e in scenario[f"{kind}_watch_events"]]
        for kind in ("workload", "job", "pod", "event")
    }


def suspend_history(events: list[tuple[str, dict[str, Any]]], name: str) -> list[Any]:
    history: list[Any] = []
    for _, obj in events:
        if obj["metadata"]["name"] == name:
            state = bool(obj["spec"].get("suspend"))
            if state not in history[-1:]:
                history.append(state)
    return history


def injected(events: list[tuple[str, dict[str, Any]]], name: str) -> list[Any]:
    """Return what admission put on a Job's pod template, the first time it was unsuspended."""
    for _, obj in events:
        if obj["metadata"]["name"] == name and obj["spec"].get("suspend") is False:
            template = obj["spec"]["template"]
            labels = {
                k: v for k, v in (template["metadata"].get("labels") or {}).items() if "kueue" in k
            }
            return [
                labels,
                template["metadata"].get("annotations"),
                template["spec"].get("nodeSelector"),
            ]
    return []


def pod_fates(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, bool, Any]]:
    """Return each pod's last phase, whether it was deleted, and its exit code; sorted."""
    pods: dict[str, tuple[str, bool, Any]] = {}
    for kind, obj in events:
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        code = None
        for status in statuses:
            code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode", code)
        phase = (obj.get("status") or {}).get("phase", "")
        pods[obj["metadata"]["name"]] = (phase, kind == "DELETED", code)
    return sorted(pods.values(), key=repr)


async def replay(name: str, tmp_path: Path) -> tuple[dict[str, Any], Seen]:
    """Run the scenario on the fake; return it and every watch event seen, by kind."""
    scenario = load(name)
    timings = ControllerConfig(batch_period=1.0 * TIME_SCALE, time_scale=TIME_SCALE)
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.003, rule=shell_rule)
    fake = FakeCluster(directory=tmp_path, controller=timings, kubelet_config=kubelet, kueue=True)
    seen: Seen = {"workload": [], "job": [], "pod": [], "event": []}
    names = {"workloads": "workload", "jobs": "job", "pods": "pod", "events": "event"}

    recording = [True]

    def note(event: Any) -> None:
        if recording[0] and event.resource in names and event.namespace == "demo":
            seen[names[event.resource]].append((event.type, json.loads(json.dumps(event.obj))))

    fake.store.listen(note)
    async with fake, await api_client(fake) as api:
        core, batch, custom = core_api(api), batch_api(api), custom_api(api)
        await core.create_namespace({"metadata": {"name": "demo"}})
        for item in [{"object": scenario["resourceflavor"]}, *scenario["setup"]]:
            await create(custom, item["object"])
        jobs = jobs_of(scenario)
        for job in jobs:
            if name == "kueue-preempted" and job["metadata"]["name"] == "high":
                await wait_until(lambda: pods_ready(fake), "the low Workload's pods are ready")
            await batch.create_namespaced_job("demo", job)
        if "late_localqueue" in scenario:
            await wait_until(lambda: misconfigured(fake), "the Workload says its queue is missing")
            await create(custom, scenario["late_localqueue"]["object"])
        await wait_until(
            lambda: all(done(fake, j["metadata"]["name"]) for j in jobs),
            "every Job ends",
            timeout=120,
        )
        await wait_until(lambda: all_finished(fake), "every Workload is Finished", timeout=30)
        recording[0] = False  # the recording ended here, by deleting the Jobs
        for job in jobs:
            fake.store.delete("jobs", "demo", job["metadata"]["name"], propagation="Background")
        await wait_until(
            lambda: not fake.objects("workloads", "demo"), "the Workloads go", timeout=30
        )
    return scenario, seen


def all_finished(fake: FakeCluster) -> bool:
    """Return whether every Workload is Finished and has let go of its finalizer."""
    return all(
        not w["metadata"].get("finalizers")
        and any(c["type"] == "Finished" for c in w["status"].get("conditions") or [])
        for w in fake.objects("workloads", "demo")
    )


def done(fake: FakeCluster, name: str) -> bool:
    job = fake.get("jobs", name, "demo")
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


async def create(custom: Any, obj: dict[str, Any]) -> None:
    plural = PLURALS[obj["kind"]]
    if obj["kind"] == "LocalQueue":
        await custom.create_namespaced_custom_object(GROUP, VERSION, "demo", plural, obj)
    else:
        await custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)


def misconfigured(fake: FakeCluster) -> bool:
    return any(
        c.get("reason") == "Misconfigured"
        for w in fake.objects("workloads", "demo")
        for c in (w.get("status") or {}).get("conditions") or []
    )


def pods_ready(fake: FakeCluster) -> bool:
    """Return whether the one Workload says PodsReady, as it did 3 s into the recording."""
    return any(
        c["type"] == "PodsReady" and c["status"] == "True"
        for w in fake.objects("workloads", "demo")
        for c in (w.get("status") or {}).get("conditions") or []
    )


# One run per scenario, shared by the tests that each compare one aspect of it.
_RUNS: dict[str, tuple[dict[str, Any], Seen]] = {}


async def run_once(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Seen]:
    if name not in _RUNS:
        _RUNS[name] = await replay(name, tmp_path_factory.mktemp(name))
    return _RUNS[name]


def each_workload(scenario: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(o["metadata"]["name"] for _, o in recorded(scenario)["workload"]))


def fake_name(seen: Seen, recorded_name: str) -> str:
    """Return the fake's Workload for the same Job (the hash differs: another uid)."""
    prefix = recorded_name.rsplit("-", 1)[0]
    for _, obj in seen["workload"]:
        if obj["metadata"]["name"].rsplit("-", 1)[0] == prefix:
            return str(obj["metadata"]["name"])
    raise AssertionError(f"no Workload for {prefix}")


@pytest.mark.parametrize("name", SCENARIOS)
async def test_workload_conditions_match_the_transcript(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scenario, seen = await run_once(name, tmp_path_factory)
    want = recorded(scenario)
    for workload in each_workload(scenario):
        mine = fake_name(seen, workload)
        assert condition_history(seen["workload"], mine) == transitions(
            condition_history(want["workload"], workload)
        ), workload
        assert pods_ready_history(seen["workload"], mine) == pods_ready_history(
            want["workload"], workload
        ), workload


def transitions(history: list[Any]) -> list[Any]:
    """Return the recorded history without the momentary states the fake does not pass through.

    Real Kueue briefly said "ClusterQueue  doesn't exist" (an empty name) between creating the
    missing LocalQueue and seeing its ClusterQueue: its cache caught up one event later.
    """
    return [h for h in history if not any("ClusterQueue  doesn't exist" in c[3] for c in h)]


@pytest.mark.parametrize("name", SCENARIOS)
async def test_workload_objects_match_the_transcript(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scenario, seen = await run_once(name, tmp_path_factory)
    for _, first in [e for e in recorded(scenario)["workload"] if e[0] == "ADDED"]:
        mine = next(
            o
            for t, o in seen["workload"]
            if t == "ADDED" and fake_name(seen, first["metadata"]["name"]) == o["metadata"]["name"]
        )
        for obj in (first, mine):
            job_uid = obj["metadata"]["labels"]["kueue.x-k8s.io/job-uid"]
            owner = obj["metadata"]["ownerReferences"][0]
            assert owner["uid"] == job_uid and owner["kind"] == "Job" and owner["controller"]
            assert obj["metadata"]["name"] == workload_name(owner["name"], job_uid)
        assert mine["metadata"]["finalizers"] == first["metadata"]["finalizers"]
        assert mine["spec"] == first["spec"], first["metadata"]["name"]


@pytest.mark.parametrize("name", SCENARIOS)
async def test_kueue_events_match_the_transcript(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scenario, seen = await run_once(name, tmp_path_factory)
    want = {
        (kind, reason, about, rename(seen, obj_name), message)
        for kind, reason, about, obj_name, message in kueue_events(recorded(scenario)["event"])
    }
    got = {(k, r, a, n, rename_message(seen, m)) for k, r, a, n, m in kueue_events(seen["event"])}
    assert got == {(k, r, a, n, rename_message(seen, m)) for k, r, a, n, m in want}


def rename(seen: Seen, obj_name: str) -> str:
    return fake_name(seen, obj_name) if obj_name.startswith("job-") else obj_name


def rename_message(seen: Seen, message: str) -> str:
    """Return a message with every Workload name in it written as the fake's."""
    return re.sub(
        r"\bjob-[a-z0-9-]+-[0-9a-f]{5}\b",
        lambda m: fake_name(seen, m[0]).rsplit("-", 1)[0],
        message,
    )


@pytest.mark.parametrize("name", SCENARIOS)
async def test_jobs_are_suspended_and_admitted_as_recorded(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scenario, seen = await run_once(name, tmp_path_factory)
    want = recorded(scenario)
    for job in jobs_of(scenario):
        job_name = job["metadata"]["name"]
        assert suspend_history(seen["job"], job_name) == suspend_history(want["job"], job_name)
        assert injected(seen["job"], job_name) == [
            rename_value(seen, v) for v in injected(want["job"], job_name)
        ]
        failed = [
            o["status"].get("failed") for _, o in seen["job"] if o["metadata"]["name"] == job_name
        ]
        assert failed == [None] * len(failed), "a preempted pod is not the Job's failure"
        assert [
            o["status"].get("failed") for _, o in want["job"] if o["metadata"]["name"] == job_name
        ] == [None] * len([1 for _, o in want["job"] if o["metadata"]["name"] == job_name])
    assert pod_fates(seen["pod"]) == pod_fates(want["pod"])


def rename_value(seen: Seen, value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: fake_name(seen, v) if k == "kueue.x-k8s.io/workload" else v for k, v in value.items()
        }
    return value


async def test_the_create_response_is_already_suspended(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    scenario = load("kueue-admitted")
    assert scenario["create_response"]["spec"]["suspend"] is True
    _, seen = await run_once("kueue-admitted", tmp_path_factory)
    added = [o for t, o in seen["job"] if t == "ADDED"]
    assert added[0]["spec"]["suspend"] is True
