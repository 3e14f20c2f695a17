"""Replay the recorded JobSet scenarios (a real JobSet v0.13 controller) on the fake cluster.

shared/k8s-reference/jobset-launcher-workers.json (the launcher dependsOn the workers Ready,
successPolicy on the launcher) and jobset-failed.json (the launcher exits 3 under
maxRestarts 1) hold every watch event of the JobSet, its Jobs, Pods, Service and Events. Each
runs here on the simulated kubelet with the recorded scripts (sleeps scaled, as the Job
replays do) and is compared field for field where a client relies on it: the defaulted spec,
the sequence of JobSet statuses (conditions' types, reasons, messages and order, restarts,
terminalState, replicatedJobsStatus), the child Jobs' names, labels, annotations, creations
and deletions, the pods' hostnames, subdomain and labels, the headless Service, the JobSet's
Events, and that no launcher pod exists before every worker pod is Ready.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.testing import ControllerConfig, FakeCluster, KubeletConfig
from k8sjobs.testing.apiserver.store import Event

from .conftest import api_client, core_api, custom_api, wait_until
from .test_reference_transcripts import REFERENCE, TIME_SCALE, shell_rule

SCENARIOS = ("jobset-launcher-workers", "jobset-failed")
pytestmark = pytest.mark.skipif(
    not (REFERENCE / "jobset-failed.json").exists(), reason="JobSet transcripts not found"
)


def js_status(status: dict[str, Any] | None) -> dict[str, Any]:
    """Return a JobSet status without times, keeping which fields are present."""
    result = dict(status or {})
    if "conditions" in result:
        result["conditions"] = [
            (c["type"], c["status"], c["reason"], c["message"]) for c in result["conditions"]
        ]
    return result


def squash(items: list[Any]) -> list[Any]:
    """Return the items without immediate repeats (a no-op write shows no change)."""
    return [item for i, item in enumerate(items) if i == 0 or item != items[i - 1]]


def abstract(mapping: dict[str, str], uid: str, namespace: str) -> dict[str, str]:
    """Return labels or annotations with the JobSet's uid and the job-key abstracted."""
    out = {}
    for key, value in mapping.items():
        if key == "jobset.sigs.k8s.io/job-key":
            value = "<job-key>"
        elif value == uid:
            value = "<uid>"
        elif key in ("batch.kubernetes.io/controller-uid", "controller-uid"):
            value = "<job-uid>"
        out[key] = value
    return out


# The fake's API server puts these on every Job's own labels; v1.36 copies the template's
# labels (these among them) only onto a Job that has none. A known difference of the fake's
# Job defaulting (apiserver/resources.py), not of the JobSet emulation.
_SELECTOR_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


def job_view(obj: dict[str, Any], js_uid: str) -> dict[str, Any]:
    meta, template = obj["metadata"], obj["spec"]["template"]
    pod_meta = template.get("metadata") or {}
    own = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _SELECTOR_LABELS}
    return {
        "name": meta["name"],
        "labels": abstract(own, js_uid, meta["namespace"]),
        "annotations": abstract(meta.get("annotations") or {}, js_uid, meta["namespace"]),
        "owner": [(r["kind"], r["name"], r.get("controller")) for r in meta["ownerReferences"]],
        "pod_labels": abstract(pod_meta.get("labels") or {}, js_uid, meta["namespace"]),
        "pod_annotations": abstract(pod_meta.get("annotations") or {}, js_uid, meta["namespace"]),
        "subdomain": template["spec"].get("subdomain"),
        "suspend": obj["spec"].get("suspend"),
        "completionMode": obj["spec"].get("completionMode"),
    }


def pod_view(obj: dict[str, Any], js_uid: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "prefix": meta["generateName"],
        "labels": abstract(meta.get("labels") or {}, js_uid, meta["namespace"]),
        "annotations": abstract(meta.get("annotations") or {}, js_uid, meta["namespace"]),
        "hostname": obj["spec"].get("hostname"),
        "subdomain": obj["spec"].get("subdomain"),
    }


def lifecycle(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Return each Job's ADDED and DELETED, with its restart attempt, in order."""
    return [
        (
            e["type"],
            e["object"]["metadata"]["name"],
            e["object"]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"],
        )
        for e in events
        if e["type"] in ("ADDED", "DELETED")
    ]


def first_of_each(events: list[dict[str, Any]], view: Any, uid: str) -> list[Any]:
    """Return the view of each object as first added (by name or generateName prefix)."""
    seen: dict[str, Any] = {}
    for e in events:
        if e["type"] == "ADDED":
            obj = e["object"]
            key = obj["metadata"].get("generateName") or obj["metadata"]["name"]
            seen.setdefault(key, view(obj, uid))
    return list(seen.values())


def launcher_waited(events: list[dict[str, Any]]) -> bool:
    """Return whether every launcher pod was created while all its attempt's workers were
    Ready (what dependsOn Ready guarantees)."""
    ready: dict[str, bool] = {}
    ok = True
    for e in events:
        obj = e["object"]
        labels = obj["metadata"].get("labels") or {}
        role = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
        if role == "workers":
            conditions = (obj.get("status") or {}).get("conditions") or []
            up = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            ready[obj["metadata"]["name"]] = up and e["type"] != "DELETED"
        elif role == "launcher" and e["type"] == "ADDED":
            attempt = labels["jobset.sigs.k8s.io/restart-attempt"]
            current = [
                name for name, up in ready.items() if up and _attempt(events, name) == attempt
            ]
            ok = ok and len(current) == 2
    return ok


def _attempt(events: list[dict[str, Any]], pod: str) -> str:
    for e in events:
        if e["object"]["metadata"]["name"] == pod:
            return str(e["object"]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"])
    return ""


def pod_lives(events: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Return each pod's phases, whether it was deleted and its last exit code and reason,
    by generated-name prefix and restart attempt (the pod names' suffixes are random)."""
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        obj, meta = e["object"], e["object"]["metadata"]
        key = (meta["generateName"], meta["labels"]["jobset.sigs.k8s.io/restart-attempt"])
        life = pods.setdefault(key, {"phases": [], "deleted": False, "exit": None})
        phase = (obj.get("status") or {}).get("phase")
        if phase and phase not in life["phases"][-1:]:
            life["phases"].append(phase)
        life["deleted"] = life["deleted"] or e["type"] == "DELETED"
        for container in (obj.get("status") or {}).get("containerStatuses") or []:
            ended = (container.get("state") or {}).get("terminated")
            if ended:
                life["exit"] = (ended["exitCode"], ended.get("reason"))
    return pods


def js_events(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [
        (o["type"], o["reason"], o["message"], o["reportingComponent"])
        for o in (e["object"] for e in events)
        if o["involvedObject"]["kind"] == "JobSet"
    ]


async def replay(name: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a recorded scenario on the fake; return the recording and what the fake did,
    in the recording's shape (create_response and the *_watch_events lists)."""
    scenario = json.loads((REFERENCE / f"{name}.json").read_text())
    timings = ControllerConfig(
        batch_period=1.0 * TIME_SCALE, backoff_base=10.0 * TIME_SCALE, time_scale=TIME_SCALE
    )
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.003, rule=shell_rule)
    fake = FakeCluster(directory=tmp_path, controller=timings, kubelet_config=kubelet)
    seen: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("jobsets", "jobs", "pods", "services", "events")
    }

    def note(event: Event) -> None:
        if event.resource in seen and event.namespace == "demo":
            seen[event.resource].append({"type": event.type, "object": event.obj})

    async with fake, await api_client(fake) as api:
        await fake.install_jobset()
        await core_api(api).create_namespace({"metadata": {"name": "demo"}})
        fake.store.listen(note)
        created = await custom_api(api).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "demo", "jobsets", scenario["jobset_as_submitted"]
        )
        js_name = created["metadata"]["name"]

        def settled() -> bool:
            js = fake.get("jobsets", js_name, "demo") or {}
            done = bool((js.get("status") or {}).get("terminalState"))
            active = [
                j
                for j in fake.objects("jobs", "demo")
                if not (j.get("status") or {}).get("conditions")
            ]
            return done and not active

        await wait_until(settled, "the JobSet finished and its active Jobs are gone")
        await wait_until(
            lambda: (
                not any(
                    p["metadata"].get("deletionTimestamp") for p in fake.objects("pods", "demo")
                )
            ),
            "the deleted Jobs' pods are gone",
        )
        await wait_until(
            lambda: (
                js_status(seen["jobsets"][-1]["object"].get("status"))
                == js_status(scenario["jobset_watch_events"][-1]["object"]["status"])
            ),
            "the last recorded JobSet status",
        )
        launcher = [p for p in fake.objects("pods", "demo") if "launcher" in p["metadata"]["name"]][
            -1
        ]
        log = await core_api(api).read_namespaced_pod_log(launcher["metadata"]["name"], "demo")
    fake_run = {
        "create_response": created,
        "log": log,
        **{f"{k[:-1]}_watch_events": v for k, v in seen.items()},
    }
    return scenario, fake_run


@pytest.fixture(params=SCENARIOS)
async def replayed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    return await replay(request.param, tmp_path)


async def test_the_defaulted_spec_is_the_recorded_one(replayed: Any) -> None:
    recorded, fake = replayed
    assert fake["create_response"]["spec"] == recorded["create_response"]["spec"]
    assert "status" not in fake["create_response"]


async def test_jobset_statuses_follow_the_recorded_sequence(replayed: Any) -> None:
    recorded, fake = replayed
    want = squash([js_status(e["object"].get("status")) for e in recorded["jobset_watch_events"]])
    got = squash([js_status(e["object"].get("status")) for e in fake["jobset_watch_events"]])
    assert got == want


async def test_child_jobs_are_named_labelled_created_and_deleted_as_recorded(
    replayed: Any,
) -> None:
    recorded, fake = replayed
    rec_uid = recorded["create_response"]["metadata"]["uid"]
    fake_uid = fake["create_response"]["metadata"]["uid"]
    assert lifecycle(fake["job_watch_events"]) == lifecycle(recorded["job_watch_events"])
    got = first_of_each(fake["job_watch_events"], job_view, fake_uid)
    assert got == first_of_each(recorded["job_watch_events"], job_view, rec_uid)
    for event in fake["job_watch_events"]:  # the controller's hash of "<namespace>/<job>"
        meta = event["object"]["metadata"]
        key = hashlib.sha1(f"demo/{meta['name']}".encode()).hexdigest()
        assert meta["labels"]["jobset.sigs.k8s.io/job-key"] == key
    deleting = [
        e["object"]["metadata"]
        for e in fake["job_watch_events"]
        if e["type"] == "MODIFIED" and e["object"]["metadata"].get("deletionTimestamp")
    ]
    assert len(deleting) == sum(e["type"] == "DELETED" for e in fake["job_watch_events"])
    assert all(m["finalizers"] == ["foregroundDeletion"] for m in deleting)


async def test_pods_service_and_events_are_the_recorded_ones(replayed: Any) -> None:
    recorded, fake = replayed
    rec_uid = recorded["create_response"]["metadata"]["uid"]
    fake_uid = fake["create_response"]["metadata"]["uid"]
    got = first_of_each(fake["pod_watch_events"], pod_view, fake_uid)
    assert got == first_of_each(recorded["pod_watch_events"], pod_view, rec_uid)
    assert launcher_waited(fake["pod_watch_events"])
    assert launcher_waited(recorded["pod_watch_events"])

    def service(events: list[dict[str, Any]]) -> list[Any]:
        return [
            (
                e["type"],
                e["object"]["metadata"]["name"],
                [r["kind"] for r in e["object"]["metadata"]["ownerReferences"]],
                {k: e["object"]["spec"].get(k) for k in ("clusterIP", "selector", "type")},
                e["object"]["spec"]["publishNotReadyAddresses"],
            )
            for e in events
        ]

    assert service(fake["service_watch_events"]) == service(recorded["service_watch_events"])
    assert js_events(fake["event_watch_events"]) == js_events(recorded["event_watch_events"])
    # The simulated kubelet echoes the scripts' echo lines; `hostname` prints nothing here.
    ((pod, text),) = recorded["pod_logs"].items()
    hostname = pod.rsplit("-", 1)[0]
    assert fake["log"] == "".join(f"{line}\n" for line in text.splitlines() if line != hostname)


async def test_pods_run_end_and_are_deleted_as_recorded(replayed: Any) -> None:
    """The launcher's exit code, the workers killed (143) and deleted with their Job."""
    recorded, fake = replayed
    assert pod_lives(fake["pod_watch_events"]) == pod_lives(recorded["pod_watch_events"])
