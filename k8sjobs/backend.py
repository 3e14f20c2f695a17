"""The one seam between a Session and the place steps run.

A backend (Kubernetes, local processes) receives rendered manifests and keeps each
``StepHandle`` current by calling ``handle._update(result)`` whenever it learns something,
from one shared source per backend (a watch, a process table), never by polling per step.
Everything else (naming, rendering, dependencies, waiting) lives above this line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .handle import StepHandle
    from .render import Manifests

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """Where steps run. A Session drives backends only through these methods."""

    #: Short name shown to users ("kubernetes", "local").
    kind: str

    async def start(self) -> None:
        """Connect and start the shared watchers; called once by the Session."""

    async def aclose(self) -> None:
        """Stop watching and release connections; steps keep running where they run."""

    async def submit(self, handle: StepHandle, manifests: Manifests, *, replace: bool) -> None:
        """Create the step's objects and start tracking ``handle``.

        Idempotent: if the step exists with the same spec hash it is adopted; with another
        hash ``SpecMismatch`` is raised unless ``replace`` is true.
        """

    async def attach(self, study: str, namespace: str) -> list[StepHandle]:
        """Return tracked handles for every step of ``study`` that exists, for re-attach."""

    async def cancel(self, handle: StepHandle) -> None:
        """Stop the step and delete its objects; the handle ends CANCELLED."""

    async def logs(self, handle: StepHandle, *, container: str | None, tail: int | None) -> str:
        """Return the step's log text (the main container's unless ``container`` says)."""

    def stream_logs(self, handle: StepHandle, *, container: str | None) -> AsyncIterator[str]:
        """Yield the step's log lines as they are written, until the step ends."""
