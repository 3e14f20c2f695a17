"""Running steps on this machine: the local backend, the pod runner and the slot scheduler."""

from __future__ import annotations

from .backend import LocalBackend
from .podrunner import PodRunner
from .slots import Capacity, Reservation, SlotScheduler

__all__ = ["Capacity", "LocalBackend", "PodRunner", "Reservation", "SlotScheduler"]
