"""The one seam through which every registry request goes: timeouts, auth, retries, errors.

Requests that are safe to repeat (GET, HEAD, and others the caller marks idempotent) are
retried on connection errors, timeouts, 429 and 5xx, with exponential backoff and jitter,
within a bounded total time. A 401 triggers one round of the challenge flow (basic or
bearer token); a second 401 is an AuthenticationError at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import yarl

from .._resend import without_silent_resend
from ..errors import (
    ArtifactNotFound,
    AuthenticationError,
    LimitExceeded,
    RegistryError,
    RegistryUnavailable,
    TransientFailure,
    UploadFailed,
    basic_forms,
    scrub,
)
from . import _auth

T = TypeVar("T")
BodyFactory = Callable[[], Any]
# aiohttp stops reading a socket once this much is buffered (twice this, in fact). The
# default 64 KiB stalls a download whenever the writer thread is busy; 4 MiB keeps the
# socket drained while the previous chunk is written and hashed.
READ_BUFFER = 4 * 1024 * 1024
# The most a small JSON answer (a token, a page of tags) may be: more is a hostile server.
MAX_JSON_BYTES = 16 * 1024 * 1024
# Redirects followed for one request (aiohttp's default too); a blob GET needs one or two.
MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)


def _short(url: yarl.URL) -> str:
    """Return a URL without its query and fragment: what an error may show of it."""
    return str(url.with_query(None).with_fragment(None))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and for how long to retry a request that is safe to repeat."""

    attempts: int = 4
    initial_delay: float = 0.2
    max_delay: float = 2.0
    total: float = 30.0

    def delay(self, attempt: int) -> float:
        """Return the pause before retry number ``attempt`` (1-based), with full jitter."""
        ceiling = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class Timeouts:
    """Per-request limits: connecting, and silence while reading an answer."""

    connect: float = 10.0
    read: float = 60.0


class _Retryable(Exception):
    """Internal: an attempt failed in a way that a retry may fix."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


_RETRYABLE_ERRORS = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    ConnectionError,
)


def describe_error(exc: BaseException) -> str:
    """Return a short cause for a transport error, without any URL query or header."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def with_retries(operation: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """Run ``operation`` until it succeeds, retrying _Retryable and transport errors."""
    deadline = time.monotonic() + policy.total
    attempt = 0
    while True:
        attempt += 1
        try:
            return await operation()
        except aiohttp.ClientSSLError as exc:
            raise RegistryUnavailable(
                f"{what}: TLS verification failed ({exc.__class__.__name__}); "
                "pass ca_file for a private CA, or plain_http=True for an HTTP registry."
            ) from None
        except (_Retryable, TransientFailure, *_RETRYABLE_ERRORS) as exc:
            if isinstance(exc, TransientFailure):
                cause = exc.cause
            else:
                cause = exc.cause if isinstance(exc, _Retryable) else describe_error(exc)
            pause = policy.delay(attempt)
            if policy.attempts == 1:
                raise TransientFailure(f"{what}: {cause}.", cause) from None
            if attempt >= policy.attempts or time.monotonic() + pause > deadline:
                raise RegistryUnavailable(f"{what}: {cause} (after {attempt} attempts).") from None
            await asyncio.sleep(pause)


async def read_bounded(
    resp: aiohttp.ClientResponse, limit: int, refuse: Callable[[int], None]
) -> bytes:
    """Return a whole response body of at most ``limit`` bytes; for a longer one, call
    ``refuse(size seen)``, which raises.

    One ``read(n)`` returns only what has arrived so far; this reads on to the end (or to
    one byte past the limit), and refuses at once a body whose Content-Length is too long.
    """
    if resp.content_length is not None and resp.content_length > limit:
        refuse(resp.content_length)
    data = bytearray()
    while len(data) <= limit:
        chunk = await resp.content.read(limit + 1 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > limit:
        refuse(len(data))
    return bytes(data)


def _too_large(what: str) -> Callable[[int], None]:
    def refuse(size: int) -> None:
        raise LimitExceeded(
            f"{what}: the answer is over {MAX_JSON_BYTES >> 20} MiB ({size} bytes)."
        )

    return refuse


def parse_json(body: bytes) -> Any:
    """Return decoded JSON, or None for a body that is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def registry_message(body: bytes) -> str:
    """Return the first error code and message of a registry error body, if any."""
    try:
        errors = json.loads(body).get("errors") or []
        first = errors[0]
        return f"{first.get('code')}: {first.get('message')}"
    except (ValueError, AttributeError, IndexError, TypeError):
        return body[:200].decode(errors="replace").strip()


class Transport:
    """One aiohttp session with auth state per registry host; sends every request."""

    def __init__(
        self,
        *,
        plain_http: bool,
        ca_file: str | None,
        credentials: _auth.Credentials | None,
        timeouts: Timeouts,
        retry: RetryPolicy,
        max_connections: int = 16,
    ) -> None:
        self.plain_http = plain_http
        self.retry = retry
        self.timeouts = timeouts
        self._ca_file = ca_file
        self._explicit = credentials
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._creds: dict[str, _auth.Credentials | None] = {}
        self._challenges: dict[str, _auth.Challenge] = {}
        self._tokens: dict[tuple[str, str], str] = {}

    def base_url(self, host: str) -> str:
        """Return ``scheme://host`` for a registry host."""
        return f"{'http' if self.plain_http else 'https'}://{host}"

    def session(self) -> aiohttp.ClientSession:
        """Return the shared session, created on first use (inside the event loop)."""
        if self._session is None or self._session.closed:
            ssl_context: ssl.SSLContext | bool = True
            if self._ca_file:
                ssl_context = ssl.create_default_context(cafile=self._ca_file)
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=ssl_context)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    sock_connect=self.timeouts.connect,
                    sock_read=self.timeouts.read,
                ),
                auto_decompress=False,
                read_bufsize=READ_BUFFER,
            )
            # The final PUT of an upload applied once spends its session (a repeat answers
            # 404): retries are decided here, by `send` and the callers, who know what is safe.
            without_silent_resend(self._session)
        return self._session

    def _secrets(self) -> list[str]:
        """Every credential this transport holds: what registry text must never repeat."""
        found: list[str] = list(self._tokens.values())
        for creds in [self._explicit, *self._creds.values()]:
            if creds is not None:
                found.extend(basic_forms(creds.username, creds.password))
        return found

    async def close(self) -> None:
        """Close the session and forget tokens."""
        if self._session is not None:
            await self._session.close()
        self._tokens.clear()

    async def _credentials(self, host: str) -> _auth.Credentials | None:
        if self._explicit is not None:
            return self._explicit
        if host not in self._creds:
            self._creds[host] = await _auth.find_credentials(host)
        return self._creds[host]

    async def _authorization(self, host: str, scope: str) -> str | None:
        challenge = self._challenges.get(host)
        if challenge is None:
            return None
        creds = await self._credentials(host)
        if challenge.scheme == "basic":
            return creds.basic_header() if creds else None
        token = self._tokens.get((host, scope))
        if token is None:
            token = await self._fetch_token(host, challenge, scope, creds)
            self._tokens[(host, scope)] = token
        return f"Bearer {token}"

    async def _fetch_token(
        self, host: str, challenge: _auth.Challenge, scope: str, creds: _auth.Credentials | None
    ) -> str:
        realm = challenge.params.get("realm")
        if not realm:
            raise AuthenticationError(
                f"Registry {host} asked for a bearer token but gave no realm."
            )
        query = _auth.token_query(challenge, scope)
        try:
            url = yarl.URL(realm).update_query(query)
        except (TypeError, ValueError):
            raise AuthenticationError(f"Registry {host} named an unreadable token realm.") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise AuthenticationError(
                f"Registry {host} named the token realm {_short(url)}, not an http(s) URL."
            )
        if creds and url.scheme == "http" and not self.plain_http:
            raise AuthenticationError(
                f"Registry {host} (https) named the plain-http token realm {_short(url)}; "
                "k8sjobs does not send its credentials there in clear text."
            )
        # The realm is the one other origin the registry's credentials go to, because the
        # registry itself named it in its own challenge (as Docker Hub names auth.docker.io);
        # a host the token server redirects to gets none (_follow).
        headers = {"Authorization": creds.basic_header()} if creds else {}

        async def attempt() -> str:
            what = f"Getting a token for {host}"
            resp = await self._follow("GET", str(url), headers, None, url.origin(), what)
            async with resp:
                if resp.status in (401, 403):
                    raise AuthenticationError(
                        f"The token server {realm} refused "
                        f"{'the credentials' if creds else 'anonymous access'} for {host} "
                        f"(HTTP {resp.status})."
                    )
                if resp.status >= 500:
                    raise _Retryable(f"token server {realm} answered HTTP {resp.status}")
                if resp.status != 200:
                    raise AuthenticationError(
                        f"The token server {realm} answered HTTP {resp.status}."
                    )
                body = await read_bounded(resp, MAX_JSON_BYTES, _too_large(f"The token of {host}"))
                return _auth.token_from_response(parse_json(body), realm)

        return await with_retries(attempt, self.retry, f"Getting a token for {host}")

    async def send(
        self,
        method: str,
        host: str,
        url: str,
        *,
        scope: str,
        what: str,
        headers: Mapping[str, str] | None = None,
        body: BodyFactory | None = None,
        ok: tuple[int, ...] = (200,),
        idempotent: bool | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the response with an ``ok`` status (caller releases it).

        404 raises ArtifactNotFound, 401/403 AuthenticationError, and other statuses
        RegistryError or UploadFailed. ``body`` makes a fresh body for every attempt.
        """
        retry = method in ("GET", "HEAD") if idempotent is None else idempotent
        policy = self.retry if retry else RetryPolicy(attempts=1)

        async def attempt() -> aiohttp.ClientResponse:
            return await self._send_authorized(method, host, url, scope, what, headers, body, ok)

        return await with_retries(attempt, policy, what)

    async def _send_authorized(
        self,
        method: str,
        host: str,
        url: str,
        scope: str,
        what: str,
        headers: Mapping[str, str] | None,
        body: BodyFactory | None,
        ok: tuple[int, ...],
    ) -> aiohttp.ClientResponse:
        # Credentials go to the registry's own origin only: an upload Location or a tags Link
        # naming another host gets none, nor does a host a redirect leads to (_follow).
        origin = yarl.URL(self.base_url(host)).origin()
        ours = yarl.URL(url).origin() == origin
        for round_ in range(2):
            all_headers = dict(headers or {})
            authorization = await self._authorization(host, scope) if ours else None
            if authorization:
                all_headers["Authorization"] = authorization
            resp = await self._follow(method, url, all_headers, body, origin, what)
            if resp.status in (401, 403) and ours and resp.url.origin() != origin:
                # A storage host the registry redirected to: its challenge is its own, and
                # the registry's credentials (or a token fetched with them) are not for it.
                resp.release()
                raise AuthenticationError(
                    f"{what}: the registry redirected to {resp.url.origin()}, which answered "
                    f"HTTP {resp.status}; its challenge is not the registry's, so no "
                    "credentials were sent to it (the registry's storage must accept the "
                    "redirect as it is: check the registry's storage settings)."
                )
            if resp.status != 401 or round_ == 1 or not ours:
                break
            challenge_header = resp.headers.get("WWW-Authenticate", "")
            resp.release()
            await self._learn_challenge(host, scope, challenge_header, authorization, what)
        return await self._check(resp, ok, method, what)

    async def _follow(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: BodyFactory | None,
        origin: yarl.URL,
        what: str,
    ) -> aiohttp.ClientResponse:
        """Send one request, following redirects here rather than in aiohttp, and return the
        final response. An Authorization header goes to ``origin`` (the registry's) only; a
        loop, a Location that is missing or not http(s), or too many hops is a RegistryError
        naming ``what`` and what the server did. URLs are named without their query, which
        may hold a signature (a pre-signed storage URL)."""
        current = yarl.URL(url)
        seen = {current}
        for _ in range(MAX_REDIRECTS + 1):
            sent = {k: v for k, v in headers.items() if k != "Authorization"}
            if current.origin() == origin and "Authorization" in headers:
                sent["Authorization"] = headers["Authorization"]
            resp = await self.session().request(
                method,
                current,
                headers=sent,
                data=body() if body else None,
                allow_redirects=False,
            )
            if resp.status not in _REDIRECTS:
                return resp
            location = resp.headers.get("Location")
            resp.release()
            where = f"{what}: {_short(current)} answered HTTP {resp.status} (a redirect)"
            if not location:
                raise RegistryError(f"{where} with no Location; the registry is misconfigured.")
            try:
                target = current.join(yarl.URL(location))
            except ValueError:
                raise RegistryError(f"{where} to an unreadable Location.") from None
            if target.scheme not in ("http", "https"):
                raise RegistryError(
                    f"{where} to a {target.scheme or 'relative'}: URL; only http and https "
                    "redirects are followed."
                )
            if target in seen:
                raise RegistryError(
                    f"{where} back to {_short(target)}, a loop; the registry is misconfigured."
                )
            seen.add(target)
            if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                method, body = "GET", None  # as browsers and aiohttp do
            current = target
        raise RegistryError(
            f"{what}: more than {MAX_REDIRECTS} redirects (the last to {_short(current)})."
        )

    async def _learn_challenge(
        self, host: str, scope: str, header: str, sent: str | None, what: str
    ) -> None:
        challenge = _auth.parse_challenge(header)
        if challenge.scheme not in ("basic", "bearer"):
            raise AuthenticationError(f"{what}: unsupported authentication scheme {header!r:.60}.")
        creds = await self._credentials(host)
        if challenge.scheme == "basic" and creds is None:
            raise AuthenticationError(
                f"{what}: the registry requires credentials and none are configured "
                "(K8SJOBS_REGISTRY_USERNAME/PASSWORD or docker config.json)."
            )
        if sent is not None and challenge.scheme == "basic":
            raise AuthenticationError(f"{what}: the registry refused the credentials (HTTP 401).")
        # A bearer token may simply have expired: drop it so the next round fetches a new one.
        self._tokens.pop((host, scope), None)
        self._challenges[host] = challenge

    async def _check(
        self, resp: aiohttp.ClientResponse, ok: tuple[int, ...], method: str, what: str
    ) -> aiohttp.ClientResponse:
        if resp.status in ok:
            return resp
        body = b"" if method == "HEAD" else await resp.content.read(4096)
        resp.release()
        detail = scrub(registry_message(body), self._secrets())
        if resp.status == 401:
            raise AuthenticationError(f"{what}: the registry refused the credentials (HTTP 401).")
        if resp.status == 403:
            raise AuthenticationError(f"{what}: access denied (HTTP 403) {detail}".rstrip())
        if resp.status == 404:
            raise ArtifactNotFound(f"{what}: not found (HTTP 404).")
        if resp.status == 429 or resp.status >= 500:
            raise _Retryable(f"the registry answered HTTP {resp.status} {detail}".rstrip())
        if method in ("PUT", "PATCH", "POST"):
            raise UploadFailed(f"{what}: the registry answered HTTP {resp.status}: {detail}.")
        raise RegistryError(f"{what}: the registry answered HTTP {resp.status}: {detail}.")


@dataclass
class TakenBody:
    """The rest of a response body, handed from aiohttp to a thread: the bytes aiohttp had
    already buffered, then ``remaining`` bytes to receive from ``sock`` (a duplicate of the
    connection's socket, in timeout mode), which is never reused afterwards."""

    head: bytes
    sock: socket.socket
    remaining: int


def take_body(resp: aiohttp.ClientResponse, minimum: int) -> TakenBody | None:
    """Take a large plain-HTTP body away from aiohttp, or return None to read it as usual.

    Only a body with a Content-Length, no transfer or content coding, on a plain TCP socket
    qualifies. aiohttp's reading is paused first (which also stops its read timer) in the same
    synchronous step that empties its buffer, so no byte can reach it afterwards; the
    connection is closed when the response is. A thread then receives into reused buffers,
    which saves a Python object and a copy per piece and keeps pace with curl.
    """
    connection = resp.connection
    size = resp.content_length
    coded = resp.headers.get("Transfer-Encoding") or resp.headers.get("Content-Encoding")
    if connection is None or size is None or size < minimum or coded:
        return None
    transport, protocol = connection.transport, connection.protocol
    if transport is None or protocol is None or transport.get_extra_info("sslcontext"):
        return None
    raw = transport.get_extra_info("socket")
    if raw is None or raw.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    if resp.content.is_eof() or resp.content.exception() is not None:
        return None  # all there already (or failed): nothing to take over
    head = resp.content.read_nowait()
    protocol.pause_reading()
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    return TakenBody(head, sock, size - len(head))
