"""The one seam between a session's steps and whatever watches them (traces, metrics, a file).

An ``Observer`` is a listener on each handle the session registers: the backends' shared
watch already pushes every change into the handles, so observing costs no request. It keeps a
``Track`` per step (when it was submitted, first seen running, ended) and hands each change to
its ``Recorder``s. A recorder that raises is switched off with one logged warning: what
watches a run never stops the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..state import StepState
from .native import Native, NativeSource

if TYPE_CHECKING:
    from ..events import StepEvent
    from ..handle import StepHandle

__all__ = ["Observer", "Recorder", "Track"]

_log = logging.getLogger("k8sjobs.observe")

#: Seconds a closing session waits for its recorders to flush (an exporter's last batch).
CLOSE_TIMEOUT = 15.0


@dataclass
class Track:
    """What an observer has seen of one step (times in ns since the epoch, ``time_ns``).

    ``state``/``reason`` are the last seen; ``since_ns`` when that reason was first seen;
    ``events`` how many of the handle's events were already handed on.
    """

    handle: StepHandle
    submit_ns: int
    state: StepState = StepState.PENDING
    reason: str = ""
    since_ns: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    events: int = 0
    native: Native = field(default_factory=Native)
    #: The step's cache key, once the session worked it out ("" for a step it does not key).
    key: str = ""
    #: Per-recorder room (a tracer keeps the step's spans here, keyed by ``id(recorder)``).
    slots: dict[int, object] = field(default_factory=dict)

    @property
    def wait_seconds(self) -> float | None:
        """Return the seconds from submit to start (to the end, for a step that never ran)."""
        until = self.start_ns if self.start_ns is not None else self.end_ns
        return None if until is None else (until - self.submit_ns) / 1e9


class Recorder(Protocol):
    """Something that records steps as they change: a tracer, a meter, a trace file."""

    def submitted(self, track: Track) -> None:
        """A step was registered with the session (its wait starts)."""

    def changed(self, track: Track, previous: StepState, reason: str) -> None:
        """A step changed state or reason (``track`` holds the new; ``previous``/``reason``
        the old)."""

    def happened(self, track: Track, event: StepEvent) -> None:
        """A step's pod failed, was evicted or deleted (``handle.events``)."""

    def ended(self, track: Track) -> None:
        """A step reached a terminal state (called once, after ``changed``)."""

    def close(self) -> None:
        """Flush and let go of what the recorder holds (the session closes)."""


class Observer:
    """Follows the handles it is given and tells its recorders what happens to them."""

    def __init__(
        self, recorders: Sequence[Recorder], *, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self.recorders = list(recorders)
        self._clock = clock
        self._tracks: dict[int, Track] = {}

    @property
    def tracks(self) -> list[Track]:
        """Return the tracks of the steps not yet ended."""
        return list(self._tracks.values())

    def watch(self, handle: StepHandle) -> None:
        """Start following ``handle`` (once; the session calls this as it registers it)."""
        if id(handle) in self._tracks:
            return
        now = self._clock()
        track = Track(handle=handle, submit_ns=now, since_ns=now)
        self._tracks[id(handle)] = track
        self._each(lambda r: r.submitted(track))
        handle.add_listener(self._on_change)

    @property
    def metrics_url(self) -> str | None:
        """Return the Prometheus endpoint's address (its bound port), if one is served."""
        for recorder in self.recorders:
            url = getattr(recorder, "metrics_url", None)
            if isinstance(url, str):
                return url
        return None

    def keyed(self, handle: StepHandle, key: str | None) -> None:
        """Note the cache key the session gave ``handle``'s step."""
        track = self._tracks.get(id(handle))
        if track is not None and key:
            track.key = key

    async def aclose(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Close every recorder in a worker thread, waiting at most ``timeout`` seconds.

        An exporter flushes what it holds on close, over the network: an unreachable
        collector would hold the event loop for its retries, so the thread is left to finish
        (or give up by its own timeout) and the session closes on time, saying so.
        """
        try:
            async with asyncio.timeout(timeout):
                await asyncio.to_thread(self.close)
        except TimeoutError:
            _log.warning(
                "k8sjobs: the traces and metrics were not flushed within %gs (the collector "
                "is slow or unreachable); what was not sent is lost",
                timeout,
            )

    def close(self) -> None:
        """Close every recorder (steps still going are left as they are)."""
        for recorder in self.recorders:
            try:
                recorder.close()
            except Exception as exc:  # a closed exporter, a full disk: said, never raised
                _log.warning("k8sjobs: closing %s failed: %s", type(recorder).__name__, exc)
        self.recorders = []

    def _on_change(self, handle: StepHandle) -> None:
        track = self._tracks.get(id(handle))
        if track is None:
            return
        result = handle.result
        now = self._clock()
        previous, reason = track.state, track.reason
        if result.state is StepState.RUNNING and track.start_ns is None:
            track.start_ns = now
        track.state, track.reason, track.since_ns = result.state, result.reason, now
        backend = handle.backend
        if isinstance(backend, NativeSource):
            track.native = backend.native_of(handle) or track.native
        self._events(track)
        self._each(lambda r: r.changed(track, previous, reason))
        if result.state.terminal:
            track.end_ns = now
            del self._tracks[id(handle)]
            handle.remove_listener(self._on_change)
            self._each(lambda r: r.ended(track))

    def _events(self, track: Track) -> None:
        events = track.handle.events
        for event in events[track.events :]:
            self._each(lambda r, e=event: r.happened(track, e))  # type: ignore[misc]
        track.events = len(events)

    def _each(self, call: Callable[[Recorder], None]) -> None:
        for recorder in list(self.recorders):
            try:
                call(recorder)
            except Exception as exc:
                self.recorders.remove(recorder)
                _log.warning(
                    "k8sjobs: %s failed and is switched off for this session (the run goes on): %s",
                    type(recorder).__name__,
                    exc,
                )
