"""This machine's GPUs, and which step has which: the local backend's device assignment.

``discover()`` finds the GPUs: NVIDIA through ``nvidia-smi -L`` (its index and UUID), AMD
through the kernel's DRM devices (vendor 0x1002, with ``/dev/kfd``, ROCm's compute node).
A ``GpuPool`` hands each pod its own devices (the slot scheduler has already counted them,
so a pod never waits here) and takes them back when the pod ends: two steps never share a
device. ``device_env`` gives the variables each runtime reads to see only its devices:
``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` (by UUID where known: CUDA's own
order may differ from nvidia-smi's), ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES``,
``ZE_AFFINITY_MASK`` (Intel, for devices given by hand), and ``K8SJOBS_GPU_DEVICES``, which
the step's usage reports (``Usage.devices``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._usage import DEVICES_ENV

__all__ = ["Gpu", "GpuPool", "device_env", "discover"]

_NVIDIA_LINE = re.compile(r"^GPU (\d+): .*?(?:\(UUID: ([^)]+)\))?\s*$")
_SMI_TIMEOUT = 10.0


@dataclass(frozen=True)
class Gpu:
    """One device: its index as its vendor's tools count it, its vendor, its UUID if known."""

    index: str
    vendor: str = "nvidia"  # "nvidia", "amd" or "intel"
    uuid: str = ""

    @property
    def name(self) -> str:
        """Return how a step's usage names it ("nvidia:0")."""
        return f"{self.vendor}:{self.index}"


def discover(
    nvidia_smi: str | None = None, drm: Path = Path("/sys/class/drm"), kfd: Path = Path("/dev/kfd")
) -> list[Gpu]:
    """Return the GPUs of this machine that k8sjobs can hand out ([] when none)."""
    return [*_nvidia(nvidia_smi or shutil.which("nvidia-smi")), *_amd(drm, kfd)]


def _nvidia(smi: str | None) -> list[Gpu]:
    if smi is None:
        return []
    try:
        done = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=_SMI_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []  # a driver that does not answer: no GPU we can promise a step
    found = []
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        match = _NVIDIA_LINE.match(line.strip())
        if match:
            found.append(Gpu(match.group(1), "nvidia", match.group(2) or ""))
    return found


def _amd(drm: Path, kfd: Path) -> list[Gpu]:
    if not kfd.exists():
        return []
    cards = []
    for card in sorted(drm.glob("card[0-9]*")):
        if "-" in card.name:  # a connector (card0-HDMI-A-1), not a device
            continue
        try:
            vendor = (card / "device" / "vendor").read_text().strip()
        except OSError:
            continue
        if vendor == "0x1002":
            cards.append(card)
    return [Gpu(str(i), "amd") for i in range(len(cards))]


def device_env(devices: Sequence[Gpu], machine: Iterable[Gpu]) -> dict[str, str]:
    """Return the variables that show a pod its ``devices`` and hide the machine's others."""
    vendors = {gpu.vendor for gpu in machine} | {gpu.vendor for gpu in devices}

    def listed(vendor: str, *, uuid: bool = False) -> str:
        return ",".join(
            (g.uuid or g.index) if uuid else g.index for g in devices if g.vendor == vendor
        )

    env = {DEVICES_ENV: ",".join(g.name for g in devices)}
    if "nvidia" in vendors:
        env["CUDA_VISIBLE_DEVICES"] = listed("nvidia", uuid=True)
        env["NVIDIA_VISIBLE_DEVICES"] = listed("nvidia", uuid=True) or "void"
    if "amd" in vendors:
        env["ROCR_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = listed("amd") or "-1"
    if "intel" in vendors:
        env["ZE_AFFINITY_MASK"] = listed("intel")
    return env


class GpuPool:
    """The machine's devices, each held by at most one pod at a time."""

    def __init__(self, devices: Sequence[Gpu]) -> None:
        self.devices = tuple(devices)
        self._free = list(self.devices)

    def take(self, count: int, who: str) -> tuple[Gpu, ...]:
        """Return ``count`` free devices, now held by ``who`` (the slot scheduler counted)."""
        if count > len(self._free):
            raise RuntimeError(
                f"{who} asks for {count} GPU(s) and {len(self._free)} are free: the slot "
                "scheduler should have kept it waiting (a bug in k8sjobs)"
            )
        taken, self._free = tuple(self._free[:count]), self._free[count:]
        return taken

    def give_back(self, devices: Iterable[Gpu]) -> None:
        """Free ``devices`` again, in the machine's order (the lowest index is taken first)."""
        self._free = [g for g in self.devices if g in {*self._free, *devices}]
