"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["in-process", "subprocess"])
def handoff_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per artifact handoff path: the local runners read $K8SJOBS_HANDOFF
    when they start, so the same test proves both paths hand over the same artifacts."""
    monkeypatch.setenv("K8SJOBS_HANDOFF", request.param)
    return str(request.param)
