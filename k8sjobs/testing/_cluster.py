"""`FakeCluster`: the front door that wires the store, API server, job controller and kubelet.

    async with FakeCluster() as cluster:
        await kubernetes_asyncio.config.load_kube_config(str(cluster.kubeconfig_path))

The cluster writes a kubeconfig pointing at its random port (with a test CA and a bearer
token when `tls=True`), so any client, kubectl included, talks to it unmodified.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .. import _gcpace
from ._faults import Faults, RequestLog
from ._kubelet import Kubelet, KubeletConfig, NodeConfig, SimulateRule
from ._tls import make_certificates
from .apiserver.admission import PodAdmission
from .apiserver.crd import CRD_PLURAL
from .apiserver.eviction import evict
from .apiserver.namespaces import NamespaceController
from .apiserver.quota import QuotaController
from .apiserver.resources import Validator
from .apiserver.server import ApiServer
from .apiserver.store import Event, Obj, Store
from .controllers.flux_operator import FluxOperator
from .controllers.job import ControllerConfig, JobController
from .controllers.jobset import JobSetController, JobSetWebhook, jobset_crd
from .controllers.kueue import Kueue


class FakeCluster:
    """A Kubernetes stand-in: a real HTTP API server, a job controller and one node.

    kubelet: "simulate" (pods change phase on timers, see `KubeletConfig`) or "execute"
      (pods run as local processes through k8sjobs.local.podrunner).
    controller, kubelet_config, node: timings and capacity; the defaults are a real
      cluster's (1 s status batching, 10 s pod-recreation backoff), tests shorten them.
    validation: "shape" (schema-check each distinct object shape once, the default),
      "always" or "off"; see `Validator`.
    tls, token: serve HTTPS with a generated test CA, require a bearer token.
    bookmark_interval: seconds between the BOOKMARK events a watch asking for them
      (allowWatchBookmarks) gets while idle; a real server sends one about every 60 s.
    handoff: "in-process" (the default) or "subprocess": how execute mode runs the pods'
      artifact handoff containers (k8sjobs.local._handoff).
    namespace_linger: seconds a deleted namespace stays Terminating at least, even once
      empty, as on a real cluster (the namespace controller's content discovery and
      finalizers take seconds there; the default 0 removes an empty one at once).
    kueue: emulate Kueue (its CRDs, webhook, queueing, admission and preemption; see
      `controllers.kueue`); off by default, so the group is not in discovery.
    """

    def __init__(
        self,
        kubelet: str = "simulate",
        *,
        directory: Path | None = None,
        controller: ControllerConfig | None = None,
        kubelet_config: KubeletConfig | None = None,
        node: NodeConfig | None = None,
        rule: SimulateRule | None = None,
        validation: str = "shape",
        tls: bool = False,
        token: str | None = None,
        history: int = 50_000,
        watch_buffer: int = 20_000,
        bookmark_interval: float = 5.0,
        namespaces: tuple[str, ...] = ("default",),
        port: int = 0,
        handoff: str | None = None,
        namespace_linger: float = 0.0,
        kueue: bool = False,
    ) -> None:
        # It holds every object it serves, as a driver holds its steps: paced while started.
        self._pace = _gcpace.Holder()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="k8sjobs-fake-")
            directory = Path(self._tmp.name)
        self.directory = Path(directory)
        self.store = Store(
            history=history, watch_buffer=watch_buffer, validator=Validator(validation)
        )
        self.requests = RequestLog()
        config = kubelet_config or KubeletConfig()
        config.mode = kubelet
        if node is not None:
            config.node = node
        if rule is not None:
            config.rule = rule
        if handoff is not None:
            config.handoff = handoff
        if config.root is None:
            config.root = self.directory / "pods"
        self.store.admission = [
            PodAdmission(self.store),
            QuotaController(self.store),
            JobSetWebhook(),  # after PodAdmission: a JobSet pod's priority label needs it
        ]
        self.controller = JobController(self.store, controller)
        self.kubelet = Kubelet(self.store, config)
        self.namespaces = NamespaceController(self.store, linger=namespace_linger)
        self.flux_operator = FluxOperator(self.store, self.kubelet)  # once its CRD is installed
        self.jobset_controller = JobSetController(
            self.store, f"jobset-{config.node.name}", self.controller.config.time_scale
        )
        self.kueue = Kueue(self.store)
        self._kueue = kueue
        self.faults = Faults(
            drop_watches=self.store.drop_watches,
            compact=self.store.compact,
            restart=self.restart,
            pause_kubelet=self.kubelet.pause,
            silence_watches=self.store.silence_watches,
            graceful_restart=self._graceful_restart,
            cut_exec_streams=lambda namespace, pod: self.server.exec_sessions.cut(namespace, pod),
        )
        self.token = token or (secrets.token_hex(16) if tls else None)
        self.tls = tls
        self.server = ApiServer(
            self.store,
            faults=self.faults,
            requests=self.requests,
            logs=self.kubelet,
            execs=self.kubelet,
            token=self.token,
            bookmark_interval=bookmark_interval,
        )
        self._namespaces = namespaces
        self._port = port
        self._ssl: ssl.SSLContext | None = None
        self.ca_path: Path | None = None
        self.kubeconfig_path = self.directory / "kubeconfig"

    @property
    def url(self) -> str:
        """Return the API server's base URL."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.port}"

    async def start(self) -> FakeCluster:
        """Start the API server, controller and kubelet; write the kubeconfig."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in self._namespaces:
            if self.store.get("namespaces", "", name) is None:
                self.store.create("namespaces", "", {"metadata": {"name": name}})
        if self.tls:
            self.ca_path, cert, key = make_certificates(self.directory / "tls")
            self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ssl.load_cert_chain(cert, key)
        self._port = await self.server.start(port=self._port, ssl_context=self._ssl)
        if self._kueue and not self.kueue.enabled:
            await self._install_kueue()
        self.controller.start()
        self.kubelet.start()
        self.write_kubeconfig(self.kubeconfig_path)
        self._pace.hold()
        return self

    async def _install_kueue(self) -> None:
        """Install Kueue's CRDs and wait until they are served (a few loop turns)."""
        self.kueue.install()
        async with asyncio.timeout(10):
            await self.kueue.ready.wait()

    async def stop(self) -> None:
        """Stop everything; the temporary directory (if any) is removed."""
        # A client that keeps a connection open must not hold up a test's teardown.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.server.stop()
        await self.controller.stop()
        await self.kubelet.stop()
        if self._tmp is not None:
            await asyncio.to_thread(self._tmp.cleanup)
            self._tmp = None
        self._pace.release()

    async def restart(self) -> None:
        """Restart the API server on the same port; objects, history and counters are kept."""
        await self.server.stop()
        await self.server.start(port=self._port, ssl_context=self._ssl)

    async def _graceful_restart(self, drain: float, downtime: float) -> None:
        """Shut the API server down gracefully, compact history, and start it again."""
        await self.server.graceful_shutdown(drain)
        self.store.compact()
        await asyncio.sleep(downtime)
        await self.server.start(port=self._port, ssl_context=self._ssl)

    async def __aenter__(self) -> FakeCluster:
        return await self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def write_kubeconfig(
        self, path: Path, *, context: str = "fake", namespace: str = "default"
    ) -> Path:
        """Write a kubeconfig for this cluster to `path` and return it.

        ``namespace`` is the context's namespace: where clients send objects by default.
        """
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca_path is not None:
            cluster["certificate-authority"] = str(self.ca_path)
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": user}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    async def install_jobset(self, timeout: float = 30.0) -> None:
        """Install the JobSet CRD (`jobset_crd`) and return once it is Established.

        From then on the cluster serves jobset.x-k8s.io/v1alpha2 and emulates the JobSet
        controller (docs/testing.md). Raises TimeoutError after `timeout` seconds.
        """
        crd = jobset_crd()
        name = crd["metadata"]["name"]
        established = asyncio.Event()

        def note(event: Event) -> None:
            ours = event.resource == CRD_PLURAL and event.obj["metadata"]["name"] == name
            if ours and _established(event.obj):
                established.set()

        self.store.listen(note)
        found = self.store.get(CRD_PLURAL, "", name)
        if found is None:
            self.store.create(CRD_PLURAL, "", crd)
        elif _established(found):
            return
        async with asyncio.timeout(timeout):
            await established.wait()

    # ------------------------------------------------------------------ faults

    def evict(self, pod: str, namespace: str = "default", grace_seconds: int | None = None) -> Obj:
        """Evict a pod now, as the Eviction API does (a node drain, a preemption).

        The pod gets a `DisruptionTarget` condition (reason EvictionByEvictionAPI) and is
        deleted gracefully, so that a Job's podFailurePolicy sees a disruption. Return the
        pod; raise ApiError (404) when there is none.
        """
        return evict(self.store, namespace, pod, grace_seconds)

    # ------------------------------------------------------------------ assertions

    def get(self, resource: str, name: str, namespace: str = "default") -> Obj | None:
        """Return a stored object (read-only), bypassing HTTP and request counts."""
        return self.store.get(
            resource, "" if resource in ("namespaces", "nodes") else namespace, name
        )

    def objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Return every stored object of `resource` (read-only), bypassing HTTP."""
        return list(self.store.iter(resource, namespace))

    def request_count(
        self, verb: str | None = None, resource: str | None = None, subresource: str | None = None
    ) -> int:
        """Return how many API requests matched (verb: get, list, watch, create, ...)."""
        return self.requests.count(verb, resource, subresource)


def _established(crd: Obj | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
