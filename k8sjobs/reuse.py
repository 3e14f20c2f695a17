"""Reuse of recorded results: the session's side of the step cache.

Before a step is sent, the session asks ``Reuse`` for its key (``k8sjobs.steps.key``, over
the digest of every input) and looks the key up in the study's artifact store
(``k8sjobs.artifacts.stepcache``). A recorded success stands for the step: its outputs are
re-tagged under this study's and step's names and its handle ends SUCCEEDED with reason
"Cached", with no Kubernetes request and no process. Otherwise the step runs, and once it
has succeeded its result is recorded for the next run, by this driver, another machine's,
or another study's. A failure to read or write the cache never fails a step: it only makes
it run (a warning says why).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping

from .artifacts._reference import pin
from .artifacts._transfer import StoreFront
from .artifacts.stepcache import (
    InputArchives,
    ResultRecord,
    StepCache,
    archives_of,
    claims_to_verify,
    content_digest,
)
from .errors import K8sJobsError
from .handle import StepHandle
from .render.manifests import Target, output_reference
from .state import StepState
from .steps.key import cached_by_default, step_key
from .steps.spec import Step, StepOutput

__all__ = ["CACHED", "Reuse"]

_log = logging.getLogger(__name__)

#: The reason of a step whose recorded result was reused instead of running it.
CACHED = "Cached"


class Reuse:
    """The step cache of one session: its stores, the lookups, the records being written."""

    def __init__(self, *, enabled: bool, plain_http: bool) -> None:
        self.enabled = enabled
        self.plain_http = plain_http
        self._caches: dict[str, StepCache] = {}
        self._saving: set[asyncio.Task[None]] = set()
        # manifest digest -> content digest of the artifacts seen (pushed, reused, read)
        self._content: dict[str, str] = {}
        self._manifests: dict[str, bytes] = {}  # and their manifests, for their archives

    def _remember(self, manifest: bytes, digest: str, where: str) -> str:
        """Return the content digest of a manifest, kept for the steps that read it."""
        content = self._content.get(digest)
        if content is None:
            content = self._content[digest] = content_digest(manifest, where)
            self._manifests[digest] = manifest
        return content

    def covers(self, step: Step) -> bool:
        """Return whether ``step``'s results are looked up and recorded."""
        return self.enabled and cached_by_default(step)

    def reuses(self, step: Step) -> bool:
        """Return whether ``step`` may stand for an earlier run of itself at all: False once
        opted out (``cache: false``, or the session's cache off), so it always runs."""
        return self.enabled and step.cache is not False

    def cache_for(self, step: Step, store: str | None) -> StepCache | None:
        """Return the cache of ``store`` when ``step`` is cached there (None: it is not)."""
        if store is None or not self.covers(step):
            return None
        if store not in self._caches:
            from .artifacts import open_store

            opened = open_store(store, plain_http=self.plain_http)
            assert isinstance(opened, StoreFront)  # a Registry or an OCILayout
            self._caches[store] = StepCache(opened)
        return self._caches[store]

    @property
    def caches(self) -> Mapping[str, StepCache]:
        """Return the caches opened so far, by store location (request counts in them)."""
        return dict(self._caches)

    async def key(
        self, cache: StepCache, step: Step, target: Target, pinned: Mapping[str, str]
    ) -> tuple[str | None, dict[str, str]]:
        """Return ``step``'s key and its inputs, every one pinned by digest.

        The key takes each input by its content digest (``content_digest``: its layers, not
        the lineage annotations of its manifest). An input this session has not seen (an
        artifact named by tag, another study's output, a producer that just ran) costs one
        manifest read, and the step then pulls exactly what its key was made of.
        None for the key when an input cannot be resolved: the step runs, and its pull
        says what is missing.
        """
        pins = dict(pinned)
        digests = {}
        for name, source in step.inputs.items():
            reference = pins.get(name)
            if reference is None:
                reference = (
                    output_reference(target.study, source.step, source.output)
                    if isinstance(source, StepOutput)
                    else source
                )
            digest = reference.rpartition("@")[2] if "@" in reference else None
            content = self._content.get(digest) if digest else None
            if content is None:
                try:
                    manifest, digest = await cache.manifest_of(reference)
                    content = self._remember(manifest, digest, reference)
                except (K8sJobsError, OSError, ValueError) as exc:
                    _log.info("step %s: input %s not read (%s): not cached", step.name, name, exc)
                    return None, pins
            assert digest is not None
            pins[name] = pin(reference, digest)
            digests[name] = content
        # The driver's environment, for the names the step asked to key by: what a local
        # step's tools on PATH are, for instance, which nothing else of the key sees.
        environment = {name: os.environ.get(name) for name in step.key_env}
        try:
            return step_key(step, digests, environment), pins
        except ValueError as exc:
            _log.info("step %s: no key (%s): not cached", step.name, exc)
            return None, pins

    async def reuse(
        self, cache: StepCache, handle: StepHandle, key: str, pins: Mapping[str, str]
    ) -> bool | None:
        """Report ``handle`` SUCCEEDED ("Cached") from the record of ``key``, if there is one.

        Return True when reused; False when there is no record (the step runs, or its
        identical ended Job is adopted); None when there is one but its outputs could not be
        re-tagged here (a store that lost them), or an input (``pins``, as ``key`` returned
        them) is a directory archive other than the record's whose files digest claim does
        not hold or cannot be checked: then the step must run anew, not be adopted.
        A result is reused whole or not at all.
        """
        step = handle.step
        assert step is not None
        try:
            record = await cache.lookup(key)
            if record is None and key in cache.cleared:
                return None  # cleared by hand (cache clear): run it, adopt no ended run
            if record is None or record.exit_code != 0 or set(record.outputs) != set(step.outputs):
                return False
            if not await self._claims_hold(cache, step, record, pins):
                return None
            outputs = {
                name: await cache.retag(out, output_reference(handle.study, step.name, name))
                for name, out in record.outputs.items()
            }
            for out in record.outputs.values():
                self._remember(out.manifest, out.digest, out.reference)
        except (K8sJobsError, OSError) as exc:
            _log.warning(
                "step %s: its recorded result is not usable (%s): running it", step.name, exc
            )
            return None
        handle.report(
            handle.result.evolve(
                state=StepState.SUCCEEDED,
                reason=CACHED,
                message=_reused(record),
                exit_code=record.exit_code,
                started_at=record.started_at,
                finished_at=record.finished_at,
                outputs=outputs,
            )
        )
        return True

    async def _claims_hold(
        self, cache: StepCache, step: Step, record: ResultRecord, pins: Mapping[str, str]
    ) -> bool:
        """Return whether every directory input that is not the archive ``record`` was made
        from holds the files its files digest claims (the key trusted the claim): a layer
        read for each such one, none when the archives are the recorded ones. False, with
        one warning naming the input and why, on a mismatch or when it cannot be checked."""
        for name in step.inputs:
            reference = pins.get(name, "")
            manifest = self._manifests.get(reference.rpartition("@")[2])
            try:
                if manifest is None:
                    raise ValueError("its manifest was not read")
                for layer in claims_to_verify(manifest, record.inputs.get(name)):
                    await cache.verify_claim(reference, layer)
            except (K8sJobsError, OSError, ValueError) as exc:
                _log.warning(
                    "step %s: input %s (%s) is another archive than its recorded result was "
                    "made from, and its files digest claim is not confirmed (%s): running it",
                    step.name,
                    name,
                    reference,
                    exc,
                )
                return False
        return True

    def record_when_done(
        self, cache: StepCache, handle: StepHandle, key: str, pins: Mapping[str, str]
    ) -> None:
        """Record ``handle``'s result under ``key`` once it has succeeded (not if it fails),
        with the archives of its inputs (``pins``) it was made from."""

        def ended(h: StepHandle) -> None:
            if not h.done:
                return
            h.remove_listener(ended)
            if h.result.ok and h.result.reason != CACHED:
                task = asyncio.get_running_loop().create_task(self._save(cache, h, key, pins))
                self._saving.add(task)
                task.add_done_callback(self._saving.discard)

        handle.add_listener(ended)

    async def _save(
        self, cache: StepCache, handle: StepHandle, key: str, pins: Mapping[str, str]
    ) -> None:
        result = handle.result
        step = handle.step
        assert step is not None
        if set(result.outputs) != set(step.outputs) or not all(
            "@" in ref for ref in result.outputs.values()
        ):
            _log.warning("step %s: its outputs are not all pinned: not recorded", step.name)
            return
        try:
            outputs = {name: await cache.output_of(ref) for name, ref in result.outputs.items()}
            for out in outputs.values():
                self._remember(out.manifest, out.digest, out.reference)
            await cache.save(
                ResultRecord(
                    key=key,
                    study=handle.study,
                    step=handle.name,
                    outputs=outputs,
                    exit_code=result.exit_code or 0,
                    started_at=result.started_at,
                    finished_at=result.finished_at,
                    backend=handle.backend.kind,
                    namespace=handle.namespace,
                    object_name=handle.object_name,
                    inputs=self._archives(step, pins),
                )
            )
        except (K8sJobsError, OSError) as exc:
            _log.warning("step %s: its result was not recorded (%s)", step.name, exc)

    def _archives(self, step: Step, pins: Mapping[str, str]) -> dict[str, InputArchives]:
        """Return the archives of the inputs a step pulled, as its record keeps them (an
        input whose manifest was not read is left out: it is checked at the next reuse)."""
        found = {}
        for name in step.inputs:
            digest = pins.get(name, "").rpartition("@")[2]
            manifest = self._manifests.get(digest)
            if manifest is not None:
                found[name] = archives_of(manifest, digest, pins[name])
        return found

    async def aclose(self) -> None:
        """Finish writing the records of steps that succeeded, then close the stores."""
        while self._saving:
            await asyncio.gather(*list(self._saving), return_exceptions=True)
        caches, self._caches = list(self._caches.values()), {}
        for cache in caches:
            await cache.store.aclose()


def _reused(record: ResultRecord) -> str:
    when = f" at {record.finished_at:%Y-%m-%d %H:%M:%S}" if record.finished_at else ""
    return f"reused: {record.study}/{record.step} succeeded with this key{when}"
