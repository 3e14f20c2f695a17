"""WatchList (`sendInitialEvents=true`) and the ListOptions combinations the server refuses."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from .conftest import call

CMS = "/api/v1/namespaces/default/configmaps"
WATCHLIST = (
    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
)


async def next_event(response: aiohttp.ClientResponse) -> dict[str, Any]:
    line = await asyncio.wait_for(response.content.readline(), 10)
    event: dict[str, Any] = json.loads(line)
    return event


async def test_watchlist_sends_the_state_then_the_end_bookmark_then_live_events(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.url}{CMS}"
    for name in ("a", "b", "c"):
        await call(http, "POST", base, {"metadata": {"name": name}})
    snapshot = cluster.store.rv
    async with http.get(f"{base}?{WATCHLIST}&resourceVersion=&timeoutSeconds=30") as response:
        assert response.status == 200
        initial = [await next_event(response) for _ in range(3)]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in initial] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("ADDED", "c"),
        ]
        end = await next_event(response)
        assert end["type"] == "BOOKMARK"
        assert end["object"]["metadata"] == {
            "resourceVersion": str(snapshot),
            "annotations": {"k8s.io/initial-events-end": "true"},
        }
        await call(http, "POST", base, {"metadata": {"name": "d"}})
        live = await next_event(response)
        assert (live["type"], live["object"]["metadata"]["name"]) == ("ADDED", "d")
        assert int(live["object"]["metadata"]["resourceVersion"]) > snapshot


async def test_send_initial_events_false_streams_only_what_happens_next(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.url}{CMS}"
    await call(http, "POST", base, {"metadata": {"name": "old"}})
    query = "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=30"
    async with http.get(f"{base}?{query}") as response:
        # The watch starts at the resourceVersion of its request, so no event can slip past.
        await call(http, "POST", base, {"metadata": {"name": "new"}})
        event = await next_event(response)
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "new")


@pytest.mark.parametrize(
    ("query", "fields", "message"),
    [
        (
            "watch=1&sendInitialEvents=true",
            ["resourceVersionMatch"],
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan",
        ),
        (
            "watch=1&resourceVersionMatch=NotOlderThan",
            ["resourceVersionMatch"],
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
            "unless sendInitialEvents is provided",
        ),
        (
            "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact",
            ["resourceVersionMatch", "resourceVersionMatch"],
            "[resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: "
            '"Exact": supported values: "NotOlderThan"]',
        ),
        (
            "sendInitialEvents=true",
            ["sendInitialEvents"],
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            "resourceVersionMatch=NotOlderThan",
            ["resourceVersionMatch"],
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided",
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            ["resourceVersionMatch"],
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
            'resourceVersion "0"',
        ),
    ],
)
async def test_invalid_combinations_are_422_on_list_options(
    cluster: FakeCluster, http: aiohttp.ClientSession, query: str, fields: list[str], message: str
) -> None:
    status, body = await call(http, "GET", f"{cluster.url}{CMS}?{query}")
    assert status == 422
    assert body["reason"] == "Invalid"
    assert body["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'
    assert body["details"]["kind"] == "ListOptions"
    assert body["details"]["group"] == "meta.k8s.io"
    assert [c["field"] for c in body["details"]["causes"]] == fields
