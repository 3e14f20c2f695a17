"""The command line and a study's allocations: ``render`` prints the allocation's objects
before the steps', ``rbac`` adds pods/exec only when asked or when the study has
allocations, and ``run`` hands the study's allocations to its session."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml

from k8sjobs.cli.rbac import ALLOCATION_RULES, rbac_objects, rbac_yaml, study_needs
from k8sjobs.render.allocation import LABEL_ALLOCATION

from .test_cli_commands import k8sjobs, study_file

STUDY = """\
name: demo
allocations:
  - name: pool
    nodes: 2
    resources: {cores_per_task: 1, memory: 256Mi}
    idle_timeout: 5m
steps:
  - name: s1
    allocation: pool
    script: echo hi from the pool
  - name: s2
    script: echo alone
"""
PLAIN = "name: plain\nsteps: [{name: a, script: 'true'}]\n"


def test_render_prints_the_allocation_s_objects_first(tmp_path: Path) -> None:
    study_file(tmp_path, STUDY)
    done = k8sjobs(tmp_path, "render", "study.yaml", check=0)
    documents = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [d["kind"] for d in documents] == ["ConfigMap", "Job"] * 3
    held = documents[:2]
    assert all(d["metadata"]["labels"][LABEL_ALLOCATION] == "pool" for d in held)
    assert held[1]["spec"]["completions"] == 2
    assert all(LABEL_ALLOCATION not in d["metadata"]["labels"] for d in documents[2:])
    for document in documents:
        kubernetes_validate.validate(document, "1.30", strict=True)


def test_rbac_adds_pods_exec_only_for_allocations(tmp_path: Path) -> None:
    plain = rbac_objects("hpc")[1]["rules"]
    extended = rbac_objects("hpc", allocations=True)[1]["rules"]
    assert extended[: len(plain)] == plain
    added = [
        {"apiGroups": [r.group], "resources": [r.resource], "verbs": list(r.verbs)}
        for r in ALLOCATION_RULES
    ]
    assert extended[len(plain) :] == added
    assert {rule["resources"][0]: rule["verbs"] for rule in added} == {
        "pods/exec": ["create", "get"],
        "pods": ["get"],
    }
    study_file(tmp_path, STUDY)
    (tmp_path / "plain.yaml").write_text(PLAIN)
    for args, want in (
        (["--allocations"], True),
        (["study.yaml"], True),
        (["plain.yaml"], False),
        ([], False),
    ):
        done = k8sjobs(tmp_path, "rbac", "--namespace", "hpc", *args, check=0)
        assert done.stdout == rbac_yaml("hpc", allocations=want), args
        assert ("pods/exec" in done.stdout) is want


def test_a_study_file_says_which_rights_its_steps_need(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "allocations: [{name: p, target: jobset, queue: q}]\n"
        "steps: [{name: a, script: 'true', target: minicluster}]\n"
    )
    assert study_needs(str(path)) == {
        "allocations": True,
        "jobset": True,
        "minicluster": True,
        "kueue": True,
    }
    (tmp_path / "plain.yaml").write_text(PLAIN)
    assert not any(study_needs(str(tmp_path / "plain.yaml")).values())


def test_rbac_of_a_bad_study_says_where_without_a_traceback(tmp_path: Path) -> None:
    study_file(tmp_path, STUDY.replace("allocation: pool", "allocation: pol"))
    done = k8sjobs(tmp_path, "rbac", "--namespace", "hpc", "study.yaml", check=2)
    assert 'study.yaml:9: step "s1": allocation: no allocation is called "pol"' in done.stderr
    assert "Traceback" not in done.stderr


def test_run_hands_the_study_s_allocations_to_its_session(tmp_path: Path) -> None:
    # Without them the session would refuse s1 (AllocationRefused: it has no "pool").
    # Two cores, both held by the pool's two pods: s2 runs only once the run releases the
    # pool, its last step done (held to its idle_timeout, 5 minutes, the run would hang).
    study_file(tmp_path, STUDY)
    done = k8sjobs(
        tmp_path, "run", "--backend", "local", "--cpu", "2", "--plain", "study.yaml", check=0
    )
    assert "AllocationRefused" not in done.stderr
    assert "s2: SUCCEEDED" in done.stdout
    # The run is over: s1's log is the one its driver kept (no pod is left to ask).
    logs = k8sjobs(tmp_path, "logs", "study.yaml", "s1", check=0)
    assert logs.stdout == "hi from the pool\n"
    assert k8sjobs(tmp_path, "logs", "study.yaml", "s2", check=0).stdout == "alone\n"
