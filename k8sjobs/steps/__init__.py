"""What a user writes: a Step and its parts, validated and pure (no I/O but reading a
``script_file`` the step names, no clock, no network).

``spec`` holds the Step and its Resources; the parts it is made of have a module each:
``quantity`` (Kubernetes quantities), ``names`` (object names and label values), ``volumes``,
``scheduling`` (node selection, affinity, tolerations), ``failure`` (retry rules) and
``allocation`` (pods held for a study, that steps run in).
"""

from __future__ import annotations

from .allocation import Allocation
from .names import job_name, label_value
from .scheduling import Affinity
from .spec import Resources, SecretKeyRef, Step, StepOutput, Toleration
from .volumes import Volume

__all__ = [
    "Affinity",
    "Allocation",
    "Resources",
    "SecretKeyRef",
    "Step",
    "StepOutput",
    "Toleration",
    "Volume",
    "job_name",
    "label_value",
]
