"""A real OCI registry for tests: Debian's ``docker-registry`` (CNCF Distribution 2.8).

``start_registry`` launches one on 127.0.0.1 with a random free port and a temporary storage
directory, in one of several configurations (plain, htpasswd basic auth, bearer tokens from a
small token server, TLS from a throw-away CA, delete enabled). It is synchronous so that
session-scoped pytest fixtures can share one process across event loops; ``running_registry``
is the async context manager for code that lives inside an event loop.

``FaultProxy`` sits between a client and the registry and injects faults per request:
a connection dropped mid-upload, a 5xx status, a stall, or a reply lost after the registry
applied the request, so tests can show that retries neither corrupt nor lose data.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from aiohttp import ClientSession, ClientTimeout, web

from ._tls import make_certificates

__all__ = [
    "REGISTRY_BINARY",
    "Fault",
    "FaultProxy",
    "RegistryServer",
    "registry_available",
    "registry_process",
    "running_registry",
    "serve_locally",
    "start_registry",
]

REGISTRY_BINARY = os.environ.get("K8SJOBS_REGISTRY_BINARY", "/usr/bin/docker-registry")
AuthMode = Literal["none", "basic", "token"]


def registry_available() -> bool:
    """Return True when the docker-registry binary (and openssl for TLS) can be run."""
    return os.access(REGISTRY_BINARY, os.X_OK) and shutil.which("openssl") is not None


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RegistryServer:
    """A running registry process and what a client needs to reach it."""

    host: str
    port: int
    workdir: Path
    tls: bool = False
    ca_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    token_server: _TokenServer | None = field(default=None, repr=False)

    @property
    def location(self) -> str:
        """Return the store location string (``host:port``) for ``open_store``."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """Return the base URL of the registry."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop the registry (and its token server) and remove its storage."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.token_server is not None:
            self.token_server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_registry(
    *,
    auth: AuthMode = "none",
    tls: bool = False,
    delete: bool = True,
    username: str = "k8sjobs",
    password: str | None = None,
) -> RegistryServer:
    """Start a docker-registry process and return once it answers ``/v2/``."""
    if not registry_available():
        raise RuntimeError(f"{REGISTRY_BINARY} is not installed; apt-get install docker-registry")
    workdir = Path(tempfile.mkdtemp(prefix="k8sjobs-registry-"))
    server = RegistryServer(host="127.0.0.1", port=free_port(), workdir=workdir, tls=tls)
    try:
        config = _base_config(workdir, server.port, delete)
        if tls:
            server.ca_file, cert, key = _make_tls(workdir)
            config["http"]["tls"] = {"certificate": cert, "key": key}
        if auth != "none":
            server.username = username
            server.password = password or secrets.token_urlsafe(12)
            config["auth"] = _auth_config(server, auth)
        config_path = workdir / "config.yml"
        # JSON is valid YAML, which spares a YAML dependency here.
        config_path.write_text(json.dumps(config))
        log = (workdir / "registry.log").open("wb")
        server.process = subprocess.Popen(
            [REGISTRY_BINARY, "serve", str(config_path)], stdout=log, stderr=subprocess.STDOUT
        )
        _wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.asynccontextmanager
async def running_registry(
    *, auth: AuthMode = "none", tls: bool = False, delete: bool = True
) -> AsyncIterator[RegistryServer]:
    """Run a registry for the duration of an ``async with`` block."""
    server = await asyncio.to_thread(start_registry, auth=auth, tls=tls, delete=delete)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def _base_config(workdir: Path, port: int, delete: bool) -> dict[str, Any]:
    storage = workdir / "storage"
    storage.mkdir()
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": delete}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
    }


def _auth_config(server: RegistryServer, auth: AuthMode) -> dict[str, object]:
    assert server.username is not None and server.password is not None
    if auth == "basic":
        htpasswd = server.workdir / "htpasswd"
        _write_htpasswd(htpasswd, server.username, server.password)
        return {"htpasswd": {"realm": "k8sjobs-test", "path": str(htpasswd)}}
    key, cert = _make_signing_key(server.workdir)
    token = _TokenServer(key, cert, server.username, server.password)
    token.start()
    server.token_server = token
    return {
        "token": {
            "realm": f"{token.url}/token",
            "service": _TokenServer.SERVICE,
            "issuer": _TokenServer.ISSUER,
            "rootcertbundle": str(cert),
        }
    }


def _write_htpasswd(path: Path, username: str, password: str) -> None:
    # Distribution accepts bcrypt entries only; htpasswd -B makes them.
    line = subprocess.run(
        ["htpasswd", "-Bbn", username, password], check=True, capture_output=True, text=True
    ).stdout.strip()
    path.write_text(line + "\n")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _make_tls(workdir: Path) -> tuple[str, str, str]:
    """Make a throw-away CA and a server certificate for 127.0.0.1; return (ca, cert, key)."""
    ca, cert, key = make_certificates(workdir / "tls")
    return str(ca), str(cert), str(key)


def _make_signing_key(workdir: Path) -> tuple[Path, Path]:
    key, crt = workdir / "token.key", workdir / "token.crt"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(crt),
        "-days",
        "2",
        "-subj",
        "/CN=k8sjobs token issuer",
    )
    return key, crt


def _wait_ready(server: RegistryServer, timeout: float = 15.0) -> None:
    context = ssl.create_default_context(cafile=server.ca_file) if server.tls else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.process is not None
        if server.process.poll() is not None:
            log = (server.workdir / "registry.log").read_text(errors="replace")
            raise RuntimeError(f"docker-registry exited at start:\n{log}")
        try:
            urllib.request.urlopen(f"{server.url}/v2/", timeout=1, context=context)
            return
        except urllib.error.HTTPError:
            return  # 401 means it is up and asking for credentials
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not answer on {server.url} within {timeout} s")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TokenServer:
    """A minimal Docker token server: checks basic credentials, signs RS256 JWTs with openssl.

    It grants every scope asked for to the one known user, and pull-only anonymous tokens are
    refused, which is enough to exercise a client's bearer flow against a real registry.
    """

    SERVICE = "k8sjobs-test-registry"
    ISSUER = "k8sjobs-test-issuer"

    def __init__(self, key: Path, cert: Path, username: str, password: str) -> None:
        self._key, self.username, self._password = key, username, password
        der = subprocess.run(
            ["openssl", "x509", "-in", str(cert), "-outform", "DER"],
            check=True,
            capture_output=True,
        ).stdout
        self._x5c = base64.b64encode(der).decode()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.requests: list[str] = []

    def start(self) -> None:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _authorized(self, header: str | None) -> bool:
        expected = base64.b64encode(f"{self.username}:{self._password}".encode()).decode()
        return header == f"Basic {expected}"

    def issue(self, scopes: list[str]) -> str:
        now = int(time.time())
        access = []
        for scope in scopes:
            kind, _, name = scope.partition(":")
            name, _, actions = name.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        claims = {
            "iss": self.ISSUER,
            "sub": self.username,
            "aud": self.SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self._key)],
            input=signing_input.encode(),
            check=True,
            capture_output=True,
        ).stdout
        return f"{signing_input}.{_b64url(signature)}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlparse

                query = parse_qs(urlparse(self.path).query)
                server.requests.append(self.path)
                if not server._authorized(self.headers.get("Authorization")):
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": server.issue(query.get("scope", []))}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve_locally(
    handler: Handler, *, client_max_size: int = 1024**2, shutdown_timeout: float = 60.0
) -> tuple[web.AppRunner, int]:
    """Serve every method and path with ``handler`` on 127.0.0.1, at a port the system picks
    (so parallel tests never collide); return the runner (``cleanup()`` stops it) and the port.
    The test servers here and in the tests (fault proxy, hostile registry) start this way."""
    app = web.Application(client_max_size=client_max_size)
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, int(sock.getsockname()[1])


FaultKind = Literal["drop", "status", "stall", "lose_reply"]


@dataclass
class Fault:
    """One fault to inject into the next matching request(s).

    ``drop`` closes the connection after ``after_bytes`` of the request body (mid-upload);
    ``status`` answers with ``status`` without forwarding; ``stall`` holds the request
    for ``stall_seconds`` and then closes the connection; ``lose_reply`` forwards the whole
    request to the registry, reads its answer, and closes the connection without replying
    (the request took effect, the client cannot know). The first ``skip`` matching requests
    pass untouched, so a test can aim at the n-th request of an operation.
    """

    kind: FaultKind
    method: str = "*"
    path_pattern: str = ".*"
    times: int = 1
    after_bytes: int = 0
    status: int = 503
    stall_seconds: float = 30.0
    skip: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times > 0
            and self.method in ("*", method)
            and re.search(self.path_pattern, path) is not None
        )

    def take(self) -> bool:
        """Count one matching request; return True when the fault fires on it."""
        if self.skip > 0:
            self.skip -= 1
            return False
        self.times -= 1
        return True


class FaultProxy:
    """An HTTP reverse proxy in front of a registry that injects ``Fault``s per request."""

    _HOP_HEADERS = frozenset({"transfer-encoding", "connection", "keep-alive", "content-length"})

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, int]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    @property
    def location(self) -> str:
        return f"127.0.0.1:{self.port}"

    def inject(self, fault: Fault) -> Fault:
        """Add a fault; it fires on the next ``fault.times`` matching requests."""
        self.faults.append(fault)
        return fault

    async def __aenter__(self) -> FaultProxy:
        self._session = ClientSession(timeout=ClientTimeout(total=None, sock_read=60))
        self._runner, self.port = await serve_locally(self._handle, client_max_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._session is not None
        await self._runner.cleanup()
        await self._session.close()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.matches(method, path) and fault.take():
                return fault
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fault = self._take_fault(request.method, request.path_qs)
        self.log.append((request.method, request.path_qs, 0 if fault is None else 1))
        if fault is not None and fault.kind == "status":
            return web.Response(status=fault.status, text="injected fault")
        if fault is not None and fault.kind == "stall":
            await asyncio.sleep(fault.stall_seconds)
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("stalled")
        if fault is not None and fault.kind == "lose_reply":
            await self._forward(request, self._body(request, None), reply=False)
            assert request.transport is not None
            request.transport.abort()
            raise ConnectionResetError("injected lost reply")
        body = self._body(request, fault)
        return await self._forward(request, body)

    async def _body(self, request: web.Request, fault: Fault | None) -> AsyncIterator[bytes]:
        sent = 0
        async for chunk in request.content.iter_chunked(256 * 1024):
            if fault is not None and sent + len(chunk) > fault.after_bytes:
                assert request.transport is not None
                request.transport.abort()
                raise ConnectionResetError("injected drop mid-upload")
            sent += len(chunk)
            yield chunk

    async def _forward(
        self, request: web.Request, body: AsyncIterator[bytes], *, reply: bool = True
    ) -> web.StreamResponse:
        """Send the request on to the registry and stream its answer back; with ``reply``
        False, read the registry's whole answer (so it has surely applied the request)
        and send nothing back."""
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in self._HOP_HEADERS}
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        data = body if request.body_exists else None
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=data,
            allow_redirects=False,
        ) as upstream:
            if not reply:
                await upstream.read()
                return web.StreamResponse(status=upstream.status)
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in self._HOP_HEADERS:
                    response.headers.add(key, value)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(256 * 1024):
                await response.write(chunk)
            await response.write_eof()
            return response


@contextlib.contextmanager
def registry_process(**kwargs: object) -> Iterator[RegistryServer]:
    """Run a registry for the duration of a ``with`` block (sync fixtures)."""
    server = start_registry(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
