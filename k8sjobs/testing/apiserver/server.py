"""The HTTP face of the fake cluster: the Kubernetes REST API over aiohttp.

One catch-all route parses the URL into (verb, resource, namespace, name, subresource), the
way the real API server's request-info resolver does, then calls the store. Every request is
counted (tests assert on reads while waiting), may be delayed or failed by `Faults`, and
every error leaves as a `Status` body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import yaml
from aiohttp import web

from .._faults import Faults, RequestKey, RequestLog
from . import apply as _apply
from . import catalog as _catalog
from . import decoding as _decoding
from . import errors as _errors
from . import events as _events
from . import listoptions as _listoptions
from . import patch as _patch
from . import requests as _requests
from . import selectors as _selectors
from . import table as _table
from .crd import CRD_PLURAL, CrdController, check_unknown_fields
from .discovery import DISCOVERY
from .errors import ApiError
from .eviction import evict, eviction_grace
from .eviction import success_status as eviction_status
from .exec import ExecHost, ExecSessions, serve_exec
from .namespaces import admit_delete
from .resources import Resource
from .store import Obj, Store, Watcher, copy_obj

_JSON = "application/json"
_APPLY = "application/apply-patch+yaml"
_JSON_PATCH = "application/json-patch+json"
_DEFAULT_WATCH_TIMEOUT = 1800.0
# How often a quiet watch looks whether its client has gone (aiohttp tells no handler).
_LIVENESS = 0.25
# http.DefaultMaxHeaderBytes, plus the 4 KiB Go's server reads beyond it.
_MAX_HEADER_BYTES = (1 << 20) + 4096


class LogSource(Protocol):
    """Where pod logs come from (the kubelet)."""

    def read_log(self, namespace: str, pod: str, container: str, previous: bool) -> bytes:
        """Return the container's log so far."""

    def log_running(self, namespace: str, pod: str, container: str) -> bool:
        """Return whether the container may still write to its log."""


class ApiServer:
    """An aiohttp application serving the store through the Kubernetes REST API."""

    def __init__(
        self,
        store: Store,
        *,
        faults: Faults,
        requests: RequestLog,
        logs: LogSource | None = None,
        execs: ExecHost | None = None,
        token: str | None = None,
        bookmark_interval: float = 5.0,
    ) -> None:
        self.store = store
        self.faults = faults
        self.requests = requests
        self.logs = logs
        self.execs = execs
        #: The open pods/exec streams (exec.py), which a fault can cut.
        self.exec_sessions = ExecSessions()
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._discovery: dict[str, Any] = DISCOVERY
        self.crds = CrdController(store)

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> int:
        """Start serving; return the bound port (random unless `port` is given)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=0.5,
            # Go's net/http (kube-apiserver) takes 1 MiB of request line and headers, in any
            # number of lines; aiohttp's 8 KiB and 128 lines are raised past it, and the
            # total is checked per request (`_headers_too_large`).
            max_line_size=2 * _MAX_HEADER_BYTES,
            max_field_size=2 * _MAX_HEADER_BYTES,
            max_headers=_MAX_HEADER_BYTES // 4,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        return self.port

    async def graceful_shutdown(self, drain: float) -> None:
        """Shut down the way kube-apiserver does on SIGTERM, measured on v1.36.

        It stops listening at once (new connections are refused; idle keep-alive ones are
        closed), holds every open watch open and silent for `drain` seconds (no events, no
        bookmarks), then ends them cleanly (HTTP 200, no ERROR event) and stops.
        """
        assert self._runner is not None and self._runner.server is not None
        for site in list(self._runner.sites):
            await site.stop()
        await asyncio.sleep(0)  # let requests already accepted start being handled
        self._runner.server.pre_shutdown()
        self.store.silence_watches()
        await asyncio.sleep(drain)
        await self.stop()

    async def stop(self) -> None:
        """Stop serving, ending open watches and exec streams first so that shutdown does not
        wait on them."""
        self.store.drop_watches()
        self.exec_sessions.cut()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if _headers_too_large(request):
            return web.Response(
                status=431,
                text="431 Request Header Fields Too Large",
                headers={"Connection": "close"},
            )
        try:
            self._authenticate(request)
            return await self._dispatch(request)
        except ApiError as error:
            return _status_response(error)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _status_response(_errors.bad_request(f"the body is not valid JSON: {exc}"))

    def _authenticate(self, request: web.Request) -> None:
        if self.token is None:
            return
        if request.headers.get("Authorization", "") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        document = self._document(path)
        if document is not None:
            return _json_response(document)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        resource, namespace, name, sub = _parse(path, self.store.resources)
        # An exec's GET (WebSocket) or POST (SPDY) is audited, and authorized, as a create.
        verb = "create" if sub == "exec" else _verb(request.method, name, request.query)
        if sub and verb not in _SUBRESOURCE_VERBS[sub]:
            raise _method_not_allowed()
        self.requests.record(RequestKey(verb, resource.plural, sub))
        delay = self.faults.delay_for(verb)
        if delay:
            await asyncio.sleep(delay)
        injected = self.faults.error_for(verb, resource.plural)
        if injected is not None:
            raise injected
        handler = getattr(self, f"_{verb}")
        result: web.StreamResponse = await handler(request, resource, namespace, name, sub)
        return result

    def _document(self, path: str) -> Any:
        """Return the discovery or OpenAPI document at `path`, or None for a REST path."""
        if path.count("/") <= 3 and path.startswith("/apis"):
            document = _catalog.discovery(path, self.store.resources)
            if document is not None:
                return document
        if path.startswith("/openapi/v3"):
            return _catalog.openapi_v3(path, self.store.resources)
        return self._discovery.get(path)

    # ------------------------------------------------------------------ verbs

    async def _get(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        if sub == "log":
            return await self._log(request, ns, name)
        obj = self.store.require(res.plural, ns, name)
        if _table.wants_table(request.headers.get("Accept", "")):
            return _json_response(
                _as_table(request, res, [obj], obj["metadata"]["resourceVersion"])
            )
        return _json_response(_shown(res, obj))

    async def _list(
        self, request: web.Request, res: Resource, ns: str | None, name: str, sub: str
    ) -> web.StreamResponse:
        query = request.query
        _listoptions.send_initial_events(query, watch=False)
        matches = _selectors.from_query(query, _selector_key(res))
        _requests.timeout_seconds(query, 0.0)  # only checked: a list ends when it is written
        limit = _decoding.int_param(query, "limit") or 0
        start, list_rv = "", self.store.rv
        if token := query.get("continue"):
            start, list_rv = self._decode_continue(token)
        only = _selectors.exact_name(query.get("fieldSelector"))
        items: list[Obj] = []
        next_key = last_key = ""
        for obj in self._candidates(res, ns, only, start):
            key = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
            if key <= start or not matches(obj):
                continue
            if limit and len(items) == limit:
                next_key = last_key
                break
            items.append(_shown(res, obj))
            last_key = key
        metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if next_key:
            metadata["continue"] = _encode_continue(next_key, list_rv)
            # Unknown with a selector, and then left out, as a real API server does.
            if not query.get("labelSelector") and not query.get("fieldSelector"):
                metadata["remainingItemCount"] = (
                    self.store.count_after(res.plural, ns, next_key[len(ns) + 1 :])
                    if ns is not None
                    else sum(1 for _ in self._candidates(res, ns, only, next_key))
                )
        if _table.wants_table(request.headers.get("Accept", "")):
            cont = metadata.get("continue", "")
            return _json_response(_as_table(request, res, items, str(list_rv), cont))
        body = {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": metadata,
            "items": items,
        }
        return _json_response(body)

    def _candidates(
        self, res: Resource, ns: str | None, only: str | None, after: str = ""
    ) -> Iterator[Obj]:
        """Yield the objects a list walks, in key order; in one namespace, from the first
        key after ``after`` (found by bisection: a page costs its own objects, not all)."""
        if only is not None and ns is not None:
            obj = self.store.get(res.plural, ns, only)
            yield from [obj] if obj is not None else []
            return
        if ns is None or (after and not after.startswith(f"{ns}/")):
            yield from list(self.store.iter(res.plural, ns))
            return
        yield from self.store.iter(res.plural, ns, after=after[len(ns) + 1 :])

    def _decode_continue(self, token: str) -> tuple[str, int]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            start, rv = str(data["start"]), int(data["rv"])
        except (ValueError, KeyError, TypeError) as exc:
            raise _errors.bad_request(f"continue key is not valid: {exc}") from exc
        if rv < self.store.floor:
            raise _errors.gone(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results. "
                "Continuing with the provided token results in an inconsistent list - objects "
                "that were created, modified, or deleted between the time the first chunk was "
                "returned and now may show up in the list."
            )
        return start, rv

    async def _watch(
        self, request: web.Request, res: Resource, ns: str | None, name: str, sub: str
    ) -> web.StreamResponse:
        query = request.query
        matches = _selectors.from_query(query, _selector_key(res))
        raw_rv = query.get("resourceVersion", "")
        initial = _listoptions.send_initial_events(query, watch=True)
        since = None if initial else _requests.watch_resource_version(raw_rv)
        if initial is False and since is None:
            since = self.store.rv  # sendInitialEvents=false: only what happens from now on
        _decoding.int_param(query, "limit")  # only checked: a watch sends what changes
        bookmarks = _requests.truthy(query.get("allowWatchBookmarks"))
        timeout = _requests.timeout_seconds(query, _DEFAULT_WATCH_TIMEOUT)
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            watcher = self.store.watch(res.plural, ns, matches, since)
            snapshot = (len(watcher.pending), self.store.rv)
            if _table.wants_table(request.headers.get("Accept", "")):
                include = query.get("includeObject", "Metadata")
                watcher.encode = _table.watch_encoder(res, include)
            elif _is_view(res):
                watcher.encode = _view_line
        except ApiError as error:
            line = json.dumps({"type": "ERROR", "object": error.status()}).encode() + b"\n"
            await response.write(line)
            return response
        try:
            if initial:
                # The snapshot's ADDED events, then its end at the snapshot's resourceVersion.
                await self._send_pending(response, watcher, snapshot[0])
                await response.write(self._bookmark(res, initial_end=True, rv=snapshot[1]))
            await self._stream(request, response, watcher, (res, timeout, bookmarks))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
        return response

    async def _send_pending(
        self, response: web.StreamResponse, watcher: Any, count: int | None = None
    ) -> None:
        """Send the watcher's queued events (only the first `count` when given)."""
        left = len(watcher.pending) if count is None else count
        while watcher.pending and left > 0:
            chunk: list[bytes] = []
            while watcher.pending and len(chunk) < min(256, left):
                event = watcher.pending.popleft()
                chunk.append(event.line() if watcher.encode is None else watcher.encode(event))
                event.sent()
            left -= len(chunk)
            await response.write(b"".join(chunk))

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        watcher: Any,
        how: tuple[Resource, float, bool],
    ) -> None:
        res, timeout, bookmarks = how
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval
        while not _client_gone(request):
            if watcher.silenced:
                await _until_closed(request, watcher, deadline)
                return
            await self._send_pending(response, watcher)
            if watcher.closed:
                return
            now = time.monotonic()
            if now >= deadline:
                return
            if bookmarks and now >= next_bookmark and not watcher.silenced:
                await response.write(self._bookmark(res))
                next_bookmark = now + self.bookmark_interval
            watcher.wakeup.clear()
            wait = min(deadline, next_bookmark if bookmarks else deadline, now + _LIVENESS) - now
            try:  # asyncio.timeout: wait_for (3.11) can drop the server's cancellation
                async with asyncio.timeout(max(wait, 0.001)):
                    await watcher.wakeup.wait()
            except TimeoutError:
                continue

    def _bookmark(self, res: Resource, *, initial_end: bool = False, rv: int = 0) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(rv or self.store.rv)}
        if initial_end:
            metadata["annotations"] = {_listoptions.INITIAL_EVENTS_END: "true"}
        obj = {"kind": res.kind, "apiVersion": res.api_version, "metadata": metadata}
        return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"

    async def _create(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        if res.plural == "pods" and sub == "exec":
            return await self._exec(request, ns, name)
        raw = await _read_object(request, res, ns)
        if _is_view(res):
            _events.check_v1_create(raw)
        body = _accepted(res, raw)
        if res.plural == "pods" and sub == "eviction":
            evict(self.store, ns, name, eviction_grace(body, name))
            return _json_response(eviction_status(), 201)
        _check_kind(res, body)
        if sub:
            raise _method_not_allowed()
        dry_run = _dry_run(request, "CreateOptions")
        warnings = _field_warnings(request, res, body)
        _track_fields(request, res, None, body, sub)
        created = self.store.create(res.plural, ns or "", body, dry_run=dry_run)
        return _warn(_json_response(_shown(res, created), 201), warnings)

    async def _update(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        body = _accepted(res, await _read_object(request, res, ns))
        _check_kind(res, body)
        if body.get("metadata", {}).get("name") != name:
            raise _errors.bad_request("the name of the object does not match the name on the URL")
        dry_run = _dry_run(request, "UpdateOptions")
        warnings = _field_warnings(request, res, body)
        _track_fields(request, res, self.store.get(res.plural, ns or "", name), body, sub)
        stored = self.store.update(res.plural, ns or "", body, subresource=sub, dry_run=dry_run)
        return _warn(_json_response(_shown(res, stored)), warnings)

    async def _patch(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        ctype = request.content_type
        if ctype == _APPLY:
            return await self._apply(request, res, ns or "", name, sub)
        if "force" in request.query:
            raise _options_invalid(
                "PatchOptions", "force", "Forbidden", "may not be specified for non-apply patch"
            )
        patch = await _read_json(request)
        refused = _decoding.bad_patch(ctype, patch) if ctype != _JSON_PATCH else None
        if refused is not None:
            raise refused
        patch = {} if patch is None else patch
        current = _shown(res, copy_obj(self.store.require(res.plural, ns or "", name)))
        if ctype == "application/merge-patch+json":
            patched = _patch.merge_patch(current, patch)
        elif ctype == "application/strategic-merge-patch+json":
            patched = _patch.strategic_merge_patch(current, patch)
        elif ctype == _JSON_PATCH:
            if not isinstance(patch, list):
                raise _errors.bad_request("a JSON patch must be a list of operations")
            patched = _patch.json_patch(current, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media "
                f"types include: application/json-patch+json, application/merge-patch"
                f"+json, application/strategic-merge-patch+json (not {ctype})",
            )
        mistyped = (
            None
            if res.hooks
            else _decoding.patched_mismatch(res.group, res.version, res.kind, patched)
        )
        if mistyped is not None:
            raise mistyped
        if not isinstance(patch, list) and "resourceVersion" not in (
            patch.get("metadata") if isinstance(patch.get("metadata"), dict) else {}
        ):
            patched["metadata"].pop("resourceVersion", None)
        if sub != "status" and res.has_status:
            patched["status"] = current.get("status", {})
        dry_run = _dry_run(request, "PatchOptions")
        _track_fields(request, res, current, patched, sub)
        stored = self.store.update(
            res.plural,
            ns or "",
            _accepted(res, patched),
            subresource=sub,
            dry_run=dry_run,
            owned=True,
        )
        return _json_response(_shown(res, stored))

    async def _apply(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        """Server-side apply: merge the applied fields, own them, create when absent."""
        manager = request.query.get("fieldManager", "")
        if not manager:
            raise _options_invalid(
                "PatchOptions", "fieldManager", "Required", "is required for apply patch"
            )
        dry_run = _dry_run(request, "PatchOptions")
        raw = await request.read()
        _requests.check_size(raw)
        applied = _read_apply_body(raw, res, name)
        _requests.check_namespace(applied, ns)
        warnings = _field_warnings(request, res, applied)
        live = self.store.get(res.plural, ns, name)
        sent_rv = applied["metadata"].get("resourceVersion")
        if live is not None and sent_rv and sent_rv != live["metadata"]["resourceVersion"]:
            raise _errors.conflict(res.plural, name, res.group)
        force = _requests.truthy(request.query.get("force"))
        merged = _apply.apply(res, live, applied, manager, sub, force)
        if live is None:
            created = self.store.create(res.plural, ns, merged, dry_run=dry_run)
            return _warn(_json_response(created, 201), warnings)
        merged["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        stored = self.store.update(res.plural, ns, merged, subresource=sub, dry_run=dry_run)
        return _warn(_json_response(stored), warnings)

    async def _delete(
        self, request: web.Request, res: Resource, ns: str, name: str, sub: str
    ) -> web.StreamResponse:
        options = await _delete_options(request)
        dry_run = _dry_run(request, "DeleteOptions", options.get("dryRun"))
        if res.plural == "namespaces":
            admit_delete(name)
        if res.plural == CRD_PLURAL and not dry_run:
            self.crds.delete(name)
        obj, gone = self.store.delete(
            res.plural,
            ns or "",
            name,
            grace_seconds=options.get("gracePeriodSeconds"),
            propagation=options.get("propagationPolicy"),
            precondition_uid=(options.get("preconditions") or {}).get("uid"),
            precondition_rv=(options.get("preconditions") or {}).get("resourceVersion"),
            dry_run=dry_run,
        )
        if res.plural == "pods" or not gone:
            return _json_response(_shown(res, obj))
        details: dict[str, Any] = {"name": name}
        if res.group:
            details["group"] = res.group
        details.update({"kind": res.plural, "uid": obj["metadata"]["uid"]})
        return _json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )

    async def _deletecollection(
        self, request: web.Request, res: Resource, ns: str | None, name: str, sub: str
    ) -> web.StreamResponse:
        options = await _delete_options(request)
        dry_run = _dry_run(request, "DeleteOptions", options.get("dryRun"))
        matches = _selectors.from_query(request.query, _selector_key(res))
        deleted = []
        for obj in list(self.store.iter(res.plural, ns)):
            if not matches(obj):
                continue
            meta = obj["metadata"]
            with _ignore_not_found():
                gone_obj, _ = self.store.delete(
                    res.plural,
                    meta.get("namespace", ""),
                    meta["name"],
                    grace_seconds=options.get("gracePeriodSeconds"),
                    propagation=options.get("propagationPolicy"),
                    dry_run=dry_run,
                )
                deleted.append(gone_obj)
        body = {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": deleted,
        }
        return _json_response(body)

    # ------------------------------------------------------------------ exec

    async def _exec(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        """Check the pod and container as the real server does (404, then 400s), then hand
        the stream to exec.py."""
        pod = self.store.require("pods", ns, name)
        container = self._named_container(pod, request.query.get("container"))
        if not pod["spec"].get("nodeName"):
            raise _errors.bad_request(f"pod {name} does not have a host assigned")
        return await serve_exec(request, self.execs, self.exec_sessions, ns, name, container)

    # ------------------------------------------------------------------ logs

    async def _log(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        tail = _log_tail(request.query, name)  # options are decoded before the pod is read
        pod = self.store.require("pods", ns, name)
        container = self._named_container(pod, request.query.get("container"))
        if self.logs is None:
            return web.Response(body=b"", content_type="text/plain")
        status = _container_status(pod, container)
        if "waiting" in status.get("state", {"waiting": {}}) and not status.get("lastState"):
            reason = status.get("state", {}).get("waiting", {}).get("reason", "ContainerCreating")
            raise _errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        previous = _requests.truthy(request.query.get("previous"))
        if previous:
            raise _errors.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        if not _requests.truthy(request.query.get("follow")):
            data = _tail(self.logs.read_log(ns, name, container, False), tail)
            return web.Response(body=data, content_type="text/plain")
        return await self._follow_log(request, ns, name, container, tail)

    def _named_container(self, pod: Obj, container: str | None) -> str:
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        init = [c["name"] for c in pod["spec"].get("initContainers", [])]
        if container:
            if container not in names + init:
                raise _errors.bad_request(
                    f"container {container} is not valid for pod {pod['metadata']['name']}"
                )
            return container
        if len(names) == 1:
            return str(names[0])
        raise _errors.bad_request(
            f"a container name must be specified for pod {pod['metadata']['name']}, choose one "
            f"of: [{' '.join(names)}]"
            + (f" or one of the init containers: [{' '.join(init)}]" if init else "")
        )

    async def _follow_log(
        self, request: web.Request, ns: str, name: str, container: str, tail: int | None
    ) -> web.StreamResponse:
        assert self.logs is not None
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        data = self.logs.read_log(ns, name, container, False)
        sent = len(data)
        await response.write(_tail(data, tail))
        while self.logs.log_running(ns, name, container):
            await asyncio.sleep(0.05)
            data = self.logs.read_log(ns, name, container, False)
            if len(data) > sent:
                await response.write(data[sent:])
                sent = len(data)
        data = self.logs.read_log(ns, name, container, False)
        if len(data) > sent:
            await response.write(data[sent:])
        return response


# ---------------------------------------------------------------------- helpers


def _parse(path: str, resources: dict[str, Resource]) -> tuple[Resource, str | None, str, str]:
    """Split a REST path into (resource, namespace, name, subresource), or raise 404."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, parts = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, parts = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    namespace: str | None = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    resource = resources.get(parts[0]) if parts else None
    if resource is not None and resource.group != group:
        # A plural two groups serve (events, events.k8s.io/events) is keyed with its group.
        resource = resources.get(f"{parts[0]}.{group}")
    if resource is None or resource.group != group or not _serves(resource, version):
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    if len(parts) > 3 or (len(parts) == 3 and parts[2] not in _subresources(resource)):
        # Each kind has its own subresources; any other path is unknown (and changes nothing).
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    if not resource.namespaced:
        namespace = ""
    return resource, namespace, name, sub


def _headers_too_large(request: web.Request) -> bool:
    """Return whether the request line and headers exceed what Go's net/http reads."""
    size = len(request.method) + len(request.raw_path) + 12  # "GET <path> HTTP/1.1\r\n"
    size += sum(len(name) + len(value) + 4 for name, value in request.raw_headers)
    return size > _MAX_HEADER_BYTES


def _is_view(res: Resource) -> bool:
    """Return whether `res` serves objects stored as another kind (events.k8s.io Events)."""
    return res.plural == "events" and res.group == _events.GROUP


def _shown(res: Resource, obj: Obj) -> Obj:
    """Return a stored object as `res` serves it."""
    return _events.to_v1(obj) if _is_view(res) else obj


def _accepted(res: Resource, body: Any) -> Any:
    """Return a request body for `res` as the store keeps it."""
    return _events.from_v1(body) if _is_view(res) else body


def _view_line(event: Any) -> bytes:
    obj = event.obj if event.type == "BOOKMARK" else _events.to_v1(event.obj)
    return json.dumps({"type": event.type, "object": obj}).encode() + b"\n"


def _selector_key(res: Resource) -> str:
    return f"{res.plural}.{res.group}" if _is_view(res) else res.plural


# The subresources the fake serves, and the verbs each takes.
_SUBRESOURCE_VERBS = {
    "status": ("get", "update", "patch"),
    "log": ("get",),
    "eviction": ("create",),
    "exec": ("create",),
}


def _subresources(resource: Resource) -> tuple[str, ...]:
    """Return the subresources `resource` has (others answer 404)."""
    found: tuple[str, ...] = ("status",) if resource.has_status else ()
    if resource.plural == "pods" and not resource.group:
        found += ("log", "eviction", "exec")
    return found


def _method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def _as_table(
    request: web.Request, res: Resource, objects: list[Obj], rv: str, cont: str = ""
) -> dict[str, Any]:
    include = request.query.get("includeObject", "Metadata")
    return _table.table(res, objects, rv, include, cont)


def _read_apply_body(raw: bytes, res: Resource, name: str) -> dict[str, Any]:
    """Return the applied configuration (YAML or JSON), checked against the URL."""
    try:
        body = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise _errors.bad_request(f"error decoding YAML: {exc}") from exc
    if not isinstance(body, dict):
        raise _errors.bad_request("the applied configuration must be an object")
    if body.get("apiVersion") != res.api_version or body.get("kind") != res.kind:
        message = (
            f"the API version in the data ({body.get('apiVersion')}) and kind "
            f"({body.get('kind')}) do not match the resource {res.api_version} {res.kind}"
        )
        raise _errors.bad_request(message)
    body.setdefault("metadata", {})
    if body["metadata"].get("name", name) != name:
        raise _errors.bad_request("the name of the object does not match the name on the URL")
    body["metadata"]["name"] = name
    return body


def _track_fields(request: web.Request, res: Resource, old: Obj | None, new: Any, sub: str) -> None:
    """Record managedFields for a write that names a fieldManager or edits managed objects."""
    manager = request.query.get("fieldManager")
    managed = old is not None and old["metadata"].get("managedFields")
    if not (manager or managed) or not isinstance(new, dict):
        return
    if not manager:
        manager = request.headers.get("User-Agent", "unknown").split("/", 1)[0]
    _apply.record_update(res, old, new, manager, sub)


def _options_invalid(kind: str, field: str, error: str, detail: str) -> ApiError:
    reason = {"Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden"}[error]
    message = f"{error} value: {detail}" if error == "Required" else f"{error}: {detail}"
    return _errors.invalid(
        kind, "", [{"reason": reason, "message": message, "field": field}], "meta.k8s.io"
    )


def _field_warnings(request: web.Request, res: Resource, body: Any) -> list[str]:
    if res.hooks is None:
        return []
    return check_unknown_fields(res, body, request.query.get("fieldValidation", "Warn"))


def _warn(response: web.Response, warnings: list[str]) -> web.Response:
    """Add one `Warning: 299` header per warning, as the real server does."""
    for warning in warnings:
        response.headers.add("Warning", f"299 - {json.dumps(warning)}")
    return response


def _dry_run(request: web.Request, options_kind: str, body_value: Any = None) -> bool:
    """Return whether the request asks for a dry run (`dryRun=All`), or raise 422."""
    values = request.query.getall("dryRun", []) or list(body_value or [])
    if not values:
        return False
    if values != ["All"]:
        quoted = ", ".join(json.dumps(v) for v in values)
        cause = {
            "reason": "FieldValueNotSupported",
            "message": f'Unsupported value: []string{{{quoted}}}: supported values: "All"',
            "field": "dryRun",
        }
        raise _errors.invalid(options_kind, "", [cause], "meta.k8s.io")
    return True


def _serves(resource: Resource, version: str) -> bool:
    if resource.hooks is None:
        return version == resource.version
    return version in resource.hooks.served


def _verb(method: str, name: str, query: Any) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if _requests.truthy(query.get("watch")) else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method not in verbs:
        raise _method_not_allowed()
    return verbs[method]


def _client_gone(request: web.Request) -> bool:
    """Return whether the watch's client has gone (its connection closed or closing).

    aiohttp does not cancel a handler whose client vanished, and a quiet watch writes
    nothing that could fail, so it would stay registered (its queue filling) until its
    timeout; kube-apiserver ends it at once.
    """
    transport = request.transport
    return transport is None or transport.is_closing()


async def _until_closed(request: web.Request, watcher: Watcher, deadline: float) -> None:
    """Hold a silenced watch open, sending nothing, until it is closed, times out or its
    client goes."""
    while not watcher.closed and (left := deadline - time.monotonic()) > 0:
        if _client_gone(request):
            return
        watcher.wakeup.clear()
        with contextlib.suppress(TimeoutError):
            # not wait_for: it can drop a cancellation
            async with asyncio.timeout(min(left, _LIVENESS)):
                await watcher.wakeup.wait()


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    _requests.check_size(raw)
    return _decoding.loads(raw) if raw else {}


async def _read_object(request: web.Request, res: Resource, namespace: str | None) -> Any:
    """Return a create/update body (JSON or YAML), checked as the real handlers check it:
    decoded into the kind's Go types (400 on a value of the wrong type), then its namespace."""
    raw = await request.read()
    body = _requests.decode_object(raw, request.content_type, res.kind)
    if res.hooks is None:  # a custom resource decodes into unstructured JSON: any type goes
        _decoding.check_types(res.group, res.version, res.kind, body, raw)
    _requests.check_namespace(body, namespace)
    return body


async def _delete_options(request: web.Request) -> dict[str, Any]:
    """Return the DeleteOptions of a delete: the body's when it has one (the query is then
    not read, as the real handler does), else the query's."""
    raw = await request.read() if request.can_read_body else b""
    _requests.check_size(raw)
    options: dict[str, Any] = {}
    if raw.strip():
        options = _decoding.loads(raw, "DeleteOptions")
        _decoding.check_delete_options(options, raw)
    else:
        query = request.query
        grace = _decoding.int_param(query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
    if options.get("orphanDependents") is True:
        options.setdefault("propagationPolicy", "Orphan")
    return options


def _check_kind(res: Resource, body: Any) -> None:
    if not isinstance(body, dict):
        raise _errors.bad_request("the body must be a JSON object")
    kind = body.get("kind")
    if kind and kind != res.kind:
        raise _errors.bad_request(f"the kind {kind!r} does not match the resource {res.plural!r}")


def _encode_continue(start: str, rv: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _container_status(pod: Obj, container: str) -> dict[str, Any]:
    statuses = [
        *pod["status"].get("initContainerStatuses", []),
        *pod["status"].get("containerStatuses", []),
    ]
    return next((s for s in statuses if s.get("name") == container), {})


def _tail(data: bytes, tail: int | None) -> bytes:
    if tail is None:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-tail:]) if tail > 0 else b""


def _log_tail(query: Any, pod: str) -> int | None:
    """Return PodLogOptions' tailLines (400 when not a number, 422 when negative)."""
    for key in ("tailLines", "limitBytes", "sinceSeconds"):
        value = _decoding.int_param(query, key)
        floor = 0 if key == "tailLines" else 1
        if value is not None and value < floor:
            rule = "greater than or equal to 0" if floor == 0 else "greater than 0"
            message = f"Invalid value: {value}: must be {rule}"
            causes = [{"reason": "FieldValueInvalid", "message": message, "field": key}]
            raise _errors.invalid("PodLogOptions", pod, causes)
    return _decoding.int_param(query, "tailLines")


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type=_JSON)


def _status_response(error: ApiError) -> web.Response:
    response = _json_response(error.status(), error.code)
    response.headers.update(error.headers)
    return response


class _ignore_not_found:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        return isinstance(exc, ApiError) and exc.code == 404


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
