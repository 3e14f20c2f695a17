"""An allocation's agent as a real process, and a client that drives it through ``attach``.

This is what the driver does through pods/exec: ``serve`` runs in a dir, and each client is
an ``attach`` subprocess whose stdin and stdout carry the line protocol. Every line the agent
sends is checked by ``decode_event``, so every test also checks that the agent speaks the
protocol. Waits are bounded: ``Client.wait_for`` reads until a condition holds or fails the
test after ``timeout`` seconds, with the events it saw.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from k8sjobs.allocations import agent as agent_module
from k8sjobs.allocations.protocol import Event, ExitEvent, StartedEvent, decode_event, encode

AGENT = Path(agent_module.__file__)
WAIT = 30.0


def serve_argv(directory: Path, *args: str) -> list[str]:
    """Return the command line of an agent serving ``directory`` (the pod's command)."""
    return [sys.executable, str(AGENT), "serve", "--dir", str(directory), *args]


class Client:
    """A connected ``attach`` process: send ops, wait for events."""

    def __init__(self, directory: Path, *, wait: float = WAIT) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), "attach", "--dir", str(directory), "--wait", str(wait)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin = self.proc.stdin
        self._fd = self.proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._buffer = b""
        self.events: list[Event] = []  # every event read, in order
        self._unseen: list[Event] = []
        self.closed = False

    def send(self, op: Mapping[str, Any]) -> None:
        """Write one op (as the driver does)."""
        self.send_bytes(encode(op))

    def send_bytes(self, data: bytes) -> None:
        """Write raw bytes to the agent."""
        self._stdin.write(data)
        self._stdin.flush()

    def hello(self) -> Event:
        """Say hello; return the agent's hello (the replay follows it)."""
        self.send({"op": "hello", "protocol": 1})
        return self.wait_for(lambda e: e["ev"] == "hello")

    def _read(self, timeout: float) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._fd, selectors.EVENT_READ)
            if not sel.select(timeout):
                return
        try:
            data = os.read(self._fd, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.closed = True
            return
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        for line in lines:
            event = decode_event(line)
            self.events.append(event)
            self._unseen.append(event)

    def wait_for(self, condition: Callable[[Event], bool], timeout: float = WAIT) -> Event:
        """Return the first event not returned before that meets ``condition``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._unseen):
                if condition(event):
                    del self._unseen[i]
                    return event
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise AssertionError(
                    f"no such event within {timeout}s (closed: {self.closed}); "
                    f"last events: {self.events[-5:]}"
                )
            self._read(min(left, 1.0))

    def exit_of(self, step_id: str, timeout: float = WAIT) -> ExitEvent:
        """Return the next `exit` of ``step_id``."""
        event = self.wait_for(lambda e: e["ev"] == "exit" and e["id"] == step_id, timeout)
        assert event["ev"] == "exit"
        return event

    def started(self, step_id: str, timeout: float = WAIT) -> StartedEvent:
        """Return the next `started` of ``step_id``."""
        event = self.wait_for(lambda e: e["ev"] == "started" and e["id"] == step_id, timeout)
        assert event["ev"] == "started"
        return event

    def exits(self, count: int, timeout: float = WAIT) -> dict[str, ExitEvent]:
        """Return the next ``count`` exits, by id."""
        found: dict[str, ExitEvent] = {}
        deadline = time.monotonic() + timeout
        while len(found) < count:
            event = self.wait_for(
                lambda e: e["ev"] == "exit", max(0.01, deadline - time.monotonic())
            )
            assert event["ev"] == "exit"
            found[event["id"]] = event
        return found

    def kill(self) -> None:
        """End the attach process abruptly (a cut stream)."""
        self.proc.kill()
        self.proc.wait(WAIT)
        self._close_pipes()

    def close(self) -> int:
        """Close stdin and return attach's exit code."""
        if self.proc.poll() is None:
            with suppress(BrokenPipeError):
                self._stdin.close()
        code = self.proc.wait(WAIT)
        self._close_pipes()
        return code

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with suppress(BrokenPipeError):
                    pipe.close()


def submit(step_id: str, script: str, **fields: Any) -> dict[str, Any]:
    """Return a submit op with the defaults a test needs (sh, 1 core)."""
    return {"op": "submit", "id": step_id, "hash": "h", "script": script, "shell": ["sh"]} | fields


class Agent:
    """A serving agent process in ``directory``."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.dir = directory
        self.proc = subprocess.Popen(serve_argv(directory, *args), stderr=subprocess.PIPE)
        self.clients: list[Client] = []

    def client(self) -> Client:
        """Return a new attached client (it replaces the one before, as re-attach does)."""
        client = Client(self.dir)
        self.clients.append(client)
        return client

    def hello_client(self) -> Client:
        """Return a new attached client that said hello (and got its hello)."""
        client = self.client()
        client.hello()
        return client

    def wait(self, timeout: float = WAIT) -> int:
        """Return the agent's exit code once it ended by itself."""
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """Stop the agent and every client left (SIGTERM, then SIGKILL)."""
        for client in self.clients:
            if client.proc.poll() is None:
                client.proc.kill()
            client.proc.wait(WAIT)
            client._close_pipes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@contextmanager
def running_agent(directory: Path, *args: str) -> Iterator[Agent]:
    """Yield a serving agent; stop it and its clients after."""
    agent = Agent(directory, *args)
    try:
        yield agent
    finally:
        agent.stop()


@contextmanager
def attached(directory: Path, *args: str) -> Iterator[Client]:
    """Yield a client that said hello to an agent serving ``directory``; stop both after."""
    with running_agent(directory, *args) as agent:
        yield agent.hello_client()
