"""Rendering: every manifest is valid Kubernetes, and says exactly what the Step asks for.

A hypothesis sweep checks every rendered object against the strict JSON schema of the newest
Kubernetes release kubernetes-validate ships; targeted tests pin the meaning (restart policy,
mounts, resources, MPI wiring, Kueue, hashing, secrets, purity); golden files pin the bytes.
Set K8SJOBS_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change.
"""

from __future__ import annotations

import base64
import builtins
import functools
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_validate import utils as kv
from pydantic import SecretStr

from k8sjobs.render.manifests import (
    LABEL_HASH,
    LABEL_STEP,
    LABEL_STUDY,
    MEASURE_WRAPPER,
    Manifests,
    Target,
    expand_launcher,
)
from k8sjobs.render.manifests import render as render_any
from k8sjobs.render.multinode import SshKey
from k8sjobs.steps.names import is_dns_label
from k8sjobs.steps.spec import KNOWN_SHELLS, Resources, SecretKeyRef, Step, StepOutput, Toleration

from ..ssh_keys import TEST_KEY

GOLDEN = Path(__file__).parents[1] / "golden"


def render(
    step: Step,
    target: Target | None = None,
    *,
    inputs: dict[str, str] | None = None,
    ssh_key: SshKey | None = TEST_KEY,
) -> Manifests:
    """Render with the fixed test key pair (a multi-node ssh step needs one)."""
    return render_any(step, target or Target(), inputs=inputs or {}, ssh_key=ssh_key)


K8S_VERSION = kv.latest_version()
STORE = Target(study="genome", namespace="science", store="registry.example:5000/k8sjobs")

# --- schema validation -------------------------------------------------------------------


@functools.cache
def _definitions() -> Any:
    return kv.schema_contents(
        f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json", K8S_VERSION
    )


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.Draft202012Validator:
    # kubernetes_validate.validate() reloads and recompiles the schemas on every call; the
    # sweep validates hundreds of objects, so build each validator once, the same way.
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = kv.schema_contents(
        f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/{kind.lower()}-{group}.json",
        K8S_VERSION,
    )
    registry: referencing.Registry[Any] = referencing.Registry()
    registry = referencing.Resource.from_contents(schema) @ registry
    registry = referencing.Resource.from_contents(_definitions()) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def assert_valid(manifests: Manifests) -> None:
    """Assert every object passes the strict schema and the API server's naming rules."""
    for obj in manifests.objects():
        _validator(obj["kind"], obj["apiVersion"]).validate(obj)
        meta = obj["metadata"]
        assert is_dns_label(meta["name"]) and len(meta["name"]) <= 52
        if obj["kind"] == "Service":
            assert _DNS_1035.match(meta["name"])
        for value in meta["labels"].values():
            assert len(value) <= 63 and _LABEL_VALUE.match(value), value
    # Everything must survive the trip through YAML unchanged: that is what kubectl sends.
    assert list(yaml.safe_load_all(manifests.to_yaml())) == manifests.objects()


def test_schema_version_is_recent() -> None:
    assert tuple(map(int, K8S_VERSION.split(".")[:2])) >= (1, 33)


def test_validator_rejects_a_broken_job() -> None:
    job = render(Step(name="a", script="true")).job
    job["spec"]["template"]["spec"]["restartPolicy"] = 3
    with pytest.raises(jsonschema.ValidationError):
        _validator("Job", "batch/v1").validate(job)
    job["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    job["spec"]["completionz"] = 1  # strict mode refuses unknown fields
    with pytest.raises(jsonschema.ValidationError):
        _validator("Job", "batch/v1").validate(job)


# --- the sweep ---------------------------------------------------------------------------

SECRET_MARK = "SeCrEtVaLuE"
SHELLS = [*KNOWN_SHELLS, "/bin/bash", "/usr/bin/env python3", "/bin/bash -eu", "/opt/x/bin/r"]
QUANTITIES = ["4Gi", "500M", "1.5Gi", "1e9", 2**21, "128Mi", "2G"]
CPUS = ["250m", 0.5, "2", 1.5, "100m"]
env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: not n.startswith("K8SJOBS_")
)
dns = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
label_values = st.from_regex(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?)?", fullmatch=True)
env_values = st.one_of(
    st.text(st.characters(blacklist_characters="\0"), max_size=20),  # NUL: refused by Step
    st.builds(
        lambda t: SecretStr(SECRET_MARK + t), st.from_regex(r"[a-z0-9]{4,8}", fullmatch=True)
    ),
    st.builds(SecretKeyRef, secret=dns, key=st.from_regex(r"[a-z.]{1,8}", fullmatch=True)),
)
tolerations = st.one_of(
    st.builds(Toleration, operator=st.just("Exists")),
    st.builds(
        Toleration,
        key=st.sampled_from(["gpu", "example.com/dedicated"]),
        value=label_values,
        effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", None]),
    ),
    st.builds(
        Toleration,
        key=st.just("node.kubernetes.io/unreachable"),
        operator=st.just("Exists"),
        effect=st.just("NoExecute"),
        toleration_seconds=st.integers(0, 600),
    ),
)


@st.composite
def resources(draw: st.DrawFn) -> Resources:
    nodes = draw(st.integers(1, 4))
    return Resources(
        nodes=nodes,
        tasks=draw(st.integers(nodes, nodes * 4)),
        cores_per_task=draw(st.integers(1, 4)),
        gpus=draw(st.integers(0, 2)),
        gpu_resource=draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"])),
        memory=draw(st.one_of(st.none(), st.sampled_from(QUANTITIES))),
        cpu=draw(st.one_of(st.none(), st.sampled_from(CPUS))),
    )


@st.composite
def launcher_calls(draw: st.DrawFn, res: Resources) -> str:
    per_node = res.tasks_per_node
    nodes = draw(st.integers(1, res.nodes))
    procs = draw(st.integers(1, min(res.tasks, nodes * per_node)))
    return draw(
        st.sampled_from(
            [
                "$(LAUNCHER)",
                f"$(LAUNCHER)[{procs}p]",
                f"$(LAUNCHER)[{nodes}n]",
                f"$(LAUNCHER)[{nodes}n, {procs}p]",
            ]
        )
    )


@st.composite
def steps(draw: st.DrawFn) -> Step:
    res = draw(resources())
    calls = draw(st.lists(launcher_calls(res), max_size=3))
    script = "\n".join(["set -e", *(f"{c} ./solver --in data" for c in calls), "echo done"])
    outputs = draw(
        st.dictionaries(
            st.sampled_from(["model", "log", "result.csv"]),
            st.sampled_from(["out/model.pt", "run.log", "a/b/c.csv"]),
            max_size=2,
        )
    )
    inputs = draw(
        st.dictionaries(
            st.sampled_from(["data", "weights"]),
            st.one_of(
                st.just("registry.example:5000/datasets/genome@sha256:" + "a" * 64),
                st.builds(StepOutput, step=st.just("Prepare data"), output=st.just("table")),
            ),
            max_size=2,
        )
    )
    return Step(
        name=draw(st.text(min_size=1, max_size=80).filter(lambda t: t.isprintable() and t.strip())),
        script=script,
        shell=draw(st.sampled_from(SHELLS)),
        image=draw(st.sampled_from(["python:3.12-slim", "ghcr.io/org/mpi:4.1@sha256:" + "b" * 64])),
        resources=res,
        env=draw(st.dictionaries(env_names, env_values, max_size=4)),
        workdir=draw(st.sampled_from(["/work", "/scratch/run", "/home/user/w"])),
        labels=draw(st.dictionaries(st.sampled_from(["team", "example.com/run"]), label_values)),
        annotations=draw(
            st.dictionaries(st.sampled_from(["note", "a.io/b"]), st.text(max_size=30))
        ),
        namespace=draw(st.one_of(st.none(), dns)),
        retries=draw(st.integers(0, 5)),
        walltime=draw(st.one_of(st.none(), st.sampled_from([3600, "01:00:00", "1h30m", "90s"]))),
        ttl_after_finished=draw(st.one_of(st.none(), st.integers(0, 86400))),
        node_selector=draw(
            st.dictionaries(st.sampled_from(["zone", "gpu.io/model"]), label_values)
        ),
        tolerations=draw(st.lists(tolerations, max_size=2)),
        service_account=draw(st.one_of(st.none(), dns)),
        image_pull_secrets=draw(st.lists(dns, max_size=2)),
        queue=draw(st.one_of(st.none(), dns)),
        inputs=inputs,
        outputs=outputs,
        launcher=draw(
            st.sampled_from(
                [
                    "mpirun -np {procs} --host {hosts}",
                    "mpiexec -n {procs} -ppn {procs_per_node} -hosts {hosts}",
                    "mpirun -np {procs} --map-by ppr:{procs_per_node}:node:pe={cores_per_task}",
                ]
            )
        ),
        security=draw(st.sampled_from(["default", "restricted"])),
        launch=draw(st.sampled_from([None, "ssh", "none"])),
        mpi=draw(st.sampled_from(["openmpi", "mpich", "intel"])),
        ssh_dir=draw(st.sampled_from([None, "/home/mpiuser/.ssh"])),
    )


targets = st.builds(
    Target,
    study=st.text(max_size=60),
    namespace=dns,
    store=st.sampled_from(["registry.example:5000/k8sjobs", "oci:/var/k8sjobs/store"]),
    plain_http=st.booleans(),
    registry_secret=st.one_of(st.none(), dns),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=steps(), target=targets)
def test_every_rendered_object_is_valid_kubernetes(step: Step, target: Target) -> None:
    manifests = render(step, target)
    assert_valid(manifests)
    assert_secrets_only_in_secret(step, manifests)
    job = manifests.job
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == step.resources.nodes
    assert (manifests.service is not None) == (step.resources.nodes > 1)
    assert "$(LAUNCHER)" not in manifests.configmap["data"]["entrypoint"]
    main = pod["containers"][0]
    assert main["resources"]["requests"] == main["resources"]["limits"]
    assert main["command"][-1] == "/k8sjobs/entrypoint/entrypoint"
    assert main["command"][-1 - len(step.argv) : -1] == list(step.argv)


def assert_secrets_only_in_secret(step: Step, manifests: Manifests) -> None:
    secrets = [v.get_secret_value() for v in step.env.values() if isinstance(v, SecretStr)]
    if step.launch_mode == "ssh":
        secrets.append(TEST_KEY.private)
    for obj in manifests.objects():
        text = yaml.safe_dump(obj)
        for value in secrets:
            if obj["kind"] == "Secret":
                assert base64.b64encode(value.encode()).decode() in text
            else:
                assert value not in text
                assert base64.b64encode(value.encode()).decode() not in text
    assert SECRET_MARK not in manifests.spec_hash


# --- targeted behaviour ------------------------------------------------------------------


def _pod(manifests: Manifests) -> dict[str, Any]:
    return manifests.job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_single_node_step_is_a_plain_job() -> None:
    m = render(Step(name="train", script="python train.py"), Target(study="s"))
    assert _pod(m)["restartPolicy"] == "Never"
    assert "completionMode" not in m.job["spec"]
    assert m.job["spec"]["completions"] == m.job["spec"]["parallelism"] == 1
    assert m.service is None and m.secret is None
    assert "subdomain" not in _pod(m)
    assert [o["kind"] for o in m.objects()] == ["ConfigMap", "Job"]


@pytest.mark.parametrize("shell", ["bash", "sh", "python", "/usr/bin/env python3", "/bin/zsh"])
def test_configmap_is_mounted_read_only_and_run_by_the_shell(shell: str) -> None:
    step = Step(name="a", script="print(1)", shell=shell)
    m = render(step)
    pod = _pod(m)
    volume = next(v for v in pod["volumes"] if v["name"] == "entrypoint")
    assert volume["configMap"]["name"] == m.configmap["metadata"]["name"] == m.name
    assert volume["configMap"]["defaultMode"] == 0o555
    items = {i["key"]: i["mode"] for i in volume["configMap"]["items"]}
    assert items == {"entrypoint": 0o555, "run": 0o555}
    main = pod["containers"][0]
    mount = next(v for v in main["volumeMounts"] if v["name"] == "entrypoint")
    assert mount == {"name": "entrypoint", "mountPath": "/k8sjobs/entrypoint", "readOnly": True}
    # The measuring wrapper runs the shell (it leaves the usage line in the termination log).
    wrapper = ["/bin/sh", "/k8sjobs/entrypoint/run"]
    assert main["command"] == [*wrapper, *step.argv, "/k8sjobs/entrypoint/entrypoint"]
    assert m.configmap["data"]["entrypoint"] == "print(1)"
    assert m.configmap["data"]["run"] == MEASURE_WRAPPER


def test_outputs_wrap_the_shell_and_keep_its_argv() -> None:
    step = Step(name="a", script="echo", shell="python", outputs={"r": "r.txt"})
    pod = _pod(render(step, STORE))
    assert pod["containers"][0]["command"] == [
        "/bin/sh",
        "/k8sjobs/entrypoint/run",
        "python3",
        "/k8sjobs/entrypoint/entrypoint",
    ]
    assert [c["name"] for c in pod["containers"]] == ["step", "k8sjobs-push"]


def test_requests_equal_limits_from_resources() -> None:
    res = Resources(nodes=2, tasks=6, cores_per_task=2, gpus=1, memory="8Gi")
    main = _pod(render(Step(name="a", script="x", resources=res)))["containers"][0]
    expected = {"cpu": "6", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert main["resources"] == {"requests": expected, "limits": expected}


def test_no_gpu_and_no_memory_ask_only_for_cpu() -> None:
    main = _pod(render(Step(name="a", script="x")))["containers"][0]
    assert main["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}


def test_multi_node_step_is_an_indexed_job_with_a_headless_service() -> None:
    step = Step(name="mpi", script="$(LAUNCHER) ./a.out", resources=Resources(nodes=3, tasks=12))
    m = render(step, Target(study="s", namespace="hpc"))
    spec = m.job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    assert m.service is not None
    assert m.service["metadata"]["name"] == m.name == _pod(m)["subdomain"]
    assert m.service["metadata"]["namespace"] == "hpc"
    assert m.service["spec"]["clusterIP"] == "None"
    assert m.service["spec"]["selector"] == {"batch.kubernetes.io/job-name": m.name}
    assert m.service["spec"]["publishNotReadyAddresses"] is True
    assert [o["kind"] for o in m.objects()] == ["ConfigMap", "Secret", "Service", "Job"]


def _hosts(name: str, slots: list[int]) -> str:
    return ",".join(f"{name}-{i}.{name}:{n}" for i, n in enumerate(slots))


@pytest.mark.parametrize(
    ("nodes", "tasks", "call", "np", "slots"),
    [
        (1, 4, "$(LAUNCHER)", 4, None),
        (1, 4, "$(LAUNCHER)[2p]", 2, None),
        (2, 8, "$(LAUNCHER)", 8, [4, 4]),
        (2, 5, "$(LAUNCHER)", 5, [3, 3]),
        (2, 8, "$(LAUNCHER)[4p]", 4, [4]),
        (2, 8, "$(LAUNCHER)[6p]", 6, [3, 3]),
        (2, 8, "$(LAUNCHER)[1n]", 4, [4]),
        (4, 8, "$(LAUNCHER)[2n, 3p]", 3, [2, 2]),
        (3, 3, "$(LAUNCHER)[ 2n , 2p ]", 2, [1, 1]),
    ],
)
def test_launcher_expands_with_process_count_and_hosts(
    nodes: int, tasks: int, call: str, np: int, slots: list[int] | None
) -> None:
    res = Resources(nodes=nodes, tasks=tasks)
    step = Step(name="s", script=f"{call} ./a.out", resources=res, launch="none")
    name = "job"
    hosts = f"localhost:{np}" if slots is None else _hosts(name, slots)
    assert expand_launcher(step, name) == f"mpirun -np {np} --host {hosts} ./a.out"
    launched = Step(name="s", script=f"{call} ./a.out", resources=res)
    hostfile = '"$K8SJOBS_HOSTFILE"'
    expected = (
        f"mpirun -np {np} --host {hosts}"
        if nodes == 1
        else f"mpirun -np {np} --hostfile {hostfile}"
    )
    assert expand_launcher(launched, name) == f"{expected} ./a.out"


def test_launcher_hosts_are_the_indexed_pod_hostnames() -> None:
    step = Step(
        name="mpi", script="$(LAUNCHER)", resources=Resources(nodes=2, tasks=2), launch="none"
    )
    m = render(step)
    assert m.configmap["data"]["entrypoint"] == f"mpirun -np 2 --host {_hosts(m.name, [1, 1])}"


def test_custom_launcher_template_and_several_calls() -> None:
    step = Step(
        name="s",
        script="$(LAUNCHER)[2p] a\n$(LAUNCHER) b",
        resources=Resources(tasks=4, cores_per_task=3),
        launcher="mpiexec -n {procs} -ppn {procs_per_node} --cpus {cores_per_task} ({nodes})",
    )
    assert expand_launcher(step, "j") == (
        "mpiexec -n 2 -ppn 2 --cpus 3 (1) a\nmpiexec -n 4 -ppn 4 --cpus 3 (1) b"
    )


def test_script_without_launcher_is_unchanged() -> None:
    script = "echo '$(NOT_LAUNCHER)' $LAUNCHER\n"
    assert expand_launcher(Step(name="s", script=script), "j") == script


def test_queue_sets_kueue_label_and_suspends() -> None:
    m = render(Step(name="a", script="x", queue="team-a"))
    assert m.job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert m.job["spec"]["suspend"] is True
    plain = render(Step(name="a", script="x"))
    assert "suspend" not in plain.job["spec"]
    assert "kueue.x-k8s.io/queue-name" not in plain.job["metadata"]["labels"]


def test_labels_identify_study_step_and_hash_and_keep_original_names() -> None:
    m = render(Step(name="Train model #3", script="x", labels={"team": "ml"}), Target("Genome!"))
    for obj in m.objects():
        labels, notes = obj["metadata"]["labels"], obj["metadata"]["annotations"]
        assert labels[LABEL_STUDY].startswith("genome-")
        assert labels[LABEL_STEP].startswith("train-model-3-")
        assert labels[LABEL_HASH] == m.spec_hash
        assert labels["team"] == "ml"
        assert notes["k8sjobs.io/study-name"] == "Genome!"
        assert notes["k8sjobs.io/step-name"] == "Train model #3"


def test_walltime_ttl_and_retries_reach_the_job() -> None:
    step = Step(name="a", script="x", walltime="1h30m", ttl_after_finished=600, retries=2)
    spec = render(step).job["spec"]
    assert (spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (5400, 600)
    assert spec["backoffLimit"] == 2


def test_restricted_security_satisfies_the_restricted_pod_security_level() -> None:
    pod = _pod(render(Step(name="a", script="x", security="restricted", outputs={"o": "o"}), STORE))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["runAsNonRoot"] is True
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_env_secrets_become_secret_refs() -> None:
    step = Step(
        name="a",
        script="x",
        env={
            "PLAIN": "p",
            "TOKEN": SecretStr("hunter2"),
            "DB": SecretKeyRef(secret="db", key="pw"),
        },
    )
    m = render(step)
    env = {e["name"]: e for e in _pod(m)["containers"][0]["env"]}
    assert env["PLAIN"] == {"name": "PLAIN", "value": "p"}
    assert env["TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": m.name, "key": "TOKEN"}
    assert env["DB"]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "pw"}
    assert m.secret is not None and m.secret["data"] == {"TOKEN": "aHVudGVyMg=="}
    assert "hunter2" not in m.to_yaml()
    assert [o["kind"] for o in m.objects()] == ["ConfigMap", "Secret", "Job"]


def test_pod_sees_its_surroundings_in_env() -> None:
    step = Step(name="a", script="x", workdir="/scratch", resources=Resources(tasks=4))
    env = {e["name"]: e.get("value") for e in _pod(render(step))["containers"][0]["env"]}
    assert env["K8SJOBS_WORKDIR"] == "/scratch"
    assert env["K8SJOBS_INPUTS"] == "/scratch/inputs"
    assert env["K8SJOBS_ENTRYPOINT"] == "/k8sjobs/entrypoint/entrypoint"
    assert (env["K8SJOBS_NODES"], env["K8SJOBS_TASKS"], env["OMP_NUM_THREADS"]) == ("1", "4", "1")


def test_artifacts_need_a_store() -> None:
    with pytest.raises(ValueError, match="needs an artifact store"):
        render(Step(name="a", script="x", outputs={"o": "o"}))


def test_expanded_script_over_the_configmap_limit_is_refused() -> None:
    script = "$(LAUNCHER)\n" * 80_000
    step = Step(name="a", script=script, resources=Resources(nodes=4, tasks=4))
    with pytest.raises(ValueError, match="over the 1048576-byte ConfigMap limit"):
        render(step)


# --- hashing -----------------------------------------------------------------------------


def _rich_step() -> Step:
    return Step(
        name="train",
        script="$(LAUNCHER) python train.py",
        resources=Resources(nodes=2, tasks=4, gpus=1, memory="4Gi"),
        env={"TOKEN": SecretStr("hunter2"), "MODE": "fast"},
        inputs={"data": "registry.example:5000/d:1"},
        outputs={"model": "model.pt"},
        queue="q",
    )


_HASH_SCRIPT = """
from pydantic import SecretStr
from k8sjobs import Resources, Step, Target, render
from k8sjobs.render import generate_key
step = Step(name="train", script="$(LAUNCHER) python train.py",
            resources=Resources(nodes=2, tasks=4, gpus=1, memory="4Gi"),
            env={"TOKEN": SecretStr("hunter2"), "MODE": "fast"},
            inputs={"data": "registry.example:5000/d:1"}, outputs={"model": "model.pt"}, queue="q")
print(render(step, Target(study="genome", namespace="science",
                          store="registry.example:5000/k8sjobs"), ssh_key=generate_key()).spec_hash)
"""


def test_spec_hash_is_stable_across_processes() -> None:
    here = render(_rich_step(), STORE).spec_hash
    seen = set()
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        seen.add(out.stdout.strip())
    assert seen == {here}


@pytest.mark.parametrize(
    "change",
    [
        {"script": "$(LAUNCHER) python train2.py"},
        {"image": "python:3.13-slim"},
        {"resources": Resources(nodes=2, tasks=4, gpus=2, memory="4Gi")},
        {"env": {"TOKEN": SecretStr("hunter2"), "MODE": "slow"}},
        {"env": {"OTHER": SecretStr("hunter2"), "MODE": "fast"}},
        {"outputs": {"model": "model2.pt"}},
        {"queue": None},
        {"walltime": 60},
        {"shell": "sh"},
    ],
)
def test_spec_hash_changes_when_the_spec_changes(change: dict[str, Any]) -> None:
    base = _rich_step()
    changed = Step(**{**dict(base), **change})
    assert render(changed, STORE).spec_hash != render(base, STORE).spec_hash


def test_spec_hash_ignores_secret_values_and_repeats() -> None:
    base = _rich_step()
    other = Step(**{**dict(base), "env": {"TOKEN": SecretStr("other"), "MODE": "fast"}})
    assert render(base, STORE).spec_hash == render(other, STORE).spec_hash
    assert render(base, STORE).to_yaml() == render(base, STORE).to_yaml()


def test_target_changes_the_hash() -> None:
    step = _rich_step()
    other = Target(study="genome", namespace="science", store="registry.example:5000/other")
    assert render(step, STORE).spec_hash != render(step, other).spec_hash


# --- purity ------------------------------------------------------------------------------


def test_render_does_no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    step = _rich_step()
    target = Target(study="genome", store="registry.example:5000/k", registry_secret="reg")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"render did I/O: {args!r}")

    expected = render(step, target).to_yaml()
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert render(step, target).to_yaml() == expected


def test_render_leaves_the_step_and_its_dicts_alone() -> None:
    step = Step(name="a", script="x", labels={"team": "ml"}, node_selector={"zone": "a"})
    m = render(step)
    m.job["metadata"]["labels"]["new"] = "1"
    _pod(m)["nodeSelector"]["zone"] = "b"
    assert step.labels == {"team": "ml"} and step.node_selector == {"zone": "a"}
    assert "new" not in m.configmap["metadata"]["labels"]


# --- golden files ------------------------------------------------------------------------


def _golden_cases() -> dict[str, Manifests]:
    plain = Step(name="hello", script="echo hello from $K8SJOBS_STEP\n")
    mpi = Step(
        name="Simulate",
        script="#!/bin/bash\nset -e\n$(LAUNCHER) ./lulesh -s 64\n$(LAUNCHER)[2p] ./post\n",
        image="ghcr.io/example/lulesh:2.0",
        resources=Resources(nodes=2, tasks=8, cores_per_task=2, gpus=1, memory="16Gi"),
        walltime="01:00:00",
        tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        node_selector={"nvidia.com/gpu.product": "A100"},
        env={"OMP_PROC_BIND": "close"},
    )
    handoff = Step(
        name="train",
        script="import os\nprint(os.listdir(os.environ['K8SJOBS_INPUTS']))\n",
        shell="python",
        inputs={"data": StepOutput(step="prepare", output="table")},
        outputs={"model": "out/model.pt"},
        env={"API_TOKEN": SecretStr("not-in-golden"), "DB": SecretKeyRef(secret="db", key="pw")},
        retries=1,
        ttl_after_finished=3600,
    )
    kueue = Step(
        name="analyse",
        script="echo analyse\n",
        shell="sh",
        queue="team-a",
        security="restricted",
        namespace="team-a",
        labels={"team": "a"},
        resources=Resources(tasks=2, memory="1Gi"),
        image_pull_secrets=["regcred"],
        service_account="runner",
    )
    registry = Target(
        study="Genome 2026",
        namespace="science",
        store="registry.example:5000/k8sjobs",
        registry_secret="registry-auth",
    )
    return {
        "plain": render(plain),
        "mpi-gpu": render(mpi, Target(study="hpc", namespace="hpc")),
        "handoff": render(handoff, registry),
        "kueue-restricted": render(kueue, Target(study="kueue")),
        **_failure_golden_cases(registry),
    }


def _failure_golden_cases(registry: Target) -> dict[str, Manifests]:
    """The failure policy (k8sjobs.steps.failure) and outputs on failure, as a cluster gets them."""
    retry_on = Step(
        name="fetch",
        script="curl -fsS https://example.org/data > data.csv\n",
        retries=3,
        retry_on_exit_codes=[75, 7],
        outputs={"data": "data.csv"},
        push_outputs="always",
    )
    fail_on = Step(name="check", script="exit 0\n", disruptions="count", fail_on_exit_codes=[42, 2])
    return {
        "failure-retry-on-push-always": render(retry_on, registry),
        "failure-count-disruptions-fail-on": render(fail_on, Target(study="policy")),
    }


@pytest.mark.parametrize("case", sorted(_golden_cases()))
def test_golden_output(case: str) -> None:
    manifests = _golden_cases()[case]
    assert_valid(manifests)
    assert_golden_text(manifests.to_yaml(), case)


def assert_golden_text(text: str, case: str) -> None:
    """Assert ``text`` reads as golden/<case>.yaml (K8SJOBS_UPDATE_GOLDEN=1 rewrites it)."""
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("K8SJOBS_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with K8SJOBS_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), (
        f"{path.name} differs from the rendering; if the change is intended, rerun with "
        "K8SJOBS_UPDATE_GOLDEN=1 and review the diff"
    )


def test_golden_files_hold_no_secret_values() -> None:
    for path in GOLDEN.glob("*.yaml"):
        assert "not-in-golden" not in path.read_text()
        assert json.dumps("not-in-golden") not in path.read_text()
