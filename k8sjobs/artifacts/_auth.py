"""Registry credentials and the WWW-Authenticate challenge flows (basic and bearer token).

Credentials are looked up per registry host, first match wins: those given to the store,
then $K8SJOBS_REGISTRY_USERNAME / $K8SJOBS_REGISTRY_PASSWORD, then docker's config.json
($DOCKER_CONFIG/config.json or ~/.docker/config.json): ``credHelpers``, ``auths``, and
``credsStore``. A secret never appears in a repr, an exception or a log line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AuthenticationError

HELPER_TIMEOUT = 10.0
_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(frozen=True)
class Credentials:
    """A username and a secret (a password, or an identity token when the username is
    ``<token>``), for one registry."""

    username: str
    password: str = field(repr=False)

    def basic_header(self) -> str:
        """Return the value of an ``Authorization: Basic`` header."""
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header."""

    scheme: str
    params: Mapping[str, str]


def parse_challenge(header: str) -> Challenge:
    """Return the scheme and parameters of a WWW-Authenticate header."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _CHALLENGE_PARAM.finditer(rest)
    }
    return Challenge(scheme.lower(), params)


def docker_config_path() -> Path:
    """Return the path of docker's config.json ($DOCKER_CONFIG wins over ~/.docker).

    Without one, a ``.dockerconfigjson`` there: a dockerconfigjson Secret mounted whole (a
    Flux Operator sidecar's, which cannot rename the key) holds the same document.
    """
    base = Path(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"))
    path = base / "config.json"
    secret = base / ".dockerconfigjson"
    return secret if not path.exists() and secret.exists() else path


def _load_docker_config() -> dict[str, Any]:
    path = docker_config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise AuthenticationError(
            f"Cannot read docker config {path}: {type(exc).__name__}."
        ) from exc
    return data if isinstance(data, dict) else {}


def _host_keys(host: str) -> list[str]:
    # config.json keys are written in several spellings for the same registry.
    keys = [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]
    if host in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        keys.append("https://index.docker.io/v1/")
    return keys


def _from_auths(auths: Mapping[str, Any], host: str) -> Credentials | None:
    for key in _host_keys(host):
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if entry.get("identitytoken"):
            return Credentials("<token>", str(entry["identitytoken"]))
        if entry.get("auth"):
            try:
                user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
            except ValueError as exc:
                raise AuthenticationError(
                    f'docker config: the "auth" entry for {host} is not base64 of user:password.'
                ) from exc
            return Credentials(user, secret)
        if entry.get("username"):
            return Credentials(str(entry["username"]), str(entry.get("password", "")))
    return None


async def run_credential_helper(
    name: str, host: str, timeout: float = HELPER_TIMEOUT
) -> Credentials | None:
    """Return what ``docker-credential-<name> get`` says for ``host``, or None if it has nothing.

    The helper runs in a process group of its own: at the timeout (or if the caller is
    cancelled) the whole group is killed, so a helper that forks leaves nothing behind.
    """
    program = f"docker-credential-{name}"
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            "get",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise AuthenticationError(
            f"Credential helper {program} for {host} cannot be run: {exc.strerror}."
        ) from exc
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate(host.encode())
    except TimeoutError:
        raise AuthenticationError(
            f"Credential helper {program} did not answer for {host} within {timeout:g} s."
        ) from None
    finally:
        if proc.returncode is None or (proc.stdout is not None and not proc.stdout.at_eof()):
            _kill_group(proc.pid)
            await proc.wait()
    if proc.returncode != 0:
        return None  # helpers exit non-zero for "credentials not found"
    try:
        data = json.loads(out)
        return Credentials(str(data["Username"]), str(data["Secret"]))
    except (ValueError, KeyError, TypeError):
        raise AuthenticationError(
            f"Credential helper {program} gave unreadable output for {host}."
        ) from None


def _kill_group(pgid: int) -> None:
    """Kill every process of a helper's group (it may have forked)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def find_credentials(host: str) -> Credentials | None:
    """Return the credentials configured for ``host``, or None for anonymous access."""
    user = os.environ.get("K8SJOBS_REGISTRY_USERNAME")
    if user:
        return Credentials(user, os.environ.get("K8SJOBS_REGISTRY_PASSWORD", ""))
    config = _load_docker_config()
    helpers = config.get("credHelpers") or {}
    for key in _host_keys(host):
        if key in helpers:
            return await run_credential_helper(str(helpers[key]), host)
    found = _from_auths(config.get("auths") or {}, host)
    if found is None and config.get("credsStore"):
        found = await run_credential_helper(str(config["credsStore"]), host)
    return found


def token_query(challenge: Challenge, scope: str) -> list[tuple[str, str]]:
    """Return the query of a token request answering a bearer ``challenge`` for ``scope``.

    ``scope`` is ours, not the challenge's: the challenge is remembered per host, and its
    scope belongs to whichever request met it first.
    """
    query = []
    if "service" in challenge.params:
        query.append(("service", challenge.params["service"]))
    query.extend(("scope", one) for one in scope.split())
    return query


def token_from_response(body: Any, realm: str) -> str:
    """Return the token in a token server's JSON answer, or raise AuthenticationError."""
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not token:
        raise AuthenticationError(f"The token server {realm} answered without a token.")
    return str(token)
