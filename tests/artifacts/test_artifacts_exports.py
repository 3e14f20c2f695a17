"""The public front door of k8sjobs.artifacts stays complete (as httpx checks its own)."""

from __future__ import annotations

import k8sjobs.artifacts as artifacts


def test_every_name_in_all_exists_once() -> None:
    assert len(artifacts.__all__) == len(set(artifacts.__all__))
    for name in artifacts.__all__:
        assert hasattr(artifacts, name), name


def test_every_public_name_is_exported() -> None:
    for name in artifacts.__all__:  # the package imports its names on first use
        getattr(artifacts, name)
    public = {n for n in vars(artifacts) if n[0].isalpha() and n != "annotations"}
    submodules = {"errors", "handoff", "image", "lineage", "stepcache"}
    assert public - submodules <= set(artifacts.__all__)
