"""Resources as Kubernetes users write them (issue 28 items 8-9): ``cpu: 250m`` or ``0.5``
per pod, whole cores for the launcher; a bare memory number under 1Mi refused; ``1GB``
answered with ``1G`` and ``1Gi`` and what each means."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from k8sjobs.render.manifests import Target, render
from k8sjobs.steps.spec import Resources, Step


def _container(step: Step) -> dict[str, Any]:
    pod = render(step, Target()).job["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "step")


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(
    ("cpu", "rendered", "cores"),
    [("250m", "250m", 0.25), (0.5, "500m", 0.5), ("2", "2", 2.0), (1.5, "1500m", 1.5)],
)
def test_cpu_quantity_is_the_pods_request_and_limit(
    cpu: str | float, rendered: str, cores: float
) -> None:
    step = Step(name="small", script="true", resources=Resources(cpu=cpu))
    container = _container(step)
    assert container["resources"]["requests"]["cpu"] == rendered
    assert container["resources"]["limits"]["cpu"] == rendered
    assert step.resources.cpu_cores == cores


def test_launcher_counts_stay_whole_with_a_fraction_of_a_core() -> None:
    step = Step(
        name="mpi",
        script="$(LAUNCHER) ./solve",
        resources=Resources(tasks=4, cpu="500m"),
    )
    env = _env(_container(step))
    assert env["K8SJOBS_CORES_PER_TASK"] == "1"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["K8SJOBS_TASKS"] == "4"


def test_without_cpu_the_request_is_tasks_times_cores() -> None:
    step = Step(name="a", script="true", resources=Resources(tasks=3, cores_per_task=2))
    assert _container(step)["resources"]["requests"]["cpu"] == "6"


@pytest.mark.parametrize(("value", "hint"), [(0.5, 'cpu: "500m"'), ("250m", 'cpu: "250m"')])
def test_a_fraction_in_cores_per_task_points_at_cpu(value: object, hint: str) -> None:
    with pytest.raises(ValidationError, match="not a whole number of cores") as caught:
        Resources(cores_per_task=value)
    assert hint in str(caught.value)


@pytest.mark.parametrize("value", ["lots", "0.0001", True, "-1", "1Gi5"])
def test_a_cpu_that_is_not_a_quantity_is_refused(value: object) -> None:
    with pytest.raises(ValidationError, match="cpu"):
        Resources(cpu=value)


@pytest.mark.parametrize("value", [512, "512", 1048575])
def test_a_bare_memory_number_under_one_mebibyte_is_refused(value: int | str) -> None:
    with pytest.raises(ValidationError) as caught:
        Resources(memory=value)
    message = str(caught.value)
    assert "a number without a suffix is bytes" in message
    assert f'write "{value}Mi"' in message


def test_a_bare_memory_number_of_a_mebibyte_or_more_is_bytes() -> None:
    assert Resources(memory=2**20).memory_bytes == 2**20
    assert Resources(memory="268435456").memory_bytes == 2**28


@pytest.mark.parametrize(
    ("value", "binary", "decimal"),
    [
        ("1GB", '"1Gi" for 1 x 2^30 bytes', '"1G" for 1 x 10^9 bytes'),
        ("512MiB", '"512Mi" for 512 x 2^20', '"512M" for 512 x 10^6'),
        ("2 kb", '"2Ki" for 2 x 2^10', '"2k" for 2 x 10^3'),
    ],
)
def test_a_size_with_a_byte_unit_suggests_both_spellings(
    value: str, binary: str, decimal: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Resources(memory=value)
    message = str(caught.value)
    assert binary in message and decimal in message
    assert "12Gi" not in message


def test_quarter_core_steps_run_four_at_once_on_one_core(tmp_path: Path) -> None:
    """Four steps of cpu: 250m on a one-core local backend run together: each waits (bounded)
    for the other three to start, which whole-core steps on one core could never do."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    steps = "".join(
        f"""
  - name: s{i}
    resources: {{cpu: 250m}}
    script: |
      touch {barrier}/s{i}
      for _ in $(seq 600); do [ "$(ls {barrier} | wc -l)" -ge 4 ] && exit 0; sleep 0.1; done
      exit 3
"""
        for i in range(4)
    )
    (tmp_path / "study.yaml").write_text(f"name: quarters\nsteps:{steps}")
    done = subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", "run", "study.yaml", "--cpu", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 succeeded" in done.stdout
