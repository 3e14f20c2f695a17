"""The line channel between the driver and the agent of one pod, and how each backend opens it.

The agent (``agent.py serve``) listens on a unix socket inside its pod; ``agent.py attach``
relays its stdin and stdout to that socket. The driver runs ``attach`` in the pod and speaks
the line protocol over its stdin and stdout: through the API server's ``pods/exec`` on a
cluster (or the fake one), as a local subprocess on the local backend. Both meet behind
``Channel``: whole lines in, whole lines out, an end that says whether it was a clean one.

Why ``attach`` and not the agent itself behind exec: an exec stream breaks (an API server
restart, an idle proxy), and the process behind it may go with it. The agent is the pod's
own process, so a broken stream loses nothing: the next ``attach`` re-attaches to the same
agent and its steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..kube.client import KubeClient
    from ..kube.exec import ExecStream

__all__ = [
    "AGENT_DIR",
    "AGENT_SCRIPT",
    "ATTACH_WAIT",
    "Channel",
    "ChannelBroken",
    "ExecChannel",
    "ProcessChannel",
    "attach_command",
    "open_channel",
]

#: Where the rendered pod mounts the agent's ConfigMap, and the agent's own state directory.
AGENT_SCRIPT = "/k8sjobs/agent/agent.py"
AGENT_DIR = "/k8sjobs/alloc"
#: The agent's volume (an emptyDir) in the pod, where its socket and steps live.
AGENT_VOLUME = "alloc"
#: How long ``attach`` waits for the agent's socket (the agent still starting).
ATTACH_WAIT = 30.0
#: The longest line either side sends (the protocol's bound; a longer one is a broken peer).
LINE_LIMIT = 1024 * 1024


class ChannelBroken(Exception):
    """The channel to a pod's agent ended: the words say how (the server's, where it spoke)."""


def attach_command(
    agent_dir: str = AGENT_DIR, script: str = AGENT_SCRIPT, python: str = "python3"
) -> list[str]:
    """Return the command that attaches to a pod's agent (run in the pod's container)."""
    return [python, script, "attach", "--dir", agent_dir, "--wait", f"{ATTACH_WAIT:g}"]


class Channel(Protocol):
    """Whole protocol lines to and from one agent."""

    async def send(self, line: bytes) -> None:
        """Write one line (ending in a newline); raise ChannelBroken when it cannot."""

    def lines(self) -> AsyncIterator[bytes]:
        """Yield each line the agent writes (without its newline) until the channel ends;
        end by raising ChannelBroken with the reason, or return at a clean end."""

    async def aclose(self) -> None:
        """End the channel; the agent and its steps go on."""


class _Lines:
    """Splits a byte stream into lines, bounded (a peer that never ends a line is broken)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        if b"\n" not in data:
            if len(self._buffer) > LINE_LIMIT:
                raise ChannelBroken(f"the agent sent a line over {LINE_LIMIT} bytes")
            return []
        *whole, rest = bytes(self._buffer).split(b"\n")
        self._buffer = bytearray(rest)
        return whole


class ProcessChannel:
    """A channel through a local ``attach`` process (the local backend's pods)."""

    def __init__(self, process: asyncio.subprocess.Process, pod: str) -> None:
        self._process = process
        self._pod = pod

    @classmethod
    async def open(cls, agent_dir: Path, script: Path, pod: str) -> ProcessChannel:
        """Start ``attach`` on the agent whose state directory is ``agent_dir``."""
        command = attach_command(str(agent_dir), str(script), python=sys.executable)
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT + 1,
        )
        return cls(process, pod)

    async def send(self, line: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(line)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ChannelBroken(f"pod {self._pod}: the agent's channel closed ({exc})") from None

    async def lines(self) -> AsyncIterator[bytes]:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # asyncio's words for a line over the limit
                raise ChannelBroken(f"the agent sent a line over {LINE_LIMIT} bytes") from None
            if not line.endswith(b"\n"):
                break
            yield line[:-1]
        code = await self._process.wait()
        stderr = b""
        if self._process.stderr is not None:
            stderr = await self._process.stderr.read(4096)
        words = stderr.decode(errors="replace").strip() or f"attach exited {code}"
        raise ChannelBroken(f"pod {self._pod}: {words}")

    async def aclose(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()
        with contextlib.suppress(Exception):
            await self._process.wait()


class ExecChannel:
    """A channel through the API server's ``pods/exec`` (a cluster's pods, or the fake's)."""

    def __init__(self, stream: ExecStream, pod: str) -> None:
        self._stream = stream
        self._pod = pod

    @classmethod
    async def open(
        cls, client: KubeClient, namespace: str, pod: str, container: str
    ) -> ExecChannel:
        """Open ``attach`` in ``pod`` through pods/exec (raises ApiError when refused)."""
        from ..kube.exec import open_exec

        stream = await open_exec(client, namespace, pod, attach_command(), container=container)
        return cls(stream, pod)

    async def send(self, line: bytes) -> None:
        try:
            await self._stream.write(line)
        except Exception as exc:
            raise ChannelBroken(f"pod {self._pod}: the exec stream broke ({exc})") from None

    async def lines(self) -> AsyncIterator[bytes]:
        from ..kube.exec import STDOUT

        splitter = _Lines()
        said = bytearray()  # attach's stderr: why it could not reach the agent, if it says
        try:
            async for channel, data in self._stream:
                if channel != STDOUT:
                    said += data[: 4096 - len(said)]
                    continue
                for line in splitter.feed(data):
                    yield line
        except ChannelBroken:
            raise
        except Exception as exc:
            raise ChannelBroken(f"pod {self._pod}: the exec stream broke ({exc})") from None
        status = self._stream.status
        words = said.decode(errors="replace").strip() or (
            status.message if status is not None else "the exec stream ended"
        )
        raise ChannelBroken(f"pod {self._pod}: {words}")

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._stream.aclose()


async def open_channel(host: Any, namespace: str, pod: str) -> Channel:
    """Open the channel to the agent in ``pod`` of ``host`` (a Kubernetes or local backend).

    On Kubernetes (or the fake cluster) through pods/exec; locally the pod's volumes are
    directories of its sandbox, so ``attach`` runs here on the agent's own directory.
    """
    if host.kind == "local":
        agent_dir = host.runner.sandbox(namespace, pod) / "volumes" / AGENT_VOLUME
        return await ProcessChannel.open(agent_dir, Path(__file__).with_name("agent.py"), pod)
    from ..render.allocation import AGENT_CONTAINER

    return await ExecChannel.open(host.client, namespace, pod, AGENT_CONTAINER)
