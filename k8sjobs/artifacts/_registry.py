"""Registry: an async client for an OCI distribution registry, storing ORAS artifacts."""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, TypeVar
from urllib.parse import quote, urlencode, urljoin

import aiohttp
import aiohttp.abc
import aiohttp.payload
import anyio
import anyio.lowlevel
import anyio.to_thread

from ..errors import (
    ArtifactNotFound,
    DigestMismatch,
    InvalidReference,
    LimitExceeded,
    RegistryError,
    UploadFailed,
)
from . import _media, _transfer
from ._auth import Credentials
from ._digest import DigestCache, hash_file
from ._http import (
    MAX_JSON_BYTES,
    BodyFactory,
    RetryPolicy,
    TakenBody,
    Timeouts,
    Transport,
    parse_json,
    read_bounded,
    take_body,
    with_retries,
)
from ._limits import Budget, PullLimits
from ._media import Descriptor
from ._reference import Reference, check_host, check_repository, parse_reference, redact
from ._streams import (
    ArchivePipe,
    BlobSink,
    HashingReader,
    OrderedWorker,
    SinkFactory,
    SocketDrain,
    VerifyingWriter,
)
from ._tarball import ArchiveInfo

T = TypeVar("T")
READ_CHUNK = 2 * 1024 * 1024
# Bodies at least this large are received on threads (see take_body); smaller ones are not
# worth the extra threads.
TAKE_OVER_FROM = 4 * 1024 * 1024


_SENDFILE_SLICE = 8 * 1024 * 1024  # progress is reported this often


class _FileRange(aiohttp.payload.Payload):
    """``length`` bytes of ``file`` from ``offset``, sent with sendfile(2) once aiohttp has
    written the request headers: no copy through Python, as curl's read and send do."""

    def __init__(
        self, file: BinaryIO, offset: int, length: int, sent: _transfer.BytesCallback
    ) -> None:
        super().__init__(file, content_type="application/octet-stream")
        self._size = length
        self._file, self._offset, self._length, self._sent = file, offset, length, sent

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        flush_headers = getattr(writer, "send_headers", None)  # aiohttp >= 3.12 holds them
        if flush_headers is not None:
            flush_headers()
        transport = writer.transport
        if transport is None:
            raise ConnectionResetError("the connection closed before the body was sent")
        loop = asyncio.get_running_loop()
        offset, end = self._offset, self._offset + self._length
        while offset < end:
            step = min(_SENDFILE_SLICE, end - offset)
            done = await loop.sendfile(transport, self._file, offset, step)
            if done < step:
                raise RegistryError("The file shrank while it was being uploaded.")
            offset += done
            self._sent(done)

    async def write_with_length(
        self, writer: aiohttp.abc.AbstractStreamWriter, content_length: int | None
    ) -> None:
        await self.write(writer)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a file range is not text")


def _location(resp: aiohttp.ClientResponse, base: str, what: str) -> str:
    """Return the URL an upload goes on at: the answer's Location, resolved against
    ``base``; a 202 without one is an UploadFailed naming ``what`` (never a KeyError)."""
    location = resp.headers.get("Location")
    if not location:
        raise UploadFailed(
            f"{what}: the registry answered HTTP {resp.status} without the Location header "
            "an upload goes on at (OCI distribution spec); the registry is misbehaving."
        )
    return urljoin(base, location)


#: The most tags one listing gathers (every page of it): a registry that pages without end
#: must not take the driver's memory.
MAX_TAGS = 1_000_000


def _too_large_tags(repository: str, size: int) -> None:
    raise LimitExceeded(f"Listing tags of {repository}: a page of the answer is {size} bytes.")


class Registry(_transfer.StoreFront):
    """An OCI registry at ``location`` (``host[:port][/prefix]``), as an ArtifactStore.

    References are ``repository:tag`` or ``repository@sha256:...`` under ``prefix``; a
    reference starting with another host (``other.example:5000/repo:tag``) goes there.
    """

    def __init__(
        self,
        location: str,
        *,
        plain_http: bool = False,
        ca_file: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        concurrency: int = 4,
        chunk_size: int = 64 * 1024 * 1024,
        monolithic_limit: int = 16 * 1024 * 1024,
        cache: DigestCache | None = None,
    ) -> None:
        host, _, prefix = location.strip("/").partition("/")
        if not host:
            raise InvalidReference(f'Registry location "{redact(location)}" names no host.')
        what = f"Registry location {redact(location)!r}"
        check_host(host, what)
        if prefix:
            check_repository(prefix, what)
        self.host, self.prefix = host, prefix
        self.concurrency = concurrency
        self.chunk_size, self.monolithic_limit = chunk_size, monolithic_limit
        self.cache = cache or DigestCache()
        creds = Credentials(username, password or "") if username else None
        self._transport = Transport(
            plain_http=plain_http,
            ca_file=ca_file,
            credentials=creds,
            timeouts=timeouts or Timeouts(),
            retry=retry or RetryPolicy(),
            max_connections=max(4, concurrency * 2),
        )

    def __repr__(self) -> str:
        return f"Registry({self.host + ('/' + self.prefix if self.prefix else '')!r})"

    async def __aenter__(self) -> Registry:
        # anyio imports its event-loop backend on first use (about 20 ms): here, rather
        # than in the middle of the first transfer.
        await anyio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close connections; the digest cache stays on disk."""
        await self._transport.close()

    # -- addressing ---------------------------------------------------------------------

    def _ref(self, reference: str) -> Reference:
        ref = parse_reference(reference)
        if ref.registry is None and self.prefix:
            return Reference(f"{self.prefix}/{ref.repository}", ref.tag, ref.digest, self.host)
        return Reference(ref.repository, ref.tag, ref.digest, ref.registry or self.host)

    def _url(self, ref: Reference, tail: str) -> str:
        return f"{self._transport.base_url(ref.registry or self.host)}/v2/{ref.repository}/{tail}"

    def _blob_url(self, ref: Reference, digest: str) -> str:
        # Checked here too, not only where manifests are read: a digest is a URL path.
        return self._url(ref, f"blobs/{_media.check_digest(digest, f'A blob of {ref}')}")

    @staticmethod
    def _scope(ref: Reference, push: bool = False) -> str:
        return f"repository:{ref.repository}:{'pull,push' if push else 'pull'}"

    async def _send(self, method: str, ref: Reference, url: str, what: str, **kw: object):  # type: ignore[no-untyped-def]
        host = ref.registry or self.host
        return await self._transport.send(method, host, url, what=what, **kw)  # type: ignore[arg-type]

    # -- BlobBackend --------------------------------------------------------------------

    async def has_blob(self, ref: Reference, digest: str) -> bool:
        """Return True when the repository already holds blob ``digest`` (HEAD)."""
        try:
            resp = await self._send(
                "HEAD",
                ref,
                self._blob_url(ref, digest),
                f"Checking blob {digest[:19]} of {ref}",
                scope=self._scope(ref, True),
            )
        except ArtifactNotFound:
            return False
        resp.release()
        return True

    async def _start_upload(self, ref: Reference, what: str) -> str:
        resp = await self._send(
            "POST",
            ref,
            self._url(ref, "blobs/uploads/"),
            what,
            scope=self._scope(ref, True),
            ok=(202,),
            idempotent=True,
        )
        resp.release()
        return _location(resp, self._url(ref, ""), what)

    @staticmethod
    def _with_query(url: str, **params: str) -> str:
        return url + ("&" if "?" in url else "?") + urlencode(params)

    async def _body(
        self, reader: HashingReader, length: int, sent: _transfer.BytesCallback
    ) -> AsyncIterator[bytes]:
        """Yield ``length`` bytes of the file. The next chunk is read on a worker thread and
        each chunk is hashed on another while the event loop sends the current one."""
        loop = asyncio.get_running_loop()
        hashing = OrderedWorker()
        left = length
        ahead = loop.run_in_executor(None, reader.read_only, min(READ_CHUNK, left))
        try:
            while left > 0:
                chunk = await ahead
                if not chunk:
                    raise RegistryError("The file shrank while it was being uploaded.")
                left -= len(chunk)
                if left > 0:
                    ahead = loop.run_in_executor(None, reader.read_only, min(READ_CHUNK, left))
                await hashing.submit(reader.hash, chunk)
                if left == 0:
                    # The caller reads the digest once the body is sent: finish it first.
                    await hashing.drain()
                sent(len(chunk))
                yield chunk
        finally:
            await asyncio.wait([ahead])  # never leave a read running on a file about to close
            await hashing.close()

    async def _upload_once(
        self,
        ref: Reference,
        path: Path,
        size: int,
        known: str | None,
        sent: _transfer.BytesCallback,
    ) -> str:
        what = f"Uploading {path.name} to {ref}"
        url = await self._start_upload(ref, what)
        if url.startswith("http://") and size > self.monolithic_limit:
            return await self._upload_sendfile(ref, url, path, size, known, sent, what)
        reader = await anyio.to_thread.run_sync(HashingReader, path)
        try:
            if size <= self.monolithic_limit and known:
                body = functools.partial(self._body, reader, size, sent)
                return await self._put_final(ref, url, known, what, body, size)
            url = await self._patch_chunks(
                ref, url, size, lambda offset, n: self._body(reader, n, sent), what
            )
            return await self._put_final(ref, url, known or reader.digest, what)
        finally:
            await anyio.to_thread.run_sync(reader.close)

    async def _upload_sendfile(
        self,
        ref: Reference,
        url: str,
        path: Path,
        size: int,
        known: str | None,
        sent: _transfer.BytesCallback,
        what: str,
    ) -> str:
        """Upload over plain HTTP with sendfile(2), the file's pages going to the socket
        without passing through Python, while a worker thread hashes the file."""
        loop = asyncio.get_running_loop()
        hashing = loop.run_in_executor(None, hash_file, path) if known is None else None
        try:
            file = await anyio.to_thread.run_sync(path.open, "rb")
            try:
                url = await self._patch_chunks(
                    ref, url, size, lambda offset, n: _FileRange(file, offset, n, sent), what
                )
            finally:
                await anyio.to_thread.run_sync(file.close)
            digest, hashed = await hashing if hashing is not None else (known, size)
        finally:
            if hashing is not None:
                await asyncio.wait([hashing])
        if hashed != size or digest is None:
            raise RegistryError(f"{what}: the file changed while it was being uploaded.")
        return await self._put_final(ref, url, digest, what)

    async def _patch(
        self, ref: Reference, url: str, headers: dict[str, str], body: BodyFactory, what: str
    ) -> str:
        """Send one PATCH of an upload (never repeated: the registry may have taken part of
        it); return the URL the upload goes on at."""
        resp = await self._send(
            "PATCH",
            ref,
            url,
            what,
            scope=self._scope(ref, True),
            headers=headers,
            ok=(202,),
            idempotent=False,
            body=body,
        )
        resp.release()
        return _location(resp, url, what)

    async def _patch_chunks(
        self,
        ref: Reference,
        url: str,
        size: int,
        body: Callable[[int, int], object],
        what: str,
    ) -> str:
        """Send ``size`` bytes in PATCHes of at most chunk_size, ``body(offset, length)``
        making each one's body; return the URL that finishes the upload."""
        offset = 0
        while offset < size or size == 0:
            length = min(self.chunk_size, size - offset)
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(length),
                "Content-Range": f"{offset}-{offset + length - 1}",
            }
            url = await self._patch(
                ref, url, headers, functools.partial(body, offset, length), what
            )
            offset += length
            if size == 0:
                break
        return url

    async def _put_final(
        self,
        ref: Reference,
        url: str,
        digest: str,
        what: str,
        body: BodyFactory | None = None,
        size: int = 0,
    ) -> str:
        """Finish an upload, sending its last ``size`` bytes (``body``) if any. Never repeated
        alone: once applied, the session is spent (see _retry_upload)."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        resp = await self._send(
            "PUT",
            ref,
            self._with_query(url, digest=digest),
            what,
            scope=self._scope(ref, True),
            headers=headers,
            body=body if size else None,
            ok=(201,),
            idempotent=False,
        )
        resp.release()
        return digest

    async def put_blob(
        self,
        ref: Reference,
        path: Path,
        known: tuple[str, int] | None,
        sent: _transfer.BytesCallback,
    ) -> tuple[str, int]:
        """Upload a file as a blob unless present; return its digest and size.

        Small files are hashed first (so HEAD can skip them); large ones unknown to the
        digest cache are hashed while they stream, which reads them only once.
        """
        st = await anyio.to_thread.run_sync(path.stat)
        started_ns = time.time_ns()
        if known is None and st.st_size <= self.monolithic_limit:
            known = await self.cache.file_digest(path)
        if known is not None and await self.has_blob(ref, known[0]):
            return known
        count = _transfer.AttemptBytes(sent)
        hashed = known

        async def attempt() -> str:
            count.restart()
            return await self._upload_once(
                ref, path, st.st_size, hashed[0] if hashed else None, count
            )

        async def stored() -> str | None:
            # A large file is hashed while it streams; before sending it again, hash it
            # alone, which the retry needs anyway and which HEAD needs.
            nonlocal hashed
            hashed = hashed or await self.cache.file_digest(path)
            return hashed[0] if await self.has_blob(ref, hashed[0]) else None

        digest = await self._retry_upload(attempt, stored, f"Uploading {path.name} to {ref}")
        if known is None:
            await anyio.to_thread.run_sync(self.cache.remember_file, path, st, digest, started_ns)
        return digest, st.st_size

    async def put_archive(
        self, ref: Reference, produce: _transfer.ArchiveProducer, sent: _transfer.BytesCallback
    ) -> ArchiveInfo:
        """Stream a directory archive to the registry while it is being made.

        The digest is known only at the end, so the archive goes up as one chunked PATCH
        and the final PUT names the digest. A failed upload is made again from scratch.
        """
        what = f"Uploading an archive to {ref}"
        count = _transfer.AttemptBytes(sent)
        made: ArchiveInfo | None = None

        async def attempt() -> ArchiveInfo:
            nonlocal made
            count.restart()
            pipe = ArchivePipe()
            producer = asyncio.get_running_loop().run_in_executor(None, pipe.run, produce)
            try:
                url = await self._start_upload(ref, what)
                headers = {"Content-Type": "application/octet-stream"}
                url = await self._patch(
                    ref, url, headers, lambda: self._pipe_body(pipe, count), what
                )
                made = info = await producer
                await self._put_final(ref, url, info.digest, what)
                return info
            finally:
                pipe.cancel()
                await asyncio.wait([producer])
                if not producer.cancelled():
                    producer.exception()  # retrieved: the error that matters is raised above

        async def stored() -> ArchiveInfo | None:
            return made if made is not None and await self.has_blob(ref, made.digest) else None

        return await self._retry_upload(attempt, stored, what)

    async def _retry_upload(
        self,
        attempt: Callable[[], Awaitable[T]],
        stored: Callable[[], Awaitable[T | None]],
        what: str,
    ) -> T:
        """Run an upload ``attempt`` until it succeeds, each in an upload session of its own.

        An upload session is spent once its final PUT is applied; when only the reply to that
        PUT was lost, the same PUT again would answer 404 though the blob is stored. So no
        request of an upload is repeated alone: a retry asks ``stored()`` first (HEAD), and
        uploads again from a fresh session only when the blob is not there.
        """
        tried = False

        async def once() -> T:
            nonlocal tried
            if tried and (done := await stored()) is not None:
                return done
            tried = True
            return await attempt()

        return await with_retries(once, self._transport.retry, what)

    @staticmethod
    async def _pipe_body(
        pipe: ArchivePipe, sent: _transfer.BytesCallback
    ) -> AsyncIterator[bytearray]:
        loop = asyncio.get_running_loop()
        while (chunk := await loop.run_in_executor(None, pipe.get)) is not None:
            sent(len(chunk))
            yield chunk

    async def put_blob_bytes(self, ref: Reference, data: bytes, digest: str) -> None:
        """Upload a small in-memory blob (the empty config)."""
        what = f"Uploading config blob to {ref}"

        async def attempt() -> bool:
            url = await self._start_upload(ref, what)
            await self._put_final(ref, url, digest, what, lambda: data, len(data))
            return True

        async def stored() -> bool | None:
            return await self.has_blob(ref, digest) or None

        await self._retry_upload(attempt, stored, what)

    async def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str:
        """Store a manifest under ``ref``'s tag (or digest); return its digest."""
        digest = _media.digest_like(data, ref.digest) if ref.digest else _media.sha256_digest(data)
        target = ref.digest or ref.tag or digest
        if ref.digest and ref.digest != digest:
            raise DigestMismatch(f"The manifest for {ref} has digest {digest}.")
        resp = await self._send(
            "PUT",
            ref,
            self._url(ref, f"manifests/{target}"),
            f"Storing the manifest of {ref}",
            scope=self._scope(ref, True),
            headers={"Content-Type": media_type},
            body=lambda: data,
            ok=(201,),
            idempotent=True,
        )
        resp.release()
        return digest

    async def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]:
        """Fetch a manifest and verify it against its digest; return (data, media type, digest)."""
        what = f"Fetching the manifest of {ref}"
        resp = await self._send(
            "GET",
            ref,
            self._url(ref, f"manifests/{ref.target}"),
            what,
            scope=self._scope(ref),
            headers={"Accept": _media.MANIFEST_ACCEPT},
        )
        async with resp:
            data = await read_bounded(
                resp,
                _media.MAX_MANIFEST_BYTES,
                lambda size: _media.check_manifest_size(size, f"{ref} (from the registry)"),
            )
        expected = ref.digest or self._header_digest(resp, what)
        digest = _media.digest_like(data, expected) if expected else _media.sha256_digest(data)
        if expected and expected != digest:
            raise DigestMismatch(f"{what}: the manifest has digest {digest}, expected {expected}.")
        return data, resp.headers.get("Content-Type", _media.MANIFEST), digest

    async def fetch_blob(
        self,
        ref: Reference,
        desc: Descriptor,
        sink: SinkFactory,
        received: _transfer.BytesCallback,
    ) -> BlobSink:
        """Stream a blob into a fresh sink per attempt, which verifies its size and digest;
        return the sink that succeeded. Retried from scratch."""
        what = f"Fetching {desc.title or desc.digest} of {ref}"
        url = self._blob_url(ref, desc.digest)
        count = _transfer.AttemptBytes(received)

        async def attempt() -> BlobSink:
            count.restart()
            writer = await anyio.to_thread.run_sync(sink, what)
            try:
                resp = await self._send("GET", ref, url, what, scope=self._scope(ref))
                async with resp:
                    taken = take_body(resp, TAKE_OVER_FROM)
                    if taken is None:
                        await self._drain_into(resp, writer, count)
                    else:
                        try:
                            await self._drain_socket(taken, writer, count)
                        finally:
                            resp.close()
                await anyio.to_thread.run_sync(writer.finish)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(writer.abort)
                raise
            return writer

        return await with_retries(attempt, self._transport.retry, what)

    async def _drain_socket(
        self, taken: TakenBody, writer: BlobSink, received: _transfer.BytesCallback
    ) -> None:
        """Receive the rest of a body taken from aiohttp on threads (SocketDrain)."""
        loop = asyncio.get_running_loop()
        drain = SocketDrain(
            taken.sock,
            taken.head,
            taken.remaining,
            writer,
            lambda n: loop.call_soon_threadsafe(received, n),
            self._transport.timeouts.read,
        )
        running = loop.run_in_executor(None, drain.run)
        try:
            await asyncio.shield(running)
        finally:
            drain.stop()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([running])

    @staticmethod
    async def _drain_into(
        resp: aiohttp.ClientResponse, writer: BlobSink, received: _transfer.BytesCallback
    ) -> None:
        """Copy a response body into ``writer``. The pieces arrive as the socket gave them and
        go in batches, never joined, to one thread that hashes and writes them (both release
        the GIL) while the event loop reads on: two copies in all, as for curl."""
        worker = OrderedWorker()
        batch: list[bytes] = []
        buffered = 0
        try:
            while True:
                piece, chunk_end = await resp.content.readchunk()
                if piece:
                    batch.append(piece)
                    buffered += len(piece)
                elif not chunk_end:
                    break  # end of the body
                if buffered >= READ_CHUNK:
                    writer.count(buffered)
                    await worker.submit(writer.take, batch)
                    received(buffered)
                    batch, buffered = [], 0
            writer.count(buffered)
            await worker.submit(writer.take, batch)
            received(buffered)
            await worker.drain()
        except BaseException:
            writer.cancel()  # a store in progress (an archive unpacking) stops at its next piece
            raise
        finally:
            await worker.close()

    @staticmethod
    def _header_digest(resp: aiohttp.ClientResponse, what: str) -> str | None:
        """Return the Docker-Content-Digest header, checked against the digest grammar."""
        digest = resp.headers.get("Docker-Content-Digest")
        return None if digest is None else _media.check_digest(digest, f"{what}: the registry")

    # -- ArtifactStore ------------------------------------------------------------------

    async def resolve(self, reference: str) -> str:
        """Return the manifest digest that ``reference`` points to."""
        ref = self._ref(reference)
        resp = await self._send(
            "HEAD",
            ref,
            self._url(ref, f"manifests/{ref.target}"),
            f"Resolving {ref}",
            scope=self._scope(ref),
            headers={"Accept": _media.MANIFEST_ACCEPT},
        )
        resp.release()
        digest = self._header_digest(resp, f"Resolving {ref}")
        if digest is None:
            _, _, digest = await self.get_manifest(ref)
        return digest

    async def tags(self, repository: str) -> list[str]:
        """Return the repository's tags, following pagination; [] for an unknown repository."""
        ref = self._ref(f"{repository}:latest")
        url: str | None = self._url(ref, "tags/list?n=1000")
        found: list[str] = []
        seen: set[str] = set()
        while url:
            if url in seen:  # a Link back to a page read: the listing would never end
                raise RegistryError(
                    f"Listing tags of {repository}: the registry links back to a page it "
                    f"already gave ({url}); its pagination loops."
                )
            seen.add(url)
            try:
                resp = await self._send(
                    "GET", ref, url, f"Listing tags of {repository}", scope=self._scope(ref)
                )
            except ArtifactNotFound:
                return []
            async with resp:
                data = await read_bounded(
                    resp, MAX_JSON_BYTES, lambda n: _too_large_tags(repository, n)
                )
            body = parse_json(data)
            tags = body.get("tags") if isinstance(body, dict) else None
            if not isinstance(tags, list | None):
                raise RegistryError(f"Listing tags of {repository}: the answer is malformed.")
            found.extend(str(tag) for tag in tags or [])
            if len(found) > MAX_TAGS:
                raise LimitExceeded(
                    f"Listing tags of {repository}: over {MAX_TAGS} tags; is it one repository?"
                )
            link = resp.links.get("next")
            url = urljoin(url, str(link["url"])) if link else None
        return sorted(found)

    async def delete(self, reference: str) -> None:
        """Delete the manifest ``reference`` names (and so every tag pointing to it)."""
        ref = self._ref(reference)
        digest = ref.digest or await self.resolve(reference)
        what = f"Deleting {ref}"
        tried = False

        async def attempt() -> None:
            nonlocal tried
            retry, tried = tried, True
            try:
                resp = await self._send(
                    "DELETE",
                    ref,
                    self._url(ref, f"manifests/{quote(digest)}"),
                    what,
                    scope=f"repository:{ref.repository}:delete,pull,push",
                    ok=(202, 200),
                    idempotent=False,  # retried below, where a 404 means done
                )
            except ArtifactNotFound:
                if retry:
                    return  # an earlier attempt deleted it; only its reply was lost
                raise
            resp.release()

        await with_retries(attempt, self._transport.retry, what)

    async def copy(self, source: str, destination: str) -> str:
        """Copy an artifact to another reference (same or other repository or registry)."""
        src, dst = self._ref(source), self._ref(destination)
        data, media_type, digest = await self.get_manifest(src)
        manifest = _media.decode_manifest(data, str(src), media_type)
        # Each blob passes through a temporary file: the default pull limit bounds it.
        Budget(PullLimits(), f"Copying {src}").check_declared(
            {desc.title or desc.digest: (desc.size, True) for desc in manifest.blobs()}
        )
        for desc in manifest.blobs():
            if not await self.has_blob(dst, desc.digest):
                await self._copy_blob(src, dst, desc)
        await self.put_manifest(dst, data, media_type)
        return digest

    async def mount_blob(self, dst: Reference, desc: Descriptor, src: Reference) -> None:
        """Make blob ``desc`` of repository ``src`` part of ``dst`` too (a cross-repository
        mount: no data moves); a registry that will not mount gets the blob copied."""
        if (dst.registry or self.host) == (src.registry or self.host):
            url = self._with_query(
                self._url(dst, "blobs/uploads/"), mount=desc.digest, **{"from": src.repository}
            )
            resp = await self._send(
                "POST",
                dst,
                url,
                f"Mounting blob {desc.digest[:19]} of {src} into {dst}",
                scope=f"{self._scope(dst, True)} {self._scope(src)}",
                ok=(201, 202),
                idempotent=True,
            )
            resp.release()
            if resp.status == 201:
                return
        await self._copy_blob(src, dst, desc)

    async def _copy_blob(self, src: Reference, dst: Reference, desc: Descriptor) -> None:
        with tempfile.TemporaryDirectory(prefix="k8sjobs-copy-") as tmp:
            path = Path(tmp) / "blob"
            sink = VerifyingWriter.factory(path, desc.digest, desc.size)
            await self.fetch_blob(src, desc, sink, lambda n: None)
            await self.put_blob(dst, path, (desc.digest, desc.size), lambda n: None)


__all__ = ["Registry"]
