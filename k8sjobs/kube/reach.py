"""Whether the API server can be used, and what to tell a person when it cannot.

Two moments. At a session's start, ``probe`` sends one LIST of Jobs (``limit=1``) within a
bound the user sets (``connect_timeout``): it proves that the address answers, that TLS
holds, that the credentials are taken (401) and that the identity may list Jobs (403); a
failure is one ``ClusterUnreachable`` line naming the server, the cause and the fix, never
a watch retrying in silence. After a good start, ``ApiHealth`` follows every request the
client sends: the first one that gets no answer starts an outage (a WARNING, once), any
answer ends it (INFO), and an outage longer than ``outage_timeout`` gives up: the backend
stops waiting and says so, while the steps keep running on the cluster. Nothing here fails
or loses a step: an unreachable server says nothing about the steps.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import aiohttp

from ..errors import ApiError, ClusterUnreachable, Forbidden, ServerUnavailable

__all__ = ["ApiHealth", "explain", "probe"]

log = logging.getLogger("k8sjobs.kube")

_FIX_NETWORK = (
    "check that the cluster is running and that the server address in the kubeconfig is "
    "the cluster's"
)


def explain(exc: BaseException, *, timeout: float) -> tuple[str, str]:
    """Return (cause, fix) for a request that failed with ``exc``, in a person's words."""
    cause = getattr(exc, "last_error", None)
    if isinstance(exc, ServerUnavailable) and isinstance(cause, BaseException):
        return explain(cause, timeout=timeout)
    if isinstance(exc, ApiError):
        if exc.status == 401:
            return (
                "it refused the credentials (401 Unauthorized)",
                "the token or client certificate of the kubeconfig's user is wrong or has "
                "expired: get fresh credentials for this context",
            )
        if isinstance(exc, Forbidden):
            return (
                f"it forbids this identity to {exc}",
                "`k8sjobs rbac` prints a Role and RoleBinding that grant what k8sjobs needs",
            )
        return f"it answered {exc}", "check the server's health (kubectl get --raw /readyz)"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (
            f"its TLS certificate was not accepted ({exc.certificate_error})",
            "check certificate-authority-data in the kubeconfig (or that the address is the "
            "cluster's)",
        )
    if isinstance(exc, (aiohttp.ClientSSLError, ssl.SSLError)):
        return (
            f"the TLS handshake failed ({_first_line(exc)})",
            "check that the server speaks HTTPS at this address and the kubeconfig's certificates",
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "its host name does not resolve", _FIX_NETWORK
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "the connection was refused (nothing listens there)", _FIX_NETWORK
        return f"it cannot be connected to ({exc.os_error.strerror or exc})", _FIX_NETWORK
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "it closed the connection without answering", _FIX_NETWORK
    if isinstance(exc, TimeoutError):
        return (
            f"it sent no answer within {timeout:g} s",
            "check the network path to it (VPN, firewall, proxy), or allow more time "
            "(connect_timeout, --connect-timeout)",
        )
    return f"{type(exc).__name__}: {_first_line(exc)}", _FIX_NETWORK


def unreachable(
    server: str, where: str, exc: BaseException, *, timeout: float
) -> ClusterUnreachable:
    """Return the one-line error for a server that cannot be used at a session's start."""
    cause, fix = explain(exc, timeout=timeout)
    origin = f" ({where})" if where else ""
    return ClusterUnreachable(
        f"Kubernetes API server {server}{origin} cannot be used: {cause}; {fix}.", server=server
    )


async def probe(
    list_jobs: Callable[[], Awaitable[object]], server: str, *, timeout: float, where: str = ""
) -> None:
    """Return once ``list_jobs()`` (one LIST of Jobs, one attempt) succeeds within ``timeout`` s.

    Refusals that retrying cannot cure (TLS, 401, 403) are raised at once; a refused or
    unanswered connection is retried (quickly: a server restarting answers within the bound)
    until ``timeout``. Raises ``ClusterUnreachable`` naming ``server`` (and ``where`` its
    address came from).
    """
    last: BaseException = TimeoutError()
    delay = 0.1
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise unreachable(server, where, last, timeout=timeout)
        try:
            async with asyncio.timeout(left):
                await list_jobs()
            return
        except (ApiError, aiohttp.ClientError, TimeoutError, ssl.SSLError) as exc:
            if not _retryable(exc):
                raise unreachable(server, where, exc, timeout=timeout) from None
            # A refusal seen earlier says more than the deadline that cut the last attempt.
            if not isinstance(exc, TimeoutError) or isinstance(last, TimeoutError):
                last = exc
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 1.0)


def _retryable(exc: BaseException) -> bool:
    cause = getattr(exc, "last_error", None)
    if isinstance(cause, BaseException):
        exc = cause
    if isinstance(exc, (aiohttp.ClientSSLError, ssl.SSLError)):
        return False
    if isinstance(exc, ApiError):
        return exc.status == 0 or exc.status == 429 or exc.status >= 500
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class ApiHealth:
    """Whether the API server answers, as every request of one client finds out (no probing).

    ``failed`` is called for a request that got no answer, ``answered`` for one that got any
    HTTP answer. The first failure after an answer starts an outage: one WARNING naming the
    server and the cause, ``since`` set, listeners called; the next answer ends it (INFO,
    listeners called). An outage longer than ``outage_timeout`` seconds (None: never) calls
    ``on_give_up`` once with the ``ClusterUnreachable`` to raise.
    """

    def __init__(self, server: str, outage_timeout: float | None) -> None:
        self.server = server
        self.outage_timeout = outage_timeout
        #: Off until the session's start has reached the server (``probe`` says why not).
        self.armed = False
        self.since: datetime | None = None
        self.cause = ""
        self.outages = 0
        #: Seconds the ended outages lasted (``unreachable_seconds`` adds the current one).
        self.outage_seconds = 0.0
        self.given_up: ClusterUnreachable | None = None
        self.on_give_up: Callable[[ClusterUnreachable], None] | None = None
        self._listeners: list[Callable[[ApiHealth], None]] = []
        self._back: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def reachable(self) -> bool:
        """Return whether the last request got an answer (True before any request)."""
        return self.since is None

    def unreachable_seconds(self) -> float:
        """Return the seconds the server was unreachable this session, the current outage too."""
        if self.since is None:
            return self.outage_seconds
        return self.outage_seconds + (datetime.now(UTC) - self.since).total_seconds()

    def notice(self) -> str | None:
        """Return the line a live display shows during an outage (None while reachable)."""
        if self.since is None:
            return None
        local = self.since.astimezone().strftime("%H:%M:%S")
        return f"API server unreachable since {local}, retrying ({self.cause})"

    def add_listener(self, listener: Callable[[ApiHealth], None]) -> None:
        """Call ``listener(health)`` whenever an outage starts or ends."""
        self._listeners.append(listener)

    def answered(self) -> None:
        """Take note of an HTTP answer (called on every one: O(1) while reachable)."""
        if self.since is None:
            return
        lasted = (datetime.now(UTC) - self.since).total_seconds()
        self.outage_seconds += lasted
        log.info(
            "Kubernetes API server %s answers again (unreachable for %.0f s)", self.server, lasted
        )
        self.since = None
        self.cause = ""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._back is not None:
            self._back.set()
            self._back = None
        self._tell()

    def failed(self, exc: BaseException) -> None:
        """Take note of a request that got no answer (``exc``: why)."""
        if not self.armed or self.since is not None or self.given_up is not None:
            return
        self.since = datetime.now(UTC)
        self.cause, _fix = explain(exc, timeout=0)
        self.outages += 1
        bound = (
            f"giving up after {self.outage_timeout:g} s (outage_timeout)"
            if self.outage_timeout is not None
            else "for as long as it takes"
        )
        log.warning(
            "Kubernetes API server %s is unreachable (%s); retrying, %s. The steps keep "
            "running on the cluster.",
            self.server,
            self.cause,
            bound,
        )
        if self.outage_timeout is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.outage_timeout, self._give_up)
        self._tell()

    async def wait_reachable(self) -> None:
        """Return once the server answers again; raise ``ClusterUnreachable`` on giving up."""
        while self.since is not None:
            if self.given_up is not None:
                raise self.given_up
            if self._back is None:
                self._back = asyncio.Event()
            await self._back.wait()
        if self.given_up is not None:
            raise self.given_up

    def _give_up(self) -> None:
        self._timer = None
        since = self.since.astimezone().strftime("%H:%M:%S") if self.since else "?"
        self.given_up = ClusterUnreachable(
            f"Kubernetes API server {self.server} unreachable since {since} ({self.cause}), "
            f"longer than outage_timeout ({self.outage_timeout:g} s): stopped waiting. The "
            "steps were not stopped; `k8sjobs status` shows them once the server answers.",
            server=self.server,
        )
        log.error("%s", self.given_up)
        if self._back is not None:
            self._back.set()
        if self.on_give_up is not None:
            self.on_give_up(self.given_up)
        self._tell()

    def _tell(self) -> None:
        for listener in list(self._listeners):
            listener(self)
