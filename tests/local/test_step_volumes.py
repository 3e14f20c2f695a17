"""Step volumes run locally and on the fake cluster: the same study, real files, real processes.

A claim is a directory shared by every step (and run) that names it; NFS is a mapped
directory or a clear error; ConfigMaps and Secrets come from the backend's objects (locally)
or the API server (fake cluster); emptyDirs and /dev/shm are per-pod directories.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from k8sjobs import Session, Step, StepState
from k8sjobs.local import LocalBackend
from k8sjobs.local._volumedirs import ENV_VOLUMES, parse_volume_map
from k8sjobs.study import StudyRun, parse_study

CLAIM = {"name": "shared", "claim": "results", "mount_path": "/results"}
ENV = {"RESULTS": "/results"}


def local(state: Path, **options: Any) -> LocalBackend:
    return LocalBackend(state_dir=state, kill_grace=0.5, **options)


async def run(session: Session, *steps: Step) -> list[Any]:
    handles = [await session.submit(s) for s in steps]
    return list(await session.gather(*handles, timeout=60))


async def test_a_claim_is_shared_by_steps_and_runs(tmp_path: Path) -> None:
    write = Step(name="write", script='echo 42 > "$RESULTS/n"', env=ENV, volumes=[CLAIM])
    read = Step(name="read", script='cat "$RESULTS/n"', env=ENV, volumes=[CLAIM])
    async with Session(study="claims", backend=local(tmp_path / "state")) as session:
        [first] = await run(session, write)
        [second] = await run(session, read)
        assert (first.state, second.state) == (StepState.SUCCEEDED, StepState.SUCCEEDED)
        assert await session.handles["read"].logs() == "42\n"
    claim = tmp_path / "state" / "claims" / "default" / "results"
    assert (claim / "n").read_text() == "42\n"
    # Another run (another session) finds the claim's files where the first left them.
    again = Step(name="again", script='cat "$RESULTS/n"', env=ENV, volumes=[CLAIM])
    async with Session(study="claims", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, again)
        assert result.state is StepState.SUCCEEDED
        assert await session.handles["again"].logs() == "42\n"


async def test_a_claim_mapped_to_a_directory_uses_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("from the user\n")
    volume = {**CLAIM, "read_only": True}
    s = Step(name="reads", script='cat "$RESULTS/input.txt"', env=ENV, volumes=[volume])
    backend = local(tmp_path / "state", volumes={"results": str(data)})
    async with Session(study="mapped", backend=backend) as session:
        [result] = await run(session, s)
        assert result.state is StepState.SUCCEEDED, result.describe()
        assert await session.handles["reads"].logs() == "from the user\n"


async def test_the_environment_maps_volumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    monkeypatch.setenv(ENV_VOLUMES, f"nfs.example.org:/export={share}")
    nfs = {"name": "n", "nfs": {"server": "nfs.example.org", "path": "/export"}, "mount_path": "/n"}
    s = Step(name="touch", script='echo hi > "$SHARE/f"', env={"SHARE": "/n"}, volumes=[nfs])
    async with Session(study="env", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, s)
        assert result.state is StepState.SUCCEEDED, result.describe()
    assert (share / "f").read_text() == "hi\n"


async def test_an_unmapped_nfs_share_fails_saying_how_to_map_it(tmp_path: Path) -> None:
    nfs = {"name": "scratch", "nfs": {"server": "10.1.2.3", "path": "/e"}, "mount_path": "/s"}
    async with Session(study="nfs", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, Step(name="n", script="true", volumes=[nfs]))
    assert result.state is StepState.FAILED
    assert 'volume "scratch"' in result.message
    assert 'LocalBackend(volumes={"10.1.2.3:/e": "/local/dir"})' in result.message
    assert f'{ENV_VOLUMES}="10.1.2.3:/e=/local/dir"' in result.message


async def test_config_maps_secrets_empty_dirs_and_shm_locally(tmp_path: Path) -> None:
    script = """
set -e
cat "$CONF/settings.toml"; echo
cat "$TOKEN/token"; echo
stat -c %a "$TOKEN/token"
echo scratch > "$SCRATCH/x"; cat "$SCRATCH/x"
test -d "$SHM" && test -w "$SHM" && echo shm ok
"""
    volumes = [
        {
            "name": "conf",
            "config_map": "app",
            "items": {"s": "settings.toml"},
            "mount_path": "/etc/app",
        },
        {"name": "token", "secret": "hub", "mode": 0o440, "mount_path": "/etc/token"},
        {"name": "scratch", "empty_dir": {"size_limit": "1Gi"}, "mount_path": "/scratch"},
    ]
    env = {"CONF": "/etc/app", "TOKEN": "/etc/token", "SCRATCH": "/scratch", "SHM": "/dev/shm"}
    s = Step(name="files", script=script, env=env, volumes=volumes, shm="64Mi")
    backend = local(
        tmp_path / "state",
        configmaps={"app": {"s": "answer = 42"}},
        secrets={"hub": {"token": "t0ken"}},
    )
    async with Session(study="files", backend=backend) as session:
        [result] = await run(session, s)
        assert result.state is StepState.SUCCEEDED, result.describe()
        assert await session.handles["files"].logs() == (
            "answer = 42\nt0ken\n400\nscratch\nshm ok\n"  # secret files keep the owner's bits
        )
    assert "t0ken" not in repr(backend.objects)


async def test_a_missing_config_map_fails_naming_it(tmp_path: Path) -> None:
    conf = {"name": "conf", "config_map": "absent", "mount_path": "/etc/app"}
    async with Session(study="missing", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, Step(name="m", script="true", volumes=[conf]))
    assert result.state is StepState.FAILED
    assert result.reason == "CreateContainerConfigError"
    assert '"absent"' in result.message


async def test_a_claim_under_the_work_directory_is_reached_by_relative_paths(
    tmp_path: Path,
) -> None:
    nested = {"name": "cache", "claim": "cache", "mount_path": "/work/cache", "sub_path": "v1"}
    s = Step(name="nested", script="echo kept > cache/f; cat cache/f", volumes=[nested])
    async with Session(study="nested", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, s)
        assert result.state is StepState.SUCCEEDED, result.describe()
    assert (tmp_path / "state/claims/default/cache/v1/f").read_text() == "kept\n"


async def test_host_paths_are_the_host_directory(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "tool").write_text("tool\n")
    volume = {"name": "host", "host_path": str(host), "mount_path": "/opt/tools"}
    s = Step(name="h", script='cat "$TOOLS/tool"', env={"TOOLS": "/opt/tools"}, volumes=[volume])
    async with Session(study="host", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, s)
        assert result.state is StepState.SUCCEEDED, result.describe()
        assert await session.handles["h"].logs() == "tool\n"


async def test_scheduling_knobs_are_ignored_locally_with_a_debug_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Step(
        name="placed",
        script="echo ran",
        priority_class="high",
        runtime_class="nvidia",
        affinity={"required": [{"key": "gpu", "operator": "Exists"}]},
        spread="hostname",
    )
    caplog.set_level(logging.DEBUG, logger="k8sjobs.local.backend")
    async with Session(study="knobs", backend=local(tmp_path / "state")) as session:
        [result] = await run(session, s)
    assert result.state is StepState.SUCCEEDED
    lines = [r.getMessage() for r in caplog.records if "ignores" in r.getMessage()]
    assert lines == [
        "step placed: the local backend ignores priorityClassName, runtimeClassName, "
        "affinity, topologySpreadConstraints"
    ]


@pytest.mark.parametrize("text", ["noequals", "=/x", "a=", "a=/x,,b"])
def test_volume_maps_are_name_equals_directory(text: str) -> None:
    if text == "a=/x,,b":
        with pytest.raises(ValueError, match='"b" is not name=/directory'):
            parse_volume_map(text)
        return
    with pytest.raises(ValueError, match="is not name=/directory"):
        parse_volume_map(text)


# --- the same study, locally and on the fake cluster --------------------------------------

STUDY = """
name: volumes
defaults:
  env: {RESULTS: /results, CONF: /etc/app, SHM: /dev/shm}
  volumes:
    - {name: shared, claim: results, mount_path: /results}
    - {name: conf, config_map: app, mount_path: /etc/app, items: {greeting: greeting.txt}}
  shm: 64Mi
  spread: hostname
  priority_class: normal
steps:
  - name: produce
    script: cat "$CONF/greeting.txt" > "$RESULTS/out.txt"; echo made
  - name: consume
    depends: [produce]
    script: test -w "$SHM" && cat "$RESULTS/out.txt"
"""


async def run_study(session: Session) -> dict[str, tuple[StepState, str]]:
    results = await StudyRun(parse_study(STUDY), session).run()
    return {r.name: (r.state, await session.handles[r.name].logs()) for r in results}


def priority_class(name: str) -> dict[str, Any]:
    """Return a PriorityClass named ``name``, as a cluster admin would create it."""
    meta = {"name": name}
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": meta,
        "value": 1000,
    }


async def test_the_same_study_runs_locally_and_on_the_fake_cluster(tmp_path: Path) -> None:
    from k8sjobs.testing import ControllerConfig, FakeCluster

    backend = local(tmp_path / "local", configmaps={"app": {"greeting": "hello"}})
    async with Session(study="volumes", backend=backend) as session:
        here = await run_study(session)
    (tmp_path / "cluster").mkdir()
    timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster", controller=timings) as cluster,
        Session(
            study="volumes",
            backend="kubernetes",
            kubeconfig=cluster.kubeconfig_path,
            log_dir=tmp_path / "logs",
        ) as session,
    ):
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}}
        cluster.store.create("configmaps", "default", {**configmap, "data": {"greeting": "hello"}})
        # Admission refuses a pod naming a PriorityClass the cluster lacks, as a real one does.
        cluster.store.create("priorityclasses", "", priority_class("normal"))
        there = await run_study(session)
        job = cluster.get("jobs", session.handles["consume"].object_name)
        assert job is not None
        spec = job["spec"]["template"]["spec"]
        assert spec["priorityClassName"] == "normal"
        assert {v["name"] for v in spec["volumes"]} >= {"shared", "conf", "k8sjobs-shm"}
    assert (
        here
        == there
        == {
            "produce": (StepState.SUCCEEDED, "made\n"),
            "consume": (StepState.SUCCEEDED, "hello"),
        }
    )
    # Each backend keeps the claim as a directory: under its state dir, under the cluster's.
    assert (tmp_path / "local/claims/default/results/out.txt").read_text() == "hello"
    assert (tmp_path / "cluster/claims/default/results/out.txt").read_text() == "hello"


async def test_fake_cluster_refuses_nothing_of_a_full_volume_and_scheduling_step(
    tmp_path: Path,
) -> None:
    from k8sjobs.testing import FakeCluster

    volumes = [
        {"name": "c", "claim": "c", "mount_path": "/c", "read_only": True, "sub_path": "a"},
        {"name": "n", "nfs": {"server": "nfs", "path": "/e"}, "mount_path": "/n"},
        {"name": "m", "config_map": "m", "items": {"k": "f"}, "mode": 0o444, "mount_path": "/m"},
        {"name": "s", "secret": "s", "mode": 0o400, "mount_path": "/s"},
        {"name": "e", "empty_dir": {"medium": "Memory", "size_limit": "1Gi"}, "mount_path": "/e"},
        {"name": "h", "host_path": "/opt", "mount_path": "/h"},
    ]
    s = Step(
        name="full",
        script="true",
        volumes=volumes,
        shm="1Gi",
        resources={"nodes": 2, "tasks": 2},
        priority_class="p",
        runtime_class="r",
        affinity={
            "required": [{"key": "a", "operator": "Gt", "values": ["3"]}],
            "preferred": [{"key": "b", "operator": "DoesNotExist", "weight": 100}],
        },
        spread="zone",
    )
    async with (
        FakeCluster("simulate", directory=tmp_path, validation="always") as cluster,
        Session(study="full", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as session,
    ):
        # What the step names must exist, as on a real cluster: admission refuses a pod whose
        # classes are missing, and a kubelet waits for its ConfigMap and Secret volumes.
        cluster.store.create("priorityclasses", "", priority_class("p"))
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}}
        cluster.store.create("configmaps", "default", {**configmap, "data": {"k": "v"}})
        named = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
        cluster.store.create("secrets", "default", {**named, "data": {"k": "dg=="}})
        runtime = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runc"}
        cluster.store.create("runtimeclasses", "", {**runtime, "metadata": {"name": "r"}})
        handle = await session.submit(s)
        result = await handle.wait(timeout=30)
        assert result.state is StepState.SUCCEEDED, result.describe()
        stored = cluster.get("jobs", handle.object_name)
        assert stored is not None
        pod_volumes = stored["spec"]["template"]["spec"]["volumes"]
        secret = next(v for v in pod_volumes if v["name"] == "s")
        assert secret["secret"]["defaultMode"] == 0o400
