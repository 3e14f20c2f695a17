"""A thin async client for the Kubernetes REST API: JSON dicts in, JSON dicts out.

Every call goes through one shared aiohttp session and one ``_send`` loop that applies the
house rules: a client-side token bucket (QPS and burst), a bound on writes in flight, a
timeout on every request, and retries with exponential backoff and jitter on 429 (after
the server's Retry-After), 5xx and connection errors, only for requests safe to repeat.
Each attempt is one request on the wire (aiohttp's own silent resend is off, see _resend.py).
Responses stay plain dicts: building typed models costs more than the request on the hot
path (see benchmarks/bench_submit.py), and the watcher only reads a few fields.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from .._resend import without_silent_resend
from ..errors import ApiError, ServerUnavailable, api_error
from .config import ClusterConfig
from .reach import ApiHealth

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "JOBS",
    "PODS",
    "SECRETS",
    "SERVICES",
    "ClientOptions",
    "Kind",
    "KubeClient",
]

log = logging.getLogger("k8sjobs.kube")


@dataclass(frozen=True)
class Kind:
    """An API resource: where it lives (``/api/v1``, ``/apis/batch/v1``) and its plural."""

    prefix: str
    plural: str
    #: A subresource ("log"): its paths end in it, and RBAC names it "pods/log".
    sub: str = ""

    def path(self, namespace: str, name: str = "") -> str:
        """Return the URL path of the collection, or of one object (and its subresource)."""
        base = f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return "/".join(p for p in (base, name, self.sub if name else "") if p)

    def grant(self, verb: str) -> str:
        """Return the RBAC rule a 403 asks the user to add, in the words of a Role."""
        group = (
            self.prefix.removeprefix("/apis/").rpartition("/")[0] if "/apis/" in self.prefix else ""
        )
        resource = f"{self.plural}/{self.sub}" if self.sub else self.plural
        return f'verb "{verb}" on resource "{resource}" (apiGroup "{group}")'


CONFIGMAPS = Kind("/api/v1", "configmaps")
SECRETS = Kind("/api/v1", "secrets")
SERVICES = Kind("/api/v1", "services")
PODS = Kind("/api/v1", "pods")
POD_LOGS = Kind("/api/v1", "pods", sub="log")
JOBS = Kind("/apis/batch/v1", "jobs")
EVENTS = Kind("/api/v1", "events")
#: A Flux Operator MiniCluster (a step with ``target: minicluster``).
MINICLUSTERS = Kind("/apis/flux-framework.org/v1alpha2", "miniclusters")
#: Kueue's Workload: one per queued Job, owned by it (k8sjobs.admission).
WORKLOADS = Kind("/apis/kueue.x-k8s.io/v1beta2", "workloads")
#: A JobSet (a step with ``target: jobset``; k8sjobs.render.jobset).
JOBSETS = Kind("/apis/jobset.x-k8s.io/v1alpha2", "jobsets")


@dataclass(frozen=True)
class ClientOptions:
    """Limits that keep one driver from overwhelming the API server.

    ``qps``/``burst``: the token bucket every request draws from; ``max_writes``: writes in
    flight at once; ``timeout``: seconds for one request; ``watch_idle``: seconds a watch
    (or a followed log) may go without a byte: a watch with neither event nor bookmark for
    that long is taken for dead and relisted (a real server bookmarks an idle watch about
    once a minute, so keep it well above 60); ``retries``: attempts after the first, for
    requests safe to repeat; ``backoff``/``max_backoff``: the base and cap of the
    exponential backoff, in seconds. ``connect_timeout``: seconds a session's start may take
    to reach the API server before it fails with one line saying why (``reach.probe``);
    ``outage_timeout``: seconds a started session keeps retrying a server that stopped
    answering before it stops waiting (None: forever; the steps are never failed by it).
    """

    qps: float = 200.0
    burst: int = 400
    max_writes: int = 128
    timeout: float = 30.0
    watch_idle: float = 120.0
    retries: int = 8
    backoff: float = 0.1
    max_backoff: float = 10.0
    connect_timeout: float = 10.0
    outage_timeout: float | None = 900.0


class _TokenBucket:
    """A token bucket that reserves a token at once and sleeps off any deficit (fair, FIFO)."""

    def __init__(self, qps: float, burst: int) -> None:
        self._rate = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()

    async def take(self) -> None:
        """Wait until one request may go out."""
        if self._rate <= 0:
            return
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        self._tokens -= 1.0
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self._rate)


class KubeClient:
    """Requests to one API server, with rate limit, timeouts and safe retries."""

    def __init__(self, config: ClusterConfig, options: ClientOptions | None = None) -> None:
        self.config = config
        self.options = options or ClientOptions()
        self._bucket = _TokenBucket(self.options.qps, self.options.burst)
        self._writes = asyncio.Semaphore(self.options.max_writes)
        self._session: aiohttp.ClientSession | None = None
        self._reloaded = False
        self.health = ApiHealth(config.host, self.options.outage_timeout)
        #: Requests sent, by (verb, HTTP status; "none" where no answer came): for metrics.
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        #: The server's last refusal per resource (plural), while it is being retried and
        #: until a request for that resource succeeds: what a wait for it says it waits on.
        self.refusals: dict[str, str] = {}

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def session(self) -> aiohttp.ClientSession:
        """Return the shared HTTP session, opening it on first use."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, ssl=self.config.ssl)
            self._session = without_silent_resend(
                aiohttp.ClientSession(
                    connector=connector, headers=self._headers(), json_serialize=json.dumps
                )
            )
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session and its connections."""
        if self._session is not None:
            await self._session.close()

    # ---- verbs -----------------------------------------------------------------------

    async def create(
        self, kind: Kind, namespace: str, body: Mapping[str, Any], *, answer: bool = True
    ) -> Any:
        """Create an object and return it (None unless ``answer``: skip decoding the echo).

        Repeating is safe because the caller adopts on AlreadyExists.
        """
        name = body["metadata"]["name"]
        what = f'create {kind.plural} "{name}" in namespace "{namespace}"'
        return await self.request(
            "POST",
            kind.path(namespace),
            body=body,
            what=what,
            kind=kind,
            verb="create",
            answer=answer,
        )

    async def get(self, kind: Kind, namespace: str, name: str) -> Any:
        """Return one object."""
        what = f'get {kind.plural} "{name}" in namespace "{namespace}"'
        return await self.request(
            "GET", kind.path(namespace, name), what=what, kind=kind, verb="get"
        )

    async def list(self, kind: Kind, namespace: str, selector: str = "", **params: str) -> Any:
        """Return a List of the objects matching ``selector`` (one page per call)."""
        return await self.list_page(kind, namespace, selector, params)

    async def list_page(
        self,
        kind: Kind,
        namespace: str,
        selector: str,
        params: Mapping[str, str],
        *,
        retries: int | None = None,
    ) -> Any:
        """Return one page of a List (``list``, with ``retries`` overriding the client's)."""
        query = {"labelSelector": selector, **params} if selector else dict(params)
        what = f'list {kind.plural} in namespace "{namespace}"'
        return await self.request(
            "GET",
            kind.path(namespace),
            params=query,
            what=what,
            kind=kind,
            verb="list",
            retries=retries,
        )

    async def list_all(
        self, kind: Kind, namespace: str, selector: str = "", *, limit: int = 500
    ) -> dict[str, Any]:
        """Return every object matching ``selector`` as one List, following ``continue`` pages.

        Pages of ``limit`` keep each answer small (0: no limit asked, usually one answer);
        the List's ``metadata.resourceVersion`` is the last page's, from which a watch can
        start.
        """
        items: list[Any] = []
        page: dict[str, Any] = {}
        async for page in self.list_pages(kind, namespace, selector, limit=limit):
            items.extend(page.get("items") or ())
        version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        return {**page, "metadata": {"resourceVersion": version}, "items": items}

    async def list_pages(
        self, kind: Kind, namespace: str, selector: str = "", *, limit: int = 500, fields: str = ""
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield each page of the List of objects matching ``selector`` (see ``list_all``).

        For a caller that digests a page before asking for the next: a relist of 100,000
        Jobs decoded at once is ~2 GB, a page of 500 ~10 MB.
        """
        paging = {"limit": str(limit)} if limit else {}
        if fields:
            paging["fieldSelector"] = fields
        params = paging
        while True:
            page = await self.list(kind, namespace, selector, **params)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params = {**paging, "continue": token}

    async def merge_patch(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        answer: bool = True,
    ) -> Any:
        """Merge-patch an object; callers send absolute values only, so a repeat is harmless."""
        what = f'patch {kind.plural} "{name}" in namespace "{namespace}"'
        return await self.request(
            "PATCH",
            kind.path(namespace, name),
            body=patch,
            what=what,
            kind=kind,
            verb="patch",
            content_type="application/merge-patch+json",
            answer=answer,
        )

    async def delete(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        *,
        propagation: str,
        preconditions: Mapping[str, str] | None = None,
    ) -> Any:
        """Delete an object with ``propagation`` (Background, Foreground, Orphan); with
        ``preconditions`` (``{"uid": ...}``) only that very object (else Conflict)."""
        what = f'delete {kind.plural} "{name}" in namespace "{namespace}"'
        body: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": propagation,
        }
        if preconditions:
            body["preconditions"] = dict(preconditions)
        return await self.request(
            "DELETE", kind.path(namespace, name), body=body, what=what, kind=kind, verb="delete"
        )

    async def log(self, namespace: str, pod: str, container: str, tail: int | None = None) -> str:
        """Return a container's log text."""
        params = {"container": container}
        if tail is not None:
            params["tailLines"] = str(tail)
        what = f'read the log of pod "{pod}" container "{container}" in namespace "{namespace}"'
        path = POD_LOGS.path(namespace, pod)
        text = await self.request(
            "GET", path, params=params, what=what, kind=POD_LOGS, verb="get", raw=True
        )
        return str(text)

    # ---- streams ---------------------------------------------------------------------

    async def stream_bytes(
        self, path: str, params: Mapping[str, str], *, what: str, kind: Kind, verb: str
    ) -> AsyncGenerator[bytes, None]:
        """Yield the bytes of a long-lived response as they come (a followed log, byte-exact).

        Opened with the retries of any GET; a drop while streaming ends the iteration with
        the aiohttp error.
        """
        response = await self._send(
            "GET", path, params=params, what=what, kind=kind, verb=verb, stream=True
        )
        try:
            async for chunk in response.content.iter_any():
                yield chunk
        finally:
            response.release()

    async def stream_lines(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        what: str,
        kind: Kind,
        verb: str,
        opened: Callable[[], None] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """Yield the lines of a long-lived response (a watch, a followed log) as they come.

        The connection is opened with the same retries as any GET, then ``opened`` is
        called (a watch starts its silence clock there, not while connecting); once
        streaming, a drop ends the iteration with the aiohttp error, and the caller decides
        how to resume.
        """
        response = await self._send(
            "GET", path, params=params, what=what, kind=kind, verb=verb, stream=True
        )
        try:
            if opened is not None:
                opened()
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
            if buffer.strip():
                yield buffer
        finally:
            response.release()

    # ---- the one loop that sends -----------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        kind: Kind,
        verb: str,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        raw: bool = False,
        answer: bool = True,
        retries: int | None = None,
    ) -> Any:
        """Send one request (with retries) and return its JSON body, or text when ``raw``.

        With ``answer=False`` the body is read but not decoded and None is returned: on the
        submit path, decoding the server's echo of every ConfigMap costs more than sending it.
        ``retries`` overrides the client's (0: one attempt).
        """
        response = await self._send(
            method,
            path,
            what=what,
            kind=kind,
            verb=verb,
            params=params,
            body=body,
            content_type=content_type,
            retries=retries,
        )
        async with response:
            data = await response.read()
        if not answer:
            return None
        if raw:
            return data.decode("utf-8", "replace")
        return orjson.loads(data) if data else {}

    async def _send(
        self,
        method: str,
        path: str,
        *,
        what: str,
        kind: Kind,
        verb: str,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        stream: bool = False,
        retries: int | None = None,
    ) -> aiohttp.ClientResponse:
        """Return a 2xx response, retrying what is safe; raise the mapped ApiError otherwise.

        Every attempt tells ``health`` whether the server answered.
        """
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        url = self.config.host + path
        allowed = self.options.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                response = await self._once(method, url, params, data, headers, stream)
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                self.requests[verb, "none"] += 1
                self.health.failed(exc)
                if attempt >= allowed:
                    raise _no_answer(method, what, attempt + 1, exc) from None
                await asyncio.sleep(self._delay(attempt, None))
                attempt += 1
                continue
            self.health.answered()
            self.requests[verb, str(response.status)] += 1
            if response.status < 300:
                self.refusals.pop(kind.plural, None)
                return response
            error = await self._error(response, what, kind, verb)
            self.refusals[kind.plural] = str(error)
            if response.status == 401 and not self._reloaded and self.config.reload is not None:
                await self._reload()
                continue
            if not _retryable(response.status) or attempt >= allowed:
                raise error
            retry_after = _retry_after(response)
            log.debug("%s: HTTP %s, retry %d", what, response.status, attempt + 1)
            await asyncio.sleep(self._delay(attempt, retry_after))
            attempt += 1

    async def _once(
        self,
        method: str,
        url: str,
        params: Mapping[str, str] | None,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        stream: bool,
    ) -> aiohttp.ClientResponse:
        await self._bucket.take()
        opts = self.options
        timeout = (
            aiohttp.ClientTimeout(total=None, sock_connect=opts.timeout, sock_read=opts.watch_idle)
            if stream
            else aiohttp.ClientTimeout(total=opts.timeout)
        )
        session = self.session()
        if method == "GET":
            return await session.request(
                method, url, params=params, headers=headers, data=data, timeout=timeout
            )
        async with self._writes:
            response = await session.request(
                method, url, params=params, headers=headers, data=data, timeout=timeout
            )
            await response.read()  # within the write slot: the write is done when answered
            return response

    async def _error(
        self, response: aiohttp.ClientResponse, what: str, kind: Kind, verb: str
    ) -> ApiError:
        async with response:
            text = await response.text(errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            body = {"message": text[:300] or f"HTTP {response.status}"}
        if not isinstance(body, dict):
            body = {"message": str(body)[:300]}
        if response.status == 403:
            refusal = body.get("message", "forbidden")
            body = {**body, "message": f"{refusal}; grant {kind.grant(verb)} to this identity"}
        return api_error(response.status, body, what=what)

    async def _reload(self) -> None:
        """Take fresh credentials once (expired exec-plugin or service-account token)."""
        assert self.config.reload is not None
        self._reloaded = True
        self.config = await self.config.reload()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Return the seconds to wait before retry ``attempt + 1``: backoff with full jitter."""
        cap = min(self.options.max_backoff, self.options.backoff * 2**attempt)
        jittered = random.uniform(cap / 2, cap)
        return max(jittered, retry_after or 0.0)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "k8sjobs/0.1"}
        if self.config.authorization:
            headers["Authorization"] = self.config.authorization
        return headers


def _retryable(status: int) -> bool:
    # 429 means the request was not processed; 5xx may be a restart or overload. Every
    # request k8sjobs sends is safe to repeat: reads, deletes, creates (AlreadyExists is
    # then handled as adoption) and merge patches that set absolute values.
    return status == 429 or status >= 500


def _no_answer(method: str, what: str, attempts: int, exc: BaseException) -> ServerUnavailable:
    """The error for a request no attempt got an answer to; a write may have been applied."""
    message = f"no answer after {attempts} attempt(s) ({type(exc).__name__})"
    if method != "GET":
        # The connection may have closed after the server applied it: say so, not "failed".
        message += "; the server may have applied it all the same, so read before writing again"
    error = ServerUnavailable(0, {"message": message}, what=what)
    error.last_error = exc  # what ``reach.explain`` tells a person
    return error


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return min(float(value), 60.0) if value else None
    except ValueError:
        return None
