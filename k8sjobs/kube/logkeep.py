"""Keep the logs of running pods in files, so a log outlives its pod.

On a real cluster the job controller deletes the pod of a step that runs past its walltime
(``activeDeadlineSeconds``), and an evicted pod is deleted too: its log goes with it. The
``LogKeeper`` follows (``follow=true``) the step container's log of every running pod of
the backend's steps into ``log_dir/<study>/<step>/<job uid>/<pod>.<container>.log`` as it is written
(the Job's uid, so that a later run of the same step never shows an earlier run's pods),
so the backend can still show it (``handle.logs()``, ``k8sjobs logs``) and save it.

Cost: one long-lived HTTP request to the API server (which proxies it to the kubelet) per
followed pod, and the log's bytes once more over the network and onto the driver's disk.
``limit`` bounds the follows open at once per backend; a pod beyond it waits for a free
follow and then reads its log from the start (a pod deleted while waiting keeps nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from pathlib import Path
from typing import IO

import aiohttp

from ..errors import ApiError
from ..steps.names import label_value
from .client import POD_LOGS, KubeClient

__all__ = ["LogKeeper", "file_name"]

log = logging.getLogger("k8sjobs.kube")
# Seconds between a dropped follow and the next: a flapping connection cannot spin.
_REFOLLOW_PAUSE = 1.0


def file_name(name: str) -> str:
    """Return ``name`` if it is a safe file name, else its label form (slug and hash)."""
    if re.fullmatch(r"[\w+-][\w.+-]*", name):
        return name
    return label_value(name)


class LogKeeper:
    """Follows pod logs into files under ``log_dir``, at most ``limit`` at once."""

    def __init__(self, log_dir: Path, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"follow_logs must be 0 (off) or a number of pods (not {limit})")
        self.log_dir = log_dir
        self.limit = limit
        self._slots = asyncio.Semaphore(limit) if limit else None
        self._tasks: dict[Path, asyncio.Task[None]] = {}
        self._followed: set[Path] = set()  # never followed twice (paths only, small)

    def path(self, study: str, step: str, run: str, pod: str, container: str) -> Path:
        """Return the file that keeps one container's log (``run``: the Job's uid)."""
        folder = self.log_dir / file_name(study) / file_name(step) / file_name(run)
        return folder / f"{pod}.{container}.log"

    def kept(self, study: str, step: str, run: str, container: str) -> dict[str, Path]:
        """Return {pod: file} of the kept logs of one run of a step's container, oldest first."""
        folder = self.log_dir / file_name(study) / file_name(step) / file_name(run)
        suffix = f".{container}.log"
        found = [p for p in folder.glob(f"*{suffix}")] if folder.is_dir() else []
        found.sort(key=lambda p: p.stat().st_mtime)
        return {p.name[: -len(suffix)]: p for p in found}

    def follow(
        self,
        client: KubeClient,
        namespace: str,
        where: tuple[str, str, str],
        pod: str,
        container: str,
    ) -> None:
        """Start keeping one container's log (once per pod; nothing when follows are off).

        ``where`` is (study, step, run) as ``path`` takes them.
        """
        if self._slots is None:
            return
        path = self.path(*where, pod, container)
        if path in self._followed:
            return
        task = asyncio.create_task(self._follow(client, namespace, pod, container, path))
        self._tasks[path] = task
        self._followed.add(path)
        # A long session follows many pods: only the running follows are held.
        task.add_done_callback(lambda _t: self._tasks.pop(path, None))

    async def wait(self, path: Path, timeout: float) -> None:
        """Return once the follow into ``path`` has ended, or after ``timeout`` seconds."""
        task = self._tasks.get(path)
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)

    async def aclose(self) -> None:
        """Stop every follow (the files keep what was written)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(
        self, client: KubeClient, namespace: str, pod: str, container: str, path: Path
    ) -> None:
        assert self._slots is not None
        async with self._slots:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            # A dropped follow (a silent log passes the read timeout) reads the log again
            # from the start, until the container ends or the pod is gone.
            again = await self._one_follow(client, namespace, pod, container, path)
            while again:
                await asyncio.sleep(_REFOLLOW_PAUSE)
                again = await self._one_follow(client, namespace, pod, container, path)

    async def _one_follow(
        self, client: KubeClient, namespace: str, pod: str, container: str, path: Path
    ) -> bool:
        """Write one followed log into ``path``; return whether to follow again (a drop)."""
        params = {"container": container, "follow": "true"}
        what = f'follow the log of pod "{pod}" container "{container}" in namespace "{namespace}"'
        part = path.with_name(f".{path.name}.part")
        kept = await asyncio.to_thread(_size, path)
        written, promoted = 0, False
        out = await asyncio.to_thread(open, part, "wb")
        try:
            stream = client.stream_bytes(
                POD_LOGS.path(namespace, pod), params, what=what, kind=POD_LOGS, verb="get"
            )
            async for chunk in stream:
                await asyncio.to_thread(_append, out, chunk)
                written += len(chunk)
                # The file is replaced only once this read holds all the last one had.
                if not promoted and written >= kept:
                    await asyncio.to_thread(os.replace, part, path)
                    promoted = True
            return False
        except ApiError as exc:  # not started yet, or gone: nothing more to read
            log.debug("log of %s/%s not followed: %s", pod, container, exc)
            return False
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("follow of %s/%s dropped (%s); following again", pod, container, exc)
            return True
        finally:
            await asyncio.to_thread(out.close)
            if not promoted:
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(part.unlink)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _append(out: IO[bytes], chunk: bytes) -> None:
    out.write(chunk)
    out.flush()
