"""GPUs on the local backend: each step its own devices, never two steps on one device."""

from __future__ import annotations

import stat
from pathlib import Path

from k8sjobs import Session, Step
from k8sjobs.local import Gpu, LocalBackend
from k8sjobs.local.gpus import GpuPool, device_env, discover

DEVICES = [Gpu(str(i), "nvidia", f"GPU-uuid-{i}") for i in range(4)]
# Each step claims its devices with O_EXCL while it runs: a second step on one device fails.
CLAIM = """
import os, pathlib, time
seen = os.environ["CUDA_VISIBLE_DEVICES"]
claims = [pathlib.Path(os.environ["CLAIMS"]) / d for d in seen.split(",")]
for claim in claims:
    os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
print(seen, os.environ["NVIDIA_VISIBLE_DEVICES"], os.environ["K8SJOBS_GPU_DEVICES"])
time.sleep(0.3)
for claim in claims:
    claim.unlink()
"""


async def test_six_one_gpu_steps_on_four_devices_never_share_one(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=6, gpus=DEVICES)
    async with Session(study="gpu", backend=backend) as s:
        handles = [
            await s.submit(
                Step(
                    name=f"g{i}",
                    shell="python",
                    script=CLAIM,
                    env={"CLAIMS": str(claims)},
                    resources={"gpus": 1},
                )
            )
            for i in range(6)
        ]
        results = [await h.wait(120) for h in handles]
        logs = [await h.logs() for h in handles]
    assert all(r.ok for r in results), [r.describe() for r in results]
    for result, log in zip(results, logs, strict=True):
        cuda, nvidia, named = log.split()
        assert cuda == nvidia and cuda.startswith("GPU-uuid-") and "," not in cuda
        index = cuda.removeprefix("GPU-uuid-")
        assert named == f"nvidia:{index}"
        assert result.usage is not None and result.usage.devices == (f"nvidia:{index}",)
    assert len({log.split()[0] for log in logs}) == 4  # six steps took turns on four devices


async def test_a_step_without_gpus_sees_none_of_the_machine_s(tmp_path: Path) -> None:
    backend = LocalBackend(state_dir=tmp_path / "state", gpus=DEVICES)
    script = 'import os; print(repr(os.environ["CUDA_VISIBLE_DEVICES"]))'
    async with Session(study="gpu", backend=backend) as s:
        handle = await s.submit(Step(name="cpu", shell="python", script=script))
        result = await handle.wait(60)
        log = await handle.logs()
    assert result.ok and log.strip() == "''"
    assert result.usage is not None and result.usage.devices == ()


def test_the_pool_hands_out_free_devices_lowest_first() -> None:
    pool = GpuPool(DEVICES)
    first, second = pool.take(2, "a"), pool.take(1, "b")
    assert [g.index for g in first + second] == ["0", "1", "2"]
    pool.give_back(first)
    assert [g.index for g in pool.take(3, "c")] == ["0", "1", "3"]


def test_device_env_speaks_each_vendor_s_variables() -> None:
    amd, intel = Gpu("1", "amd"), Gpu("0", "intel")
    env = device_env([amd, intel], [amd, intel, *DEVICES])
    assert (env["ROCR_VISIBLE_DEVICES"], env["HIP_VISIBLE_DEVICES"]) == ("1", "1")
    assert env["ZE_AFFINITY_MASK"] == "0"
    assert (env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"]) == ("", "void")
    assert env["K8SJOBS_GPU_DEVICES"] == "amd:1,intel:0"


def test_discover_reads_nvidia_smi(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        "echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-3b7f)'\n"
        "echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9c21)'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    found = discover(str(smi), drm=tmp_path / "no-drm", kfd=tmp_path / "no-kfd")
    assert found == [Gpu("0", "nvidia", "GPU-3b7f"), Gpu("1", "nvidia", "GPU-9c21")]


def test_discover_finds_amd_cards_when_rocm_s_node_exists(tmp_path: Path) -> None:
    for card, vendor in (("card0", "0x1002"), ("card1", "0x8086"), ("card2", "0x1002")):
        (tmp_path / "drm" / card / "device").mkdir(parents=True)
        (tmp_path / "drm" / card / "device" / "vendor").write_text(vendor + "\n")
    (tmp_path / "drm" / "card0-HDMI-A-1").mkdir()
    (tmp_path / "kfd").touch()
    found = discover(str(tmp_path / "absent-smi"), drm=tmp_path / "drm", kfd=tmp_path / "kfd")
    assert found == [Gpu("0", "amd"), Gpu("1", "amd")]
