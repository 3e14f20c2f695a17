"""The Maestro batch block takes a step's volumes and scheduling knobs, with located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs.maestro.adapter import load_batch

from .test_adapter import adapter, study_step

VOLUMES = [{"name": "data", "claim": "datasets", "mount_path": "/data", "read_only": True}]


def test_batch_volumes_and_knobs_reach_the_pod(tmp_path: Path) -> None:
    chosen = adapter(
        volumes=VOLUMES,
        shm="4Gi",
        priority_class="batch-low",
        affinity={"required": [{"key": "gpu", "operator": "Exists"}]},
        steps={"train": {"priority_class": "batch-high", "runtime_class": "nvidia"}},
    )
    job = chosen.manifests(study_step("train_N.1", "x"), "echo\n", str(tmp_path)).job
    spec = job["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "batch-high"  # the step's setting wins
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    by_name = {v["name"]: v for v in spec["volumes"]}
    assert by_name["data"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert by_name["k8sjobs-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    other = chosen.manifests(study_step("post", "x"), "echo\n", str(tmp_path)).job
    assert other["spec"]["template"]["spec"]["priorityClassName"] == "batch-low"


def test_a_steps_volumes_replace_the_batch_ones(tmp_path: Path) -> None:
    scratch = [{"name": "scratch", "empty_dir": {}, "mount_path": "/scratch"}]
    chosen = adapter(volumes=VOLUMES, steps={"sim": {"volumes": scratch}})
    job = chosen.manifests(study_step("sim", "x"), "echo\n", str(tmp_path)).job
    names = {v["name"] for v in job["spec"]["template"]["spec"]["volumes"]}
    assert "scratch" in names and "data" not in names


def test_bad_volumes_name_the_key() -> None:
    with pytest.raises(ValueError, match=r'"volumes.0.mount_path": .*absolute'):
        load_batch({"type": "kubernetes", "volumes": [{**VOLUMES[0], "mount_path": "data"}]})
    with pytest.raises(ValueError, match=r'"affinity.required.0": .*needs values'):
        load_batch({"affinity": {"required": [{"key": "a", "operator": "In"}]}})


def test_step_level_volume_rules_name_the_step(tmp_path: Path) -> None:
    on_work = [{**VOLUMES[0], "mount_path": "/work"}]
    chosen = adapter(volumes=on_work)
    with pytest.raises(ValueError, match=r'Step "sim": volumes.0.mount_path: .*work directory'):
        chosen.manifests(study_step("sim", "x"), "echo\n", str(tmp_path))
