"""Running steps on this machine: the local backend, the pod runner and the slot scheduler."""

from __future__ import annotations

from k8sjobs.local.backend import LocalBackend
from k8sjobs.local.podrunner import PodRunner
from k8sjobs.local.slots import Capacity, Reservation, SlotScheduler

__all__ = ["Capacity", "LocalBackend", "PodRunner", "Reservation", "SlotScheduler"]
