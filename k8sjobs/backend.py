"""The one seam between a Session and the place steps run.

A backend (Kubernetes, local processes) receives rendered manifests with a ``StepHandle``,
and keeps that handle current by calling ``handle.report(result)`` with a new ``StepResult``
whenever it learns something, from one shared source per backend (a watch, a process table),
never by polling per step. ``report`` is the whole reporting seam: it keeps a handle moving
forward only (a terminal result is final, RUNNING never goes back to PENDING), so a backend
may report whatever its source replays and need not remember what it said before.

The session asks a backend three things besides running steps: ``kind`` (its name),
``namespace`` (where steps go when neither step nor session names one) and ``default_store``
(the artifact store when the session names none). Everything else (naming, rendering,
dependencies, waiting) lives above this line: a step's object name and namespace come from
``render.placement``, the same function ``render`` uses, so handle and manifests agree.

The handle depends only on ``StepControl`` (cancel and logs), which ``Backend`` extends:
``handle.py`` imports nothing from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .handle import StepControl, StepHandle

if TYPE_CHECKING:
    from .render.manifests import Manifests

__all__ = ["Backend"]


@runtime_checkable
class Backend(StepControl, Protocol):
    """Where steps run. A Session drives backends only through these methods.

    ``kind``, ``cancel``, ``logs`` and ``stream_logs`` come from ``StepControl``.
    """

    @property
    def namespace(self) -> str | None:
        """Return the namespace steps go to unless the step or session names one.

        None means the backend has no preference and "default" is used.
        """

    @property
    def default_store(self) -> str | None:
        """Return the artifact store to use when the session names none (None: no store)."""

    async def start(self) -> None:
        """Connect and start the shared watchers; called once by the Session."""

    async def aclose(self) -> None:
        """Stop watching and release connections; steps keep running where they run."""

    async def submit(
        self, handle: StepHandle, manifests: Manifests, *, replace: bool, rerun: bool = False
    ) -> None:
        """Create the step's objects and start tracking ``handle``.

        Idempotent: if the step exists with the same spec hash it is adopted (and
        ``handle.adopted`` set), unless it has ended and ``rerun`` is true (then it runs
        again). An ended step of another spec is replaced: it is an older run's leftover.
        One of another spec still running raises ``SpecMismatch`` unless ``replace`` is
        true (then it is stopped first). From then on the backend reports every change of
        the step through ``handle.report``.
        """

    async def attach(self, study: str, namespace: str) -> list[StepHandle]:
        """Return tracked handles for every step of ``study`` that exists, for re-attach."""
