"""target: jobset: the JobSet render builds (k8sjobs.render.jobset), pinned by golden files,
checked as the fake cluster checks it (the JobSet CRD's schema, each child Job as a batch/v1
Job), and every name the controller derives from it a DNS label for any step name."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from k8sjobs.render.jobset import LAUNCHER, ROLE_ENV, WORKERS, object_name
from k8sjobs.render.manifests import LABEL_STUDY, Manifests, Target, render
from k8sjobs.render.multinode import ROLE_WRAPPER
from k8sjobs.steps.names import is_dns_label
from k8sjobs.steps.spec import Resources, Step, StepOutput
from k8sjobs.testing import jobset_crd
from k8sjobs.testing.apiserver.openapi import unknown_fields, validate
from k8sjobs.testing.apiserver.resources import Resource
from k8sjobs.testing.controllers.jobset import JobSetWebhook

from ..ssh_keys import TEST_KEY
from .test_render import _validator, assert_golden_text

JOBSET_RESOURCE = Resource("jobsets", "JobSet", "jobset.x-k8s.io", "v1alpha2", namespaced=True)
MPI_SCRIPT = "#!/bin/sh\nset -e\n$(LAUNCHER) ./ring\n"


def _schema() -> dict[str, Any]:
    (version,) = [v for v in jobset_crd()["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def assert_accepted(manifests: Manifests) -> None:
    """Assert the JobSet passes the validating webhook, the CRD's schema (no unknown field)
    and each replicated Job's template is a valid batch/v1 Job, as the fake checks them."""
    js = manifests.job
    assert js["kind"] == "JobSet"
    JobSetWebhook().validate(JOBSET_RESOURCE, manifests.namespace, js)  # vjobset.kb.io
    assert validate(js, _schema()) == []
    assert unknown_fields(js, _schema()) == []
    for rjob in js["spec"]["replicatedJobs"]:
        child = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{manifests.name}-{rjob['name']}-0",
                **rjob["template"]["metadata"],
            },
            "spec": rjob["template"]["spec"],
        }
        _validator("Job", "batch/v1").validate(child)
        assert is_dns_label(child["metadata"]["name"])


def _rjobs(m: Manifests) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in m.job["spec"]["replicatedJobs"]}


def _pod(m: Manifests, rjob: str) -> dict[str, Any]:
    pod: dict[str, Any] = _rjobs(m)[rjob]["template"]["spec"]["template"]["spec"]
    return pod


def _golden_cases() -> dict[str, Manifests]:
    registry = Target(study="hpc", namespace="hpc", store="registry.example:5000/k8sjobs")
    single = Step(name="hello", script="echo hello\n", target="jobset")
    ssh = Step(
        name="Simulate",
        script=MPI_SCRIPT,
        image="ghcr.io/example/ring:1",
        target="jobset",
        resources=Resources(nodes=2, tasks=4, memory="1Gi"),
        walltime="01:00:00",
        retries=2,
        fail_on_exit_codes=[3],
        inputs={"mesh": StepOutput(step="mesh", output="grid")},
        outputs={"result": "out.txt"},
    )
    none = Step(
        name="shards",
        script='echo shard "$JOB_COMPLETION_INDEX"\n',
        target="jobset",
        launch="none",
        resources=Resources(nodes=3, tasks=3),
    )
    restricted = Step(
        name="analyse",
        script=MPI_SCRIPT,
        target="jobset",
        security="restricted",
        resources=Resources(nodes=2, tasks=2),
    )
    return {
        "jobset-single-node": render(single, Target(study="demo")),
        "jobset-ssh": render(ssh, registry, ssh_key=TEST_KEY),
        "jobset-launch-none": render(none, Target(study="demo")),
        "jobset-restricted": render(restricted, Target(study="secure"), ssh_key=TEST_KEY),
    }


@pytest.mark.parametrize("case", sorted(_golden_cases()))
def test_golden_jobset(case: str) -> None:
    manifests = _golden_cases()[case]
    assert_accepted(manifests)
    assert_golden_text(manifests.to_yaml(), case)


def test_the_schema_check_can_fail() -> None:
    m = _golden_cases()["jobset-ssh"]
    m.job["spec"]["replicatedJobz"] = []
    assert unknown_fields(m.job, _schema()) == ["spec.replicatedJobz"]
    m.job["spec"]["successPolicy"]["operator"] = "Most"
    assert validate(m.job, _schema()) != []


def test_ssh_launcher_depends_on_ready_workers_and_decides_success() -> None:
    m = _golden_cases()["jobset-ssh"]
    rjobs = _rjobs(m)
    assert list(rjobs) == [WORKERS, LAUNCHER]
    assert rjobs[LAUNCHER]["dependsOn"] == [{"name": WORKERS, "status": "Ready"}]
    assert m.job["spec"]["successPolicy"] == {
        "operator": "All",
        "targetReplicatedJobs": [LAUNCHER],
    }
    assert m.job["spec"]["network"]["enableDNSHostnames"] is True
    assert m.job["spec"]["network"]["subdomain"] == m.name
    workers, launcher = _pod(m, WORKERS), _pod(m, LAUNCHER)
    assert rjobs[WORKERS]["template"]["spec"]["completions"] == 1  # nodes - 1
    # The workers serve sshd (a TCP probe on 2222); only the launcher pushes the outputs.
    (main,) = workers["containers"]
    assert main["readinessProbe"]["tcpSocket"] == {"port": 2222}
    assert {"name": ROLE_ENV, "value": "worker"} in main["env"]
    assert [c["name"] for c in launcher["containers"]] == ["step", "k8sjobs-push"]
    assert "readinessProbe" not in launcher["containers"][0]
    assert [c["name"] for c in workers["initContainers"]] == ["k8sjobs-pull"]
    # $(LAUNCHER) is the Job target's mpirun line; the hostfile names the JobSet's pods.
    assert m.configmap["data"]["entrypoint"] == (
        '#!/bin/sh\nset -e\nmpirun -np 4 --hostfile "$K8SJOBS_HOSTFILE" ./ring\n'
    )
    domain = f"{m.name}.hpc.svc"
    assert m.configmap["data"]["hostfile"] == (
        f"{m.name}-launcher-0-0.{domain} slots=2\n{m.name}-workers-0-0.{domain} slots=2\n"
    )


def test_failure_rules_become_the_jobsets_failure_policy() -> None:
    m = _golden_cases()["jobset-ssh"]
    policy = m.job["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 2
    assert policy["rules"][0]["action"] == "FailJobSet"
    reasons = set(policy["rules"][0]["onJobFailureReasons"])
    assert reasons == {"PodFailurePolicy", "DeadlineExceeded"}
    for rjob in _rjobs(m).values():
        child = rjob["template"]["spec"]
        assert child["backoffLimit"] == 0 and child["activeDeadlineSeconds"] == 3600
        rules = child["podFailurePolicy"]["rules"]
        assert rules[0]["action"] == "Ignore"  # disruptions restart the pod, not the set
        assert rules[1] == {
            "action": "FailJob",
            "onExitCodes": {"containerName": "step", "operator": "In", "values": [3]},
        }


def test_labels_reach_the_jobset_its_child_jobs_and_pods() -> None:
    step = Step(name="a", script="true", target="jobset", labels={"team": "ml"}, queue="q")
    m = render(step, Target(study="s"))
    assert m.job["metadata"]["labels"]["team"] == "ml"
    assert m.job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert m.job["spec"]["suspend"] is True
    (rjob,) = m.job["spec"]["replicatedJobs"]
    assert rjob["name"] == LAUNCHER
    assert LABEL_STUDY in rjob["template"]["metadata"]["labels"]
    assert LABEL_STUDY in rjob["template"]["spec"]["template"]["metadata"]["labels"]


def test_launch_none_runs_the_script_on_every_index() -> None:
    m = _golden_cases()["jobset-launch-none"]
    (rjob,) = m.job["spec"]["replicatedJobs"]
    assert rjob["name"] == WORKERS and rjob["template"]["spec"]["completions"] == 3
    assert "dependsOn" not in rjob
    assert "hostfile" not in m.configmap["data"]


def test_role_wrapper_takes_the_role_from_k8sjobs_role() -> None:
    # A JobSet's workers count their indexes from 0: the role comes from ROLE_ENV.
    assert f"role=${{{ROLE_ENV}:-}}" in ROLE_WRAPPER


def test_retry_oom_is_refused_for_a_jobset() -> None:
    with pytest.raises(ValidationError, match="retry_oom is for target: job"):
        Step(
            name="a",
            script="true",
            target="jobset",
            resources=Resources(memory="1Gi"),
            retry_oom={"factor": 2, "max": "4Gi"},
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    study=st.text(min_size=1, max_size=253),
    step=st.text(min_size=1, max_size=253),
    nodes=st.integers(min_value=1, max_value=100_000),
)
def test_every_derived_name_is_a_dns_label(study: str, step: str, nodes: int) -> None:
    # The longest names the model allows (253 characters), any characters, any node count:
    # the JobSet, its child Jobs <js>-<rj>-0 and the last pod's hostname <js>-<rj>-0-<j>.
    try:
        s = Step(
            name=step,
            script="true",
            target="jobset",
            launch="none",
            resources=Resources(nodes=nodes, tasks=nodes),
        )
    except ValidationError:
        return  # a name the model refuses (a NUL byte, ...)
    m = render(s, Target(study=study))
    assert is_dns_label(m.name)
    for rjob in m.job["spec"]["replicatedJobs"]:
        last = rjob["template"]["spec"]["completions"] - 1
        assert is_dns_label(f"{m.name}-{rjob['name']}-0-{last}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    study=st.text(min_size=1, max_size=253),
    step=st.text(min_size=1, max_size=253),
    nodes=st.integers(min_value=1, max_value=100_000),
    launch=st.sampled_from(["ssh", "none"]),
)
def test_the_longest_step_names_pass_the_jobset_webhook(
    study: str, step: str, nodes: int, launch: str
) -> None:
    # The webhook (vjobset.kb.io) checks the last pod's name with its generated suffix,
    # <js>-<rj>-<i>-<j>-abcde, not the hostname alone: the fake's webhook is held to it.
    try:
        s = Step(
            name=step,
            script="$(LAUNCHER) ./ring\n" if launch == "ssh" and nodes > 1 else "true",
            target="jobset",
            launch=launch,
            resources=Resources(nodes=nodes, tasks=nodes),
        )
    except ValidationError:
        return  # a name the model refuses (a NUL byte, ...)
    try:
        m = render(s, Target(study=study), ssh_key=TEST_KEY)
    except ValueError as error:  # the hostfile of thousands of ssh nodes: refused, said why
        assert "ConfigMap limit" in str(error)
        return
    JobSetWebhook().validate(JOBSET_RESOURCE, m.namespace, m.job)
    for rjob in m.job["spec"]["replicatedJobs"]:
        last = rjob["template"]["spec"]["completions"] - 1
        assert is_dns_label(f"{m.name}-{rjob['name']}-0-{last}-abcde")


def test_object_name_is_kept_when_it_fits_and_hashed_when_not() -> None:
    assert object_name("a" * 40, 2) == "a" * 40
    long = object_name("a" * 52, 2)
    assert len(long) + len("-launcher-0-0") <= 63 and long != "a" * 52
    assert object_name("a" * 51 + "b", 2) != long
