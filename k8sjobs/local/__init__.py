"""Running pods on this machine: the pod runner and the slot scheduler."""

from __future__ import annotations

from k8sjobs.local.podrunner import PodRunner
from k8sjobs.local.slots import Capacity, Reservation, SlotScheduler

__all__ = ["Capacity", "PodRunner", "Reservation", "SlotScheduler"]
