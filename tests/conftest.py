"""Fixtures shared by every test directory."""

from __future__ import annotations

import signal

import pytest

# Ctrl-C tests send SIGINT to the CLI they start. A suite started in the background by a
# non-interactive shell (`bash .ci/run &`, a CI runner's script) inherits SIGINT ignored, and
# an ignored signal stays ignored across exec: every child would ignore the test's SIGINT, as
# a background job rightly does. A handler, unlike SIG_IGN, is reset to the default at exec,
# so with one here each child starts with SIGINT as a terminal's foreground job has it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(params=["in-process", "subprocess"])
def handoff_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per artifact handoff path: the local runners read $K8SJOBS_HANDOFF
    when they start, so the same test proves both paths hand over the same artifacts."""
    monkeypatch.setenv("K8SJOBS_HANDOFF", request.param)
    return str(request.param)
