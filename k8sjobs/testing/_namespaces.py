"""Namespace lifecycle: deletion goes through Terminating, as on a real cluster.

Deleting a namespace marks it (deletionTimestamp, `status.phase: Terminating`); the
namespace controller then deletes everything in it (pods gracefully, so they are stopped)
and removes the namespace once it is empty. Meanwhile creates in it are refused with 403
and a `NamespaceTerminating` cause, and `default`, `kube-system` and `kube-public` may not
be deleted at all (403 Forbidden), as the NamespaceLifecycle admission plugin answers.
"""

from __future__ import annotations

import asyncio
import contextlib

from . import _errors
from ._errors import ApiError
from ._store import Event, Store

IMMORTAL = ("default", "kube-system", "kube-public")


def admit_delete(name: str) -> None:
    """Refuse to delete an immortal namespace (403), as the NamespaceLifecycle plugin does."""
    if name in IMMORTAL:
        raise _errors.forbidden("namespaces", name, "this namespace may not be deleted")


class NamespaceController:
    """Empties a Terminating namespace, then removes it; event-driven, no polling."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.listen(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource == "namespaces":
            if event.type != "DELETED" and event.obj["metadata"].get("deletionTimestamp"):
                self._later(event.obj["metadata"]["name"])
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
        if not contents:
            self.store.finalize_namespace(namespace)
