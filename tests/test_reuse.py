"""Re-runs that do the right thing (issue 26): a 20-step study run again reuses every step,
an edited step runs with exactly its descendants, studies share a step's result, and a
``cache: false`` step always runs. On the local backend and on the fake cluster (with a
real docker-registry), counting the processes each step's script started (one line each in
a shared file) and the fake's Kubernetes writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from k8sjobs import Session
from k8sjobs.local import LocalBackend
from k8sjobs.reuse import CACHED
from k8sjobs.state import StepResult
from k8sjobs.steps.spec import Step, StepOutput
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import RegistryServer, registry_available, registry_process

from .waiting import wait_until

STEPS = 20
WRITES = ("create", "update", "patch", "delete")


def tree(count: Path, *, edited: int | None = None, cache: bool | None = None) -> list[Step]:
    """Return 20 steps as a binary tree: step i reads the output of step (i - 1) // 2."""
    steps = []
    for i in range(STEPS):
        name = f"s{i:02d}"
        extra = " edited" if i == edited else ""  # changes its output, so its readers' keys
        script = (
            f"echo {name} >> {count}\n"
            'cat "$K8SJOBS_INPUTS"/up/out.txt > out.txt 2>/dev/null || true\n'
            f"echo {name} >> out.txt{extra}\n"
        )
        inputs = {"up": StepOutput(step=f"s{(i - 1) // 2:02d}", output="out")} if i else {}
        steps.append(
            Step(name=name, script=script, inputs=inputs, outputs={"out": "out.txt"}, cache=cache)
        )
    return steps


def descendants(root: int) -> set[str]:
    found = {root}
    for i in range(1, STEPS):
        if (i - 1) // 2 in found:
            found.add(i)
    return {f"s{i:02d}" for i in found}


def ran(count: Path) -> Counter[str]:
    return Counter(count.read_text().split()) if count.exists() else Counter()


@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryServer]:
    """Yield a real docker-registry process (skipped where Debian's docker-registry is not)."""
    if not registry_available():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    with registry_process() as server:
        yield server


@pytest.fixture(params=["local", "fake-cluster"])
def where(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Callable[..., Session], FakeCluster | None]]:
    """Yield a maker of sessions on one backend (and the fake cluster, when it is one)."""
    if request.param == "local":

        def local(study: str = "tree", **options: object) -> Session:
            return Session(
                study=study,
                backend=LocalBackend(state_dir=tmp_path / "state"),
                store=f"oci:{tmp_path / 'store'}",
                **options,  # type: ignore[arg-type]
            )

        yield local, None
        return
    cluster: FakeCluster = request.getfixturevalue("fake_cluster_execute")
    registry: RegistryServer = request.getfixturevalue("registry")
    prefix = f"{registry.location}/{tmp_path.name}"  # the registry outlives the test

    def kube(study: str = "tree", **options: object) -> Session:
        return Session(
            study=study,
            kubeconfig=cluster.kubeconfig_path,
            store=prefix,
            plain_http=True,
            **options,  # type: ignore[arg-type]
        )

    yield kube, cluster


async def run(session: Session, steps: list[Step]) -> dict[str, StepResult]:
    async with session as s:
        handles = await s.submit_many(steps)
        results = await s.gather(*handles, check=True, timeout=240)
    return {r.name: r for r in results}


def writes(cluster: FakeCluster | None) -> int:
    return 0 if cluster is None else sum(cluster.request_count(v) for v in WRITES)


async def test_a_second_run_reuses_every_step_and_an_edit_runs_exactly_its_descendants(
    where: tuple[Callable[..., Session], FakeCluster | None], tmp_path: Path
) -> None:
    make, cluster = where
    count = tmp_path / "ran"
    first = await run(make(), tree(count))
    assert ran(count) == Counter({f"s{i:02d}": 1 for i in range(STEPS)})
    assert not any(r.reason == CACHED for r in first.values())

    before = writes(cluster)
    second = await run(make(), tree(count))
    assert ran(count) == Counter({f"s{i:02d}": 1 for i in range(STEPS)})  # no process
    assert writes(cluster) == before  # no Kubernetes object
    assert all(r.reason == CACHED for r in second.values())
    assert {n: r.outputs["out"].rpartition("@")[2] for n, r in second.items()} == {
        n: r.outputs["out"].rpartition("@")[2] for n, r in first.items()
    }

    third = await run(make(), tree(count, edited=4))
    again = descendants(4)
    assert again == {"s04", "s09", "s10", "s19"}
    assert ran(count) == Counter({f"s{i:02d}": 1 + (f"s{i:02d}" in again) for i in range(STEPS)})
    assert {n for n, r in third.items() if r.reason != CACHED} == again

    # An edit that leaves the output's bytes as they were runs that step alone: its
    # readers' inputs have the same digest, so the same key (as Nextflow's resume).
    fourth = await run(
        make(),
        [
            *tree(count, edited=4)[:4],
            tree(count)[4].model_copy(update={"script": tree(count)[4].script + "# a comment\n"}),
            *tree(count, edited=4)[5:],
        ],
    )
    assert {n for n, r in fourth.items() if r.reason != CACHED} == {"s04"}


async def test_two_studies_share_a_step_and_cache_false_always_runs(
    where: tuple[Callable[..., Session], FakeCluster | None], tmp_path: Path
) -> None:
    make, _ = where
    count = tmp_path / "ran"
    await run(make("one"), tree(count)[:3])
    shared = await run(make("two"), tree(count)[:3])
    assert ran(count) == Counter({"s00": 1, "s01": 1, "s02": 1})
    assert all(r.reason == CACHED for r in shared.values())
    # Re-tagged under the second study's names, pinned to the first one's digests.
    assert all("/two-" in r.outputs["out"] for r in shared.values()), shared

    await run(make("one"), tree(count, cache=False)[:3])
    await run(make("one"), tree(count, cache=False)[:3])
    assert ran(count) == Counter({"s00": 3, "s01": 3, "s02": 3})

    await run(make("one", cache=False), tree(count)[:1])  # the session's option
    assert ran(count)["s00"] == 4
    rerun = make("one")
    async with rerun as s:
        result = await (await s.submit(tree(count)[0], rerun=True)).wait(timeout=60)
    assert result.ok and result.reason != CACHED
    assert ran(count)["s00"] == 5


def study_yaml(count: Path) -> str:
    """Return the 20-step tree as a study file; each step takes a moment to run."""
    lines = ["name: crash", "steps:"]
    for i in range(STEPS):
        lines += [
            f"  - name: s{i:02d}",
            f"    script: echo s{i:02d} >> {count}; sleep 0.4; echo s{i:02d} > out.txt",
            "    outputs: {out: out.txt}",
        ]
        if i:
            lines.append(f"    inputs: {{up: s{(i - 1) // 2:02d}.out}}")
    return "\n".join(lines) + "\n"


async def test_after_kill_9_of_the_driver_the_next_run_runs_each_step_once_in_all(
    where: tuple[Callable[..., Session], FakeCluster | None], tmp_path: Path
) -> None:
    _, cluster = where
    count = tmp_path / "ran"
    (tmp_path / "study.yaml").write_text(study_yaml(count))
    if cluster is None:
        backend = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    else:
        registry = where[0]().store
        assert registry is not None
        backend = [
            "--backend", "kubernetes", "--kubeconfig", str(cluster.kubeconfig_path),
            "--registry", registry, "--plain-http", "--state-dir", str(tmp_path / "state"),
        ]  # fmt: skip
    command = [sys.executable, "-m", "k8sjobs.cli", "run", "study.yaml", "--plain", *backend]

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )

    driver = await start()
    try:
        await wait_until(lambda: len(ran(count)) >= 6, "six steps started", timeout=120)
        driver.kill()  # SIGKILL: no cleanup of any kind
        await driver.communicate()
    finally:
        if driver.returncode is None:
            driver.kill()
            await driver.communicate()
    again = await start()
    out, err = await asyncio.wait_for(again.communicate(), 300)
    assert again.returncode == 0, out.decode() + err.decode()
    assert ran(count) == Counter({f"s{i:02d}": 1 for i in range(STEPS)}), out.decode()


async def test_every_output_carries_its_lineage_and_lineage_walks_it_back(
    tmp_path: Path,
) -> None:
    count = tmp_path / "ran"
    store = f"oci:{tmp_path / 'store'}"
    backend = LocalBackend(state_dir=tmp_path / "state")
    results = await run(Session(study="lin", backend=backend, store=store), tree(count)[:4])
    from k8sjobs.artifacts import open_store
    from k8sjobs.artifacts.lineage import walk

    async with open_store(store) as opened:
        origin = await walk(opened, results["s03"].outputs["out"])  # type: ignore[arg-type]
    assert origin.facts["study"] == "lin" and origin.facts["step"] == "s03"
    assert origin.facts["exit_code"] == "0" and origin.facts["backend"] == "local"
    assert origin.facts["image"] == tree(count)[3].image
    assert origin.facts["key"].startswith("sha256:") and origin.facts["started"]
    (up,) = origin.inputs.values()
    assert up.facts["step"] == "s01" and up.reference == results["s01"].outputs["out"]
    (root,) = up.inputs.values()
    assert root.facts["step"] == "s00" and not root.inputs

    shown = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k8sjobs.cli", "lineage", results["s03"].outputs["out"],
        "--store", store, "--format", "json", "--ro-crate", str(tmp_path / "crate"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(shown.communicate(), 60)
    assert shown.returncode == 0, err.decode()
    data = json.loads(out)
    assert data["step"] == "s03" and data["inputs"]["up"]["inputs"]["up"]["step"] == "s00"
    crate = json.loads((tmp_path / "crate" / "ro-crate-metadata.json").read_text())
    by_id = {entity["@id"]: entity for entity in crate["@graph"]}
    assert {"@id": "https://w3id.org/ro/wfrun/workflow/0.6"} in by_id["./"]["conformsTo"]
    steps = [e for e in crate["@graph"] if e["@type"] == "CreateAction" and e["@id"] != "#run"]
    assert sorted(e["name"] for e in steps) == ["lin/s00", "lin/s01", "lin/s03"]
    assert all(e["actionStatus"]["@id"].endswith("CompletedActionStatus") for e in steps)
    assert json.loads((tmp_path / "crate" / "lineage.json").read_text()) == data


async def test_a_record_whose_outputs_the_store_lost_is_not_reused(tmp_path: Path) -> None:
    count = tmp_path / "ran"
    store = tmp_path / "store"

    def session() -> Session:
        return Session(
            study="lost", backend=LocalBackend(state_dir=tmp_path / "state"), store=f"oci:{store}"
        )

    first = await run(session(), tree(count)[:2])
    from k8sjobs.artifacts import open_store

    async with open_store(f"oci:{store}") as opened:
        data, _, _ = await opened.get_manifest(opened._ref(first["s00"].outputs["out"]))  # type: ignore[attr-defined]
    layer = json.loads(data)["layers"][0]["digest"].split(":")[1]
    (store / "blobs" / "sha256" / layer).unlink()  # a store cleaned by hand
    again = await run(session(), tree(count)[:2])
    assert again["s00"].reason != CACHED  # not taken for a success it cannot hand on
    assert ran(count)["s00"] == 2


async def test_cache_ls_lists_the_records_and_cache_clear_makes_every_step_run(
    tmp_path: Path,
) -> None:
    count = tmp_path / "ran"
    store = f"oci:{tmp_path / 'store'}"

    def session() -> Session:
        return Session(study="clr", backend=LocalBackend(state_dir=tmp_path / "s"), store=store)

    async def cli(*words: str) -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "k8sjobs.cli", "cache", *words, "--store", store,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        return out.decode()

    await run(session(), tree(count)[:3])
    listed = await cli("ls")
    assert sorted(line.split()[1] for line in listed.splitlines()) == [
        "clr/s00",
        "clr/s01",
        "clr/s02",
    ]
    assert await cli("clear") == "forgot 3 recorded results\n"
    assert await cli("ls") == ""
    assert await cli("clear") == "forgot 0 recorded results\n"
    # The same study, whose ended runs of each step are still there to adopt: the docs say
    # the run after a clear runs every step, and it does (it adopted them all, ran none).
    again = await run(session(), tree(count)[:3])
    assert ran(count) == Counter({"s00": 2, "s01": 2, "s02": 2}), again
    assert all(r.reason != CACHED and r.ok for r in again.values())
    assert len((await cli("ls")).splitlines()) == 3  # recorded anew
    await run(session(), tree(count)[:3])
    assert ran(count) == Counter({"s00": 2, "s01": 2, "s02": 2})  # and reused again


async def test_key_env_makes_a_local_step_run_when_the_tool_on_path_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 6: a local step runs this machine's tools, which the key cannot see; a
    step that names PATH in ``key_env`` runs again under another PATH, and is reused under
    the same one."""
    count = tmp_path / "ran"
    for version in ("1", "2"):
        tool = tmp_path / f"bin{version}" / "tool"
        tool.parent.mkdir()
        tool.write_text(f"#!/bin/sh\necho tool {version}\n")
        tool.chmod(0o755)
    step = Step(
        name="use",
        script=f"echo use >> {count}\ntool > out.txt\n",
        outputs={"out": "out.txt"},
        key_env=["PATH"],
    )

    async def with_tool(version: str) -> StepResult:
        monkeypatch.setenv("PATH", f"{tmp_path / f'bin{version}'}:{sys_path}")
        backend = LocalBackend(state_dir=tmp_path / f"state{version}")
        session = Session(study="tool", backend=backend, store=f"oci:{tmp_path / 'store'}")
        return (await run(session, [step]))["use"]

    sys_path = "/usr/bin:/bin"
    assert (await with_tool("1")).reason != CACHED
    assert (await with_tool("1")).reason == CACHED
    assert (await with_tool("2")).reason != CACHED  # another tool: not the stale result
    assert ran(count)["use"] == 2
