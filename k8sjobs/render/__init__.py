"""A Step to the Kubernetes objects that run it: pure (no I/O, no clock).

``manifests`` turns one step into its ConfigMap, Job, Secret and Service; ``multinode`` wires
a step across pods (``$(LAUNCHER)``, ssh as the MPI Operator does), ``minicluster`` renders a
Flux Operator MiniCluster instead, ``podsecurity`` checks the restricted profile, ``sshkey``
makes a step's key pair, and ``jobindex`` reads an Indexed Job's index sets.
"""

from __future__ import annotations

from .manifests import HANDOFF_IMAGE, Manifests, Target, expand_launcher, render
from .podsecurity import check_restricted
from .sshkey import generate_key

__all__ = [
    "HANDOFF_IMAGE",
    "Manifests",
    "Target",
    "check_restricted",
    "expand_launcher",
    "generate_key",
    "render",
]
