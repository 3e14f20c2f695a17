"""A registry that says what a test tells it to: a real HTTP server (aiohttp, 127.0.0.1)
serving manifests and blobs from memory, in pieces of ``chunk`` bytes, recording every
request. The artifact tests use it where a real registry would never misbehave: fuzzed or
oversized manifests, hostile digests, bodies that trickle or stall, echoed credentials,
redirects to storage hosts (which may challenge), loops and odd schemes, uploads answered
without a Location, manifests served under any Content-Type."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from k8sjobs.artifacts._media import EMPTY_CONFIG_DESCRIPTOR, LAYER_TAR, MANIFEST, TITLE
from k8sjobs.testing.registry import serve_locally


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_for(layers: list[dict[str, Any]]) -> bytes:
    """An ORAS artifact manifest (bytes) holding ``layers`` (JSON descriptors)."""
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": EMPTY_CONFIG_DESCRIPTOR.to_json(),
            "layers": layers,
        }
    ).encode()


def file_layer(title: str, data: bytes, media_type: str = LAYER_TAR) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": digest_of(data),
        "size": len(data),
        "annotations": {TITLE: title},
    }


@dataclass
class HostileRegistry:
    """Serves ``manifests`` (by tag or digest) and ``blobs`` (by digest) under any repository."""

    manifests: dict[str, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    chunk: int = 1 << 20  # body piece size; each piece is flushed on its own
    send_length: bool = True  # Content-Length, else chunked transfer coding
    stall_after: int | None = None  # send this many bytes of a blob, then stop sending
    basic_user: tuple[str, str] | None = None  # require these credentials (basic auth)
    echo_authorization: bool = False  # answer 400 with the Authorization header in the body
    tags_next: str | None = None  # answer tags/list with one tag and a Link to this URL
    challenge: str | None = None  # answer every request 401 with this WWW-Authenticate
    refuse: int | None = None  # answer every request with this status (a 403, say)
    blob_redirect: str | None = None  # answer blob GETs 307 to this ("{digest}" filled in)
    redirect_status: int = 307
    upload_location: bool = True  # False: POST blobs/uploads/ answers 202 with no Location
    content_types: dict[str, str] = field(default_factory=dict)  # a manifest's, by tag
    requests: list[tuple[str, str]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # every Authorization received
    port: int = 0
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    @property
    def location(self) -> str:
        return f"127.0.0.1:{self.port}"

    def put(
        self,
        tag: str,
        manifest: bytes,
        blobs: dict[str, bytes] | None = None,
        content_type: str | None = None,
    ) -> str:
        """Serve ``manifest`` under ``tag`` and its digest (as ``content_type``, default the
        OCI manifest's); return the digest."""
        digest = digest_of(manifest)
        self.manifests[tag] = self.manifests[digest] = manifest
        if content_type is not None:
            self.content_types[tag] = self.content_types[digest] = content_type
        for data in (blobs or {}).values():
            self.blobs[digest_of(data)] = data
        return digest

    async def __aenter__(self) -> HostileRegistry:
        self._runner, self.port = await serve_locally(self._handle, shutdown_timeout=0.1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        auth = request.headers.get("Authorization", "")
        if auth:
            self.authorizations.append(auth)
        if self.basic_user is not None:
            expected = "Basic " + base64.b64encode(":".join(self.basic_user).encode()).decode()
            if auth != expected:
                return web.Response(
                    status=401, headers={"WWW-Authenticate": 'Basic realm="hostile"'}
                )
        if self.challenge is not None:
            return web.Response(status=401, headers={"WWW-Authenticate": self.challenge})
        if self.refuse is not None:
            return web.Response(status=self.refuse, text="AccessDenied")
        if not self.upload_location and request.method == "POST":
            return web.Response(status=202)  # no Location: where would the upload go on?
        if self.echo_authorization:
            body = {"errors": [{"code": "DENIED", "message": f"bad request with {auth}"}]}
            return web.json_response(body, status=400)
        if request.path.endswith("/tags/list"):
            link = {"Link": f'<{self.tags_next}>; rel="next"'} if self.tags_next else {}
            return web.json_response({"tags": [f"t{self.port}"]}, headers=link)
        parts = request.path.split("/")
        kind, key = parts[-2], parts[-1]
        if kind == "blobs" and self.blob_redirect is not None and request.method == "GET":
            location = self.blob_redirect.format(digest=key)
            return web.Response(status=self.redirect_status, headers={"Location": location})
        store = self.manifests if kind == "manifests" else self.blobs
        if kind not in ("manifests", "blobs") or key not in store:
            return web.json_response({"errors": [{"code": "UNKNOWN"}]}, status=404)
        data = store[key]
        default = MANIFEST if kind == "manifests" else "application/octet-stream"
        headers = {"Content-Type": self.content_types.get(key, default)}
        if kind == "manifests":
            headers["Docker-Content-Digest"] = digest_of(data)
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(data))})
        return await self._send(request, data, headers, stall=kind == "blobs")

    async def _send(
        self, request: web.Request, data: bytes, headers: dict[str, str], stall: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=headers)
        if self.send_length:
            resp.content_length = len(data)
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        end = len(data) if not stall or self.stall_after is None else self.stall_after
        for start in range(0, end, self.chunk):
            await resp.write(data[start : min(start + self.chunk, end)])
            await asyncio.sleep(0)  # let each piece go out on its own
        if end < len(data):
            self.stalled.set()
            await asyncio.Event().wait()  # until the client gives up or the server stops
        await resp.write_eof()
        return resp
