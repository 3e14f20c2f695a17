"""Fault points: where a test may kill the driver with SIGKILL, exactly, instead of racing it.

A driver killed with ``kill -9`` can stop between any two steps of starting a container; the
windows between them are too short to hit by timing. ``kill_point(name)`` kills the calling
process (SIGKILL, as ``kill -9`` does) when the environment variable ``K8SJOBS_FAULT_KILL``
names that point, so a test runs a driver in a subprocess and stops it exactly there. Unset
(always, outside tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["FAULT_KILL", "kill_point"]

FAULT_KILL = "K8SJOBS_FAULT_KILL"


def kill_point(name: str) -> None:
    """Die by SIGKILL here if ``K8SJOBS_FAULT_KILL`` is ``name``."""
    if os.environ.get(FAULT_KILL) == name:
        os.kill(os.getpid(), signal.SIGKILL)
