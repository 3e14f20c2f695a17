"""A request the API server applied whose reply was lost (the connection closed before the
answer came back) is retried without harm: through a fault proxy in front of the fake
cluster, over real HTTP, aimed in turn at every write of a submit, a cancel and a replace.

The client cannot tell such a request from one that never arrived, so each retry must hold
in both cases: a create retried meets its own object (AlreadyExists, same spec hash:
adopted), a delete retried finds nothing (404: done), a merge patch or update retried sets
the same values again. And each attempt is one request on the wire: aiohttp's own silent
resend of a PUT or DELETE is off, so the client's retry loop sees and counts every one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from k8sjobs.errors import ServerUnavailable
from k8sjobs.kube import KubeClient, load_config
from k8sjobs.kube.client import CONFIGMAPS, JOBS, ClientOptions
from k8sjobs.kube.create import create_step, spec_hash
from k8sjobs.kube.watch import wait_deleted
from k8sjobs.render.manifests import Manifests, Target, render
from k8sjobs.render.sshkey import generate_key
from k8sjobs.session import Session
from k8sjobs.state import StepState
from k8sjobs.steps.spec import Resources, Step
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import Fault, FaultProxy

from ..waiting import wait_until
from .kubehelpers import FAKE, orphans, step
from .test_minicluster_kube import _flux_step, _with_operator

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: For the spec hash only: it does not depend on a step's key pair.
KEY = generate_key()


@dataclass
class WriteFault(Fault):
    """A lost reply aimed at the n-th write (``skip`` earlier writes pass), reads untouched:
    watches and lists run beside the writes in an order no test controls."""

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method in WRITES


@pytest_asyncio.fixture
async def proxy(cluster: FakeCluster) -> AsyncIterator[FaultProxy]:
    """A FaultProxy in front of the fake cluster, with no faults until injected."""
    async with FaultProxy(cluster.url) as p:
        yield p


@pytest.fixture
def kubeconfig(cluster: FakeCluster, proxy: FaultProxy, tmp_path: Path) -> Path:
    """A kubeconfig like the cluster's that sends every request through the proxy."""
    return _through(cluster, proxy, tmp_path / "kubeconfig")


def _through(cluster: FakeCluster, proxy: FaultProxy, path: Path) -> Path:
    """Write a kubeconfig like the cluster's that sends every request through ``proxy``."""
    path.write_text(
        cluster.kubeconfig_path.read_text().replace(cluster.url, f"http://{proxy.location}")
    )
    return path


def _session(kubeconfig: Path, tmp_path: Path) -> Session:
    options = {"pending_grace": 0.5, "backoff": 0.02, "max_backoff": 0.2}
    return Session(study="s", kubeconfig=kubeconfig, log_dir=tmp_path / "logs", options=options)


def _writes(proxy: FaultProxy, since: int) -> list[str]:
    """Return the writes the proxy saw from log entry ``since`` on, as "METHOD resource"."""
    return [f"{m} {_resource(p)}" for m, p, _ in proxy.log[since:] if m in WRITES]


def _resource(path: str) -> str:
    parts = path.split("?")[0].split("/")
    return parts[parts.index("namespaces") + 2]


Operation = Callable[[str, Callable[[], None]], Awaitable[None]]


async def _each_write(proxy: FaultProxy, operation: Operation) -> list[str]:
    """Run ``operation(name, aim)`` clean to learn the writes it sends after calling
    ``aim()``, then once per such write with that write's reply lost (each run on its own
    step name); return the clean run's writes.

    Each faulty run must send the clean run's writes with only the lost one repeated: its
    retry, and nothing else (no object deleted and made again, no second create)."""
    mark = [0]

    def clean_aim() -> None:
        mark[0] = len(proxy.log)

    await operation("clean", clean_aim)
    clean = _writes(proxy, mark[0])
    for index in range(len(clean)):
        fault = WriteFault("lose_reply", skip=index)

        def aim(fault: Fault = fault) -> None:
            mark[0] = len(proxy.log)
            proxy.inject(fault)

        await operation(f"lost{index}", aim)
        assert fault.times == 0, f"write {index} ({clean[index]}) never came"
        assert _writes(proxy, mark[0]) == clean[: index + 1] + clean[index:], index
    return clean


def _check_created_once(cluster: FakeCluster, manifests: Manifests) -> None:
    """The step's Job (or MiniCluster) has this spec and owns every other object of its step."""
    job = cluster.get(_plural(manifests.job), manifests.name)
    assert job is not None and spec_hash(job) == manifests.spec_hash, manifests.name
    for extra in manifests.objects()[:-1]:
        found = cluster.get(_plural(extra), manifests.name)
        assert found is not None, (manifests.name, extra["kind"])
        (owner,) = found["metadata"]["ownerReferences"]
        assert owner["uid"] == job["metadata"]["uid"], (manifests.name, extra["kind"])


def _plural(obj: Mapping[str, Any]) -> str:
    return f"{str(obj['kind']).lower()}s"


def _manifests(name: str, duration: float) -> Manifests:
    return render(step(name, duration=duration), Target(study="s"))


def _mpi(name: str) -> Step:
    """A two-node step: a ConfigMap, a Secret (its key pair) and a Service beside its Job."""
    notes = {f"{FAKE}duration": "0.05"}
    return Step(
        name=name,
        script="$(LAUNCHER) ./a.out",
        resources=Resources(nodes=2, tasks=2),
        annotations=notes,
    )


async def test_each_attempt_is_one_request_on_the_wire(
    proxy: FaultProxy, kubeconfig: Path, cluster: FakeCluster
) -> None:
    # No retries of its own: a lost reply must surface, never be resent behind its back.
    async with KubeClient(await load_config(kubeconfig), ClientOptions(retries=0)) as client:
        body = {"metadata": {"name": "cm"}, "data": {"a": "1"}}
        await client.create(CONFIGMAPS, "default", body)
        await client.create(CONFIGMAPS, "default", {"metadata": {"name": "warm"}})
        path = CONFIGMAPS.path("default", "cm")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "POST": lambda: client.create(CONFIGMAPS, "default", {"metadata": {"name": "new"}}),
            "GET": lambda: client.get(CONFIGMAPS, "default", "cm"),
            "PUT": lambda: client.request(
                "PUT", path, body=body, what="put", kind=CONFIGMAPS, verb="update"
            ),
            "PATCH": lambda: client.merge_patch(CONFIGMAPS, "default", "cm", {"data": {"b": "2"}}),
            "DELETE": lambda: client.delete(CONFIGMAPS, "default", "cm", propagation="Background"),
        }
        for method, call in calls.items():
            await client.get(CONFIGMAPS, "default", "warm")  # a kept-alive connection
            before = len(proxy.log)
            proxy.inject(Fault("lose_reply", method=method))
            with pytest.raises(ServerUnavailable, match="no answer after 1 attempt") as raised:
                await call()
            assert ("may have applied it" in str(raised.value)) is (method != "GET")
            sent = [m for m, _, _ in proxy.log[before:]]
            assert sent == [method], f"{method} went out {len(sent)} times: {sent}"
    assert cluster.get("configmaps", "new") is not None  # the POST was applied, unanswered
    assert cluster.get("configmaps", "cm") is None  # the DELETE too


@pytest.mark.parametrize(
    ("make", "extras"),
    [(step, ["configmaps"]), (_mpi, ["services", "secrets", "configmaps"])],
    ids=["job", "mpi"],
)
async def test_a_submit_survives_each_lost_reply(
    proxy: FaultProxy,
    kubeconfig: Path,
    cluster: FakeCluster,
    tmp_path: Path,
    make: Callable[[str], Step],
    extras: list[str],
) -> None:
    async def submit(name: str, aim: Callable[[], None]) -> None:
        async with _session(kubeconfig, tmp_path) as s:
            aim()
            handle = await s.submit(make(name))
            result = await handle.wait(20)
        assert result.state is StepState.SUCCEEDED, (name, result)
        _check_created_once(cluster, render(make(name), Target(study="s"), ssh_key=KEY))

    cluster.requests.reset()
    writes = await _each_write(proxy, submit)
    # Two writes for a single-node step: the Job, then its ConfigMap already owned by it.
    assert writes == [f"POST {kind}" for kind in ["jobs", *extras]]
    # Never a Job deleted and made again: each step's Job was created once and adopted.
    assert cluster.request_count("delete") == 0
    assert not orphans(cluster)


async def test_a_cancel_survives_each_lost_reply(
    proxy: FaultProxy, kubeconfig: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    async def cancel(name: str, aim: Callable[[], None]) -> None:
        async with _session(kubeconfig, tmp_path) as s:
            handle = await s.submit(step(name, duration=30))
            await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
            aim()
            await handle.cancel()
            result = await handle.wait(10)
        assert result.state is StepState.CANCELLED, (name, result)
        await wait_until(lambda: cluster.get("jobs", handle.object_name) is None, "no job")

    assert await _each_write(proxy, cancel) == ["DELETE jobs"]


async def test_a_replace_survives_each_lost_reply(
    proxy: FaultProxy, kubeconfig: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    async def replace(name: str, aim: Callable[[], None]) -> None:
        async with _session(kubeconfig, tmp_path) as s:
            assert (await (await s.submit(step(name))).wait(20)).ok
        async with _session(kubeconfig, tmp_path) as s:
            aim()
            handle = await s.submit(step(name, duration=0.06), replace=True)
            result = await handle.wait(20)
        assert result.state is StepState.SUCCEEDED, (name, result)
        _check_created_once(cluster, _manifests(name, 0.06))
        job = cluster.get("jobs", handle.object_name)
        assert job is not None and job["metadata"]["annotations"][f"{FAKE}duration"] == "0.06"

    writes = await _each_write(proxy, replace)
    assert writes == ["DELETE jobs", "DELETE configmaps", "POST jobs", "POST configmaps"]


async def test_a_replace_of_an_unknown_job_survives_each_lost_reply(
    proxy: FaultProxy, kubeconfig: Path, cluster: FakeCluster
) -> None:
    # The caller does not know the old Job (current=None): the create meets it, then
    # deletes it and creates the new one, whose reply may be lost too.
    async with KubeClient(await load_config(kubeconfig), ClientOptions(backoff=0.02)) as client:

        async def replace(name: str, aim: Callable[[], None]) -> None:
            await _create(client, _manifests(name, 30), replace=False)
            aim()
            new = _manifests(name, 0.06)
            await _create(client, new, replace=True)
            _check_created_once(cluster, new)
            await wait_until(lambda: _ended(cluster, new.name), f"{name}: the new job ends")

        writes = await _each_write(proxy, replace)
    assert writes == [
        "POST jobs",
        "DELETE jobs",
        "DELETE configmaps",
        "POST jobs",
        "POST configmaps",
    ]


async def _create(client: KubeClient, manifests: Manifests, *, replace: bool) -> None:
    await create_step(
        client,
        manifests,
        current=None,
        replace=replace,
        gone=lambda: wait_deleted(client, JOBS, "default", manifests.name, timeout=20),
    )


def _ended(cluster: FakeCluster, name: str) -> bool:
    job = cluster.get("jobs", name) or {}
    conditions = (job.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


async def test_a_minicluster_step_survives_each_lost_reply(tmp_path: Path) -> None:
    # Its top object is a MiniCluster, which the Flux Operator turns into the Job: created
    # once, adopted on a retry, deleted as a whole on cancel.
    async for flux in _with_operator("simulate", tmp_path):
        await _lose_each_minicluster_reply(flux, tmp_path)


async def _lose_each_minicluster_reply(flux: FakeCluster, tmp_path: Path) -> None:
    async with FaultProxy(flux.url) as proxy:
        kubeconfig = _through(flux, proxy, tmp_path / "kubeconfig")

        async def submit(name: str, aim: Callable[[], None]) -> None:
            async with _session(kubeconfig, tmp_path) as s:
                aim()
                result = await (await s.submit(_flux_step(name))).wait(30)
            assert result.state is StepState.SUCCEEDED, (name, result)
            _check_created_once(flux, render(_flux_step(name), Target(study="s")))

        async def cancel(name: str, aim: Callable[[], None]) -> None:
            async with _session(kubeconfig, tmp_path) as s:
                handle = await s.submit(_flux_step(f"c{name}", duration=600))
                job = handle.object_name
                await wait_until(lambda: flux.get("jobs", job) is not None, "its job")
                aim()
                await handle.cancel()
                assert (await handle.wait(30)).state is StepState.CANCELLED, name
            await wait_until(lambda: flux.get("miniclusters", job) is None, "it is gone")

        submitted = await _each_write(proxy, submit)
        assert submitted == ["POST miniclusters", "POST configmaps"], submitted
        assert await _each_write(proxy, cancel) == ["DELETE miniclusters"]
    assert flux.request_count("delete", "jobs") == 0
