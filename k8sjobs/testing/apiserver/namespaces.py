"""Namespace lifecycle: deletion goes through Terminating, as on a real cluster.

Deleting a namespace marks it (deletionTimestamp, `status.phase: Terminating`); the
namespace controller then deletes everything in it (pods gracefully, so they are stopped)
and removes the namespace once it is empty. Meanwhile creates in it are refused with 403
and a `NamespaceTerminating` cause, and `default`, `kube-system` and `kube-public` may not
be deleted at all (403 Forbidden), as the NamespaceLifecycle admission plugin answers.
With ``linger`` a namespace stays Terminating that long at least (a real one takes seconds):
creating a namespace of that name meanwhile is refused with 409 "object is being deleted".
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from . import errors as _errors
from .errors import ApiError
from .store import Event, Store

IMMORTAL = ("default", "kube-system", "kube-public")


def admit_delete(name: str) -> None:
    """Refuse to delete an immortal namespace (403), as the NamespaceLifecycle plugin does."""
    if name in IMMORTAL:
        raise _errors.forbidden("namespaces", name, "this namespace may not be deleted")


class NamespaceController:
    """Empties a Terminating namespace, then removes it; event-driven, no polling."""

    def __init__(self, store: Store, *, linger: float = 0.0) -> None:
        self.store = store
        self.linger = linger
        self._since: dict[str, float] = {}  # namespace -> when its deletion was first seen
        store.listen(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource == "namespaces":
            name = event.obj["metadata"]["name"]
            if event.type == "DELETED":
                self._since.pop(name, None)
            elif event.obj["metadata"].get("deletionTimestamp"):
                self._since.setdefault(name, time.monotonic())
                self._later(name)
        elif event.type == "DELETED" and event.namespace:
            namespace = self.store.get("namespaces", "", event.namespace)
            if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
                self._later(event.namespace)

    def _later(self, namespace: str) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: the cluster is not running
            asyncio.get_running_loop().call_soon(self.drain, namespace)

    def drain(self, namespace: str) -> None:
        """Delete what is left in a Terminating namespace; remove it when nothing is."""
        ns = self.store.get("namespaces", "", namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        contents = self.store.namespace_contents(namespace)
        for resource, obj in contents:
            if obj["metadata"].get("deletionTimestamp"):
                continue
            name = obj["metadata"]["name"]
            with contextlib.suppress(ApiError):
                self.store.delete(resource, namespace, name, propagation="Background")
        if contents:
            return
        left = self._since.setdefault(namespace, time.monotonic()) + self.linger
        if left > time.monotonic():
            asyncio.get_running_loop().call_later(left - time.monotonic(), self.drain, namespace)
            return
        self.store.finalize_namespace(namespace)
