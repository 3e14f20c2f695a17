"""Running steps on this machine: the local backend, the pod runner and the slot scheduler."""

from __future__ import annotations

from .backend import LocalBackend
from .gpus import Gpu
from .podrunner import PodRunner
from .slots import Capacity, Reservation, SlotScheduler

__all__ = ["Capacity", "Gpu", "LocalBackend", "PodRunner", "Reservation", "SlotScheduler"]
