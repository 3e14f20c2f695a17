"""Readiness probes, as a kubelet runs them: a container is Ready only once its probe passes.

A container with a ``readinessProbe`` starts unready; its probe runs after
``initialDelaySeconds`` and every ``periodSeconds`` (default 10), each try bounded by
``timeoutSeconds`` (default 1); ``successThreshold`` passes in a row (default 1) make it
Ready, ``failureThreshold`` failures in a row (default 3) make it unready again. Handlers:

- ``tcpSocket``: a TCP connection to ``host`` (default the pod's IP, this machine) and
  ``port`` (a number or the name of one of the container's ``ports``). Every local pod shares
  this machine's network, so the one port that is per pod is the workers' sshd port (2222):
  for a pod of a multi-node step it is that pod's agent socket (``k8sjobs.local.agent``,
  which stands in for sshd), so a worker is Ready once its agent listens, as a worker pod is
  once its sshd does;
- ``exec``: the command, in the container's environment and working directory; exit 0 passes.

``httpGet`` and ``grpc`` are not run: such a container is Ready once running, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .agent import SSHD_PORT, short_address, socket_path

__all__ = ["probed", "run_readiness"]

_HANDLED = ("tcpSocket", "exec")


def probed(container: Mapping[str, Any]) -> bool:
    """Return whether the container's readiness comes from a probe this runner runs."""
    probe = container.get("readinessProbe") or {}
    return any(key in probe for key in _HANDLED)


async def run_readiness(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: str,
    argv: Callable[[Sequence[str]], list[str]],
    set_ready: Callable[[bool], None],
) -> None:
    """Probe the container until cancelled, calling ``set_ready`` on each change.

    ``argv`` translates an exec probe's command as the container's own command is (paths
    into the sandbox).
    """
    probe = container.get("readinessProbe") or {}
    period = float(probe.get("periodSeconds", 10))
    timeout = float(probe.get("timeoutSeconds", 1))
    successes_needed = int(probe.get("successThreshold", 1))
    failures_allowed = int(probe.get("failureThreshold", 3))
    await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
    ready, successes, failures = False, 0, 0
    while True:
        passed = await _try(probe, container, env, cwd, argv, timeout)
        successes, failures = (successes + 1, 0) if passed else (0, failures + 1)
        if not ready and successes >= successes_needed:
            ready = True
            set_ready(True)
        elif ready and failures >= failures_allowed:
            ready = False
            set_ready(False)
        await asyncio.sleep(period)


async def _try(
    probe: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: str,
    argv: Callable[[Sequence[str]], list[str]],
    timeout: float,
) -> bool:
    try:
        async with asyncio.timeout(timeout):
            if "tcpSocket" in probe:
                return await _tcp(probe["tcpSocket"], container, env)
            return await _exec(argv(probe["exec"].get("command") or []), env, cwd)
    except (TimeoutError, OSError):
        return False


async def _tcp(
    handler: Mapping[str, Any], container: Mapping[str, Any], env: Mapping[str, str]
) -> bool:
    port = _port(handler.get("port"), container)
    agents = env.get("K8SJOBS_AGENT_DIR")
    if port == SSHD_PORT and agents and env.get("HOSTNAME"):
        path = socket_path(agents, env.get("K8SJOBS_AGENT_NAMESPACE", "default"), env["HOSTNAME"])
        with short_address(path) as address:
            _, writer = await asyncio.open_unix_connection(address)
    else:
        _, writer = await asyncio.open_connection(handler.get("host") or "127.0.0.1", port)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise OSError(f"no container port named {value!r}")


async def _exec(command: list[str], env: Mapping[str, str], cwd: str) -> bool:
    if not command:
        return False
    process = await asyncio.create_subprocess_exec(
        *command,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        return await process.wait() == 0
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
