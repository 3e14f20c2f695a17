"""The handoff image as a user sees it: the name rendered steps pull, what ``k8sjobs image
build`` makes it from, and the environment that bounds its pulls.

Standard library only: ``k8sjobs --help`` shows these, and must not load the modules that
use them (render, the artifact stack: pydantic, yaml, aiohttp), which import them from here.
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["DEFAULT_BASE", "DEFAULT_PLATFORMS", "ENV_MAX_BYTES", "ENV_MAX_RATIO", "HANDOFF_IMAGE"]

#: The handoff image of this release, tagged with the package version (published by
#: .github/workflows/release.yml; `k8sjobs image build` makes the same image for a mirror).
HANDOFF_IMAGE = f"ghcr.io/k8sjobs/handoff:{__version__}"
#: What ``k8sjobs image build`` installs k8sjobs onto, and for which platforms.
DEFAULT_BASE = "docker.io/library/python:3.12-slim"
DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
#: The environment variables that raise a pull's limits (in the pod, and for the CLI's pull).
ENV_MAX_BYTES = "K8SJOBS_PULL_MAX_BYTES"
ENV_MAX_RATIO = "K8SJOBS_PULL_MAX_RATIO"
