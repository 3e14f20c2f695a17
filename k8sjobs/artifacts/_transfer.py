"""Push and pull logic shared by every store, over the small BlobBackend protocol.

A store only knows how to test, put and fetch single blobs and manifests; this module turns
files and directories into layers and back, several blobs at a time, verifying as it goes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import posixpath
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio
import anyio.to_thread

from ..errors import ArtifactNotFound, RegistryError, UnsafeArchive
from . import _media, _staging, _tarball, _untar
from ._digest import DigestCache
from ._limits import Budget, PullLimits
from ._media import Descriptor, Manifest
from ._reference import Reference, pin
from ._streams import BlobSink, SinkFactory, VerifyingExtractor, VerifyingWriter


@dataclass(frozen=True)
class ProgressEvent:
    """Progress of one blob: ``completed`` of ``total`` bytes moved (cumulative)."""

    name: str
    completed: int
    total: int | None


ProgressCallback = Callable[[ProgressEvent], None]
BytesCallback = Callable[[int], None]
# Writes a directory archive (deterministically: it may be called again on a retry).
ArchiveProducer = Callable[[_tarball.Writable], _tarball.ArchiveInfo]


@dataclass(frozen=True)
class PushResult:
    """What a push stored: the reference, the manifest's digest, and its layers."""

    reference: str
    digest: str
    layers: tuple[Descriptor, ...]
    bytes_sent: int

    @property
    def pinned(self) -> str:
        """Return the reference pinned by digest (``repository@sha256:...``)."""
        return pin(self.reference, self.digest)


@dataclass(frozen=True)
class PullResult:
    """What a pull wrote: the manifest's digest and the top-level paths created."""

    reference: str
    digest: str
    paths: tuple[Path, ...]
    manifest: Manifest


class BlobBackend(Protocol):
    """What a store must do for push and pull: single blobs and manifests."""

    async def has_blob(self, ref: Reference, digest: str) -> bool: ...

    async def put_blob(
        self, ref: Reference, path: Path, known: tuple[str, int] | None, sent: BytesCallback
    ) -> tuple[str, int]: ...

    async def put_archive(
        self, ref: Reference, produce: ArchiveProducer, sent: BytesCallback
    ) -> _tarball.ArchiveInfo: ...

    async def put_blob_bytes(self, ref: Reference, data: bytes, digest: str) -> None: ...

    async def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str: ...

    async def mount_blob(self, dst: Reference, desc: Descriptor, src: Reference) -> None: ...

    async def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]: ...

    async def fetch_blob(
        self, ref: Reference, desc: Descriptor, sink: SinkFactory, received: BytesCallback
    ) -> BlobSink: ...


class StoreFront(BlobBackend):
    """Push, pull and exists, the same over any BlobBackend: a registry and a layout
    inherit them and provide ``_ref``, ``resolve``, ``cache`` and ``concurrency``."""

    cache: DigestCache
    concurrency: int

    def _ref(self, reference: str) -> Reference:
        raise NotImplementedError

    async def resolve(self, reference: str) -> str:
        raise NotImplementedError

    async def push(
        self,
        reference: str,
        paths: Sequence[str | Path],
        *,
        artifact_type: str | None = _media.DEFAULT_ARTIFACT_TYPE,
        annotations: dict[str, str] | None = None,
        compression: _tarball.Compression = "gzip",
        level: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> PushResult:
        """Store files and directories as one artifact; return its reference and digest."""
        opts = PushOptions(
            artifact_type, annotations, compression, level, self.concurrency, progress, reference
        )
        ref = self._ref(reference)
        return await push_paths(self, ref, [Path(p) for p in paths], self.cache, opts)

    async def pull(
        self,
        reference: str,
        target: str | Path,
        *,
        progress: ProgressCallback | None = None,
        limits: PullLimits | None = None,
    ) -> PullResult:
        """Copy an artifact's files into ``target``, every byte verified, within ``limits``
        (default ``PullLimits()``: 100 GiB in all, archives unpacking to at most 200x)."""
        return await pull_to(
            self,
            self._ref(reference),
            Path(target),
            concurrency=self.concurrency,
            progress=progress,
            display=reference,
            limits=limits,
        )

    async def files_digest(
        self, reference: str, desc: Descriptor, limits: PullLimits | None = None
    ) -> str:
        """Return the files digest of the directory layer ``desc`` of ``reference``, computed
        by reading it as a pull does, within ``limits``, with nothing written anywhere."""
        return await files_digest_of(self, self._ref(reference), desc, limits)

    async def exists(self, reference: str) -> bool:
        """Return True when ``reference`` names a stored manifest."""
        try:
            await self.resolve(reference)
        except ArtifactNotFound:
            return False
        return True


@dataclass
class PushOptions:
    """Settings of one push."""

    artifact_type: str | None = _media.DEFAULT_ARTIFACT_TYPE
    annotations: Mapping[str, str] | None = None
    compression: _tarball.Compression = "gzip"
    level: int | None = None
    concurrency: int = 4
    progress: ProgressCallback | None = None
    display: str | None = None  # the reference as the caller wrote it, for the result


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """Return the first leaf exception of a task group's failure: the one worth reporting
    (the others are usually cancellations it caused)."""
    first = group.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first


class AttemptBytes:
    """Passes byte counts on to ``report`` and, when a transfer starts over, takes back
    what the failed attempt counted, so that progress never counts a byte twice."""

    def __init__(self, report: BytesCallback) -> None:
        self._report, self._counted = report, 0

    def __call__(self, n: int) -> None:
        self._counted += n
        self._report(n)

    def restart(self) -> None:
        self._report(-self._counted)
        self._counted = 0


def _reporter(progress: ProgressCallback | None, name: str, total: int | None) -> BytesCallback:
    done = 0

    def report(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(ProgressEvent(name, done, total))

    return report


class _Pusher:
    """One push: prepares each path as a layer and uploads it, bounded in parallel."""

    def __init__(self, backend: BlobBackend, ref: Reference, cache: DigestCache, opts: PushOptions):
        self.backend, self.ref, self.cache, self.opts = backend, ref, cache, opts
        self.bytes_sent = 0
        self.limiter = anyio.Semaphore(max(1, opts.concurrency))

    def _sent(self, name: str, total: int | None) -> BytesCallback:
        report = _reporter(self.opts.progress, name, total)

        def sent(n: int) -> None:
            self.bytes_sent += n
            report(n)

        return sent

    async def file_layer(self, path: Path) -> Descriptor:
        known = await anyio.to_thread.run_sync(self.cache.lookup_file, path)
        size = await anyio.to_thread.run_sync(lambda: path.stat().st_size)
        digest, size = await self.backend.put_blob(
            self.ref, path, known, self._sent(path.name, size)
        )
        annotations = {_media.TITLE: path.name}
        return Descriptor(_media.LAYER_TAR, digest, size, annotations)

    async def dir_layer(self, path: Path) -> Descriptor:
        opts = self.opts
        entries = await anyio.to_thread.run_sync(_tarball.scan, path)
        _tarball.check_links(path, entries)
        key = await anyio.to_thread.run_sync(
            _tarball.fingerprint, path, entries, opts.compression, opts.level
        )
        cached = await anyio.to_thread.run_sync(self.cache.get, key) if key else None
        fields = cached.split() if cached else []
        if len(fields) == 4:  # an entry of an older version, without files_digest: a miss
            digest, size, tar_digest, files_digest = fields
            if await self.backend.has_blob(self.ref, digest):
                return self._dir_descriptor(path, digest, int(size), tar_digest, files_digest)
        compression, level = opts.compression, opts.level

        def produce(out: _tarball.Writable) -> _tarball.ArchiveInfo:
            chosen = _tarball.choose_level(entries, compression, level)
            return _tarball.write_archive(entries, out, compression, chosen)

        info = await self.backend.put_archive(self.ref, produce, self._sent(path.name, None))
        if key:
            value = f"{info.digest} {info.size} {info.tar_digest} {info.files_digest}"
            await anyio.to_thread.run_sync(self.cache.put, key, value)
        return self._dir_descriptor(
            path, info.digest, info.size, info.tar_digest, info.files_digest
        )

    def _dir_descriptor(
        self, path: Path, digest: str, size: int, tar_digest: str, files_digest: str
    ) -> Descriptor:
        annotations = {
            _media.TITLE: path.name,
            _media.CONTENT_DIGEST: tar_digest,
            _media.FILES_DIGEST: files_digest,
            _media.UNPACK: "true",
        }
        media_type = _tarball.media_type_for(self.opts.compression)
        return Descriptor(media_type, digest, size, annotations)

    async def layer(self, path: Path, slot: list[Descriptor | None], index: int) -> None:
        async with self.limiter:
            if await anyio.to_thread.run_sync(path.is_dir):
                slot[index] = await self.dir_layer(path)
            else:
                slot[index] = await self.file_layer(path)

    async def config(self) -> None:
        desc = _media.EMPTY_CONFIG_DESCRIPTOR
        if not await self.backend.has_blob(self.ref, desc.digest):
            await self.backend.put_blob_bytes(self.ref, _media.EMPTY_CONFIG_DATA, desc.digest)


def overlapping_titles(titles: Sequence[str]) -> tuple[str, str] | None:
    """Return two layer titles that name the same path or one inside the other (``d`` and
    ``d/x.txt``), or None. Such layers would write over each other, in whichever order
    they happened to finish. Titles are compared normalised, path component by component."""
    ordered = sorted((posixpath.normpath(t).split("/"), t) for t in titles)
    for (a, title_a), (b, title_b) in itertools.pairwise(ordered):
        if b[: len(a)] == a:
            return title_a, title_b
    return None


def _check_paths(given: Sequence[Path]) -> list[Path]:
    """Return the paths made absolute, or raise if one is missing, special, or a duplicate name."""
    paths = [Path(os.path.abspath(p)) for p in given]
    for path in paths:
        try:
            path.name.encode("utf-8")
        except UnicodeEncodeError:
            raise RegistryError(
                f"Cannot push {os.fsencode(path)!r}: its name is not UTF-8, and a layer's "
                "title is UTF-8 text in the manifest. Rename it (convmv -f latin1 -t utf8), "
                "or push the directory that holds it: names inside a directory are carried "
                "as their bytes."
            ) from None
        if path.name.startswith(_staging.RESERVED):
            raise RegistryError(
                f'Cannot push {path}: names starting with "{_staging.RESERVED}" are the '
                "temporary names of k8sjobs pulls, which remove them; rename it."
            )
        if not path.exists():
            raise RegistryError(f"Cannot push {path}: no such file or directory.")
        if not (path.is_file() or path.is_dir()):
            raise RegistryError(
                f"Cannot push {path}: only regular files and directories can be pushed."
            )
    overlap = overlapping_titles([path.name for path in paths])
    if overlap is not None:
        raise RegistryError(
            f'Cannot push two paths named "{overlap[0]}" in one artifact; rename one, '
            "or push them as two artifacts."
        )
    return paths


async def push_paths(
    backend: BlobBackend,
    ref: Reference,
    paths: Sequence[Path],
    cache: DigestCache,
    opts: PushOptions,
) -> PushResult:
    """Upload ``paths`` as layers of one artifact, then its manifest; return what was stored."""
    paths = await anyio.to_thread.run_sync(_check_paths, paths)
    pusher = _Pusher(backend, ref, cache, opts)
    slots: list[Descriptor | None] = [None] * len(paths)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pusher.config)
            for index, path in enumerate(paths):
                tg.start_soon(pusher.layer, path, slots, index)
    except BaseExceptionGroup as group:
        error = first_error(group)
        if isinstance(error, OSError):  # a file vanished or cannot be read meanwhile
            raise RegistryError(_read_failure(opts.display or str(ref), error)) from None
        raise error from None
    layers = [layer for layer in slots if layer is not None]
    manifest = _media.build_manifest(layers, opts.artifact_type, opts.annotations or {})
    digest = await backend.put_manifest(ref, _media.encode_manifest(manifest), _media.MANIFEST)
    return PushResult(opts.display or str(ref), digest, tuple(layers), pusher.bytes_sent)


_NAME_MAX = 255  # bytes in one path component (ext4, xfs, tmpfs alike)


def _layer_destination(target: Path, desc: Descriptor) -> Path:
    title = desc.title or ""
    try:
        norm = _untar.inside(title)
    except UnsafeArchive as exc:
        raise UnsafeArchive(f'Layer title "{title}" is not a safe relative path: {exc}.') from None
    if norm in (".", ""):
        raise UnsafeArchive(f'Layer title "{title}" names no file.')
    if any(part.startswith(_staging.RESERVED) for part in norm.split("/")):
        raise UnsafeArchive(
            f'Layer title "{title}": names starting with "{_staging.RESERVED}" are the '
            "temporary names of k8sjobs pulls, which remove them."
        )
    if any(len(part.encode("utf-8", "surrogateescape")) > _NAME_MAX for part in norm.split("/")):
        raise UnsafeArchive(
            f'Layer title "{title[:80]}...": a path component is longer than {_NAME_MAX} '
            "bytes, which no Linux filesystem stores."
        )
    return target / norm


@contextlib.contextmanager
def _install_lock(parent: Path) -> Iterator[None]:
    """Hold the install lock of ``parent``: flock(2) on the directory itself, so no file of
    ours is left in the user's directory. Every pull moving results into ``parent`` takes it,
    threads of one process (each opens its own descriptor) and other processes alike, so the
    two renames of a replacement are never interleaved with another pull's (blocking).

    Where a directory cannot be locked (NFS: EBADF) the lock is a ``.k8sjobs-lock`` file in
    ``parent``, made once and left there: a hidden file is the price of pulls that do not
    collide."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _staging.flock(fd, str(parent), fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _replace(src: Path, dest: Path) -> None:
    """Move ``src`` to ``dest``, replacing a file or directory already there (blocking).

    Under the parent's install lock: concurrent pulls of one artifact into one target each
    succeed, and the last leaves one complete copy. The old directory is moved aside under a
    short name of its own (``dest``'s name may already be near the 255-byte limit), and
    removed once the lock is released.
    """
    trash = dest.with_name(f"{_staging.OLD_MARK}{secrets.token_hex(8)}")
    with _install_lock(dest.parent):
        if dest.is_dir() and not dest.is_symlink():
            dest.rename(trash)
        elif src.is_dir() and (dest.is_symlink() or dest.exists()):
            with contextlib.suppress(FileNotFoundError):
                dest.unlink()  # a file (or link) where a directory goes: rename cannot
        os.replace(src, dest)
    shutil.rmtree(trash, ignore_errors=True)


def _make_target(target: Path) -> Path:
    target = Path(os.path.abspath(target))
    target.mkdir(parents=True, exist_ok=True)
    return target


def _install(staging: Path, tops: list[str], target: Path) -> list[Path]:
    for name in tops:
        _replace(staging / name, target / name)
    return [target / name for name in tops]


def _release_all(held: list[_staging.Held]) -> None:
    for one in held:
        one.release()


async def _pull_archive(
    backend: BlobBackend,
    ref: Reference,
    desc: Descriptor,
    target: Path,
    report: BytesCallback,
    budget: Budget,
) -> list[Path]:
    """Extract a directory layer while it downloads, into a staging directory per attempt;
    move what it holds into ``target`` only once the digest and every member are checked."""
    stagings: list[_staging.Held] = []
    desc_root = _layer_destination(Path("/"), desc).name  # members must all be under it

    def sink(where: str) -> VerifyingExtractor:
        stagings.append(_staging.staging_dir(target))
        return VerifyingExtractor(
            stagings[-1].path,
            desc.media_type,
            desc.digest,
            desc.size,
            where,
            desc_root,
            budget,
            claim=desc.annotations.get(_media.FILES_DIGEST),
        )

    try:
        done = await backend.fetch_blob(ref, desc, sink, report)
        assert isinstance(done, VerifyingExtractor)
        return await anyio.to_thread.run_sync(_install, stagings[-1].path, done.tops, target)
    finally:
        with anyio.CancelScope(shield=True):  # on every exit, cancellation included
            await anyio.to_thread.run_sync(_release_all, stagings)


async def files_digest_of(
    backend: BlobBackend, ref: Reference, desc: Descriptor, limits: PullLimits | None
) -> str:
    """Return the files digest of a directory layer, read and counted as ``_pull_archive``
    unpacks it (the same parser and the same ``FilesDigest``, in a worker thread), its blob
    digest verified; nothing is written. Bounded as a pull of that layer is."""
    budget = Budget(limits or PullLimits(), f"Verifying {desc.title} of {ref}")
    budget.check_declared({desc.title or "": (desc.size, True)})
    root = _layer_destination(Path("/"), desc).name

    def sink(where: str) -> VerifyingExtractor:
        return VerifyingExtractor(
            None, desc.media_type, desc.digest, desc.size, where, root, budget
        )

    done = await backend.fetch_blob(ref, desc, sink, lambda n: None)
    assert isinstance(done, VerifyingExtractor)
    return done.files_digest


def _prepare(parents: set[Path]) -> None:
    """Make the layers' parent directories, and clear what killed pulls left there, once
    per pull (blocking)."""
    for parent in sorted(parents):
        parent.mkdir(parents=True, exist_ok=True)
        _staging.sweep(parent)


async def _pull_layer(
    backend: BlobBackend,
    ref: Reference,
    desc: Descriptor,
    target: Path,
    progress: ProgressCallback | None,
    budget: Budget,
) -> list[Path]:
    dest = _layer_destination(target, desc)
    report = _reporter(progress, desc.title or desc.digest, desc.size)
    if desc.unpack:
        return await _pull_archive(backend, ref, desc, dest.parent, report, budget)
    budget.reserve(desc.size, f'file "{desc.title}"')
    part = await anyio.to_thread.run_sync(_staging.part_file, dest.parent, dest.name)
    try:
        sink = VerifyingWriter.factory(part.path, desc.digest, desc.size)
        await backend.fetch_blob(ref, desc, sink, report)
        # mkstemp makes the file private; a pulled file should read like any other.
        await anyio.to_thread.run_sync(os.chmod, part.path, 0o644)
        await anyio.to_thread.run_sync(_replace, part.path, dest)
        return [dest]
    finally:
        with anyio.CancelScope(shield=True):  # on every exit, cancellation included
            await anyio.to_thread.run_sync(part.release)


async def pull_to(
    backend: BlobBackend,
    ref: Reference,
    target: Path,
    *,
    concurrency: int = 4,
    progress: ProgressCallback | None = None,
    display: str | None = None,
    limits: PullLimits | None = None,
) -> PullResult:
    """Fetch an artifact's layers into ``target``, verified and within ``limits``; return
    what was written."""
    data, content_type, digest = await backend.get_manifest(ref)
    manifest = _media.decode_manifest(data, str(ref), content_type)
    try:
        return await _pull_manifest(
            backend, ref, digest, manifest, target, concurrency, progress, display, limits
        )
    except OSError as exc:  # the target's filesystem: full, read-only, not ours
        raise RegistryError(target_failure(f"Pulling {display or ref}", target, exc)) from None


_HINTS = {
    errno.ENOSPC: "free space there (in a pod: give the step's work volume more room)",
    errno.EDQUOT: "free space there, or raise the quota",
    errno.EROFS: "the filesystem is read-only; pull into a writable directory",
    errno.EACCES: "check the directory's owner and permissions",
    errno.EPERM: "check the directory's owner and permissions",
    errno.ENAMETOOLONG: "a name there is longer than the filesystem allows",
}


def _read_failure(display: str, exc: OSError) -> str:
    """Return the one-line error of an OSError met while pushing: a file that vanished or
    cannot be read, or (into an OCI layout) a disk that is full."""
    path = _tarball.shown(os.fsdecode(exc.filename)) if exc.filename else "a file"
    code = errno.errorcode.get(exc.errno or 0, "")
    cause = f"{exc.strerror or type(exc).__name__}{f' ({code})' if code else ''}"
    hint = _HINTS.get(exc.errno or 0) or (
        "did it change during the push?" if exc.errno == errno.ENOENT else None
    )
    return f"Pushing {display}: {path}: {cause}" + (f"; {hint}." if hint else ".")


def target_failure(what: str, target: Path, exc: OSError) -> str:
    """Return the one-line error of an OSError met while writing into ``target``: the path,
    the cause and what to do."""
    path = exc.filename or target
    code = errno.errorcode.get(exc.errno or 0, "")
    hint = _HINTS.get(exc.errno or 0)
    cause = f"{exc.strerror or type(exc).__name__}{f' ({code})' if code else ''}"
    return f"{what}: cannot write {path}: {cause}" + (f"; {hint}." if hint else ".")


async def _pull_manifest(
    backend: BlobBackend,
    ref: Reference,
    digest: str,
    manifest: Manifest,
    target: Path,
    concurrency: int,
    progress: ProgressCallback | None,
    display: str | None,
    limits: PullLimits | None,
) -> PullResult:
    target = await anyio.to_thread.run_sync(_make_target, target)
    layers = [layer for layer in manifest.layers if layer.title]
    if manifest.layers and not layers:
        raise RegistryError(
            f"{display or ref}: none of its {len(manifest.layers)} layers has a title "
            f"({_media.TITLE}), so none names a file: it is a container image, not a file "
            "artifact. k8sjobs pulls what k8sjobs or oras pushed."
        )
    for layer in layers:
        _layer_destination(target, layer)  # refuse a hostile title before fetching anything
    overlap = overlapping_titles([layer.title or "" for layer in layers])
    if overlap is not None:
        raise UnsafeArchive(
            f'{display or ref}: layers "{overlap[0]}" and "{overlap[1]}" would write the same '
            "path (one is, or is inside, the other); nothing was written."
        )
    budget = Budget(limits or PullLimits(), f"Pulling {display or ref}")
    budget.check_declared({layer.title or "": (layer.size, layer.unpack) for layer in layers})
    parents = {_layer_destination(target, layer).parent for layer in layers}
    await anyio.to_thread.run_sync(_prepare, parents | {target})
    written: list[list[Path]] = [[] for _ in layers]
    limiter = anyio.Semaphore(max(1, concurrency))

    async def one(index: int, desc: Descriptor) -> None:
        async with limiter:
            written[index] = await _pull_layer(backend, ref, desc, target, progress, budget)

    try:
        async with anyio.create_task_group() as tg:
            for index, layer in enumerate(layers):
                tg.start_soon(one, index, layer)
    except BaseExceptionGroup as group:
        raise first_error(group) from None
    paths = tuple(p for group in written for p in group)
    return PullResult(display or str(ref), digest, paths, manifest)
