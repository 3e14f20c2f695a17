"""The local pod runner, with real processes and real files."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from k8sjobs.local.podrunner import PodRunner
from k8sjobs.render.manifests import render
from k8sjobs.steps.spec import Step

from ..loop_io import loop_file_calls
from ..waiting import wait_until
from .processes import alive


@dataclass
class Cluster:
    """ConfigMaps and Secrets a pod may read, and every status the runner reported."""

    runner: PodRunner
    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, bytes]] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)

    async def run(
        self, pod: Mapping[str, Any], extra_env: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Run a pod to its end and return its final status."""
        return await self.runner.run(
            pod,
            configmap=self.configmaps.__getitem__,
            secret=self.secrets.__getitem__,
            on_status=self.statuses.append,
            extra_env=extra_env,
        )

    def sandbox(self, pod: Mapping[str, Any]) -> Path:
        return self.runner.sandbox(pod["metadata"]["namespace"], pod["metadata"]["name"])


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(PodRunner(tmp_path / "pods", kill_grace=1.0))


def make_pod(
    containers: list[dict[str, Any]],
    *,
    name: str = "step-0-abcde",
    init: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Return a Pod object as a job controller creates it from a Job's template."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers,
        "volumes": volumes or [],
    }
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "demo",
            "labels": labels or {"job-name": "step"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def container(name: str, *command: str, **fields: Any) -> dict[str, Any]:
    """Return a container spec running ``command``."""
    return {"name": name, "image": "busybox", "command": list(command), **fields}


def state(status: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Return the state of one (init) container in a pod status."""
    every = [*status.get("initContainerStatuses", []), *status["containerStatuses"]]
    return dict(next(c for c in every if c["name"] == name)["state"])


def configmap_volume(name: str, configmap: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "configMap": {"name": configmap, **fields}}


def mount(name: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "mountPath": path, **fields}


# ---------------------------------------------------------------------------------------------
# Scripts, interpreters, volumes


@pytest.mark.parametrize(
    ("shell", "script"),
    [
        ("sh", 'echo "hello from sh $0"\n'),
        ("bash", 'echo "hello from bash ${BASH_VERSION:+yes}"\n'),
        ("python3", 'import sys\nprint("hello from", sys.executable)\n'),
    ],
)
async def test_configmap_script_runs_with_the_named_shell(
    cluster: Cluster, shell: str, script: str
) -> None:
    cluster.configmaps["step-cm"] = {"entrypoint": script}
    pod = make_pod(
        [
            container(
                "main",
                shell,
                "/k8sjobs/entrypoint/entrypoint",
                volumeMounts=[mount("entrypoint", "/k8sjobs/entrypoint", readOnly=True)],
            )
        ],
        volumes=[configmap_volume("entrypoint", "step-cm", defaultMode=0o555)],
    )
    status = await cluster.run(pod)
    assert status["phase"] == "Succeeded"
    log = cluster.runner.log_path(pod["metadata"]["name"], "main").read_text()
    assert log.startswith(f"hello from {shell if shell != 'python3' else sys.executable}")
    if shell == "bash":
        assert log == "hello from bash yes\n"


async def test_python_is_the_drivers_interpreter_at_any_path(cluster: Cluster) -> None:
    code = "import sys, k8sjobs; print(sys.executable)"
    pod = make_pod([container("main", "/usr/local/bin/python", "-c", code)])
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    assert cluster.runner.log_path(pod["metadata"]["name"], "main").read_text() == (
        sys.executable + "\n"
    )


async def test_volumes_are_written_with_their_modes(cluster: Cluster) -> None:
    cluster.configmaps["cm"] = {"run.sh": "#!/bin/sh\n", "conf": "a=1"}
    cluster.secrets["creds"] = {"token": b"s3cret", "key": b"k"}
    pod = make_pod(
        [
            container(
                "main",
                "true",
                volumeMounts=[
                    mount("scripts", "/scripts", readOnly=True),
                    mount("creds", "/creds", readOnly=True),
                    mount("work", "/work"),
                ],
            )
        ],
        volumes=[
            configmap_volume(
                "scripts",
                "cm",
                items=[
                    {"key": "run.sh", "path": "bin/run.sh", "mode": 0o555},
                    {"key": "conf", "path": "conf"},
                ],
            ),
            {
                "name": "creds",
                "secret": {
                    "secretName": "creds",
                    "items": [
                        {"key": "token", "path": "token"},
                        {"key": "key", "path": "key", "mode": 0o400},
                    ],
                },
            },
            {"name": "work", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    )
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    volumes = cluster.sandbox(pod) / "volumes"
    assert (volumes / "scripts/bin/run.sh").read_text() == "#!/bin/sh\n"
    assert mode(volumes / "scripts/bin/run.sh") == 0o555
    assert mode(volumes / "scripts/conf") == 0o644
    assert mode(volumes / "scripts") == 0o555  # mounted read-only
    assert (volumes / "creds/token").read_bytes() == b"s3cret"
    assert mode(volumes / "creds/token") == 0o600  # 0644 by default, kept to its owner
    assert mode(volumes / "creds/key") == 0o400
    assert mode(volumes / "work") & 0o200  # a writable emptyDir


async def test_a_rerun_of_the_same_pod_replaces_its_read_only_sandbox(cluster: Cluster) -> None:
    cluster.configmaps["cm"] = {"a": "1"}
    pod = make_pod(
        [container("main", "true", volumeMounts=[mount("cm", "/cm", readOnly=True)])],
        volumes=[configmap_volume("cm", "cm")],
    )
    await cluster.run(pod)
    cluster.configmaps["cm"] = {"b": "2"}
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    assert sorted(p.name for p in (cluster.sandbox(pod) / "volumes/cm").iterdir()) == ["b"]


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# ---------------------------------------------------------------------------------------------
# Path translation and environment


async def test_paths_under_mount_paths_point_into_the_sandbox(cluster: Cluster) -> None:
    cluster.configmaps["cm"] = {
        "run.sh": 'cd "$K8SJOBS_WORKDIR" && echo out > result && printf "%s\\n" "$@" && pwd\n'
    }
    pod = make_pod(
        [
            container(
                "main",
                "sh",
                "/k8sjobs/entrypoint/run.sh",
                "/work/data/x",  # under two mounts: the longer wins
                "/work",
                "/workshop/x",  # not under /work
                "see /work/x",  # does not start with a mount path
                env=[{"name": "K8SJOBS_WORKDIR", "value": "/work/sub"}],
                workingDir="/work",
                volumeMounts=[
                    mount("entrypoint", "/k8sjobs/entrypoint", readOnly=True),
                    mount("work", "/work"),
                    mount("data", "/work/data", subPath="in"),
                ],
            )
        ],
        init=[
            container("mkdir", "mkdir", "-p", "/work/sub", volumeMounts=[mount("work", "/work")])
        ],
        volumes=[
            configmap_volume("entrypoint", "cm"),
            {"name": "work", "emptyDir": {}},
            {"name": "data", "emptyDir": {}},
        ],
    )
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    volumes = cluster.sandbox(pod) / "volumes"
    assert (volumes / "work/sub/result").read_text() == "out\n"
    assert cluster.runner.log_path(pod["metadata"]["name"], "main").read_text().splitlines() == [
        f"{volumes}/data/in/x",
        f"{volumes}/work",
        "/workshop/x",
        "see /work/x",
        f"{volumes}/work/sub",
    ]


async def test_env_comes_from_refs_and_fields_and_nothing_of_the_driver(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIVER_SECRET", "leak")
    cluster.secrets["reg"] = {"password": b"pw"}
    cluster.configmaps["settings"] = {"LEVEL": "3", "MODE": "fast"}
    index = "batch.kubernetes.io/job-completion-index"
    env = [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "reg", "key": "password"}}},
        {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
        {
            "name": "INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{index}']"}},
        },
        {"name": "JOB", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            "name": "GONE",
            "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}},
        },
        {"name": "WHO", "value": "$(POD)-$(INDEX) $$(POD) $(UNDEFINED)"},
    ]
    pod = make_pod(
        [
            container(
                "main",
                "env",
                env=env,
                envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            )
        ],
        annotations={index: "2"},
    )
    pod["spec"]["hostname"] = "step-2"
    assert (await cluster.run(pod, extra_env={"EXTRA": "1"}))["phase"] == "Succeeded"
    lines = cluster.runner.log_path(pod["metadata"]["name"], "main").read_text().splitlines()
    seen = dict(line.split("=", 1) for line in lines)
    sandbox = cluster.sandbox(pod)
    assert seen == {
        "PATH": os.environ["PATH"],
        **{k: v for k, v in os.environ.items() if k == "LANG" or k.startswith("LC_")},
        "HOME": f"{sandbox}/home",
        "TMPDIR": f"{sandbox}/tmp",
        "HOSTNAME": "step-2",
        "PASSWORD": "pw",
        "LEVEL": "3",
        "CFG_LEVEL": "3",
        "CFG_MODE": "fast",
        "INDEX": "2",
        "JOB": "step",
        "POD": "step-0-abcde",
        "NS": "demo",
        "WHO": "step-0-abcde-2 $(POD) $(UNDEFINED)",
        "EXTRA": "1",
        "K8SJOBS_USAGE": "keeper",  # the wrapper leaves the machine's cgroup alone
    }


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("volume", 'configmap "absent" not found'),
        ("env", "couldn't find key password in Secret demo/reg"),
    ],
)
async def test_a_missing_source_leaves_the_pod_pending_with_a_config_error(
    cluster: Cluster, where: str, message: str
) -> None:
    cluster.secrets["reg"] = {"user": b"me"}
    main = container("main", "true")
    volumes = []
    if where == "volume":
        main["volumeMounts"] = [mount("cm", "/cm")]
        volumes = [configmap_volume("cm", "absent")]
    else:
        main["env"] = [
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "reg", "key": "password"}}}
        ]
    pod = make_pod([main], volumes=volumes)
    status = await cluster.run(pod)
    assert status["phase"] == "Pending"
    assert state(status, "main") == {
        "waiting": {"reason": "CreateContainerConfigError", "message": message}
    }
    assert cluster.statuses[-1] == status


# ---------------------------------------------------------------------------------------------
# Init containers, exit codes, logs


async def test_a_failed_init_container_fails_the_pod(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "main-ran"
    pod = make_pod(
        [container("main", "touch", str(marker))],
        init=[
            container("first", "true"),
            container("second", "sh", "-c", "exit 3"),
            container("third", "true"),
        ],
    )
    status = await cluster.run(pod)
    assert status["phase"] == "Failed"
    assert state(status, "first")["terminated"]["reason"] == "Completed"
    assert state(status, "second")["terminated"]["exitCode"] == 3
    assert state(status, "second")["terminated"]["reason"] == "Error"
    assert state(status, "third") == {"waiting": {"reason": "PodInitializing"}}
    assert state(status, "main") == {"waiting": {"reason": "PodInitializing"}}
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert initialized["status"] == "False"
    assert initialized["reason"] == "ContainersNotInitialized"
    assert not marker.exists()


async def test_exit_codes_decide_the_phase(cluster: Cluster) -> None:
    pod = make_pod(
        [
            container("ok", "true"),
            container("bad", "sh", "-c", "exit 7"),
            container("killed", "sh", "-c", "kill -9 $$$$"),  # Kubernetes turns $$ into $
        ]
    )
    status = await cluster.run(pod)
    assert status["phase"] == "Failed"
    assert state(status, "ok")["terminated"]["exitCode"] == 0
    assert state(status, "bad")["terminated"]["exitCode"] == 7
    assert state(status, "killed")["terminated"]["exitCode"] == 137
    assert state(status, "killed")["terminated"]["reason"] == "Error"


async def test_a_missing_executable_is_a_start_error(cluster: Cluster) -> None:
    pod = make_pod([container("main", "no-such-interpreter", "x"), container("ok", "true")])
    status = await cluster.run(pod)
    assert status["phase"] == "Failed"
    terminated = state(status, "main")["terminated"]
    assert terminated["exitCode"] == 128
    assert terminated["reason"] == "StartError"
    assert '"no-such-interpreter": executable file not found in $PATH' in terminated["message"]


async def test_a_container_without_command_names_itself(cluster: Cluster) -> None:
    pod = make_pod([{"name": "main", "image": "ghcr.io/acme/sim:1"}])
    terminated = state(await cluster.run(pod), "main")["terminated"]
    assert terminated["reason"] == "StartError"
    assert 'container "main" has no command' in terminated["message"]
    assert "ghcr.io/acme/sim:1" in terminated["message"]


async def test_logs_are_written_while_the_container_runs(cluster: Cluster) -> None:
    script = "echo out; echo err >&2; sleep 30"
    pod = make_pod([container("main", "sh", "-c", script)])
    log = cluster.runner.log_path("step-0-abcde", "main", namespace="demo")
    task = asyncio.create_task(cluster.run(pod))
    try:
        await wait_until(lambda: log.exists() and log.read_text() == "out\nerr\n")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# ---------------------------------------------------------------------------------------------
# Ending: leftovers, cancellation, memory


async def test_processes_left_behind_by_a_container_are_killed(
    cluster: Cluster, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child"
    pod = make_pod([container("main", "sh", "-c", f"sleep 1000 & echo $! > {pidfile}")])
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    await wait_until(lambda: not alive(int(pidfile.read_text())), "the left-behind child is gone")


async def test_cancel_terminates_the_whole_process_tree(cluster: Cluster, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = f'sleep 1000 & echo "$$$$ $!" > {pidfile}; wait'  # $$ is Kubernetes' escape of $
    pod = make_pod([container("main", "sh", "-c", script)])
    task = asyncio.create_task(cluster.run(pod))
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"))
    pids = [int(pid) for pid in pidfile.read_text().split()]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(alive(pid) for pid in pids)
    final = cluster.statuses[-1]
    assert final["phase"] == "Failed"
    terminated = state(final, "main")["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")


async def test_cancel_kills_a_container_that_ignores_sigterm(
    cluster: Cluster, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    script = f'trap "" TERM; touch {ready}; sleep 1000'
    pod = make_pod([container("main", "sh", "-c", script)])
    task = asyncio.create_task(cluster.run(pod))
    await wait_until(ready.exists)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    terminated = state(cluster.statuses[-1], "main")["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    pid = int(state_id(cluster.statuses[-1], "main"))
    assert not alive(pid)


def state_id(status: Mapping[str, Any], name: str) -> str:
    terminated = state(status, name)["terminated"]
    return str(terminated["containerID"]).removeprefix("local://")


async def test_memory_over_the_limit_is_oomkilled(cluster: Cluster) -> None:
    hog = "import time\nb = b'x' * (200 * 2**20)\ntime.sleep(30)\n"
    pod = make_pod(
        [container("main", "python3", "-c", hog, resources={"limits": {"memory": "64Mi"}})]
    )
    with anyio.fail_after(10):
        status = await cluster.run(pod)
    terminated = state(status, "main")["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")
    assert status["phase"] == "Failed"


async def test_memory_under_the_limit_runs(cluster: Cluster) -> None:
    pod = make_pod(
        [container("main", "sh", "-c", "sleep 0.7", resources={"limits": {"memory": "1Gi"}})]
    )
    assert (await cluster.run(pod))["phase"] == "Succeeded"


# ---------------------------------------------------------------------------------------------
# Status shape


TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def test_status_moves_through_the_kubelets_shapes(cluster: Cluster) -> None:
    pod = make_pod([container("main", "sh", "-c", "sleep 0.2")], init=[container("init", "true")])
    final = await cluster.run(pod)
    seen = cluster.statuses
    assert seen[-1] == final
    assert [s["phase"] for s in seen] == ["Pending"] * 4 + ["Running", "Running", "Succeeded"]
    not_ready = "False ContainersNotReady"
    initializing = "False ContainersNotInitialized"
    assert [conditions(s) for s in seen] == [
        expected_conditions("False", initializing, not_ready),
        expected_conditions("True", initializing, not_ready),
        expected_conditions("True", initializing, not_ready),
        expected_conditions("True", "True", not_ready),
        expected_conditions("True", "True", "True"),
        expected_conditions("True", "True", not_ready),
        expected_conditions("True", "True", "False PodCompleted"),
    ]
    assert [c["type"] for c in final["conditions"]] == list(expected_conditions("", "", ""))
    assert seen[0]["conditions"][2]["message"] == "containers with unready status: [main]"
    assert [list(state(s, "init")) + list(state(s, "main")) for s in seen] == [
        ["waiting", "waiting"],
        ["waiting", "waiting"],
        ["running", "waiting"],
        ["terminated", "waiting"],
        ["terminated", "running"],
        ["terminated", "terminated"],
        ["terminated", "terminated"],
    ]
    main = final["containerStatuses"][0]
    assert set(main) == {
        "name",
        "state",
        "lastState",
        "ready",
        "restartCount",
        "image",
        "imageID",
        "containerID",
        "started",
    }
    assert (main["ready"], main["started"], main["restartCount"]) == (False, False, 0)
    assert main["containerID"].startswith("local://")
    terminated = main["state"]["terminated"]
    keys = {"exitCode", "reason", "startedAt", "finishedAt", "containerID", "message"}
    assert set(terminated) == keys
    assert terminated["message"].startswith("k8sjobs-usage v1 src=rusage wall_ms=")
    assert TIMESTAMP.match(terminated["startedAt"]) and TIMESTAMP.match(final["startTime"])
    assert final["initContainerStatuses"][0]["ready"] is True
    assert (final["hostIP"], final["podIP"]) == ("127.0.0.1", "127.0.0.1")
    assert final["qosClass"] == "BestEffort"
    running = seen[4]["containerStatuses"][0]
    assert (running["ready"], running["started"]) == (True, True)


def expected_conditions(ready_to_start: str, initialized: str, ready: str) -> dict[str, str]:
    """Return conditions as ``conditions`` shows them, in a kubelet's order."""
    return {
        "PodReadyToStartContainers": ready_to_start,
        "Initialized": initialized,
        "Ready": ready,
        "ContainersReady": ready,
        "PodScheduled": "True",
    }


def conditions(status: Mapping[str, Any]) -> dict[str, str]:
    """Return each condition's type mapped to its status and reason, in the status's order."""
    return {
        c["type"]: " ".join(filter(None, [c["status"], c.get("reason")]))
        for c in status["conditions"]
    }


async def test_the_event_loop_thread_does_no_proc_scan_or_volume_write(cluster: Cluster) -> None:
    cluster.configmaps["cm"] = {f"file-{i}": "x" * 10_000 for i in range(50)}
    pod = make_pod(
        [
            container(
                "main",
                "sh",
                "-c",
                "sleep 1",
                resources={"limits": {"memory": "1Gi"}},
                volumeMounts=[mount("cm", "/cm")],
            )
        ],
        volumes=[configmap_volume("cm", "cm")],
    )
    # Seen through audit hooks, not timed: the loop's thread neither scans /proc (the memory
    # limit's watch) nor writes the ConfigMap's files; worker threads do.
    with loop_file_calls() as calls:
        status = await cluster.run(pod)
    assert status["phase"] == "Succeeded"
    assert [call for call in calls if call[1].startswith("/proc") or "/file-" in call[1]] == []


async def test_a_rendered_step_runs_unchanged(cluster: Cluster) -> None:
    script = 'echo hi > "$K8SJOBS_WORKDIR/out"; cat out; pwd; echo "$K8SJOBS_ENTRYPOINT"'
    step = Step(name="hello", image="python:3.11", shell="bash", script=script)
    manifests = render(step)
    template = manifests.job["spec"]["template"]
    pod = {
        "metadata": {**template["metadata"], "name": "hello-0-x1y2z", "namespace": "demo"},
        "spec": template["spec"],
    }
    configmap = manifests.configmap
    cluster.configmaps[configmap["metadata"]["name"]] = configmap["data"]
    status = await cluster.run(pod)
    assert status["phase"] == "Succeeded", status
    volumes = cluster.sandbox(pod) / "volumes"
    assert cluster.runner.log_path("hello-0-x1y2z", "step").read_text().splitlines() == [
        "hi",
        f"{volumes}/work",
        f"{volumes}/entrypoint/entrypoint",
    ]


async def test_cancel_during_init_fails_the_pod_and_starts_nothing_more(
    cluster: Cluster, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    pod = make_pod(
        [container("main", "true")],
        init=[container("init", "sh", "-c", f"touch {ready}; sleep 1000")],
    )
    task = asyncio.create_task(cluster.run(pod))
    await wait_until(ready.exists)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    final = cluster.statuses[-1]
    assert final["phase"] == "Failed"
    assert state(final, "init")["terminated"]["exitCode"] == 143
    assert state(final, "main") == {"waiting": {"reason": "PodInitializing"}}


async def test_downward_api_projected_and_host_path_volumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "shared").mkdir()
    cluster.configmaps["ca"] = {"ca.crt": "CERT"}
    index = "batch.kubernetes.io/job-completion-index"
    downward = {
        "items": [{"path": "index", "fieldRef": {"fieldPath": f"metadata.annotations['{index}']"}}]
    }
    projected = {
        "sources": [
            {"serviceAccountToken": {"path": "token"}},
            {"configMap": {"name": "ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ]
    }
    # Paths inside a shell string are not translated; the script finds them in the env.
    script = 'cat "$I/index" "$S/ca.crt" "$S/namespace" > "$O/out"'
    env = [{"name": n, "value": v} for n, v in (("I", "/info"), ("S", "/sa"), ("O", "/shared"))]
    pod = make_pod(
        [
            container(
                "main",
                "sh",
                "-c",
                script,
                env=env,
                volumeMounts=[
                    mount("info", "/info"),
                    mount("sa", "/sa"),
                    mount("shared", "/shared"),
                ],
            )
        ],
        volumes=[
            {"name": "info", "downwardAPI": downward},
            {"name": "sa", "projected": projected},
            {"name": "shared", "hostPath": {"path": str(tmp_path / "shared")}},
        ],
        annotations={index: "4"},
    )
    assert (await cluster.run(pod))["phase"] == "Succeeded"
    assert (tmp_path / "shared/out").read_text() == "4CERTdemo"
    assert (cluster.sandbox(pod) / "volumes/sa/token").read_bytes() == b""


async def test_a_working_dir_outside_every_mount_is_a_start_error(cluster: Cluster) -> None:
    pod = make_pod([container("main", "true", workingDir="/nonexistent/place")])
    terminated = state(await cluster.run(pod), "main")["terminated"]
    assert terminated["reason"] == "StartError"
    assert 'workingDir "/nonexistent/place"' in terminated["message"]
