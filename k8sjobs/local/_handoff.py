"""k8sjobs' own handoff containers, run in-process instead of as ``python -m k8sjobs.handoff``.

A rendered pod pulls its inputs in the ``k8sjobs-pull`` init container and pushes its outputs
from the ``k8sjobs-push`` container, both running ``python -m k8sjobs.handoff pull|push
--config F``. Started as processes, each pays Python's start and the package's imports (about
half a second each); here the runner (the LocalBackend on the driver's event loop, the fake
cluster's execute kubelet in its own) calls the same ``run_command`` directly, with the
container's translated argv and environment, so inputs, outputs, ``outputs.json``, the log
lines and the exit code (hence InputPullFailed and OutputPushFailed) are the container's.

What differs, and why:

- Stores stay open for the runner's life, one per (location, plain_http, ca_file): one
  connection pool and one digest cache (the driver's) for every step, not one per container.
- The push container does not poll for the exit-code marker: the runner starts it once the
  pod's other containers have ended, and it reads the marker once. A step that left no marker
  (killed, or never started) pushes nothing; the polling container would wait forever.
- The container's memory limit (256Mi) is not enforced: the handoff streams its files.
- Registry credentials are the runner's own, as for the driver's other pulls; a pod that
  mounts registry credentials (``DOCKER_CONFIG`` in the container's env) runs the container,
  so that the pod's credentials are the ones used.

Anything else (another argv, another container name, ``K8SJOBS_HANDOFF=subprocess`` in the
runner's environment, or ``handoff="subprocess"`` given to the LocalBackend or FakeCluster)
runs as a process, exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import os
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts import handoff
from ..render.manifests import PULL_CONTAINER, PUSH_CONTAINER

if TYPE_CHECKING:
    from ..artifacts import ArtifactStore

__all__ = ["HANDOFF_ENV", "HandoffCall", "InProcessHandoff", "handoff_mode", "recognise"]

#: The runner's environment variable that chooses the path: "in-process" or "subprocess".
HANDOFF_ENV = "K8SJOBS_HANDOFF"
MODES = ("in-process", "subprocess")
_VERBS = {PULL_CONTAINER: "pull", PUSH_CONTAINER: "push"}
_PYTHON_NAMES = frozenset({"python", "python3"})


def handoff_mode(option: str | None) -> str:
    """Return the handoff path to use: ``option``, else $K8SJOBS_HANDOFF, else in-process."""
    mode = option or os.environ.get(HANDOFF_ENV) or "in-process"
    if mode not in MODES:
        where = "handoff=" if option else f"${HANDOFF_ENV}"
        raise ValueError(f'{where} must be "in-process" or "subprocess", not "{mode}"')
    return mode


@dataclass(frozen=True)
class HandoffCall:
    """A recognised handoff container: its verb, config file (host path) and push timeout."""

    command: str
    config: str
    timeout: float | None = None


def recognise(name: str, argv: Sequence[str], env: Mapping[str, str]) -> HandoffCall | None:
    """Return the handoff call a container makes, or None when it is anything else.

    Only the exact argv render.py writes counts (``python -m k8sjobs.handoff <verb> --config
    F`` and, for push, ``--timeout T``), in the container named for that verb.
    """
    verb = _VERBS.get(name)
    if verb is None or "DOCKER_CONFIG" in env or len(argv) < 6:
        return None
    head, rest = list(argv[:4]), list(argv[4:])
    if Path(head[0]).name not in _PYTHON_NAMES or head[1:] != ["-m", "k8sjobs.handoff", verb]:
        return None
    if rest[0] != "--config":
        return None
    if len(rest) == 2:
        return HandoffCall(verb, rest[1])
    if verb == "push" and len(rest) == 4 and rest[2] == "--timeout":
        try:
            return HandoffCall(verb, rest[1], float(rest[3]))
        except ValueError:
            return None
    return None


class InProcessHandoff:
    """Runs recognised handoff containers on the running event loop, sharing open stores."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str, bool, str | None], ArtifactStore] = {}
        self._lock = asyncio.Lock()

    async def run(
        self,
        call: HandoffCall,
        env: Mapping[str, str],
        log: Path,
        main_ended: Callable[[], Awaitable[object]] | None = None,
    ) -> int:
        """Run one handoff container; its output goes to ``log``; returns its exit code.

        A push first awaits ``main_ended`` (the pod's other containers), then reads the marker.
        """
        output = io.StringIO()
        try:
            exit_code = await self._run(call, env, output, main_ended)
        finally:
            text = output.getvalue()
            await asyncio.shield(asyncio.to_thread(_append, log, text))
        return exit_code

    async def _run(
        self,
        call: HandoffCall,
        env: Mapping[str, str],
        output: io.StringIO,
        main_ended: Callable[[], Awaitable[object]] | None,
    ) -> int:
        marker: Callable[[], Awaitable[int | None]] | None = None
        if call.command == "push":
            marker = functools.partial(_marker_after, main_ended, env)
        try:
            return await handoff.run_command(
                call.command,
                call.config,
                env,
                timeout=call.timeout,
                out=output,
                err=output,
                stores=self._shared,
                exit_code=marker,
            )
        except Exception:  # a crashing container: its traceback, exit code 1
            output.write(traceback.format_exc())
            return 1

    @contextlib.asynccontextmanager
    async def _shared(self, config: handoff.HandoffConfig) -> AsyncIterator[ArtifactStore]:
        """Yield the open store for the config's location, opening it on first use."""
        key = (config.store, config.plain_http, config.ca_file)
        async with self._lock:
            store = self._stores.get(key)
            if store is None:
                from ..artifacts import open_store

                store = await open_store(
                    config.store, plain_http=config.plain_http, ca_file=config.ca_file
                ).__aenter__()
                self._stores[key] = store
        yield store

    async def aclose(self) -> None:
        """Close every store this runner opened."""
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            with contextlib.suppress(Exception):
                await store.aclose()


async def _marker_after(
    main_ended: Callable[[], Awaitable[object]] | None, env: Mapping[str, str]
) -> int | None:
    """Return the main container's exit code, read once after it ended (None: no marker)."""
    if main_ended is not None:
        await main_ended()
    status_dir = env.get("K8SJOBS_STATUS_DIR")
    if not status_dir:
        return None  # run_push names the missing variable
    marker = Path(status_dir) / handoff.EXIT_MARKER
    return await asyncio.to_thread(handoff.read_exit_code, marker)


def _append(log: Path, text: str) -> None:
    """Append a container's output to its log (created even when empty, as a process's is)."""
    with open(log, "a", encoding="utf-8") as file:
        file.write(text)
