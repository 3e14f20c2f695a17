"""The Events API of the fake cluster: core/v1 and events.k8s.io/v1 list and watch, field
selectors, and the recorders' rules (a repeat raises `count`, a new message is a new object,
similar messages are combined, the spam filter), as a real v1.36 cluster has them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster
from k8sjobs.testing.apiserver.events import record_event

from .conftest import call, wait_until


def _job_like(name: str, uid: str = "u-1") -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "7"}
    return {"kind": "Job", "apiVersion": "batch/v1", "metadata": meta}


def _events(cluster: FakeCluster) -> list[dict[str, Any]]:
    return sorted(cluster.objects("events", "default"), key=lambda e: e["metadata"]["name"])


async def test_an_exact_repeat_raises_the_count_of_one_event(cluster: FakeCluster) -> None:
    job = _job_like("prio")
    for _ in range(3):
        record_event(cluster.store, job, "Warning", "FailedCreate", "no class", "job-controller")
    (event,) = _events(cluster)
    assert event["count"] == 3
    assert event["metadata"]["name"].startswith("prio.")
    assert event["involvedObject"] == {
        "kind": "Job",
        "namespace": "default",
        "name": "prio",
        "uid": "u-1",
        "apiVersion": "batch/v1",
        "resourceVersion": "7",
    }
    assert (event["source"], event["reportingComponent"]) == (
        {"component": "job-controller"},
        "job-controller",
    )
    assert list(event)[:3] == ["kind", "apiVersion", "metadata"]
    assert event["eventTime"] is None


async def test_a_new_message_is_a_new_event_and_ten_are_combined(cluster: FakeCluster) -> None:
    job = _job_like("quota")
    for i in range(12):
        message = f'pods "quota-{i}" is forbidden'
        record_event(cluster.store, job, "Warning", "FailedCreate", message, "job-controller")
    events = _events(cluster)
    singles = [e for e in events if not e["message"].startswith("(combined")]
    combined = [e for e in events if e["message"].startswith("(combined")]
    assert [e["count"] for e in singles] == [1] * 9
    assert len(combined) == 1
    assert combined[0]["count"] == 3  # the 10th, 11th and 12th
    assert combined[0]["message"] == '(combined from similar events): pods "quota-11" is forbidden'


async def test_the_spam_filter_lets_25_events_of_one_object_through(cluster: FakeCluster) -> None:
    pod = {**_job_like("p"), "kind": "Pod", "apiVersion": "v1"}
    for _ in range(30):
        record_event(cluster.store, pod, "Warning", "BackOff", "again", "kubelet", host="n1")
    (event,) = _events(cluster)
    assert event["count"] == 25
    assert event["source"] == {"component": "kubelet", "host": "n1"}


async def test_a_series_event_counts_its_first_repeat(cluster: FakeCluster) -> None:
    pod = {**_job_like("p"), "kind": "Pod", "apiVersion": "v1"}
    for _ in range(3):
        record_event(
            cluster.store,
            pod,
            "Warning",
            "FailedScheduling",
            "0/1 nodes are available",
            "default-scheduler",
            action="Scheduling",
            instance="default-scheduler-node",
        )
    (event,) = _events(cluster)
    assert event["series"]["count"] == 2
    assert (event["firstTimestamp"], event["lastTimestamp"], event["source"]) == (None, None, {})
    assert event["action"] == "Scheduling"
    assert event["reportingInstance"] == "default-scheduler-node"
    assert "count" not in event
    assert event["eventTime"].endswith("Z") and "." in event["eventTime"]


def _seed(cluster: FakeCluster) -> None:
    record_event(
        cluster.store, _job_like("a", "ua"), "Warning", "FailedCreate", "x", "job-controller"
    )
    record_event(cluster.store, _job_like("b", "ub"), "Normal", "Completed", "y", "job-controller")
    pod = {**_job_like("a", "up"), "kind": "Pod", "apiVersion": "v1"}
    record_event(cluster.store, pod, "Warning", "Failed", "z", "kubelet")


async def _names(http: aiohttp.ClientSession, url: str) -> list[str]:
    status, body = await call(http, "GET", url)
    assert status == 200, body
    return sorted(e["message"] if "message" in e else e["note"] for e in body["items"])


async def test_core_events_list_by_involved_object_reason_and_type(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    _seed(cluster)
    base = f"{cluster.url}/api/v1/namespaces/default/events?fieldSelector="
    assert await _names(http, base + "involvedObject.kind=Job") == ["x", "y"]
    assert await _names(http, base + "involvedObject.name=a") == ["x", "z"]
    assert await _names(http, base + "involvedObject.uid=up") == ["z"]
    assert await _names(http, base + "involvedObject.namespace=default,type=Warning") == ["x", "z"]
    assert await _names(http, base + "reason=Completed") == ["y"]
    assert await _names(http, base + "type!=Warning") == ["y"]
    status, body = await call(http, "GET", base + "regarding.name=a")
    assert (status, body["message"]) == (400, "field label not supported: regarding.name")


async def test_events_k8s_io_serves_the_same_events_in_its_shape(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    _seed(cluster)
    base = f"{cluster.url}/apis/events.k8s.io/v1/namespaces/default/events"
    status, body = await call(http, "GET", base + "?fieldSelector=regarding.kind=Job,type=Warning")
    assert status == 200, body
    assert body["kind"] == "EventList" and body["apiVersion"] == "events.k8s.io/v1"
    (event,) = body["items"]
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert (event["note"], event["reason"], event["type"]) == ("x", "FailedCreate", "Warning")
    assert event["regarding"]["name"] == "a"
    assert event["reportingController"] == "job-controller"
    assert event["deprecatedSource"] == {"component": "job-controller"}
    assert event["deprecatedCount"] == 1
    assert "message" not in event and "involvedObject" not in event
    assert await _names(http, base + "?fieldSelector=regarding.uid=up") == ["z"]
    assert await _names(http, base + "?fieldSelector=reportingController=kubelet") == ["z"]
    status, body = await call(http, "GET", base + "?fieldSelector=involvedObject.name=a")
    assert (status, body["message"]) == (400, "field label not supported: involvedObject.name")
    status, one = await call(http, "GET", f"{base}/{event['metadata']['name']}")
    assert (status, one["note"]) == (200, "x")


async def test_an_event_created_as_events_k8s_io_reads_back_as_core(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "mine"},
        "eventTime": "2026-12-01T20:58:53.263430Z",
        "reportingController": "me",
        "reportingInstance": "me-1",
        "action": "Testing",
        "reason": "Tried",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        "note": "hello",
        "type": "Normal",
    }
    url = f"{cluster.url}/apis/events.k8s.io/v1/namespaces/default/events"
    status, created = await call(http, "POST", url, body, **{"Content-Type": "application/json"})
    assert status == 201, created
    assert (created["note"], created["apiVersion"]) == ("hello", "events.k8s.io/v1")
    stored = cluster.get("events", "mine")
    assert stored is not None
    assert (stored["message"], stored["involvedObject"]["name"]) == ("hello", "p")
    assert (stored["reportingComponent"], stored["action"]) == ("me", "Testing")


async def _watch_lines(
    http: aiohttp.ClientSession, url: str, want: int, seen: list[dict[str, Any]]
) -> None:
    async with http.get(url) as response:
        assert response.status == 200
        async for line in response.content:
            seen.append(json.loads(line))
            if len([e for e in seen if e["type"] != "BOOKMARK"]) >= want:
                return


async def test_watches_of_both_apis_see_adds_count_updates_and_bookmarks(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    rv = cluster.store.rv
    query = f"?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
    core: list[dict[str, Any]] = []
    v1: list[dict[str, Any]] = []
    ns = "namespaces/default/events"
    core_url = f"{cluster.url}/api/v1/{ns}{query}&fieldSelector=involvedObject.name=a"
    v1_url = f"{cluster.url}/apis/events.k8s.io/v1/{ns}{query}&fieldSelector=regarding.name=a"
    tasks = [
        asyncio.ensure_future(_watch_lines(http, core_url, 2, core)),
        asyncio.ensure_future(_watch_lines(http, v1_url, 2, v1)),
    ]
    await wait_until(lambda: cluster.store.watcher_count() == 2, "both watches are open")
    job = _job_like("a")
    record_event(cluster.store, _job_like("other", "uo"), "Warning", "X", "m", "job-controller")
    record_event(cluster.store, job, "Warning", "FailedCreate", "m", "job-controller")
    record_event(cluster.store, job, "Warning", "FailedCreate", "m", "job-controller")
    await wait_until(lambda: all(t.done() for t in tasks), "both watches saw two events")
    core_events = [e for e in core if e["type"] != "BOOKMARK"]
    assert [(e["type"], e["object"]["count"]) for e in core_events] == [
        ("ADDED", 1),
        ("MODIFIED", 2),
    ]
    v1_events = [e for e in v1 if e["type"] != "BOOKMARK"]
    assert [(e["type"], e["object"]["deprecatedCount"]) for e in v1_events] == [
        ("ADDED", 1),
        ("MODIFIED", 2),
    ]
    assert v1_events[0]["object"]["apiVersion"] == "events.k8s.io/v1"
    # Bookmarks, once idle, name the kind of the API watched.
    v1.clear()
    task = asyncio.ensure_future(_watch_lines(http, v1_url, 99, v1))
    await wait_until(lambda: any(e["type"] == "BOOKMARK" for e in v1), "a bookmark")
    task.cancel()
    bookmark = next(e for e in v1 if e["type"] == "BOOKMARK")
    assert bookmark["object"]["apiVersion"] == "events.k8s.io/v1"


async def test_discovery_lists_the_events_group_and_core_events(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    _, groups = await call(http, "GET", f"{cluster.url}/apis")
    names = [g["name"] for g in groups["groups"]]
    assert {"events.k8s.io", "scheduling.k8s.io", "node.k8s.io"} <= set(names)
    _, resources = await call(http, "GET", f"{cluster.url}/apis/events.k8s.io/v1")
    (entry,) = resources["resources"]
    assert (entry["name"], entry["kind"], entry["namespaced"]) == ("events", "Event", True)
    assert "watch" in entry["verbs"]
    assert entry["storageVersionHash"] == "r2yiGXH7wu8="  # stored as core/v1, as recorded
    _, core = await call(http, "GET", f"{cluster.url}/api/v1")
    core_names = {r["name"] for r in core["resources"]}
    assert {"events", "limitranges", "resourcequotas", "resourcequotas/status"} <= core_names


def _v1_event(**fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "note": "started",
        "type": "Normal",
        "action": "Start",
        "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-1",
    }
    return {**event, **fields}


@pytest.mark.parametrize(
    ("fields", "causes"),
    [
        ({"type": "Bogus"}, [("type", 'Invalid value: "": has invalid value: Bogus')]),
        ({"note": "n" * 5000}, [("note", 'Invalid value: "": can have at most 1024 characters')]),
        ({"note": "é" * 513}, [("note", 'Invalid value: "": can have at most 1024 characters')]),
        ({"reason": "r" * 300}, [("reason", 'Invalid value: "": can have at most 128 characters')]),
        ({"action": "a" * 129}, [("action", 'Invalid value: "": can have at most 128 characters')]),
        (
            {"reportingInstance": "i" * 129},
            [("reportingInstance", 'Invalid value: "": can have at most 128 characters')],
        ),
        (
            {"type": "x", "reason": "r" * 129},
            [
                ("type", 'Invalid value: "": has invalid value: x'),
                ("reason", 'Invalid value: "": can have at most 128 characters'),
            ],
        ),
    ],
    ids=["type", "note", "note-bytes", "reason", "action", "instance", "two"],
)
async def test_any_events_v1_event_past_the_real_validation_is_refused_with_its_422(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    fields: dict[str, Any],
    causes: list[tuple[str, str]],
) -> None:
    """ValidateEventCreate's rules for events.k8s.io/v1: a type other than Normal or Warning,
    and reportingInstance, action, reason (128) or note (1024) longer than their bound in
    bytes, each one cause of one 422 in the real server's words; nothing is stored."""
    url = f"{cluster.url}/apis/events.k8s.io/v1/namespaces/default/events"
    status, body = await call(http, "POST", url, _v1_event(**fields))
    assert status == 422, body
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == causes
    summary = ", ".join(f"{f}: {m}" for f, m in causes)
    expected = summary if len(causes) == 1 else f"[{summary}]"
    assert body["message"] == f'Event.events.k8s.io "e1" is invalid: {expected}'
    assert cluster.objects("events", "default") == []


async def test_an_events_v1_event_at_its_bounds_is_created(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.url}/apis/events.k8s.io/v1/namespaces/default/events"
    event = _v1_event(note="n" * 1024, reason="r" * 128, type="Warning")
    status, body = await call(http, "POST", url, event)
    assert status == 201, body
    assert body["note"] == "n" * 1024
