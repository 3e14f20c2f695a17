"""Fixtures shared by every test directory."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from k8sjobs.testing.registry import RegistryServer, registry_available, registry_process

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


@pytest.fixture(scope="module")
def docker_registry() -> Iterator[RegistryServer]:
    """Yield a real docker-registry process (skipped where Debian's docker-registry is not)."""
    if not registry_available():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    with registry_process() as server:
        yield server
