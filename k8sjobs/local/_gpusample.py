"""Sampling a local step's GPUs while it runs: GPU time and peak GPU memory, from nvidia-smi.

While a container that was given NVIDIA devices runs, a worker thread (never the event loop)
asks ``nvidia-smi`` every ``K8SJOBS_GPU_SAMPLE_SECONDS`` (default 1 s) two questions, each
call bounded by ``K8SJOBS_GPU_SAMPLE_TIMEOUT`` (default 5 s; a call that does not answer in
time is killed with its process group):

- ``--query-compute-apps=pid,gpu_uuid,used_memory``: the GPU memory of every process on the
  machine's GPUs. Only the container's own processes count (its process session, the same
  tree its memory limit watches); ``gpu_memory_peak`` is the highest sum seen, in bytes.
- ``--query-gpu=index,uuid,utilization.gpu``: each device's utilization over nvidia-smi's
  own sample period. Only the container's devices count; ``gpu_seconds`` is the integral of
  utilization x time over them: each sample's utilization (0-1, summed over devices) times
  the time since the previous sample. One device busy 50% for 10 s gives 5 GPU-seconds, as
  Nextflow's and DCGM's figures read: approximate at the sampling rate (the time after the
  last sample is not counted; a burst between samples is seen only as nvidia-smi averaged it).

Sampling never fails a step: when nvidia-smi is absent, fails, or hangs, the figure stays
None and ``missing`` says why. AMD devices are not sampled (rocm-smi is not read).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._process import _scan_processes
from ._usage import DEVICES_ENV

__all__ = ["GpuFigures", "GpuSampler", "sampler_for"]

INTERVAL_ENV = "K8SJOBS_GPU_SAMPLE_SECONDS"
TIMEOUT_ENV = "K8SJOBS_GPU_SAMPLE_TIMEOUT"
_DEFAULTS = {INTERVAL_ENV: 1.0, TIMEOUT_ENV: 5.0}
APPS_QUERY = ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
GPU_QUERY = ("--query-gpu=index,uuid,utilization.gpu", "--format=csv,noheader,nounits")
_MIB = 1 << 20


@dataclass
class GpuFigures:
    """What sampling found: each figure, or None and why (``missing``, by figure name)."""

    gpu_seconds: float | None = None
    gpu_memory_peak: int | None = None
    missing: dict[str, str] = field(default_factory=dict)

    def values(self) -> tuple[float | None, int | None, dict[str, str]]:
        """Return the figures as ``_usage.measured_message`` takes them."""
        return self.gpu_seconds, self.gpu_memory_peak, self.missing


def sampler_for(session: int, env: Mapping[str, str]) -> GpuSampler | GpuFigures | None:
    """Return a sampler for a container's NVIDIA devices, or the figures' reasons without one.

    None: the container has no GPU (``parse_usage`` says so itself). ``env`` is the
    container's: ``K8SJOBS_GPU_DEVICES`` names its devices, ``NVIDIA_VISIBLE_DEVICES`` their
    UUIDs (or indexes), the sampling settings are read from the driver's environment.
    """
    names = [d for d in env.get(DEVICES_ENV, "").split(",") if d]
    if not names:
        return None
    nvidia = [d for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d and d != "void"]
    if not nvidia:
        why = "GPU time and memory are sampled on NVIDIA devices only (rocm-smi is not read)"
        return _none(why)
    settings: dict[str, float] = {}
    for name, default in _DEFAULTS.items():
        text = os.environ.get(name, "")
        try:
            settings[name] = float(text) if text else default
        except ValueError:
            settings[name] = -1.0
        if not 0 < settings[name] < math.inf:
            return _none(f"{name}={text!r} is not a number of seconds above 0: not sampled")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return _none("nvidia-smi is not on this machine's PATH: the GPUs were not sampled")
    return GpuSampler(session, nvidia, smi, settings[INTERVAL_ENV], settings[TIMEOUT_ENV])


def _none(why: str) -> GpuFigures:
    return GpuFigures(missing={"gpu_seconds": why, "gpu_memory_peak": why})


class GpuSampler:
    """Samples one container's devices in a worker thread from ``start`` to ``stop``."""

    def __init__(
        self, session: int, devices: Sequence[str], smi: str, interval: float, timeout: float
    ) -> None:
        self.session = session  # the container's process session (its program's pid)
        self.devices = frozenset(devices)  # UUIDs or indexes, as NVIDIA_VISIBLE_DEVICES says
        self.smi, self.interval, self.timeout = smi, interval, timeout
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._loop, name="k8sjobs-gpu-sample", daemon=True)
        self._busy: float | None = None  # GPU-seconds so far (None: no answer yet)
        self._peak: int | None = None
        self._errors: dict[str, str] = {}  # the last failure of each query
        # What a query gave instead of a number ("[N/A]" on a MIG slice): a figure that
        # stayed 0 beside it is unknown, not 0.
        self._unreadable: dict[str, str] = {}

    def start(self) -> None:
        """Start sampling (the first sample is taken at once)."""
        self._last = time.monotonic()
        self._thread.start()

    def stop(self) -> GpuFigures:
        """Stop sampling and return the figures; never waits (a call in flight is killed).

        Synchronous so that a container's end records its figures even while its task is
        being cancelled; the thread ends by itself once its killed call returns.
        """
        self._stopping.set()
        with self._lock:
            if self._running is not None:
                _kill_group(self._running)
            figures = GpuFigures()
            for name, value, query in (
                ("gpu_seconds", self._busy, "utilization"),
                ("gpu_memory_peak", self._peak, "apps"),
            ):
                if not value and query in self._unreadable:
                    figures.missing[name] = self._unreadable[query]
                elif value is not None:
                    setattr(figures, name, value)
                else:
                    figures.missing[name] = self._errors.get(query) or (
                        f"the step ended before nvidia-smi answered (sampled every "
                        f"{self.interval:g}s)"
                    )
        return figures

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._sample()
            self._stopping.wait(self.interval)

    def _sample(self) -> None:
        apps = self._ask("apps", APPS_QUERY)
        if apps is not None:
            used, unreadable = _memory_of(apps, _members(self.session))
            with self._lock:
                if unreadable:
                    self._unreadable["apps"] = f"nvidia-smi gave {unreadable}"
                self._peak = max(self._peak or 0, used)
        utilization = self._ask("utilization", GPU_QUERY)
        if utilization is not None:
            now = time.monotonic()
            busy, unreadable = _busy(utilization, self.devices)
            elapsed, self._last = now - self._last, now
            with self._lock:
                if unreadable:
                    self._unreadable["utilization"] = f"nvidia-smi gave {unreadable}"
                if busy is None and not unreadable:  # no row of the step's own devices
                    self._errors["utilization"] = _without_devices(utilization, self.devices)
                elif busy is not None:
                    self._busy = (self._busy or 0.0) + busy * elapsed

    def _ask(self, query: str, args: Sequence[str]) -> list[list[str]] | None:
        """Return nvidia-smi's CSV rows (None: it failed or was stopped; the reason is kept)."""
        shown = f"nvidia-smi {args[0]}"
        with self._lock:
            if self._stopping.is_set():
                return None
            try:
                process = subprocess.Popen(
                    [self.smi, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",  # bytes that are not UTF-8 are garbage to read, not a crash
                    start_new_session=True,  # so a timeout kills whatever it started too
                )
            except OSError as error:
                self._errors[query] = f"{shown} could not start: {error.strerror}"
                return None
            self._running = process
        try:
            out, err = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            with self._lock:
                self._errors[query] = f"{shown} did not answer within {self.timeout:g}s"
            return None
        finally:
            with self._lock:
                self._running = None
        if self._stopping.is_set():
            return None  # killed by stop: not the tool's fault
        if process.returncode != 0:
            first = (err.strip().splitlines() or out.strip().splitlines() or [""])[0][:200]
            with self._lock:
                self._errors[query] = f"{shown} exited {process.returncode}: {first}".rstrip(": ")
            return None
        return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line]


def _members(session: int) -> set[int]:
    """Return the pids of a process session (the container's tree)."""
    return {pid for pid, member_session, _ in _scan_processes() if member_session == session}


def _memory_of(rows: list[list[str]], pids: set[int]) -> tuple[int, str]:
    """Return the bytes of GPU memory the rows give the processes ``pids`` (MiB, nounits),
    and what nvidia-smi gave instead of a number for one of them ("" if nothing)."""
    total, unreadable = 0, ""
    for row in rows:
        if len(row) < 3 or not row[0].isdigit():
            if not ",".join(row).startswith("No running processes"):
                unreadable = f"{_shown(row)} where a line of pid, gpu_uuid, used_memory belongs"
            continue
        if int(row[0]) in pids:
            if row[2].isdigit():
                total += int(row[2]) * _MIB
            else:
                unreadable = f"{row[2]!r} as used_memory of the step's process {row[0]}"
    return total, unreadable


def _busy(rows: list[list[str]], devices: frozenset[str]) -> tuple[float | None, str]:
    """Return the summed utilization (0-1 per device) of the container's devices (None: no
    device gave a number), and what nvidia-smi gave instead of a number ("" if nothing)."""
    busy: float | None = None
    unreadable = ""
    for row in rows:
        if len(row) >= 3 and {row[0], row[1]} & devices:
            if row[2].isdigit():
                busy = (busy or 0.0) + int(row[2]) / 100
            else:
                unreadable = f"{row[2]!r} as utilization.gpu of device {row[1] or row[0]}"
    return busy, unreadable


def _without_devices(rows: list[list[str]], devices: frozenset[str]) -> str:
    """Return why an answer gave no utilization of the step's devices (empty, garbage, or
    only other devices): the figure is missing for that reason, never 0."""
    mine = ", ".join(sorted(devices))
    if not rows:
        return f"nvidia-smi's answer was empty: no utilization of the step's device ({mine})"
    return (
        f"nvidia-smi's answer named none of the step's devices ({mine}); it began {_shown(rows[0])}"
    )


def _shown(row: list[str]) -> str:
    """Return a line of nvidia-smi's answer for a message: bounded, control characters escaped."""
    text = ", ".join(row)[:80]
    return repr("".join(c if c.isprintable() else "?" for c in text))


def _kill_group(process: subprocess.Popen[str]) -> None:
    if process.returncode is not None:
        return  # reaped: its group id may already be another's
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
