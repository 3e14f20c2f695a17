"""Helpers shared by the security tests: a Role enforcer for the fake cluster, 403 bodies."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k8sjobs.cli.rbac import RULES, Rule
from k8sjobs.testing import ApiError, FakeCluster, RequestKey

GROUPS = {"jobs": "batch"}


SERVICE_ACCOUNT = "system:serviceaccount:default:k8sjobs"


def forbidden(verb: str, resource: str, user: str = SERVICE_ACCOUNT) -> ApiError:
    """Return the 403 a real API server sends when RBAC refuses ``verb`` on ``resource``."""
    plural = resource.partition("/")[0]
    group = GROUPS.get(plural, "")
    qualified = f"{plural}.{group}" if group else plural
    message = (
        f'{qualified} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group '
        f'"{group}" in the namespace "default"'
    )
    return ApiError(403, "Forbidden", message, {"group": group, "kind": plural})


@dataclass
class Rbac:
    """An authorizer for the fake cluster: refuses what ``rules`` do not grant, and records.

    Hooked through the cluster's public objects: ``requests.record`` sees every request's
    (verb, resource, subresource) first, then ``faults.error_for`` may answer with an error.
    """

    rules: tuple[Rule, ...] = RULES
    denied: list[RequestKey] = field(default_factory=list)
    refuse: set[tuple[str, str]] = field(default_factory=set)
    enforce: bool = True
    _last: RequestKey | None = None

    def granted(self) -> set[tuple[str, str]]:
        return {(verb, rule.resource) for rule in self.rules for verb in rule.verbs}

    def allows(self, key: RequestKey) -> bool:
        resource = f"{key.resource}/{key.subresource}" if key.subresource else key.resource
        pair = (key.verb, resource)
        return pair not in self.refuse and (not self.enforce or pair in self.granted())

    def install(self, cluster: FakeCluster) -> None:
        record, error_for = cluster.requests.record, cluster.faults.error_for

        def recorded(key: RequestKey) -> None:
            self._last = key
            record(key)

        def authorized(verb: str, resource: str) -> ApiError | None:
            key = self._last
            if key is not None and not self.allows(key):
                self.denied.append(key)
                full = f"{key.resource}/{key.subresource}" if key.subresource else key.resource
                return forbidden(key.verb, full)
            return error_for(verb, resource)

        cluster.requests.record = recorded  # type: ignore[method-assign]
        cluster.faults.error_for = authorized  # type: ignore[method-assign]


def used(cluster: FakeCluster) -> set[tuple[str, str]]:
    """Return every (verb, resource[/subresource]) the cluster was sent."""
    return {
        (k.verb, f"{k.resource}/{k.subresource}" if k.subresource else k.resource)
        for k in cluster.requests.counts
    }


def pairs(rules: Iterable[Rule]) -> set[tuple[str, str]]:
    return {(verb, rule.resource) for rule in rules for verb in rule.verbs}


async def run_cli(argv: Sequence[str], *, cwd: Path) -> tuple[int, str, str]:
    """Run ``k8sjobs argv`` in a child process; return its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "k8sjobs.cli",
        *argv,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
            "NO_COLOR": "1",
            # The code under test (a worktree's), not whatever the venv installed.
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
