"""Faults on demand for reliability tests, and the per-request tally tests assert on.

`Faults` is what `FakeCluster.faults` returns: error injection per verb and resource (429
with Retry-After, 500, 503), added latency, and the cluster-wide disruptions (dropping or
silencing every open watch, compacting history, restarting the server abruptly or the way
a SIGTERM'd kube-apiserver does, pausing the kubelet, cutting pods/exec streams), which it
delegates to the cluster through callbacks so that this module holds no server state.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .apiserver.errors import ApiError

_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
}


@dataclass(frozen=True)
class RequestKey:
    """What one API request was: verb (get, list, watch, create...), resource, subresource."""

    verb: str
    resource: str
    subresource: str = ""


class RequestLog:
    """Counts of API requests by verb, resource and subresource."""

    def __init__(self) -> None:
        self.counts: collections.Counter[RequestKey] = collections.Counter()

    def record(self, key: RequestKey) -> None:
        """Count one request."""
        self.counts[key] += 1

    def count(
        self, verb: str | None = None, resource: str | None = None, subresource: str | None = None
    ) -> int:
        """Return how many requests matched every given criterion."""
        return sum(
            n
            for k, n in self.counts.items()
            if verb in (None, k.verb)
            and resource in (None, k.resource)
            and subresource in (None, k.subresource)
        )

    def reset(self) -> None:
        """Forget every count (for example after a test's setup)."""
        self.counts.clear()


@dataclass
class _Rule:
    verb: str | None
    resource: str | None
    status: int
    times: int | None
    retry_after: int | None


class Faults:
    """Inject failures into the fake cluster: API errors, latency, watch drops, restarts."""

    def __init__(
        self,
        *,
        drop_watches: Callable[[], int],
        compact: Callable[[], None],
        restart: Callable[[], Awaitable[None]],
        pause_kubelet: Callable[[bool], None],
        silence_watches: Callable[..., int],
        graceful_restart: Callable[[float, float], Awaitable[None]],
        cut_exec_streams: Callable[[str | None, str | None], int] | None = None,
    ) -> None:
        self._rules: list[_Rule] = []
        self._latency: dict[str | None, float] = {}
        self._drop_watches = drop_watches
        self._compact = compact
        self._restart = restart
        self._pause_kubelet = pause_kubelet
        self._silence_watches = silence_watches
        self._graceful_restart = graceful_restart
        self._cut_exec_streams = cut_exec_streams

    def fail(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        status: int = 500,
        times: int | None = 1,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next `times` matching requests (None: all) with `status` (429/500/503).

        `verb` is get, list, watch, create, update, patch, delete or deletecollection;
        None matches every verb. A 429 carries `Retry-After: retry_after` (default 1).
        """
        if status not in _REASONS:
            raise ValueError(f"status must be one of {sorted(_REASONS)}, not {status}")
        if status == 429 and retry_after is None:
            retry_after = 1
        self._rules.append(_Rule(verb, resource, status, times, retry_after))

    def latency(self, seconds: float, verb: str | None = None) -> None:
        """Delay every request (or every request of one verb) by `seconds`; 0 removes it."""
        self._latency[verb] = seconds

    def clear(self) -> None:
        """Remove every injected error and latency."""
        self._rules.clear()
        self._latency.clear()

    def drop_watches(self) -> int:
        """End every open watch stream now; return how many were open."""
        return self._drop_watches()

    def silence_watches(self, *, resumed: bool = False) -> int:
        """Make every open watch go silent: open, but no events and no bookmarks, ever.

        Objects keep changing; the streams end only at their timeout or a later drop.
        With `resumed`, watches opened later from a resourceVersion at or before now are
        silent too, so only a client that lists again gets events: the restarted v1.36
        server on which resumed watches stayed open and silent for minutes. Returns how
        many open watches were silenced.
        """
        return self._silence_watches(resumed=resumed)

    async def graceful_shutdown(self, drain: float = 60.0, downtime: float = 0.0) -> None:
        """Restart the server the way kube-apiserver handles SIGTERM, history compacted.

        New connections are refused at once; open watches stay open and silent for
        `drain` seconds (a real v1.36 server held them about 60 s), then end cleanly
        (HTTP 200, no ERROR event). After `downtime` more seconds the server listens again
        on the same port with its history compacted, so resuming from an old
        resourceVersion answers 410 Gone. The controller and kubelet keep working all
        along. Returns once the server is back.
        """
        if drain < 0 or downtime < 0:
            raise ValueError(
                f"drain ({drain}) and downtime ({downtime}) must be seconds, 0 or more"
            )
        await self._graceful_restart(drain, downtime)

    def cut_exec_streams(self, namespace: str | None = None, pod: str | None = None) -> int:
        """Drop every open pods/exec stream (or those of one namespace, of one pod) now, with
        no status frame and no close frame: each client sees a broken stream, as when an
        API server restarts or an idle proxy gives up. Their commands are killed, as any
        closed stream's; the pods go on. Returns how many streams were cut.
        """
        if self._cut_exec_streams is None:
            return 0
        return self._cut_exec_streams(namespace, pod)

    def compact(self) -> None:
        """Compact history now: watches and continue tokens from older versions get 410."""
        self._compact()

    async def restart_server(self) -> None:
        """Stop and restart the HTTP server on the same port, keeping every object."""
        await self._restart()

    def pause_kubelet(self) -> None:
        """Freeze pods where they are: no scheduling, no starts, no status changes."""
        self._pause_kubelet(True)

    def resume_kubelet(self) -> None:
        """Let a paused kubelet carry on."""
        self._pause_kubelet(False)

    # Used by the API server for each request.

    def delay_for(self, verb: str) -> float:
        """Return the added latency for a request of `verb`."""
        return self._latency.get(verb, 0.0) + self._latency.get(None, 0.0)

    def error_for(self, verb: str, resource: str) -> ApiError | None:
        """Return the injected error for this request, consuming one use of its rule."""
        for rule in self._rules:
            if rule.verb not in (None, verb) or rule.resource not in (None, resource):
                continue
            if rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.remove(rule)
            reason, message = _REASONS[rule.status]
            error = ApiError(
                rule.status,
                reason,
                message,
                {"retryAfterSeconds": rule.retry_after} if rule.retry_after else None,
            )
            if rule.retry_after:
                error.headers["Retry-After"] = str(rule.retry_after)
            return error
        return None
