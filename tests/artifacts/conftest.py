"""Fixtures: real docker-registry processes (shared per session), stores and test data."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from k8sjobs.artifacts import DigestCache, Registry
from k8sjobs.artifacts._http import Timeouts
from k8sjobs.testing.registry import (
    REGISTRY_BINARY,
    FaultProxy,
    RegistryServer,
    registry_available,
    registry_process,
)

from .artifact_helpers import FAST_RETRY

needs_registry = pytest.mark.skipif(
    not registry_available(),
    reason=f"{REGISTRY_BINARY} (Debian package docker-registry) and openssl are needed; "
    "CI installs them with apt-get install docker-registry",
)


def _server(**kwargs: object) -> Iterator[RegistryServer]:
    if not registry_available():
        missing = f"{REGISTRY_BINARY} is not installed (apt-get install docker-registry)"
        if os.environ.get("CI"):  # CI installs it: a missing registry there is a failure
            pytest.fail(missing)
        pytest.skip(missing)
    with registry_process(**kwargs) as server:
        yield server


@pytest.fixture(scope="session")
def plain_registry() -> Iterator[RegistryServer]:
    yield from _server()


@pytest.fixture(scope="session")
def basic_registry() -> Iterator[RegistryServer]:
    yield from _server(auth="basic")


@pytest.fixture(scope="session")
def tls_registry() -> Iterator[RegistryServer]:
    yield from _server(tls=True)


@pytest.fixture(scope="session")
def token_registry() -> Iterator[RegistryServer]:
    yield from _server(auth="token")


@pytest.fixture
async def proxy(plain_registry: RegistryServer) -> AsyncIterator[FaultProxy]:
    """A FaultProxy in front of the shared plain registry, with no faults until injected."""
    async with FaultProxy(plain_registry.url) as p:
        yield p


@pytest.fixture
def cache(tmp_path: Path) -> DigestCache:
    return DigestCache(tmp_path / "digests.sqlite")


@pytest.fixture(autouse=True)
def _isolated_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the developer's docker config and env credentials out of every test."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.delenv("K8SJOBS_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("K8SJOBS_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("K8SJOBS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def registry(plain_registry: RegistryServer, cache: DigestCache) -> Registry:
    return Registry(
        plain_registry.location,
        plain_http=True,
        cache=cache,
        retry=FAST_RETRY,
        timeouts=Timeouts(connect=2, read=5),
    )
