"""A terminal Job is judged with the ends of the pods it counts, whichever watch comes first.

The Job watch and the Pod watch are separate streams with no order between them: the server
ends a pod before its Job counts it, but the Job's event may reach the driver first. These
tests replay real servers' transcripts (docs: /work/shared/k8s-reference) in every order the
two streams allow and ask for one verdict: the one the recorded order gives.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.handle import StepHandle
from k8sjobs.kube import KubernetesBackend
from k8sjobs.kube.backend import StudyWatch
from k8sjobs.kube.watch import Cache, slim
from k8sjobs.state import StepResult, StepState
from k8sjobs.status import judge, unseen_pods
from k8sjobs.testing import FakeCluster

from ..test_status import REFERENCE

NOW = datetime(2026, 1, 1, tzinfo=UTC)  # after every transcript: a fixed clock, pure
Event = tuple[str, dict[str, Any]]  # ("job" | "pod", watch event)

# Transcripts whose Job ends counting pods (a failure policy, a backoff limit, indexes).
ENDINGS = {
    "job-pod-failure-policy-failjob.json": (StepState.FAILED, "PodFailurePolicy", 42),
    "job-failed-backoff1.json": (StepState.FAILED, "ExitCode", 3),
    "job-backoff-limit-per-index.json": (StepState.FAILED, "ExitCode", 1),
    "job-success-policy-index0.json": (StepState.SUCCEEDED, "Completed", 0),
}


def streams(name: str, tag: str = "") -> tuple[list[Event], list[Event]]:
    """Return a transcript's Job and Pod watch events (no bookmarks), each in its order.

    ``tag`` renames the Job and its pods, so that one watch can replay it many times.
    """
    data = json.loads((REFERENCE / name).read_text())
    jobs = [("job", e) for e in data["job_watch_events"] if e["type"] != "BOOKMARK"]
    pods = [("pod", e) for e in data["pod_watch_events"] if e["type"] != "BOOKMARK"]
    if tag:
        jobs, pods = copy.deepcopy(jobs), copy.deepcopy(pods)
        for _, event in jobs + pods:
            meta = event["object"]["metadata"]
            meta["name"] += tag
            for key in ("batch.kubernetes.io/job-name", "job-name"):
                if key in (meta.get("labels") or {}):
                    meta["labels"][key] += tag
    return jobs, pods


def merge(jobs: list[Event], pods: list[Event], order: list[str]) -> list[Event]:
    """Return the two streams interleaved by ``order`` (each stream keeps its own order)."""
    rest = {"job": iter(jobs), "pod": iter(pods)}
    return [next(rest[which]) for which in order]


def held_verdict(events: list[Event]) -> StepResult | None:
    """Return the first verdict that is terminal with every counted pod's end seen: the
    backend's rule, on caches fed ``events`` in that order (pure)."""
    jobs, pods = Cache(), Cache()
    gone: dict[str, dict[str, Any]] = {}
    for which, event in events:
        cache = jobs if which == "job" else pods
        kind, obj = event["type"], event["object"]
        if which == "pod" and kind == "DELETED":
            gone[obj["metadata"]["name"]] = slim(obj)
        cache.apply(kind, obj)
        for job in jobs.objects.values():
            live, ended = list(pods.objects.values()), list(gone.values())
            result = judge(job, live, now=NOW, pending_grace=60, gone=ended)
            if result.state.terminal and not unseen_pods(job, live, ended):
                return result
    return None


def _verdict(result: StepResult | None) -> tuple[object, ...]:
    assert result is not None
    return (result.state, result.reason, result.exit_code, result.message)


@pytest.mark.parametrize("name", sorted(ENDINGS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_interleaving_of_the_two_watches_gets_the_recorded_verdict(
    name: str, data: st.DataObject
) -> None:
    jobs, pods = streams(name)
    recorded = sorted(jobs + pods, key=lambda e: e[1]["t"])
    order = data.draw(st.permutations(["job"] * len(jobs) + ["pod"] * len(pods)))
    expected = held_verdict(recorded)
    assert _verdict(expected)[:3] == ENDINGS[name]
    assert _verdict(held_verdict(merge(jobs, pods, order))) == _verdict(expected)


# ---- the backend's watch, fed the Job's end before its pods' -----------------------


@pytest_asyncio.fixture
async def backend(cluster: FakeCluster, tmp_path: Path) -> AsyncIterator[KubernetesBackend]:
    kube = KubernetesBackend(
        kubeconfig=cluster.kubeconfig_path, log_dir=tmp_path / "logs", keep_failed=True
    )
    await kube.start()
    yield kube
    await kube.aclose()


def deliver(watch: StudyWatch, events: list[Event]) -> None:
    """Pass ``events`` to the watch's handlers as its informers would, in this order."""
    for which, event in events:
        informer = watch.jobs if which == "job" else watch.pods
        change = informer.cache.apply(event["type"], event["object"])
        if change is not None:
            informer._on_change(change)


async def watched(backend: KubernetesBackend, jobs: list[Event]) -> tuple[StudyWatch, StepHandle]:
    """Return the watch of a study the fake has nothing of, and a handle on the Job of
    ``jobs`` (its objects reach the watch only through ``deliver``)."""
    watch = await backend._watch("default", "replayed")
    job = str(jobs[0][1]["object"]["metadata"]["name"])
    handle = StepHandle(
        name=job, study="replayed", object_name=job, namespace="default", backend=backend
    )
    watch.track(handle)
    return watch, handle


@pytest.mark.parametrize("name", sorted(ENDINGS))
async def test_a_job_ended_before_its_pods_arrive_waits_for_them(
    backend: KubernetesBackend, name: str
) -> None:
    """Every Job event first (its terminal one included), then every pod event: the step
    ends with the script's exit code and the pod's reason, not the Job's alone."""
    jobs, pods = streams(name, "-late")
    watch, handle = await watched(backend, jobs)
    deliver(watch, jobs)
    assert not handle.done  # terminal Job, its pods not seen: no verdict yet
    deliver(watch, pods)
    result = await handle.wait(timeout=30)
    assert (result.state, result.reason, result.exit_code) == ENDINGS[name]
    assert _verdict(result) == _verdict(held_verdict(sorted(jobs + pods, key=lambda e: e[1]["t"])))


async def test_a_pod_never_seen_ends_the_step_after_the_grace_and_says_so(
    backend: KubernetesBackend,
) -> None:
    """A FailJob whose pod was deleted unseen: after the grace, the exit code comes from the
    controller's message; the watch's bookkeeping stays out of the step's message."""
    backend.verdict_grace = 0.2
    jobs, _ = streams("job-pod-failure-policy-failjob.json", "-unseen")
    watch, handle = await watched(backend, jobs)
    deliver(watch, jobs)
    result = await handle.wait(timeout=30)
    assert (result.state, result.reason, result.exit_code) == (
        StepState.FAILED,
        "PodFailurePolicy",
        42,
    )
    assert "not seen" not in result.message and "pod(s)" not in result.message


async def test_the_grace_timer_is_not_what_releases_a_held_verdict(
    backend: KubernetesBackend,
) -> None:
    """A held verdict is released by the pod's event itself, long before the grace."""
    backend.verdict_grace = 3600.0
    jobs, pods = streams("job-failed-backoff1.json", "-woken")
    watch, handle = await watched(backend, jobs)
    deliver(watch, jobs)
    await asyncio.sleep(0)
    assert not handle.done
    deliver(watch, pods)
    result = await handle.wait(timeout=30)
    assert (result.reason, result.exit_code) == ("ExitCode", 3)
    assert "not seen" not in result.message
