"""Starting keepers (``_keeper``): forked by one keeper server per driver process, or not.

A keeper per container costs a Python start when the driver starts it as a new process (10 ms
on a quiet machine, 20 to 45 ms on a loaded one: most of a local step's overhead). So the
driver starts one *keeper server* (``_keeper.py serve``, the standard library only) on its
first container, and hands it a connection per container: a keeper the server forked ahead
takes it (the server then forks the next, about a millisecond, off the container's path). The
keeper then speaks with the driver on that connection alone (its pid, the request,
``started``, ``exited``); the server only forks.

Nothing depends on the server staying up. The driver sends a keeper its request only once the
keeper has said its pid, so a keeper is either known (a cancel stops it) or never asked (it
starts nothing). A server that does not fork a keeper in time (it died, or hangs) is killed and
replaced on the next container, and this container gets a keeper of its own
(``_keeper.py keep``, one Python start, as every container had before the server); so does
every container of a driver that cannot start a server. The server is not the keepers'
lifeline either: it ends when the driver closes its socket (``kill -9`` included), and the
keepers, in their own sessions, live on for adoption.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio

from ._adopt import claim
from ._faults import kill_point

__all__ = ["SERVER", "KeeperServer", "Kept", "request", "start_keeper"]

KEEPER = str(Path(__file__).with_name("_keeper.py"))
# How long the server may take to fork a keeper (its own start included), under any load.
_FORK_MARGIN = 10.0


def _keeper_command(mode: str, fd: int) -> list[str]:
    # Isolated and without site: the keeper imports only the standard library.
    return [sys.executable, "-I", "-S", KEEPER, mode, str(fd)]


class KeeperServer:
    """The driver process's keeper server: started on first use, replaced if it died."""

    def __init__(self) -> None:
        self.enabled = True  # False: every keeper is its own process (tests of that path)
        self.margin = _FORK_MARGIN
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        os.register_at_fork(after_in_child=self._forget)
        atexit.register(self.close)

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs (for diagnostics and tests)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def hand(self, conn: socket.socket) -> bool:
        """Pass ``conn`` to the server, which forks a keeper on it; False if none can run."""
        if not self.enabled:
            return False
        with self._lock:
            for _ in range(2):  # a server found dead (or full) is replaced once
                control = self._running() or self._start()
                if control is None:
                    return False
                try:
                    socket.send_fds(control, [b"k"], [conn.fileno()])
                    return True
                except OSError:
                    self._discard()
        return False

    def kill(self) -> None:
        """Kill the server (it hangs): it will never fork a keeper it was asked for."""
        with self._lock:
            self._discard()

    def close(self) -> None:
        """Close the server's socket: it ends, its keepers live on."""
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=1)
                self._process = None

    def _running(self) -> socket.socket | None:
        if self._process is None or self._process.poll() is not None:
            return None
        return self._control

    def _start(self) -> socket.socket | None:
        self._discard()
        ours, theirs = socket.socketpair()
        with theirs:
            try:
                self._process = subprocess.Popen(
                    _keeper_command("serve", theirs.fileno()),
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # not in the terminal's session: Ctrl-C is the driver's
                )
            except OSError:
                ours.close()
                return None
        ours.setblocking(False)  # a server that stopped reading is replaced, never waited for
        self._control = ours
        return ours

    def _discard(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.kill()  # its keepers, in their own sessions, are not touched
            self._process.wait()
            self._process = None

    def _forget(self) -> None:
        """In a forked child: the parent's server is the parent's (its socket is closed)."""
        self._lock = threading.Lock()
        if self._control is not None:
            self._control.close()
        self._control, self._process = None, None


SERVER = KeeperServer()


def request(
    state: Path,
    grace: float,
    log: Path,
    cwd: Path,
    program: str,
    args: Sequence[str],
    env: dict[str, str],
) -> bytes:
    """Return a keeper's request (``_keeper.read_request``); raises ValueError on a NUL."""
    head = [os.fsencode(state), str(grace).encode(), os.fsencode(log), os.fsencode(cwd)]
    items = [os.fsencode(program), str(len(args)).encode(), *map(os.fsencode, args)]
    items += [os.fsencode(f"{name}={value}") for name, value in env.items()]
    if any(b"\0" in item for item in items):
        raise ValueError("embedded null byte")
    return b"\0".join([*head, *items, b"end"])


class Kept:
    """A keeper on its connection: its pid, and how its container ended once it did."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pid = 0  # the keeper's, once it said it
        self.returncode: int | None = None  # its exit status; -9 if it was killed
        self.process: asyncio.subprocess.Process | None = None  # a keeper started on its own
        self._reader, self._writer = reader, writer
        self._ended: asyncio.Future[int] | None = None

    async def greeted(self, margin: float | None) -> bool:
        """Wait (at most ``margin`` seconds) for the keeper to say its pid; False if it did not.

        Until then it has no request, so a keeper not greeted has started nothing.
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(margin):
                word, _, rest = (await self._line()).partition(" ")
                if word == "keeper":
                    self.pid = int(rest)
        return bool(self.pid)

    async def ask(self, request: bytes) -> str:
        """Send the request; return the answer: "started <pid>", "error <why>", or "" if the
        keeper ended before it answered."""
        with contextlib.suppress(OSError):
            self._writer.write(request)
            await self._writer.drain()
            self._writer.write_eof()
        return await self._line()

    async def wait(self) -> int:
        """Return the keeper's exit status once it ended (its whole tree gone)."""
        if self._ended is None:
            self._ended = asyncio.ensure_future(self._follow())
        return await asyncio.shield(self._ended)

    async def stop(self) -> None:
        """SIGTERM to the keeper (which stops its tree, if it started one), and wait for it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGTERM)
        await self.wait()

    def abandon(self) -> None:
        """Close a connection whose keeper never said its pid: if one is forked later, it reads
        no request and starts nothing."""
        self._writer.close()

    async def _line(self) -> str:
        with contextlib.suppress(OSError):
            return (await self._reader.readline()).decode(errors="replace").strip()
        return ""

    async def _follow(self) -> int:
        while self.returncode is None:
            line = await self._line()
            word, _, rest = line.partition(" ")
            if word == "exited":
                self.returncode = int(rest)
            elif not line:  # it ended without saying how: it was killed
                self.returncode = -signal.SIGKILL
        self._writer.close()
        if self.process is not None:
            await self.process.wait()
            if self.process.returncode is not None and self.process.returncode < 0:
                self.returncode = self.process.returncode
        return self.returncode


async def start_keeper(
    request: bytes, state: Path, server: KeeperServer = SERVER
) -> tuple[Kept, str]:
    """Start a keeper for ``request``; return it and its answer (see ``Kept.ask``).

    The keeper is named in ``<state>.asked`` (``_adopt.claim``) before it gets the request, so
    a driver killed from then on leaves it findable by the next one.

    A server that does not fork a keeper (it died, or hangs past its margin) is killed, to be
    replaced on the next container, and this one gets a keeper of its own: no keeper was given
    the request, so nothing starts twice.
    """
    kept = await _connect(server)
    if kept.process is None and not await _greeted(kept, server.margin):
        server.kill()
        kept = await _connect(None)
    if kept.process is not None and not await _greeted(kept, None):
        return kept, ""
    try:
        await anyio.to_thread.run_sync(claim, state, kept.pid)
        kill_point("keeper-claimed")
        return kept, await kept.ask(request)
    except asyncio.CancelledError:  # it may have started the program: stop it whole
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(kept.stop())
        raise


async def _greeted(kept: Kept, margin: float | None) -> bool:
    """Wait for the keeper's pid; abandon its connection if it does not come."""
    try:
        if await kept.greeted(margin):
            return True
    except asyncio.CancelledError:
        kept.abandon()
        raise
    kept.abandon()
    return False


async def _connect(server: KeeperServer | None) -> Kept:
    """Open a connection to a new keeper: forked by the server, else started on its own."""
    ours, theirs = socket.socketpair()
    process = None
    with theirs:  # the keeper (or the server) holds its own copy
        if server is None or not server.hand(theirs):
            try:
                process = await asyncio.create_subprocess_exec(
                    *_keeper_command("keep", theirs.fileno()),
                    pass_fds=(theirs.fileno(),),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                    start_new_session=True,  # not in the terminal's session (Ctrl-C)
                )
            except BaseException:
                ours.close()
                raise
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    kept = Kept(reader, writer)
    kept.process = process
    return kept
