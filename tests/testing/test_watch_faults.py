"""The fake's watch faults over real HTTP: a graceful (SIGTERM) restart and silenced watches.

Each test reads the raw watch stream with aiohttp, so what is asserted is what any client
sees on the wire: which lines came, and how the stream ended.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from k8sjobs.testing import FakeCluster

from .conftest import wait_until

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


class Stream:
    """One raw watch: the lines read so far, and how the stream ended."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.status = 0
        self.ended_cleanly = False
        self.error: BaseException | None = None

    def types(self) -> list[str]:
        return [str(line["type"]) for line in self.lines]


async def _read(
    http: aiohttp.ClientSession, url: str, rv: str, stream: Stream, timeout: int = 60
) -> None:
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": rv,
        "timeoutSeconds": str(timeout),
    }
    try:
        async with http.get(url + CONFIGMAPS, params=params) as response:
            stream.status = response.status
            async for raw in response.content:
                if raw.strip():
                    stream.lines.append(json.loads(raw))
        stream.ended_cleanly = True
    except aiohttp.ClientError as exc:
        stream.error = exc


async def _list_rv(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url + CONFIGMAPS) as response:
        return str((await response.json())["metadata"]["resourceVersion"])


async def test_graceful_shutdown_holds_watches_silent_then_ends_them_cleanly(
    cluster: FakeCluster,
) -> None:
    url = cluster.url
    async with aiohttp.ClientSession() as http:
        rv = await _list_rv(http, url)
        stream = Stream()
        reader = asyncio.create_task(_read(http, url, rv, stream))
        await wait_until(lambda: "BOOKMARK" in stream.types())  # the fixture bookmarks every 0.2 s
        restart = asyncio.create_task(cluster.faults.graceful_shutdown(drain=1.0, downtime=0.2))
        await wait_until(lambda: cluster.server.port and not _accepting(cluster))
        heard = len(stream.lines)
        cluster.store.create("configmaps", "default", _cm("while-draining"))
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as fresh:  # a new connection is refused
                await _list_rv(fresh, url)
        await reader  # ends once the drain is over
        assert stream.status == 200 and stream.ended_cleanly and stream.error is None
        assert len(stream.lines) == heard  # silent: no event, no bookmark, no ERROR
        await restart
        async with aiohttp.ClientSession() as fresh:
            stale = Stream()
            await _read(fresh, url, rv, stale)
            assert stale.types() == ["ERROR"] and stale.lines[0]["object"]["code"] == 410
            assert "while-draining" in [
                c["metadata"]["name"] for c in cluster.objects("configmaps", "default")
            ]


def _accepting(cluster: FakeCluster) -> bool:
    runner = cluster.server._runner
    return runner is not None and bool(runner.sites)


async def test_silenced_watch_stays_open_and_sends_nothing(cluster: FakeCluster) -> None:
    url = cluster.url
    async with aiohttp.ClientSession() as http:
        rv = await _list_rv(http, url)
        stream = Stream()
        reader = asyncio.create_task(_read(http, url, rv, stream))
        await wait_until(lambda: "BOOKMARK" in stream.types())
        assert cluster.faults.silence_watches(resumed=True) == 1
        heard = len(stream.lines)
        cluster.store.create("configmaps", "default", _cm("unseen"))
        # A fresh list sees the change; a watch resumed from the old version stays silent,
        # one from the fresh list's version does not.
        fresh_rv = await _list_rv(http, url)
        resumed, live = Stream(), Stream()
        tasks = [
            asyncio.create_task(_read(http, url, rv, resumed)),
            asyncio.create_task(_read(http, url, fresh_rv, live)),
        ]
        cluster.store.create("configmaps", "default", _cm("after"))
        await wait_until(lambda: "ADDED" in live.types() and "BOOKMARK" in live.types())
        assert not reader.done() and len(stream.lines) == heard
        assert resumed.lines == [] and not tasks[0].done()
        assert cluster.faults.drop_watches() == 3
        await asyncio.gather(reader, *tasks)
    assert stream.ended_cleanly and len(stream.lines) == heard
    assert resumed.ended_cleanly and resumed.lines == []


async def test_a_silenced_watch_still_ends_at_its_timeout(cluster: FakeCluster) -> None:
    url = cluster.url
    async with aiohttp.ClientSession() as http:
        rv = await _list_rv(http, url)
        stream = Stream()
        reader = asyncio.create_task(_read(http, url, rv, stream, timeout=2))
        await wait_until(lambda: "BOOKMARK" in stream.types())
        cluster.faults.silence_watches()
        heard = len(stream.lines)
        cluster.store.create("configmaps", "default", _cm("unseen"))
        await asyncio.wait_for(reader, 30)  # ends by itself: nothing dropped it
    assert stream.ended_cleanly and len(stream.lines) == heard
