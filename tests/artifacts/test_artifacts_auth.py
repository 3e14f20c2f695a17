"""Auth and transport against real registries: basic, bearer tokens, TLS, config sources."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from k8sjobs.artifacts import (
    AuthenticationError,
    Credentials,
    DigestCache,
    Registry,
    RegistryUnavailable,
)
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import FAST_RETRY, CountingRetry


def _file(tmp_path: Path) -> Path:
    f = tmp_path / "f.txt"
    f.write_text("secret-free payload")
    return f


def _store(server: RegistryServer, tmp_path: Path, **kw: Any) -> Registry:
    return Registry(
        server.location,
        plain_http=not server.tls,
        cache=DigestCache(tmp_path / "c.sqlite"),
        **{"retry": FAST_RETRY, **kw},
    )


async def test_basic_auth_with_explicit_credentials(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    store = _store(
        basic_registry, tmp_path, username=basic_registry.username, password=basic_registry.password
    )
    async with store:
        pushed = await store.push("auth/x:v1", [_file(tmp_path)])
        assert await store.resolve("auth/x:v1") == pushed.digest
    assert basic_registry.password and basic_registry.password not in repr(store)


async def test_wrong_password_fails_fast_naming_the_reference_without_the_secret(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    retry = CountingRetry(**vars(FAST_RETRY))
    store = _store(
        basic_registry, tmp_path, username="k8sjobs", password="wrong-password-xyz", retry=retry
    )
    async with store:
        with pytest.raises(AuthenticationError) as info:
            await store.push("auth/x:v2", [_file(tmp_path)])
    assert retry.pauses == []  # fast because never retried: a refusal is final
    assert "auth/x:v2" in str(info.value) and "wrong-password-xyz" not in str(info.value)


async def test_missing_credentials_say_where_to_put_them(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    async with _store(basic_registry, tmp_path) as store:
        with pytest.raises(AuthenticationError, match="K8SJOBS_REGISTRY_USERNAME"):
            await store.resolve("auth/x:v1")


async def test_credentials_from_environment(
    basic_registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8SJOBS_REGISTRY_USERNAME", basic_registry.username or "")
    monkeypatch.setenv("K8SJOBS_REGISTRY_PASSWORD", basic_registry.password or "")
    async with _store(basic_registry, tmp_path) as store:
        await store.push("auth/env:v1", [_file(tmp_path)])


# A dockerconfigjson Secret mounted whole names the file by its key (a Flux Operator sidecar).
@pytest.mark.parametrize("file_name", ["config.json", ".dockerconfigjson"])
async def test_credentials_from_docker_config_auths(
    basic_registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_name: str
) -> None:
    auth = base64.b64encode(
        f"{basic_registry.username}:{basic_registry.password}".encode()
    ).decode()
    config_dir = tmp_path / "docker"
    config_dir.mkdir()
    (config_dir / file_name).write_text(
        json.dumps({"auths": {basic_registry.location: {"auth": auth}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    async with _store(basic_registry, tmp_path) as store:
        await store.push("auth/config:v1", [_file(tmp_path)])


async def test_credentials_from_a_credential_helper(
    basic_registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, config_dir = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    config_dir.mkdir()
    helper = bin_dir / "docker-credential-k8stest"
    answer = json.dumps(
        {"ServerURL": "", "Username": basic_registry.username, "Secret": basic_registry.password}
    )
    helper.write_text(f"#!/bin/sh\nread host\necho '{answer}'\n")
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    (config_dir / "config.json").write_text(
        json.dumps({"credHelpers": {basic_registry.location: "k8stest"}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    async with _store(basic_registry, tmp_path) as store:
        await store.push("auth/helper:v1", [_file(tmp_path)])


async def test_bearer_token_flow_against_token_server(
    token_registry: RegistryServer, tmp_path: Path
) -> None:
    creds = {"username": token_registry.username, "password": token_registry.password}
    async with _store(token_registry, tmp_path, **creds) as store:
        pushed = await store.push("tok/x:v1", [_file(tmp_path)])
        await store.pull("tok/x:v1", tmp_path / "out")
        assert await store.tags("tok/x") == ["v1"]
    assert pushed.digest
    assert token_registry.token_server is not None
    requests = token_registry.token_server.requests
    assert any("repository:tok/x:pull,push" in unquote(r) for r in requests), requests


async def test_bearer_token_refused_for_wrong_credentials(
    token_registry: RegistryServer, tmp_path: Path
) -> None:
    async with _store(token_registry, tmp_path, username="k8sjobs", password="nope") as store:
        with pytest.raises(AuthenticationError, match="token server"):
            await store.resolve("tok/x:v1")


async def test_tls_with_ca_file(tls_registry: RegistryServer, tmp_path: Path) -> None:
    async with _store(tls_registry, tmp_path, ca_file=tls_registry.ca_file) as store:
        await store.push("tls/x:v1", [_file(tmp_path)])
        await store.pull("tls/x:v1", tmp_path / "out")


async def test_tls_without_ca_is_refused_with_a_hint(
    tls_registry: RegistryServer, tmp_path: Path
) -> None:
    async with _store(tls_registry, tmp_path) as store:
        with pytest.raises(RegistryUnavailable, match="ca_file"):
            await store.resolve("tls/x:v1")


async def test_refused_connection_is_reported_after_bounded_attempts(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retry = CountingRetry()  # the default figures: what a user gets
    async with Registry(f"127.0.0.1:{port}", plain_http=True, retry=retry) as store:
        with pytest.raises(RegistryUnavailable, match=r"down/x:v1.*cannot connect"):
            await store.pull("down/x:v1", tmp_path / "out")  # one request, retried
    retry.check_bounded()  # reported after the policy's attempts and pauses, no more


def test_credentials_never_show_their_secret() -> None:
    creds = Credentials("user", "hunter2")
    assert "hunter2" not in repr(creds)
