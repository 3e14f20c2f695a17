"""GPU time and peak GPU memory of local steps, sampled from a fake ``nvidia-smi`` on PATH.

The fake answers from files in its own directory that the step itself writes (so it can
name its own pids), and logs each call, so a step waits for samples instead of sleeping.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from k8sjobs import Session, Step, Usage
from k8sjobs.local import Gpu, LocalBackend
from k8sjobs.local._gpusample import GpuFigures, sampler_for
from k8sjobs.usage import format_usage_line, parse_usage

DEVICES = [Gpu("0", "nvidia", "GPU-uuid-0"), Gpu("1", "nvidia", "GPU-uuid-1")]
MIB = 1 << 20
INTERVAL = 0.2

FAKE_SMI = f"""#!{sys.executable}
import pathlib, sys, time
here = pathlib.Path(__file__).parent
query = "apps" if any("compute-apps" in a for a in sys.argv) else "gpu"
with open(here / f"{{query}}.calls", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
mode = (here / "mode").read_text().strip() if (here / "mode").exists() else "answer"
if mode == "hang":
    time.sleep(3600)
if mode == "fail":
    sys.stderr.write("Failed to initialize NVML: Driver/library version mismatch\\n")
    sys.exit(18)
answer = here / f"{{query}}.csv"
sys.stdout.buffer.write(answer.read_bytes() if answer.exists() else b"")
"""

# The step waits (never sleeps a fixed time) for the fake to have been asked N more times.
STEP = """
import os, pathlib, subprocess, sys, time
fake = pathlib.Path(os.environ["FAKE"])
def calls(query):
    path = fake / f"{query}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0
def wait_for(query, more):
    goal = calls(query) + more
    deadline = time.monotonic() + 120
    while calls(query) < goal:
        if time.monotonic() > deadline:
            sys.exit(f"nvidia-smi was not asked {more} more times: {query}")
        time.sleep(0.02)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
phase = os.environ.get("PHASES", "")
if phase:
    me = os.getpid()
    # Phase 1: this process 1000 MiB + its child 234 MiB; a stranger's 9999 MiB never counts.
    (fake / "apps.csv").write_text(
        f"{me}, GPU-uuid-0, 1000\\n{child.pid}, GPU-uuid-0, 234\\n1, GPU-uuid-1, 9999\\n"
    )
    wait_for("apps", 3)
    (fake / "apps.csv").write_text(f"{me}, GPU-uuid-0, 500\\n")  # phase 2: lower
    wait_for("apps", 3)
wait_for("gpu", int(os.environ["UTIL_CALLS"]))
child.kill()
"""


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> Path:
    fake = tmp_path / "fake-smi"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    (fake / "mode").write_text(mode)
    # Device 0 (the step's) 50% busy, device 1 (not the step's) 100%: only 0 counts.
    (fake / "gpu.csv").write_text("0, GPU-uuid-0, 50\n1, GPU-uuid-1, 100\n")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("K8SJOBS_GPU_SAMPLE_SECONDS", str(INTERVAL))
    monkeypatch.setenv("K8SJOBS_GPU_SAMPLE_TIMEOUT", "0.5")
    return fake


async def _run(
    tmp_path: Path, fake: Path, env: dict[str, str], script: str = STEP
) -> tuple[Usage, float]:
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=2, gpus=DEVICES)
    begun = time.monotonic()
    async with Session(study="gpu-usage", backend=backend) as s:
        step = Step(
            name="train",
            shell="python",
            script=script,
            env={"FAKE": str(fake), **env},
            resources={"gpus": 1},
        )
        result = await (await s.submit(step)).wait(180)
    elapsed = time.monotonic() - begun
    assert result.ok, result.describe()
    assert result.usage is not None
    return result.usage, elapsed


async def test_a_one_gpu_step_gets_its_gpu_time_and_peak_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake(tmp_path, monkeypatch, "answer")
    usage, elapsed = await _run(tmp_path, fake, {"PHASES": "1", "UTIL_CALLS": "5"})
    assert usage.devices == ("nvidia:0",)
    # The highest sum of the step's own processes (1000 + 234 MiB), not the stranger's.
    assert usage.gpu_memory_peak == 1234 * MIB
    assert usage.gpu_seconds is not None
    # At least 5 utilization samples were taken, each after the previous by >= INTERVAL, each
    # counting device 0 at 50%; device 1 (100%) would double it past half the elapsed time.
    assert usage.gpu_seconds >= 4 * INTERVAL * 0.5
    assert usage.gpu_seconds <= 0.5 * elapsed
    assert "gpu_seconds" not in usage.missing and "gpu_memory_peak" not in usage.missing
    assert "gpu mem 1.2Gi peak" in usage.describe()
    # Both queries as the brief names them, the GPU one by index and UUID.
    asked = (fake / "apps.calls").read_text().splitlines()[0]
    assert asked == "--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits"


@pytest.mark.parametrize(
    ("mode", "apps_why", "gpu_why"),
    [
        # A hanging nvidia-smi does not hang the step: each call's timeout kills it.
        ("hang", "did not answer within 0.5s", "did not answer within 0.5s"),
        ("fail", "exited 18: Failed to initialize NVML: Driver/library version mismatch", None),
    ],
)
async def test_a_hanging_or_failing_nvidia_smi_leaves_the_figures_missing_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, apps_why: str, gpu_why: str | None
) -> None:
    fake = _fake(tmp_path, monkeypatch, mode)
    # Two utilization calls began: the first apps and utilization calls had ended (or timed out).
    usage, _ = await _run(tmp_path, fake, {"UTIL_CALLS": "2"})
    assert usage.gpu_seconds is None and usage.gpu_memory_peak is None
    apps = "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory"
    utilization = "nvidia-smi --query-gpu=index,uuid,utilization.gpu"
    assert usage.missing["gpu_memory_peak"] == f"{apps} {apps_why}"
    assert usage.missing["gpu_seconds"] == f"{utilization} {gpu_why or apps_why}"


async def test_without_nvidia_smi_the_figures_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real nvidia-smi")
    fake = tmp_path / "calls"
    fake.mkdir()
    (fake / "gpu.calls").write_text("")
    backend = LocalBackend(state_dir=tmp_path / "state", gpus=DEVICES)
    async with Session(study="gpu-usage", backend=backend) as s:
        step = Step(name="t", shell="python", script="print(1)", resources={"gpus": 1})
        result = await (await s.submit(step)).wait(120)
    assert result.ok and result.usage is not None and result.usage.gpu_seconds is None
    assert result.usage.missing["gpu_memory_peak"] == (
        "nvidia-smi is not on this machine's PATH: the GPUs were not sampled"
    )


async def test_amd_devices_are_not_sampled_and_say_so(tmp_path: Path) -> None:
    backend = LocalBackend(state_dir=tmp_path / "state", gpus=[Gpu("0", "amd")])
    async with Session(study="gpu-usage", backend=backend) as s:
        step = Step(name="t", shell="python", script="print(1)", resources={"gpus": 1})
        result = await (await s.submit(step)).wait(120)
    assert result.ok and result.usage is not None and result.usage.devices == ("amd:0",)
    assert "rocm-smi is not read" in result.usage.missing["gpu_seconds"]


def test_gpu_figures_and_reasons_travel_in_the_usage_line() -> None:
    line = format_usage_line(
        "rusage",
        devices=("nvidia:0",),
        gpus_requested=1,
        gpu_seconds=2.5,
        gpu_missing={"gpu_memory_peak": "nvidia-smi did not answer within 5s"},
    )
    assert len(line.split()) == len(line.split(" "))  # one word each, reasons included
    usage = parse_usage(line)
    assert usage.gpu_seconds == 2.5 and usage.gpu_memory_peak is None
    assert usage.missing["gpu_memory_peak"] == "nvidia-smi did not answer within 5s"
    # A Kubernetes line (no GPU words) says why there are no GPU figures.
    kube = parse_usage("k8sjobs-usage v1 src=cgroup2 wall_ms=1 gpus=GPU-1 gpu_req=1")
    assert "on Kubernetes" in kube.missing["gpu_seconds"]


async def test_figures_nvidia_smi_cannot_give_are_missing_not_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake(tmp_path, monkeypatch, "answer")
    # What nvidia-smi prints for a MIG slice or an unsupported device: no numbers.
    (fake / "gpu.csv").write_text("0, GPU-uuid-0, [N/A]\n1, GPU-uuid-1, 100\n")
    step = f"import os, pathlib; pathlib.Path('{fake}/apps.csv').write_text("
    step += "f'{os.getpid()}, GPU-uuid-0, [N/A]\\n')\n" + STEP
    usage, _ = await _run(tmp_path, fake, {"UTIL_CALLS": "3"}, step)
    assert usage.gpu_seconds is None and usage.gpu_memory_peak is None
    assert usage.missing["gpu_seconds"] == (
        "nvidia-smi gave '[N/A]' as utilization.gpu of device GPU-uuid-0"
    )
    assert usage.missing["gpu_memory_peak"].startswith(
        "nvidia-smi gave '[N/A]' as used_memory of the step's process "
    )


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"", "nvidia-smi's answer was empty"),
        (b"garbage\n", "named none of the step's devices (GPU-uuid-0); it began 'garbage'"),
        (b"\xff\xfe\x00\x1b[2J\n", "named none of the step's devices"),
        (b"7, GPU-uuid-7, 40\n", "named none of the step's devices (GPU-uuid-0)"),
    ],
    ids=["empty", "garbage", "binary", "another-device"],
)
async def test_answers_without_the_step_s_device_leave_the_figures_missing_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: bytes, why: str
) -> None:
    fake = _fake(tmp_path, monkeypatch, "answer")
    (fake / "gpu.csv").write_bytes(answer)
    (fake / "apps.csv").write_bytes(answer)
    usage, _ = await _run(tmp_path, fake, {"UTIL_CALLS": "3"})
    assert usage.gpu_seconds is None, usage
    assert why in usage.missing["gpu_seconds"], usage.missing
    assert "\x1b" not in usage.missing["gpu_seconds"]
    if answer.strip() and not answer[0:1].isdigit():  # lines that are no pid,uuid,memory
        assert usage.gpu_memory_peak is None, usage
        assert (
            "where a line of pid, gpu_uuid, used_memory belongs"
            in (usage.missing["gpu_memory_peak"])
        )


@pytest.mark.parametrize("value", ["fast", "0", "-1", "nan", "inf"])
def test_a_bad_sampling_setting_leaves_the_figures_missing_and_names_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("K8SJOBS_GPU_SAMPLE_SECONDS", value)
    env = {"K8SJOBS_GPU_DEVICES": "nvidia:0", "NVIDIA_VISIBLE_DEVICES": "GPU-uuid-0"}
    figures = sampler_for(os.getpid(), env)
    assert isinstance(figures, GpuFigures) and figures.gpu_seconds is None
    assert figures.missing["gpu_seconds"] == (
        f"K8SJOBS_GPU_SAMPLE_SECONDS={value!r} is not a number of seconds above 0: not sampled"
    )
