"""What a step used: wall time, CPU seconds, peak memory, GPUs (pure values, no I/O).

A step's usage travels as one line of its main container's *termination message*, on both
backends, so one judgement (``status.judge``) reads it from the pod status the watch already
holds, with no request of its own::

    k8sjobs-usage v1 src=cgroup2 wall_ms=61250 cpu_us=59870211 mem_peak=1288490188

On Kubernetes the main container's wrapper (``render/_shell.py``) writes it at exit from its
own cgroup (v2 ``cpu.stat`` and ``memory.peak``, v1 ``cpuacct.usage`` and
``memory.max_usage_in_bytes``); locally the keeper measures the process tree (``wait4``
rusage) and the pod runner writes the line in its place. A figure the source could not give
is left out of the line; ``parse_usage`` then says why in ``Usage.missing``. Other lines of
the message (a wrapper's "Reason: sentence") are the container's own: ``split_message``
separates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from .durations import format_duration

__all__ = [
    "USAGE_TAG",
    "Usage",
    "UsageSummary",
    "format_bytes",
    "format_usage_line",
    "parse_usage",
    "request_versus_use",
    "split_message",
    "summarize_usage",
]

#: The first two words of a usage line; a new format gets a new version word.
USAGE_TAG = "k8sjobs-usage v1"

FIGURES = ("wall_seconds", "cpu_seconds", "memory_peak", "gpu_seconds", "gpu_memory_peak")

# Why a figure is missing, by the source that left it out.
_NO_CGROUP = "the container's cgroup could not be read (no /sys/fs/cgroup in the container)"
_WHY_MISSING = {
    "cgroup2": {
        "memory_peak": "memory.peak is not in the container's cgroup (Linux before 5.19)",
        "cpu_seconds": "cpu.stat could not be read in the container's cgroup",
    },
    "cgroup1": {
        "memory_peak": "memory.max_usage_in_bytes could not be read (no memory controller)",
        "cpu_seconds": "cpuacct.usage could not be read (no cpuacct controller)",
    },
    "none": {"memory_peak": _NO_CGROUP, "cpu_seconds": _NO_CGROUP},
    "rusage": {
        "memory_peak": "the process tree's peak was not recorded",
        "cpu_seconds": "the process tree's CPU time was not recorded",
    },
}
NO_LINE = (
    "the main container left no usage line: it ran without k8sjobs' wrapper (an older "
    "k8sjobs, or an adopted Job), or it was killed before it could write one"
)
_NO_GPU = "the step asked for no GPU"
_GPU_UNMEASURED = (
    "GPU time and memory were not sampled: k8sjobs samples them on the local backend only, "
    "with nvidia-smi (on Kubernetes the wrapper cannot count on nvidia-smi in the image)"
)
# The line's words for the GPU figures' reasons ("gpu_ms_why=", "gpu_mem_why=").
_GPU_WORDS = {"gpu_seconds": "gpu_ms", "gpu_memory_peak": "gpu_mem"}


@dataclass(frozen=True)
class Usage:
    """What a step's main container used, as measured where it ran (None: unknown).

    ``wall_seconds``: the script's life, from the wrapper's (or keeper's) start to its exit.
    ``cpu_seconds``: user + system CPU of the container's processes (cgroup) or of the
    script's process tree (locally). ``memory_peak``: bytes; the container cgroup's peak
    (page cache included) on Kubernetes, the largest resident set of the tree locally (or
    the summed tree's, sampled, when the step has a memory limit). ``gpu_seconds``: the
    integral of utilization x time over the step's devices, ``gpu_memory_peak``: bytes, the
    highest summed GPU memory of its processes; both sampled by nvidia-smi on the local
    backend only (``local/_gpusample.py``), approximate at the sampling rate. ``devices``:
    the GPUs the step had (local device indexes, or the ``NVIDIA_VISIBLE_DEVICES`` a
    device plugin gave). ``source`` says where the figures come from ("cgroup2",
    "cgroup1", "rusage", "none", ""), ``missing`` why each None figure is None.
    """

    wall_seconds: float | None = None
    cpu_seconds: float | None = None
    memory_peak: int | None = None
    gpu_seconds: float | None = None
    gpu_memory_peak: int | None = None
    devices: tuple[str, ...] = ()
    source: str = ""
    missing: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """Return the usage as plain JSON values (the run record's ``usage`` field)."""
        return {
            "wall_seconds": self.wall_seconds,
            "cpu_seconds": self.cpu_seconds,
            "memory_peak": self.memory_peak,
            "gpu_seconds": self.gpu_seconds,
            "gpu_memory_peak": self.gpu_memory_peak,
            "devices": list(self.devices),
            "source": self.source,
            "missing": dict(self.missing),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        """Return the Usage ``to_json`` gave (a run record's or a local step's record)."""
        return cls(
            wall_seconds=data.get("wall_seconds"),
            cpu_seconds=data.get("cpu_seconds"),
            memory_peak=data.get("memory_peak"),
            gpu_seconds=data.get("gpu_seconds"),
            gpu_memory_peak=data.get("gpu_memory_peak"),
            devices=tuple(data.get("devices") or ()),
            source=str(data.get("source") or ""),
            missing=dict(data.get("missing") or {}),
        )

    def describe(self) -> str:
        """Return the figures a person reads, e.g. "cpu 59.9s, mem 1.2Gi peak, wall 1m 01s".

        Times are written as every duration is (``durations.format_duration``): "12ms".
        """
        parts = []
        if self.cpu_seconds is not None:
            parts.append(f"cpu {format_duration(self.cpu_seconds)}")
        if self.memory_peak is not None:
            parts.append(f"mem {format_bytes(self.memory_peak)} peak")
        if self.wall_seconds is not None:
            parts.append(f"wall {format_duration(self.wall_seconds)}")
        if self.devices:
            parts.append(f"gpus {','.join(self.devices)}")
        if self.gpu_seconds is not None:
            parts.append(f"gpu {format_duration(self.gpu_seconds)}")
        if self.gpu_memory_peak is not None:
            parts.append(f"gpu mem {format_bytes(self.gpu_memory_peak)} peak")
        return ", ".join(parts) if parts else "usage unknown"


def format_bytes(count: float) -> str:
    """Return a byte count in the binary units Kubernetes quantities use ("1.2Gi", "512Mi")."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(count) < 1024 or unit == "Ti":
            whole = unit == "" or count >= 100 or float(count).is_integer()
            return f"{count:.0f}{unit}" if whole else f"{count:.1f}{unit}"
        count /= 1024
    raise AssertionError("unreachable: the loop returns at Ti")  # pragma: no cover


def format_usage_line(
    source: str,
    *,
    wall_seconds: float | None = None,
    cpu_seconds: float | None = None,
    memory_peak: int | None = None,
    devices: tuple[str, ...] = (),
    gpus_requested: int = 0,
    gpu_seconds: float | None = None,
    gpu_memory_peak: int | None = None,
    gpu_missing: Mapping[str, str] | None = None,
) -> str:
    """Return the usage line for these figures (the keeper and the wrapper write the same)."""
    words = [USAGE_TAG, f"src={source}"]
    if wall_seconds is not None:
        words.append(f"wall_ms={round(wall_seconds * 1000)}")
    if cpu_seconds is not None:
        words.append(f"cpu_us={round(cpu_seconds * 1_000_000)}")
    if memory_peak is not None:
        words.append(f"mem_peak={memory_peak}")
    if devices:
        words.append(f"gpus={','.join(devices)}")
    if gpus_requested:
        words.append(f"gpu_req={gpus_requested}")
    if gpu_seconds is not None:
        words.append(f"gpu_ms={round(gpu_seconds * 1000)}")
    if gpu_memory_peak is not None:
        words.append(f"gpu_mem={gpu_memory_peak}")
    # Why a GPU figure is missing, one word each (percent-encoded: the line splits on spaces).
    for name, why in (gpu_missing or {}).items():
        if name in _GPU_WORDS:
            words.append(f"{_GPU_WORDS[name]}_why={quote(why, safe='')}")
    return " ".join(words)


def split_message(message: str) -> tuple[str, str | None]:
    """Return a termination message without its usage line, and the usage line (or None)."""
    kept, found = [], None
    for line in message.splitlines():
        if line.startswith(USAGE_TAG + " ") or line == USAGE_TAG:
            found = line
        else:
            kept.append(line)
    return "\n".join(kept).strip(), found


def parse_usage(line: str | None) -> Usage:
    """Return the Usage a usage line gives (None: no line), saying why each figure is missing.

    ``gpu_req`` in the line is how many GPUs the step asked for: without any, GPU figures
    are missing because there is nothing to measure. Unknown words are ignored (a newer
    writer may add figures); a value that is not a number leaves its figure missing.
    """
    words: dict[str, str] = {}
    if line is not None:
        for word in line.removeprefix(USAGE_TAG).split():
            key, _, value = word.partition("=")
            words[key] = value
    source = words.get("src", "")
    why = _WHY_MISSING.get(source, {})
    wall = _number(words.get("wall_ms"), 1e-3)
    cpu = _number(words.get("cpu_us"), 1e-6)
    peak = _number(words.get("mem_peak"), 1)
    devices = tuple(d for d in words.get("gpus", "").split(",") if d)
    missing = _not_the_step_s(words, wall, cpu, peak)
    cpu = None if "cpu_seconds" in missing else cpu
    peak = None if "memory_peak" in missing else peak
    for name, figure in (("wall_seconds", wall), ("cpu_seconds", cpu), ("memory_peak", peak)):
        if figure is None and name not in missing:
            missing[name] = NO_LINE if line is None else why.get(name, f"{name} was not given")
    gpu = {
        "gpu_seconds": _number(words.get("gpu_ms"), 1e-3),
        "gpu_memory_peak": _number(words.get("gpu_mem"), 1),
    }
    asked = words.get("gpu_req", "0") not in ("", "0")
    for name, figure in gpu.items():
        if figure is None:
            reason = unquote(words.get(f"{_GPU_WORDS[name]}_why", ""))
            missing[name] = reason or (_GPU_UNMEASURED if asked or devices else _NO_GPU)
    return Usage(
        wall_seconds=wall,
        cpu_seconds=cpu,
        memory_peak=None if peak is None else int(peak),
        gpu_seconds=gpu["gpu_seconds"],
        gpu_memory_peak=None if gpu["gpu_memory_peak"] is None else int(gpu["gpu_memory_peak"]),
        devices=devices,
        source=source,
        missing=missing,
    )


def _not_the_step_s(
    words: Mapping[str, str], wall: float | None, cpu: float | None, peak: float | None
) -> dict[str, str]:
    """Return why the CPU or memory figure of a usage line cannot be the step's own: the
    wrapper found itself in the node's root cgroup (``root=cpu,mem``), or a figure is
    impossible for one container (CPU above the wall time x the cores it could see, a peak
    above the node's memory). Such a figure is the node's: missing, with the reason."""
    reasons: dict[str, str] = {}
    at_root = words.get("root", "").split(",")
    for part, name, what in (("cpu", "cpu_seconds", "CPU"), ("mem", "memory_peak", "memory")):
        if part in at_root:
            reasons[name] = (
                f"the step ran in the node's root cgroup (/proc/self/cgroup says /): its {what} "
                "figure would be the whole node's"
            )
    cores, node = _number(words.get("cores"), 1), _number(words.get("node_mem"), 1)
    # 50 ms of slack: the wall time is read in hundredths of a second, the CPU in microseconds
    known = "cpu_seconds" not in reasons and cpu is not None and wall is not None and cores
    if known and cpu is not None and wall is not None and cores and cpu > (wall + 0.05) * cores:
        reasons["cpu_seconds"] = (
            f"{format_duration(cpu)} of CPU in {format_duration(wall)} on {cores:.0f} "
            "visible cores is impossible for the step: the cgroup read is not its own"
        )
    if "memory_peak" not in reasons and peak is not None and node and peak > node:
        reasons["memory_peak"] = (
            f"a peak of {format_bytes(peak)} is above the node's {format_bytes(node)}: "
            "the cgroup read is not the step's own"
        )
    return reasons


def _number(text: str | None, scale: float) -> float | None:
    if text is None or not text.isdigit():
        return None
    return int(text) * scale


#: A step "asked for far more than it used" when its request is this many times its use.
OVERSIZED = 4.0


@dataclass(frozen=True)
class UsageSummary:
    """A study's usage at a glance: CPU hours, and the steps that asked for far more.

    ``oversized`` holds one line per step whose memory request is at least ``OVERSIZED``
    times its peak, or whose cores are at least that many times its average CPU use
    ("train: mem 8Gi req, 1.2Gi peak").
    """

    cpu_hours: float = 0.0
    measured: int = 0
    unmeasured: int = 0
    oversized: tuple[str, ...] = ()

    def describe(self) -> str:
        """Return the summary as a line or a few ("" when no step was measured)."""
        if not self.measured:
            return ""
        # Under an hour, CPU time reads as every duration does ("3ms", "4m 05s").
        cpu = (
            f"{self.cpu_hours:.3g} CPU hours"
            if self.cpu_hours >= 1
            else f"{format_duration(self.cpu_hours * 3600)} of CPU"
        )
        line = f"usage: {cpu} over {self.measured} step(s)"
        if self.unmeasured:
            line += f" ({self.unmeasured} without figures)"
        asked = [f"  asked for far more than used: {o}" for o in self.oversized]
        return "\n".join([line, *asked])


def request_versus_use(requested: Mapping[str, Any] | None, usage: Usage | None) -> str:
    """Return "mem 8Gi req, 1.2Gi peak; cpu 4 req, 0.9 used" for what is known ("" if none).

    A step with GPUs adds what it made of them: "gpu 1 device(s), 40% busy, 1.2Gi peak"
    (busy: its GPU-seconds over its wall time and devices).
    """
    requested = requested or {}
    parts = []
    memory = requested.get("memory")
    if memory or (usage is not None and usage.memory_peak is not None):
        req = f"{format_bytes(memory)} req" if memory else "no req"
        peak = usage.memory_peak if usage is not None else None
        parts.append(f"mem {req}, {format_bytes(peak) + ' peak' if peak is not None else '?'}")
    used = _cores_used(usage)
    cores = requested.get("cpu")
    if used is not None:
        parts.append(f"cpu {cores:g} req, {used:.2g} used" if cores else f"cpu {used:.2g} used")
    gpu = _gpu_used(usage)
    if gpu:
        parts.append(gpu)
    return "; ".join(parts)


def _gpu_used(usage: Usage | None) -> str:
    """Return "gpu 2 devices, 40% busy, 1.2Gi peak" for the GPU figures known ("" if none)."""
    if usage is None or not usage.devices:
        return ""
    if usage.gpu_seconds is None and usage.gpu_memory_peak is None:
        return ""  # which devices it had is in the usage itself
    words = [f"gpu {len(usage.devices)} device(s)"]
    if usage.gpu_seconds is not None and usage.wall_seconds:
        busy = usage.gpu_seconds / (usage.wall_seconds * len(usage.devices))
        words.append(f"{busy:.0%} busy")
    if usage.gpu_memory_peak is not None:
        words.append(f"{format_bytes(usage.gpu_memory_peak)} peak")
    return ", ".join(words)


def summarize_usage(
    steps: Iterable[tuple[str, Mapping[str, Any] | None, Usage | None]],
) -> UsageSummary:
    """Return the study's summary from (step name, requested, usage) of each step that ended.

    ``requested`` is the run record's (``nodes``, ``cpu`` cores per node, ``memory`` bytes).
    """
    cpu, measured, unmeasured, oversized = 0.0, 0, 0, []
    for name, requested, usage in steps:
        if usage is None or (usage.cpu_seconds is None and usage.memory_peak is None):
            unmeasured += 1
            continue
        measured += 1
        cpu += usage.cpu_seconds or 0.0
        if _oversized(requested or {}, usage):
            oversized.append(f"{name}: {request_versus_use(requested, usage)}")
    return UsageSummary(cpu / 3600, measured, unmeasured, tuple(oversized))


def _cores_used(usage: Usage | None) -> float | None:
    """Return the average cores a step kept busy (CPU seconds over wall seconds)."""
    if usage is None or usage.cpu_seconds is None or not usage.wall_seconds:
        return None
    return usage.cpu_seconds / usage.wall_seconds


def _oversized(requested: Mapping[str, Any], usage: Usage) -> bool:
    memory, peak = requested.get("memory"), usage.memory_peak
    if memory and peak and memory >= OVERSIZED * peak:
        return True
    cores, used = requested.get("cpu"), _cores_used(usage)
    # A step under a second says nothing of its cores: its start is most of it.
    long_enough = (usage.wall_seconds or 0) >= 1.0
    return bool(
        cores and cores >= 2 and used is not None and long_enough and cores >= OVERSIZED * used
    )
