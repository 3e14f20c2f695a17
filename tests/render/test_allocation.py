"""An allocation's objects (k8sjobs.render.allocation): the agent's ConfigMap and an Indexed
Job (or a JobSet) of ``nodes`` pods, pinned by golden files, valid against the strict
Kubernetes schema (and the JobSet CRD and webhook), named so that they fit every name
Kubernetes derives and never meet a step's, and accepted by the fake cluster's API server."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from k8sjobs.errors import SpecMismatch
from k8sjobs.kube import KubeClient, load_config
from k8sjobs.kube.client import JOBS, JOBSETS
from k8sjobs.kube.create import create_step
from k8sjobs.kube.watch import wait_deleted
from k8sjobs.render import allocation as ra
from k8sjobs.render.allocation import (
    AGENT_CONTAINER,
    LABEL_ALLOCATION,
    agent_argv,
    agent_script,
    allocation_object_name,
    render_allocation,
)
from k8sjobs.render.manifests import LABEL_HASH, LABEL_STUDY, Manifests, Target
from k8sjobs.render.podsecurity import check_restricted
from k8sjobs.steps.allocation import Allocation
from k8sjobs.steps.names import is_dns_label, job_name, label_value
from k8sjobs.steps.spec import PRIORITY_LABEL, QUEUE_LABEL, Resources, Toleration
from k8sjobs.testing import FakeCluster

from ..kube.conftest import FAST
from ..waiting import wait_until
from .test_jobset import assert_accepted
from .test_render import _validator, assert_golden_text

POOL = Allocation(
    name="pool",
    nodes=2,
    resources=Resources(cores_per_task=2, memory="1Gi"),
    idle_timeout="5m",
)


def _cases() -> dict[str, Manifests]:
    gpu = Allocation(
        name="gpus",
        nodes=4,
        image="ghcr.io/example/md:2",
        resources=Resources(cpu="500m", gpus=1, gpu_resource="amd.com/gpu"),
        queue="research",
        priority="high",
        node_selector={"accelerator": "mi300"},
        tolerations=[Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
        service_account="runner",
        image_pull_secrets=["ghcr"],
        security="restricted",
        target="jobset",
        max_lifetime="2h",
        idle_timeout=90.5,
    )
    return {
        "allocation-job": render_allocation(POOL, Target(study="genome", namespace="science")),
        "allocation-jobset-restricted": render_allocation(
            gpu, Target(study="MD run #3", registry_secret="registry-auth")
        ),
    }


def _masked(m: Manifests) -> str:
    """Return the YAML with the agent's text and the hash masked: the golden file pins the
    objects, not the agent (its own tests pin that), so a change to it changes no golden."""
    masked = copy.deepcopy(m)
    assert masked.configmap["data"]["agent.py"] == agent_script()
    masked.configmap["data"]["agent.py"] = "<k8sjobs/allocations/agent.py>\n"
    for obj in [masked.configmap, masked.job, *ra._pod_templates(masked.job)]:
        assert obj["metadata"]["labels"][LABEL_HASH] == m.spec_hash
        obj["metadata"]["labels"][LABEL_HASH] = "<spec-hash>"
    for obj in (masked.configmap, masked.job):
        obj["metadata"]["annotations"]["k8sjobs.io/version"] = "<version>"
    return masked.to_yaml()


def assert_valid(m: Manifests) -> None:
    """Assert each object passes the strict schema (a JobSet: its CRD, webhook and child Job)."""
    _validator("ConfigMap", "v1").validate(m.configmap)
    if m.job["kind"] == "JobSet":
        assert_accepted(m)
    else:
        _validator("Job", "batch/v1").validate(m.job)
    for obj in m.objects():
        assert is_dns_label(obj["metadata"]["name"])
        for value in obj["metadata"]["labels"].values():
            assert is_dns_label(value.lower()) or value == "k8sjobs", value


@pytest.mark.parametrize("case", sorted(_cases()))
def test_golden_allocation(case: str) -> None:
    m = _cases()[case]
    assert_valid(m)
    assert_golden_text(_masked(m), case)


def _pod(m: Manifests) -> dict[str, Any]:
    (template,) = ra._pod_templates(m.job)
    return template


def test_the_pod_runs_the_agent_with_the_allocation_s_capacity() -> None:
    m = _cases()["allocation-job"]
    assert m.job["spec"]["completions"] == m.job["spec"]["parallelism"] == 2
    assert m.job["spec"]["completionMode"] == "Indexed"
    spec = _pod(m)["spec"]
    assert spec["restartPolicy"] == "Never"
    (agent,) = spec["containers"]
    assert agent["name"] == AGENT_CONTAINER and agent["image"] == POOL.image
    assert agent["command"] == [
        "python3",
        "/k8sjobs/agent/agent.py",
        "serve",
        "--dir",
        "/k8sjobs/alloc",
        "--cpu",
        "2",
        "--memory",
        str(2**30),
        "--gpus",
        "0",
        "--idle-timeout",
        "300",
        "--max-lifetime",
        "86400",
    ]
    amounts = {"cpu": "2", "memory": "1Gi"}
    assert agent["resources"] == {"requests": amounts, "limits": amounts}
    mounts = {v["mountPath"]: v for v in agent["volumeMounts"]}
    assert mounts["/k8sjobs/agent"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/k8sjobs/agent"]["name"]]["configMap"]["name"] == m.name
    assert volumes[mounts["/k8sjobs/alloc"]["name"]] == {"name": "alloc", "emptyDir": {}}
    assert m.configmap["data"] == {"agent.py": agent_script()}
    assert m.configmap["immutable"] is True


def test_no_memory_is_zero_and_fractions_stay_fractions() -> None:
    argv = agent_argv(Allocation(name="a", resources=Resources(cpu="250m"), idle_timeout=1.5))
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags["--memory"] == "0" and flags["--cpu"] == "0.25"
    assert flags["--idle-timeout"] == "1.5"
    spec = _pod(render_allocation(Allocation(name="a")))["spec"]
    assert "memory" not in spec["containers"][0]["resources"]["limits"]


def test_lost_and_deleted_pods_are_replaced_and_a_dead_driver_leaves_no_pod_forever() -> None:
    job = _cases()["allocation-job"].job["spec"]
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "Ignore" and rules[1]["onExitCodes"]["values"] == [143]
    assert rules[1]["onExitCodes"]["containerName"] == AGENT_CONTAINER
    assert job["backoffLimitPerIndex"] == ra.AGENT_RESTARTS >= 2
    assert job["activeDeadlineSeconds"] == 86400 + 120
    short = render_allocation(Allocation(name="a", max_lifetime=0.5 + 60)).job["spec"]
    assert short["activeDeadlineSeconds"] == 61 + 120  # rounded up, never short of the life


def test_labels_name_the_study_and_allocation_and_kueue_sees_one_workload() -> None:
    m = _cases()["allocation-jobset-restricted"]
    for obj in [m.configmap, m.job, _pod(m)]:
        labels = obj["metadata"]["labels"]
        assert labels[LABEL_STUDY] == label_value("MD run #3")
        assert labels[LABEL_ALLOCATION] == "gpus"
        assert labels[LABEL_HASH] == m.spec_hash
    top = m.job["metadata"]["labels"]
    assert top[QUEUE_LABEL] == "research" and top[PRIORITY_LABEL] == "high"
    assert m.job["spec"]["suspend"] is True
    assert QUEUE_LABEL not in _pod(m)["metadata"]["labels"]  # Kueue reads the top object
    plain = _cases()["allocation-job"].job
    assert QUEUE_LABEL not in plain["metadata"]["labels"] and "suspend" not in plain["spec"]


def test_a_restricted_allocation_passes_the_restricted_level() -> None:
    m = _cases()["allocation-jobset-restricted"]
    pod = _pod(m)
    assert check_restricted(pod["spec"], pod["metadata"]["annotations"]) == []
    (agent,) = pod["spec"]["containers"]
    assert agent["resources"]["limits"] == {"cpu": "500m", "amd.com/gpu": "1"}
    assert pod["spec"]["nodeSelector"] == {"accelerator": "mi300"}
    assert pod["spec"]["serviceAccountName"] == "runner"
    assert pod["spec"]["automountServiceAccountToken"] is True
    # The read-only root: the agent and its steps write in /k8sjobs/alloc and /tmp only.
    assert {v["mountPath"] for v in agent["volumeMounts"]} >= {"/k8sjobs/alloc", "/tmp"}
    default = _pod(_cases()["allocation-job"])["spec"]
    assert check_restricted(default) != []  # the check can fail: a default pod is not


def test_the_spec_hash_follows_the_spec_and_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    first = render_allocation(POOL, Target(study="s"))
    assert render_allocation(POOL, Target(study="s")).spec_hash == first.spec_hash
    grown = POOL.model_copy(update={"nodes": 3})
    assert render_allocation(grown, Target(study="s")).spec_hash != first.spec_hash
    monkeypatch.setattr(ra, "agent_script", lambda: "print('a newer agent')\n")
    assert render_allocation(POOL, Target(study="s")).spec_hash != first.spec_hash


def test_namespace_is_the_allocation_s_else_the_target_s() -> None:
    assert render_allocation(POOL, Target(namespace="ns")).namespace == "ns"
    own = POOL.model_copy(update={"namespace": "mine"})
    m = render_allocation(own, Target(namespace="ns"))
    assert m.namespace == m.job["metadata"]["namespace"] == "mine"


studies = st.text(min_size=1, max_size=300)
labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(study=studies, name=labels, target=st.sampled_from(["job", "jobset"]))
def test_names_fit_every_derived_name_and_never_meet_a_step_s(
    study: str, name: str, target: str
) -> None:
    alloc = Allocation(name=name, target=target)
    object_name = allocation_object_name(study, alloc)
    assert is_dns_label(object_name) and object_name[0].isalpha()
    if target == "job":  # the pods' hostnames: <job>-<index>
        assert len(f"{object_name}-{2**31 - 2}") <= 63
    else:  # the webhook's check: <js>-<rj>-<i>-<index>-xxxxx
        assert len(f"{object_name}-{ra.REPLICATED_JOB}-0-{2**31 - 2}-abcde") <= 63
    # A step's object name ends "-" and 8 hex digits; this one's ninth-last is a hex digit.
    assert object_name[-11] == "-" and all(c in "0123456789abcdef" for c in object_name[-10:])
    assert object_name != job_name(study, object_name) != job_name(study, name)
    assert allocation_object_name(study + "x", alloc) != object_name


def test_names_keep_the_study_and_allocation_readable() -> None:
    assert allocation_object_name("genome", POOL).startswith("alloc-genome-pool-")
    longest = Allocation(name="a" * 40, target="jobset")
    assert allocation_object_name("genome", longest).startswith("alloc-aaaa")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"name": "a" * 41}, "at most 40"),
        ({"name": "Pool"}, "allocation name"),
        ({"nodes": 0}, "greater than 0"),
        ({"resources": {"nodes": 2}}, "write nodes: 2 on the allocation itself"),
        ({"idle_timeout": "soon"}, "not a duration"),
        ({"idle_timeout": 0}, "from 1 second"),
        ({"max_lifetime": "-5m"}, "not a duration"),
        ({"max_lifetime": 2**40}, "2147483647 seconds"),
        ({"priority": "high"}, "only a queued allocation"),
        ({"service_account": "Not A Name"}, "not a valid Kubernetes object name"),
        ({"image_pull_secrets": ["a b"]}, "not a valid Kubernetes object name"),
        ({"node_selector": {"k8sjobs.io/x": "y"}}, "reserved"),
        ({"image": "python 3"}, "not an image reference"),
        ({"nodez": 2}, 'did you mean "nodes"'),
    ],
)
def test_hostile_allocations_are_refused_naming_the_field(
    fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Allocation(**{"name": "pool", **fields})
    assert words in str(refused.value)


def test_the_longest_durations_fit_the_job_and_the_command_line() -> None:
    alloc = Allocation(name="a", max_lifetime=timedelta(seconds=2**31 - 1), idle_timeout=10**6)
    assert render_allocation(alloc).job["spec"]["activeDeadlineSeconds"] == 2**31 - 1 + 120
    argv = agent_argv(alloc)
    assert argv[argv.index("--max-lifetime") + 1] == str(2**31 - 1)
    assert argv[argv.index("--idle-timeout") + 1] == "1000000"  # no exponent: not 1e+06


# --- through the fake cluster's API server -----------------------------------------------


async def _submit(client: KubeClient, m: Manifests, *, replace: bool = False) -> bool:
    kind = JOBSETS if m.job["kind"] == "JobSet" else JOBS
    current = next(iter((await client.list_all(kind, m.namespace))["items"]), None)
    return await create_step(
        client,
        m,
        current=current,
        replace=replace,
        gone=lambda: wait_deleted(client, kind, m.namespace, m.name, timeout=20),
    )


def _pods(cluster: FakeCluster, allocation: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.store.iter("pods", "default")
        if p["metadata"]["labels"].get(LABEL_ALLOCATION) == allocation
    ]


@pytest.mark.parametrize("target", ["job", "jobset"])
async def test_the_fake_cluster_takes_the_objects_and_makes_the_pods(
    tmp_path: Path, target: str
) -> None:
    alloc = POOL.model_copy(update={"target": target})
    m = render_allocation(alloc, Target(study="genome"))
    async with (
        FakeCluster("simulate", directory=tmp_path, controller=FAST) as cluster,
        KubeClient(await load_config(str(cluster.kubeconfig_path))) as client,
    ):
        if target == "jobset":
            await cluster.install_jobset()
        assert await _submit(client, m) is False  # created
        await wait_until(lambda: len(_pods(cluster, "pool")) == 2, "the allocation's 2 pods")
        pods = _pods(cluster, "pool")
        assert {p["metadata"]["labels"][LABEL_HASH] for p in pods} == {m.spec_hash}
        assert all(p["spec"]["containers"][0]["command"] == agent_argv(alloc) for p in pods)
        # A restarted driver rendering the same allocation adopts the live one...
        again = render_allocation(alloc, Target(study="genome"))
        assert await _submit(client, again) is True
        # ... and one of another spec does not take it silently.
        grown = render_allocation(alloc.model_copy(update={"nodes": 3}), Target(study="genome"))
        assert grown.name == m.name
        if target == "job":
            with pytest.raises(SpecMismatch):
                await _submit(client, grown)
