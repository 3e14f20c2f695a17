"""Flux Operator steps (target: minicluster): the rendered MiniCluster, pinned by a golden file
and validated against the operator's published CRD schema (tests/data/flux-operator)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import SecretStr, ValidationError

from k8sjobs.render.manifests import LABEL_HASH, LABEL_STUDY, Target, render
from k8sjobs.steps.spec import Resources, SecretKeyRef, Step, Toleration

TESTS = Path(__file__).parents[1]
CRD_PATH = TESTS / "data" / "flux-operator" / "flux-framework.org_miniclusters.yaml"
GOLDEN = TESTS / "golden" / "minicluster.yaml"


def crd() -> dict[str, Any]:
    """Return the Flux Operator's MiniCluster CRD, as published."""
    loaded: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    return loaded


def _strict(schema: Any) -> Any:
    """Return ``schema`` refusing unknown fields (a real API server would drop them silently)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validator() -> jsonschema.Draft7Validator:
    (version,) = [v for v in crd()["spec"]["versions"] if v["name"] == "v1alpha2"]
    return jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


def mpi_step(**fields: Any) -> Step:
    base: dict[str, Any] = {
        "name": "lammps",
        "script": "#!/bin/bash\nset -e\n$(LAUNCHER) lmp -in in.lj\n$(LAUNCHER)[1n, 2p] ./post\n",
        "image": "ghcr.io/example/lammps-mpi:2024",
        "resources": Resources(nodes=2, tasks=8, memory="4Gi"),
        "target": "minicluster",
        "walltime": "00:30:00",
        "env": {
            "TOKEN": SecretStr("not-in-golden"),
            "DB": SecretKeyRef(secret="db", key="pw"),
            "MODE": "fast $(X)",
        },
        "tolerations": [Toleration(key="hpc", operator="Exists", effect="NoSchedule")],
        "node_selector": {"pool": "hpc"},
        "image_pull_secrets": ["regcred"],
    }
    return Step(**{**base, **fields})


def test_golden_minicluster() -> None:
    manifests = render(mpi_step(), Target(study="flux", namespace="hpc"))
    text = manifests.to_yaml()
    if os.environ.get("K8SJOBS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "rerun with K8SJOBS_UPDATE_GOLDEN=1 and review the diff"
    assert "not-in-golden" not in text


@pytest.mark.parametrize("flux_in_image", [False, True])
@pytest.mark.parametrize("nodes", [1, 2, 16])
def test_rendered_minicluster_validates_against_the_crd_schema(
    flux_in_image: bool, nodes: int
) -> None:
    step = mpi_step(resources=Resources(nodes=nodes, tasks=2 * nodes), flux_in_image=flux_in_image)
    body = render(step, Target(study="flux")).job
    validator().validate(body)
    assert body["apiVersion"] == "flux-framework.org/v1alpha2"
    assert body["kind"] == "MiniCluster"
    spec = body["spec"]
    assert spec["size"] == nodes and spec["tasks"] == 2 * nodes
    assert spec["logging"] == {"strict": True}
    assert ("flux" in spec) is flux_in_image


def test_the_schema_check_can_fail() -> None:
    body = render(mpi_step(), Target()).job
    body["spec"]["containers"][0]["comand"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(body)
    body = render(mpi_step(), Target()).job
    body["spec"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(body)


def test_launcher_is_flux_run_and_never_flux_submit() -> None:
    manifests = render(mpi_step(), Target())
    script = manifests.configmap["data"]["entrypoint"]
    assert "flux run -N2 -n8 lmp -in in.lj\n" in script
    assert "flux run -N1 -n2 ./post\n" in script
    assert "flux submit" not in manifests.to_yaml()
    (container,) = manifests.job["spec"]["containers"]
    assert container["launcher"] is True  # the script is flux start's initial program
    assert container["command"] == "/bin/bash /k8sjobs/entrypoint/entrypoint"


def test_a_custom_launcher_template_is_kept() -> None:
    step = mpi_step(launcher="flux run -N{nodes} -n{procs} --exclusive")
    script = render(step, Target()).configmap["data"]["entrypoint"]
    assert "flux run -N2 -n8 --exclusive lmp" in script


def test_the_operator_objects_carry_what_the_watches_select() -> None:
    manifests = render(mpi_step(), Target(study="flux"))
    body = manifests.job
    labels = body["metadata"]["labels"]
    # The operator names its Job after the MiniCluster, labels it with jobLabels and its
    # pods with pod.labels: the backend's watches select them by the study label.
    assert body["spec"]["jobLabels"] == labels
    assert body["spec"]["pod"]["labels"][LABEL_STUDY] == labels[LABEL_STUDY]
    assert LABEL_HASH in body["spec"]["jobLabels"]
    assert manifests.service is None  # the operator makes the headless Service
    assert body["spec"]["pod"]["restartPolicy"] == "Never"


def test_secrets_go_by_reference() -> None:
    manifests = render(mpi_step(), Target())
    (container,) = manifests.job["spec"]["containers"]
    assert container["secrets"] == {
        "TOKEN": {"name": manifests.name, "key": "TOKEN"},
        "DB": {"name": "db", "key": "pw"},
    }
    assert "TOKEN" not in container["environment"]
    assert container["environment"]["MODE"] == "fast $$(X)"  # kubelet expansion undone
    assert manifests.secret is not None and manifests.secret["type"] == "Opaque"


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        ({"security": "restricted"}, "security", "restricted"),
        ({"launch": "ssh"}, "launch", "Flux launches"),
        ({"image_pull_secrets": ["a", "b"]}, "image_pull_secrets", "one image pull secret"),
        ({"retries": 2, "retry_on_exit_codes": [75]}, "retry_on_exit_codes", "target: job"),
        ({"fail_on_exit_codes": [2]}, "fail_on_exit_codes", "podFailurePolicy"),
        ({"disruptions": "ignore"}, "disruptions", "leave disruptions unset"),
    ],
)
def test_what_a_minicluster_cannot_carry_is_refused_naming_the_field(
    fields: dict[str, Any], loc: str, words: str
) -> None:
    with pytest.raises(ValidationError) as info:
        mpi_step(**fields)
    (error,) = info.value.errors()
    assert error["loc"] == (loc,)
    assert words in error["msg"]


def test_retries_zero_still_gives_a_valid_backoff_limit() -> None:
    # The operator reads backoffLimit 0 as unset (then 100 retries).
    assert render(mpi_step(), Target()).job["spec"]["backoffLimit"] == 1
    assert render(mpi_step(retries=3), Target()).job["spec"]["backoffLimit"] == 3


def test_a_minicluster_counts_disruptions_and_renders_no_failure_policy() -> None:
    # The operator's Job has no podFailurePolicy: an evicted pod spends a retry, and the
    # step says so instead of claiming the Job steps' default "ignore".
    step = mpi_step()
    assert step.disruptions == "count"
    assert mpi_step(disruptions="count").disruptions == "count"
    assert Step(name="j", script="true").disruptions == "ignore"
    assert "podFailurePolicy" not in render(step, Target()).to_yaml()
