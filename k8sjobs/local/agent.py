"""The local remote shell: how ``mpirun`` in one index of a step starts commands in another.

On a cluster the launcher (index 0) of a multi-node step reaches its workers with ssh: each
worker runs sshd on port 2222 and ``mpirun`` starts one daemon per pod through it (see
``k8sjobs/render/multinode.py`` for that contract). Locally every index is a pod run by the
``PodRunner``, each a process group with its own environment and sandbox, and this module
stands in for both ends of ssh:

- the **server** (``agent.py --serve``) is what a worker index runs instead of sshd (the role
  wrapper runs ``$K8SJOBS_WORKER_SERVE`` when set). It listens on a unix socket named after
  the pod's hostname, ``$K8SJOBS_AGENT_DIR/<namespace>/<hostname>.sock`` (directories 0700, so
  only this user can connect), writes its pid to ``$K8SJOBS_SSHD_DIR/sshd.pid`` once it
  listens, as sshd does (the workers' readiness probe reads it), and starts each command it
  is given with ``/bin/sh -c`` in the worker's own environment, in its ``$HOME`` (as sshd
  does), as a child in a process group of its own inside the worker's session (so one
  command can be stopped alone, and ending the worker pod ends it with the rest of the pod);
- the **client** (``agent.py [ssh options] HOST COMMAND...``) is the remote shell ``mpirun``
  uses (``OMPI_MCA_plm_rsh_agent``, ``PRTE_MCA_plm_ssh_agent``, ``HYDRA_LAUNCHER_EXEC``,
  ``I_MPI_HYDRA_BOOTSTRAP_EXEC``). It takes ssh's options and ignores them (``-o ...``,
  ``-i ...``, ``-x``) but the port: as on a cluster, only 2222 reaches a worker (``-p 2222``
  or ``-o Port=2222``; without either, ssh tries 22 and is refused), so an MPI that was not
  handed the step's ssh arguments fails here as it would there. It maps
  ``<job>-<i>[.<service>[.<namespace>[.svc...]]]`` to that index's socket, relays stdin,
  stdout and stderr, and exits with the command's exit code (255 when the host is unknown,
  unreachable or drops the connection, as ssh does).
  When the client goes away before the command ends, the server stops the command (SIGTERM,
  SIGKILL two seconds later). A command for the client's own pod (its hostname, or
  ``localhost``) runs in place, as mpirun would on its own node;
- ``agent.py --check HOST`` exits 0 once HOST's server answers, else 255 with one line on
  stderr: the launcher's wait for its workers (``$K8SJOBS_WAIT_WORKERS``).

Paths. The command text goes through the path translation rule: the client sends its own
sandbox (``$K8SJOBS_AGENT_SANDBOX``), and the server rewrites that prefix to its own, so a
path into index 0's volumes names the same volume of index i, as ``/work/x`` does on a
cluster. The ranks the daemon starts get the same treatment: Open MPI starts them
through ``agent.py --rank`` (its ``orte_fork_agent``), which turns the launcher's sandbox
paths mpirun sent (the working directory, the program and its arguments, the environment)
into this index's, where they exist here, then execs the rank.

``pod_env`` gives a pod of a multi-node step (one with ``hostname`` and ``subdomain``) the
variables above, and points every MPI's remote shell at ``k8sjobs-rsh``, a two-line script
that runs this file (written once under ``$K8SJOBS_AGENT_DIR/bin``: Hydra takes one path,
not a command line). Open MPI also gets ``orte_leave_session_attached`` (and PRRTE's
``prte_leave_session_attached``): without it, mpirun tells each daemon to daemonize, which
would leave the worker's session and outlive the pod. And since every "node" here has this
machine's host name, under which Open MPI names its shared-memory segments (two nodes'
ranks of the same local rank would share one and crash), Open MPI's shared-memory transport
is off (``btl=^vader,sm``): ranks talk over TCP on loopback (``btl_tcp_if_include=lo``, and
the daemons too, ``oob_tcp_if_include=lo``), so no network interface is needed either.

The contract with the role wrapper (``k8sjobs/render/multinode.py``), as the rendered pod leaves it
to the backend: the wrapper runs ``$K8SJOBS_WORKER_SERVE`` instead of sshd on a worker,
checks each worker with ``$K8SJOBS_WAIT_WORKERS <host>`` instead of ``ssh <host> true``, and
writes its termination message to ``$K8SJOBS_TERMINATION_LOG`` (the runner reads it back
into the container's status, as a kubelet reads ``terminationMessagePath``). Render never
sets these, nor the MPI agent variables; this module sets them all for local pods.

This file uses the standard library only and is run as a script, not as ``-m
k8sjobs.local.agent``: mpirun starts it once per daemon, and importing the package would
cost a second each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import struct
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

__all__ = [
    "AGENT_FILE",
    "SSHD_PORT",
    "TERMINATION_LOG",
    "SshCall",
    "main",
    "parse_ssh",
    "pod_env",
    "resolve",
    "short_address",
    "socket_path",
    "termination_message",
]

AGENT_FILE = Path(__file__).resolve()
SHIM_NAME = "k8sjobs-rsh"
#: Where the role wrapper writes its termination message; the runner reads it back into the
#: container's terminated state, as a kubelet reads terminationMessagePath.
TERMINATION_LOG = "K8SJOBS_TERMINATION_LOG"
_TERMINATION_LIMIT = 4096  # a kubelet keeps at most 4096 bytes of it
#: The sandbox of the index whose mpirun asked for a command (set for the command).
PEER_SANDBOX = "K8SJOBS_AGENT_PEER_SANDBOX"
#: ssh's options that take an argument (OpenSSH 9); every other ``-x`` is a flag.
_SSH_ARGUMENT_OPTIONS = frozenset("BbcDEeFIiJLlmOopQRSWw")
_HEADER = struct.Struct(">cI")
_CHUNK = 65536
_STOP_GRACE = 2.0
_UNREACHABLE = 255
#: The port workers' sshd listens on (k8sjobs.render.multinode.SSH_PORT; this file imports no
#: k8sjobs) and the one ssh uses unless told.
SSHD_PORT = 2222
_SSH_DEFAULT_PORT = 22
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes; longer paths go through /proc/self/fd

# Frame kinds. Client to server: the request, stdin, end of stdin, a ping.
_REQUEST, _STDIN, _STDIN_EOF, _PING = b"R", b"I", b"E", b"P"
# Server to client: stdout, stderr, the exit status, the answer to a ping, a refusal.
_STDOUT, _STDERR, _EXIT, _PONG, _ERROR = b"O", b"e", b"X", b"K", b"!"


# ---------------------------------------------------------------------- the pod's side


def pod_env(pod: Mapping[str, Any], sandbox: Path) -> dict[str, str]:
    """Return the agent's variables for a pod of a multi-node step ({} for any other pod).

    ``sandbox`` is the pod's sandbox, ``<root>/<namespace>/<pod>``; the sockets live under
    ``<root>/.agents`` (no pod or namespace can be named ``.agents``). Writes the shim.
    """
    spec = pod.get("spec") or {}
    if not (spec.get("hostname") and spec.get("subdomain")):
        return {}
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    directory = sandbox.parent.parent / ".agents"
    shim = _write_shim(directory / "bin")
    return {
        "K8SJOBS_AGENT_DIR": str(directory),
        "K8SJOBS_AGENT_NAMESPACE": namespace,
        "K8SJOBS_AGENT_SANDBOX": str(sandbox),
        "K8SJOBS_WORKER_SERVE": f"{shim} --serve",
        "K8SJOBS_WAIT_WORKERS": f"{shim} --check",
        "OMPI_MCA_plm_rsh_agent": str(shim),
        "OMPI_MCA_orte_leave_session_attached": "1",
        # Ranks start through the agent, which moves them into their own index's paths.
        "OMPI_MCA_orte_fork_agent": f"{shim} --rank",
        "PRTE_MCA_prte_fork_agent": f"{shim} --rank",
        # Every "node" here has the same host name, under which Open MPI names its shared
        # memory segments: two nodes' segments would collide. TCP over loopback instead.
        "OMPI_MCA_btl": "^vader,sm",
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        "PRTE_MCA_oob_tcp_if_include": "lo",
        "PRTE_MCA_plm_ssh_agent": str(shim),
        "PRTE_MCA_prte_leave_session_attached": "1",
        "HYDRA_LAUNCHER": "ssh",
        "HYDRA_LAUNCHER_EXEC": str(shim),
        "I_MPI_HYDRA_BOOTSTRAP": "ssh",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC": str(shim),
    }


def termination_message(path: Path) -> str | None:
    """Return a container's termination message (at most 4096 bytes), or None if it wrote none."""
    try:
        with open(path, "rb") as file:
            text = file.read(_TERMINATION_LIMIT).decode(errors="replace").strip()
    except OSError:
        return None
    return text or None


def _write_shim(directory: Path) -> Path:
    """Write ``k8sjobs-rsh`` (atomically: pods start at once) and return its path."""
    shim = directory / SHIM_NAME
    text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I {shlex.quote(str(AGENT_FILE))} "$@"\n'
    with contextlib.suppress(OSError):
        if shim.read_text() == text:
            return shim
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # .agents: ours only
    directory.mkdir(exist_ok=True, mode=0o700)
    temporary = directory / f".{SHIM_NAME}.{os.getpid()}.{threading.get_ident()}"
    temporary.write_text(text)
    temporary.chmod(0o755)
    temporary.replace(shim)
    return shim


def socket_path(directory: str, namespace: str, hostname: str) -> str:
    """Return where the server of pod ``hostname`` in ``namespace`` listens."""
    return os.path.join(directory, namespace, f"{hostname}.sock")


def resolve(host: str, namespace: str) -> tuple[str, str]:
    """Return the (hostname, namespace) a host name given to ssh stands for.

    ``<hostname>.<service>.<namespace>.svc[.cluster.local]`` names a pod of another
    namespace; ``<hostname>`` and ``<hostname>.<service>`` one of the caller's own.
    """
    host = host.rpartition("@")[2].rstrip(".")
    labels = host.split(".")
    if len(labels) >= 3:
        return labels[0], labels[2]
    return labels[0], namespace


# ---------------------------------------------------------------------- frames


def _frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _HEADER.pack(kind, len(payload)) + payload


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _recv_frame(sock: socket.socket) -> tuple[bytes, bytes] | None:
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    kind, size = _HEADER.unpack(header)
    payload = _recv_exact(sock, size)
    return None if payload is None else (kind, payload)


async def _read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    try:
        kind, size = _HEADER.unpack(await reader.readexactly(_HEADER.size))
        return kind, await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


# ---------------------------------------------------------------------- the client


class _Unreachable(Exception):
    """The host is unknown or does not answer: ssh's exit code 255, with its message."""


def _connect(path: str, host: str, port: int = SSHD_PORT) -> socket.socket:
    """Return a connection to a server's socket, or raise _Unreachable as ssh words it."""
    if not os.path.exists(path):
        raise _Unreachable(f"ssh: Could not resolve hostname {host}: Name or service not known")
    if port != SSHD_PORT:
        # What ssh meets in a cluster, where nothing else listens: the MPI was not given
        # the step's ssh arguments (a misnamed variable, or the user's env replaced them).
        raise _Unreachable(
            f"ssh: connect to host {host} port {port}: Connection refused "
            f"(k8sjobs: workers' sshd listens on port {SSHD_PORT} only)"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with short_address(path) as address:
            sock.connect(address)
    except OSError as error:
        sock.close()
        reason = error.strerror or str(error)
        raise _Unreachable(f"ssh: connect to host {host} port 2222: {reason}") from None
    return sock


@contextlib.contextmanager
def short_address(path: str) -> Any:
    """Yield an address for ``path`` that fits a unix socket address (108 bytes).

    A longer path (a long hostname under a deep directory, such as pytest's tmp_path) is
    reached through a descriptor of its directory, so every bind and connect to an agent's
    socket goes through here.
    """
    if len(path.encode()) < _SUN_PATH_MAX:
        yield path
        return
    descriptor = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{descriptor}/{os.path.basename(path)}"
    finally:
        os.close(descriptor)


def _target(host: str) -> str | None:
    """Return the socket of ``host``'s server, or None when ``host`` is this very pod."""
    namespace = os.environ.get("K8SJOBS_AGENT_NAMESPACE", "default")
    hostname, target_namespace = resolve(host, namespace)
    own = os.environ.get("HOSTNAME", "")
    if host.rpartition("@")[2] in _LOOPBACK or (hostname == own and target_namespace == namespace):
        return None
    directory = os.environ.get("K8SJOBS_AGENT_DIR")
    if not directory:
        raise _Unreachable(
            "k8sjobs-rsh: K8SJOBS_AGENT_DIR is not set: this agent only works inside a "
            "multi-node step run by the local backend"
        )
    return socket_path(directory, target_namespace, hostname)


class SshCall(NamedTuple):
    """What an ssh command line asks for: the host, the command words, the port."""

    host: str
    words: list[str]
    port: int


def parse_ssh(argv: list[str]) -> SshCall:
    """Return the host, command words and port of an ssh command line.

    The port is what ssh would connect to: the first ``-p N`` or ``-o Port=N``, else 22
    (no ssh_config is read: the wiring must not depend on the image's). Other options
    are taken and ignored.
    """
    words = list(argv)
    port: int | None = None
    while words and words[0].startswith("-") and words[0] != "-":
        option = words.pop(0)
        if option == "--":
            break
        # As getopt reads them: "-xp2222" and "-xp 2222" are -x, then -p with 2222.
        for at, flag in enumerate(option[1:], start=2):
            if flag not in _SSH_ARGUMENT_OPTIONS:
                continue
            value = option[at:] or (words.pop(0) if words else "")
            if port is None:  # ssh keeps the first value it is given
                port = _port_option(flag, value)
            break
    if not words:
        raise _Unreachable("usage: k8sjobs-rsh [ssh options] HOST [COMMAND...]")
    return SshCall(words[0], words[1:], _SSH_DEFAULT_PORT if port is None else port)


def _port_option(flag: str, value: str) -> int | None:
    """Return the port ``-p VALUE`` or ``-o Port=VALUE`` sets, else None."""
    if flag == "o":
        key, _, value = value.replace("=", " ", 1).partition(" ")
        if key.lower() != "port":
            return None
    elif flag != "p":
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise _Unreachable(f"Bad port '{value.strip()}'") from None


def _run_remote(host: str, command: str, port: int) -> int:
    """Run ``command`` on ``host`` through its server; return its exit code."""
    path = _target(host)
    if path is None:  # this pod: run it here, as mpirun does on its own node
        home = os.environ.get("HOME") or "/"
        os.chdir(home if os.path.isdir(home) else "/")
        os.execv("/bin/sh", ["/bin/sh", "-c", command or "exec $SHELL"])
    sock = _connect(path, host, port)
    request = {"command": command, "sandbox": os.environ.get("K8SJOBS_AGENT_SANDBOX", "")}
    lock = threading.Lock()
    sock.sendall(_frame(_REQUEST, json.dumps(request).encode()))
    threading.Thread(target=_pump_stdin, args=(sock, lock), daemon=True).start()
    outputs: dict[bytes, BinaryIO] = {_STDOUT: sys.stdout.buffer, _STDERR: sys.stderr.buffer}
    while (frame := _recv_frame(sock)) is not None:
        kind, payload = frame
        if kind in outputs:
            outputs[kind].write(payload)
            outputs[kind].flush()
        elif kind == _EXIT:
            return int(payload)
        elif kind == _ERROR:
            raise _Unreachable(payload.decode(errors="replace"))
    raise _Unreachable(f"Connection to {host} closed by remote host.")


def _pump_stdin(sock: socket.socket, lock: threading.Lock) -> None:
    """Send stdin to the server until its end (a daemon thread: it dies with the client)."""
    with contextlib.suppress(OSError):
        while chunk := os.read(0, _CHUNK):
            with lock:
                sock.sendall(_frame(_STDIN, chunk))
        with lock:
            sock.sendall(_frame(_STDIN_EOF))


def _check(host: str) -> int:
    """Return 0 once ``host``'s server answers a ping (the launcher's wait for a worker)."""
    path = _target(host)
    if path is None:
        return 0
    with _connect(path, host) as sock:
        sock.sendall(_frame(_PING))
        frame = _recv_frame(sock)
    if frame is None or frame[0] != _PONG:
        raise _Unreachable(f"Connection to {host} closed by remote host.")
    return 0


# ---------------------------------------------------------------------- the server


class _Server:
    """Starts the commands clients send, in this pod's environment, one process group each."""

    def __init__(self) -> None:
        self.sandbox = os.environ.get("K8SJOBS_AGENT_SANDBOX", "")
        home = os.environ.get("HOME") or "/"
        self.home = home if os.path.isdir(home) else "/"  # where sshd starts a command
        self.groups: set[int] = set()

    async def serve(self, path: str) -> None:
        """Listen on ``path`` until this process is told to stop."""
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a former pod of this index left it
        with short_address(path) as address:
            server = await asyncio.start_unix_server(self._client, address)
        os.chmod(path, 0o600)
        _write_pid_file()
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        async with server:
            await stopped.wait()
        for group in list(self.groups):
            _signal_group(group, signal.SIGTERM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            frame = await _read_frame(reader)
            if frame is None:
                return
            kind, payload = frame
            if kind == _PING:
                writer.write(_frame(_PONG))
            elif kind == _REQUEST:
                await self._run(json.loads(payload), reader, writer)
            else:
                writer.write(_frame(_ERROR, b"k8sjobs-rsh: unexpected request"))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()

    async def _run(
        self, request: Mapping[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Run one command, relaying its streams, and send its exit status."""
        peer = str(request.get("sandbox", ""))
        command = self._translate(str(request.get("command", "")), peer)
        process = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command or "exec $SHELL",
            env={**os.environ, PEER_SANDBOX: peer},  # for the ranks' fork agent (--rank)
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.home,
            process_group=0,  # its own group: stopped alone when its client leaves
        )
        self.groups.add(process.pid)
        assert process.stdin and process.stdout and process.stderr
        outputs = [
            asyncio.ensure_future(_relay(process.stdout, writer, _STDOUT)),
            asyncio.ensure_future(_relay(process.stderr, writer, _STDERR)),
        ]
        inputs = asyncio.ensure_future(_feed(reader, process.stdin))
        relayed: asyncio.Future[Any] = asyncio.gather(*outputs)
        try:
            await asyncio.wait([inputs, relayed], return_when="FIRST_COMPLETED")
            if inputs.done():  # the client left before the command ended: stop it
                await _stop(process)
            await asyncio.gather(*outputs)
            code = await process.wait()
            writer.write(_frame(_EXIT, str(code if code >= 0 else _UNREACHABLE).encode()))
        finally:
            inputs.cancel()
            self.groups.discard(process.pid)

    def _translate(self, command: str, client_sandbox: str) -> str:
        """Return ``command`` with the client's sandbox prefix turned into this pod's."""
        if not client_sandbox or not self.sandbox or client_sandbox == self.sandbox:
            return command
        return command.replace(client_sandbox.rstrip("/") + "/", self.sandbox.rstrip("/") + "/")


async def _relay(stream: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: bytes) -> None:
    """Send a process's output to the client until its end (a gone client is ignored)."""
    while chunk := await stream.read(_CHUNK):
        with contextlib.suppress(ConnectionError):
            writer.write(_frame(kind, chunk))
            await writer.drain()


async def _feed(reader: asyncio.StreamReader, stdin: asyncio.StreamWriter) -> None:
    """Pass the client's stdin to the process; returns when the client has left."""
    while (frame := await _read_frame(reader)) is not None:
        kind, payload = frame
        with contextlib.suppress(ConnectionError):
            if kind == _STDIN:
                stdin.write(payload)
                await stdin.drain()
            elif kind == _STDIN_EOF:
                stdin.close()


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Stop a command's process group: SIGTERM, then SIGKILL after the grace time."""
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_STOP_GRACE):
            await process.wait()
    _signal_group(process.pid, signal.SIGKILL)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _write_pid_file() -> None:
    """Write our pid where sshd writes its own, for the workers' readiness probe."""
    directory = os.environ.get("K8SJOBS_SSHD_DIR")
    if directory and os.path.isdir(directory):
        with contextlib.suppress(OSError):
            Path(directory, "sshd.pid").write_text(f"{os.getpid()}\n")


def _exec_rank(argv: list[str]) -> None:
    """Start an MPI rank as Open MPI's fork agent: in this index's paths, not the launcher's.

    mpirun sends every daemon its own working directory and the program's path, both in the
    launcher's sandbox. On a cluster each pod has its own ``/work``: so here the launcher's
    sandbox prefix, in the working directory, the arguments and the environment, becomes
    this index's, wherever that path exists (a program only the launcher has stays its own).
    """
    peer = os.environ.get(PEER_SANDBOX, "").rstrip("/")
    own = os.environ.get("K8SJOBS_AGENT_SANDBOX", "").rstrip("/")

    def translate(value: str) -> str:
        if not peer or not own or peer == own or not value.startswith(peer + "/"):
            return value
        mine = own + value[len(peer) :]
        return mine if os.path.exists(mine) else value

    with contextlib.suppress(OSError):
        os.chdir(translate(os.getcwd()))
    env = {name: translate(value) for name, value in os.environ.items() if name != PEER_SANDBOX}
    words = [translate(word) for word in argv]
    try:
        os.execvpe(words[0], words, env)
    except OSError as error:
        print(f"k8sjobs-rsh: cannot start {words[0]}: {error.strerror}", file=sys.stderr)
        sys.exit(127)


def _serve() -> int:
    """Serve this pod's socket until SIGTERM; exit as SIGTERM would have ended sshd."""
    directory = os.environ.get("K8SJOBS_AGENT_DIR")
    hostname = os.environ.get("HOSTNAME")
    if not directory or not hostname:
        print("k8sjobs-rsh: --serve needs K8SJOBS_AGENT_DIR and HOSTNAME", file=sys.stderr)
        return 2
    namespace = os.environ.get("K8SJOBS_AGENT_NAMESPACE", "default")
    asyncio.run(_Server().serve(socket_path(directory, namespace, hostname)))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    return 143


def main(argv: list[str]) -> int:
    """Run as ``k8sjobs-rsh``: the client (ssh's command line), ``--serve`` or ``--check``."""
    try:
        if argv[:1] == ["--serve"]:
            return _serve()
        if argv[:1] == ["--check"] and len(argv) == 2:
            return _check(argv[1])
        if argv[:1] == ["--rank"] and len(argv) > 1:
            _exec_rank(argv[1:])
        call = parse_ssh(argv)
        # ssh joins the words with spaces and lets the remote shell parse them.
        return _run_remote(call.host, " ".join(call.words), call.port)
    except _Unreachable as error:
        print(error, file=sys.stderr)
        return _UNREACHABLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
