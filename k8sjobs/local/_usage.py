"""A local container's usage line, from its keeper's measure of the process tree.

The keeper (``_keeper``) writes ``run/<container>.usage`` as the tree ends: ``wait4`` rusage
summed over every process it reaped (CPU), the largest resident set among them (peak
memory), and the program's wall time. The runner puts that line in the container's
termination message, where a cluster's wrapper puts its cgroup's (``k8sjobs.usage``), so
``status.judge`` reads both alike. Where the runner sampled the tree's summed resident
memory (a step with a memory limit), the higher of the two peaks is kept: rusage knows
only the largest single process, the samples can miss a spike.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..usage import format_usage_line, parse_usage, split_message

__all__ = ["USAGE_MODE", "measured_message"]

#: Tells the main container's wrapper who measures: "keeper" here, its cgroup when unset.
USAGE_MODE = "K8SJOBS_USAGE"
#: The devices the local backend gave a step (``CUDA_VISIBLE_DEVICES`` and its kin say the same).
DEVICES_ENV = "K8SJOBS_GPU_DEVICES"


def measured_message(
    message: str | None,
    state: Path,
    resident_peak: int,
    env: Mapping[str, str],
    gpu: tuple[float | None, int | None, Mapping[str, str]] | None = None,
) -> str | None:
    """Return the termination message with the keeper's usage line in place of any other.

    ``gpu``: what sampling the container's GPUs found (``_gpusample.GpuFigures.values``:
    GPU-seconds, peak bytes, why each None is None), None without GPUs.
    """
    try:
        line: str | None = Path(f"{state}.usage").read_text().strip()
    except OSError:
        line = None  # the keeper was killed before it could write it
    own, _ = split_message(message or "")
    if line is None:
        return own or None
    usage = parse_usage(line)
    peak = max(usage.memory_peak or 0, resident_peak) or None
    devices = tuple(d for d in env.get(DEVICES_ENV, "").split(",") if d)
    asked = env.get("K8SJOBS_GPUS", "0")
    measured = format_usage_line(
        "rusage",
        wall_seconds=usage.wall_seconds,
        cpu_seconds=usage.cpu_seconds,
        memory_peak=peak,
        devices=devices,
        gpus_requested=int(asked) if asked.isdigit() else 0,
        gpu_seconds=None if gpu is None else gpu[0],
        gpu_memory_peak=None if gpu is None else gpu[1],
        gpu_missing=None if gpu is None else gpu[2],
    )
    return f"{own}\n{measured}" if own else measured
