"""Run N one-GPU steps on this machine's GPUs and print which device each one saw.

For a real GPU workstation (the tests use an injected device list)::

    python scripts/gpu_check.py 4

Each step reports the variables the local backend gave it and, where ``nvidia-smi`` is
installed, the UUID of the one device CUDA shows it (``nvidia-smi`` itself ignores
CUDA_VISIBLE_DEVICES, so the step asks for the UUID it was given). Expect N different
devices when the machine has N GPUs, and steps taking turns when it has fewer. Each
step's sampled GPU time and peak GPU memory follow (None, and why, for steps this short
that touched no GPU: expect a peak of 0 and a few GPU-seconds at most).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile

from k8sjobs import Session, Step
from k8sjobs.local import LocalBackend
from k8sjobs.local.gpus import discover

SCRIPT = """
import os, shutil, subprocess
seen = os.environ.get("CUDA_VISIBLE_DEVICES", "")
rocr = os.environ.get("ROCR_VISIBLE_DEVICES", "")
line = f"CUDA_VISIBLE_DEVICES={seen} ROCR_VISIBLE_DEVICES={rocr}"
smi = shutil.which("nvidia-smi")
if smi and seen:
    ask = [smi, "--query-gpu=index,name,uuid", "--format=csv,noheader", "-i", seen]
    line += " | " + subprocess.run(ask, capture_output=True, text=True).stdout.strip()
print(line)
"""


async def main(count: int) -> None:
    devices = discover()
    print(f"this machine: {[g.name for g in devices] or 'no GPU found'}")
    if not devices:
        return
    with tempfile.TemporaryDirectory() as state:
        async with Session(study="gpu-check", backend=LocalBackend(state_dir=state)) as s:
            handles = [
                await s.submit(
                    Step(name=f"gpu-{i}", shell="python", script=SCRIPT, resources={"gpus": 1})
                )
                for i in range(count)
            ]
            for handle in handles:
                result = await handle.wait()
                usage = result.usage
                had = usage.devices if usage else ()
                log = (await handle.logs()).strip()
                print(f"{handle.name}: {result.state}, had {had}: {log}")
                if usage is not None:  # sampled by nvidia-smi while it ran, or why not
                    print(
                        f"  gpu_seconds={usage.gpu_seconds} gpu_memory_peak="
                        f"{usage.gpu_memory_peak} missing={dict(usage.missing)}"
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", type=int, nargs="?", default=2, help="how many steps (default 2)")
    asyncio.run(main(parser.parse_args().steps))
