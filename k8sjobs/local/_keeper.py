"""The keeper: a small process that holds one container's whole process tree, and outlives it.

It makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the
container starts and then orphans — a ``setsid`` daemon, a double fork, ``nohup ... &`` — is
re-parented to the keeper instead of to init, so the keeper always knows the whole tree: its
descendants in ``/proc``. Standalone: it imports nothing of k8sjobs, so it starts fast.

Two ways to start keepers, one protocol (``_keepers`` is the driver's side):

- ``python -I -S _keeper.py serve FD``: a *keeper server*, started once per driver process. It
  keeps one keeper forked ahead (a *spare*, waiting on the socket FD); each connection the
  driver passes over FD (``SCM_RIGHTS``) wakes the spare, which keeps that container, and the
  server forks the next spare (a fork of this small, already started interpreter costs about
  a millisecond, a new Python start 10 to 45). The kernel reaps the keepers; the spare and the
  server end when the driver closes FD (the driver ended, ``kill -9`` included); the keepers
  live on.
- ``python -I -S _keeper.py keep FD``: one keeper on the connection FD (when no server runs).

On its connection a keeper first says ``keeper <pid>``, reads the request (the fields below,
NUL-separated, to the end of the stream), starts PROGRAM in its own session with stdout and
stderr to the log, and says ``started <pid>`` or ``error <why>``.

- When PROGRAM exits, it kills every descendant left (SIGKILL), reaps them all, writes what the
  tree used to ``STATE.usage`` (``wait4`` rusage of every process it reaped: the program with
  what the program reaped, and every orphan), the exit code to ``STATE.exit``, and says
  ``exited <code>`` (``128 + n`` for signal n, as a kubelet reports it). Nothing of the
  container survives the keeper.
- SIGTERM: SIGTERM to every descendant, and SIGKILL to those left after GRACE seconds.
  SIGUSR1: SIGKILL to every descendant at once (the runner's memory limit).
- It does not die with its driver: a driver killed with ``kill -9`` leaves the step running,
  still contained, and the next driver adopts it through ``STATE.keeper`` (the keeper's pid and
  its start time in clock ticks, so a reused pid is never mistaken for it) and ``STATE.exit``.
"""

# Only what the keeper needs, the cheapest way: a new interpreter pays every import. ``_signal``
# is the C module under ``signal``, without the enums whose creation costs more than all the
# rest; ``_socket`` the one under ``socket``.
import _signal as signal  # type: ignore[import-not-found]
import _socket
import ctypes
import os
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
CLOEXEC = _socket.MSG_CMSG_CLOEXEC  # a received connection is never inherited by the program


def start_time(pid: int) -> int:
    """Return a process's start time (clock ticks since boot): with the pid, its identity."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[19])


def descendants(root: int) -> list[int]:
    """Return every live process below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_all(signum: int) -> None:
    """Send ``signum`` to every descendant (those that end meanwhile are skipped)."""
    for pid in descendants(os.getpid()):
        try:  # noqa: SIM105 (contextlib costs an import)
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader never sees half of it."""
    with open(f"{path}.tmp", "w") as out:
        out.write(text)
    os.replace(f"{path}.tmp", path)


def say(conn: int, line: str) -> None:
    """Tell the driver one line; a driver that is gone does not matter (it adopts, or not)."""
    try:  # noqa: SIM105
        os.write(conn, f"{line}\n".encode())
    except OSError:
        pass


Request = tuple[bytes, float, bytes, bytes, bytes, list[bytes], dict[bytes, bytes]]


def read_request(conn: int) -> Request:
    """Read the driver's request to the end of the stream; raises ValueError if cut short.

    NUL-separated: state, grace, log, cwd, program, the number of arguments, the arguments,
    the environment's "NAME=value" items, then "end".
    """
    chunks = []
    while chunk := os.read(conn, 65536):
        chunks.append(chunk)
    *fields, end = b"".join(chunks).split(b"\0")
    if end != b"end" or len(fields) < 6:
        raise ValueError("the request was cut short")
    state, grace, log, cwd, program, count, *rest = fields
    args = int(count)
    env = dict(item.split(b"=", 1) for item in rest[args:])
    return state, float(grace), log, cwd, program, rest[:args], env


def start(program: bytes, argv: list[bytes], env: dict[bytes, bytes]) -> int:
    """Start the container's program in its own session; returns its pid or raises OSError.

    ``posix_spawn`` (a vfork) rather than fork and exec: no copy of this interpreter, and an
    exec that fails is reported here.
    """
    return os.posix_spawn(
        program,
        [program, *argv],
        env,
        file_actions=[(os.POSIX_SPAWN_DUP2, 2, 1)],  # stdout and stderr to the log
        setsid=True,  # the container's session, as before the keeper: its pid is its id
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGUSR1),
        setsigmask=(),  # as subprocess restores them
    )


def keep(conn: int) -> int:
    """Be one container's keeper on the driver's connection ``conn``; returns the exit status."""
    os.set_inheritable(conn, False)  # the program never holds it
    say(conn, f"keeper {os.getpid()}")  # the driver asks only once it knows whom to stop
    try:
        request = read_request(conn)
    except ValueError as error:  # the driver gave up (or died) before it asked: start nothing
        say(conn, f"error {error}")
        return 126
    state, grace, log, cwd, program, args, env = request
    setup = setup_io(cwd, log)
    if setup:
        say(conn, f"error {setup}")
        return 127
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        say(conn, f"error prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
        return 126
    # Written before the program starts: a new driver that finds it knows the program may run.
    # No rename (it cost milliseconds on a busy disk): a reader that finds it empty or cut short
    # takes it as absent, and follows the keeper the driver named in STATE.asked until it is
    # whole (or the keeper ended).
    record = os.open(state + b".keeper", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.write(record, f"{os.getpid()} {start_time(os.getpid())}\n".encode())
    os.close(record)
    signal.signal(signal.SIGTERM, lambda *_: terminate(grace))
    signal.signal(signal.SIGUSR1, lambda *_: signal_all(signal.SIGKILL))
    signal.signal(signal.SIGALRM, lambda *_: signal_all(signal.SIGKILL))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        main_pid = start(program, args, env)
    except OSError as error:
        say(conn, f"error {error.strerror or error}")
        return 127
    began = time.monotonic()
    say(conn, f"started {main_pid}")
    used = Used()
    code = wait_for(main_pid, used)
    wall = time.monotonic() - began
    while has_children(used):  # kill what the program left; as subreaper, orphans come back
        signal_all(signal.SIGKILL)
        try:  # noqa: SIM105 (contextlib costs an import)
            used.add(os.wait4(-1, 0)[2])
        except ChildProcessError:
            pass
    status = code if code >= 0 else 128 - code
    write_atomically(f"{os.fsdecode(state)}.usage", used.line(wall))
    write_atomically(f"{os.fsdecode(state)}.exit", f"{code}\n")
    say(conn, f"exited {status}")
    return status


def setup_io(cwd: bytes, log_path: bytes) -> str:
    """Move to the working directory, stdin from /dev/null, stdout and stderr to the log.

    Returns why it failed, or "" (the keeper's own errors then go to the log too).
    """
    try:
        os.chdir(cwd)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        devnull = os.open(os.devnull, os.O_RDWR)
    except OSError as error:
        return str(error)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    return ""


def terminate(grace: float) -> None:
    """SIGTERM to the tree now, SIGKILL to what is left after ``grace`` seconds."""
    signal_all(signal.SIGTERM)
    if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        signal.setitimer(signal.ITIMER_REAL, max(grace, 0.001))


class Used:
    """What the reaped processes used: CPU summed, the largest resident set (rusage)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.max_rss_kib = 0

    def add(self, usage: object) -> None:
        """Count one reaped process's rusage (its own and what it reaped)."""
        self.cpu += usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]
        self.max_rss_kib = max(self.max_rss_kib, usage.ru_maxrss)  # type: ignore[attr-defined]

    def line(self, wall: float) -> str:
        """Return the usage line (k8sjobs.usage.format_usage_line's format, without its import)."""
        return (
            f"k8sjobs-usage v1 src=rusage wall_ms={round(wall * 1000)} "
            f"cpu_us={round(self.cpu * 1e6)} mem_peak={self.max_rss_kib * 1024}\n"
        )


def has_children(used: Used) -> bool:
    """Return whether any child is left, reaping one that has ended (no /proc scan needed)."""
    try:
        pid, _, usage = os.wait4(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    if pid:
        used.add(usage)
    return True


def wait_for(main_pid: int, used: Used) -> int:
    """Reap children until the program itself exits; returns its exit code (-n: signal n)."""
    while True:
        pid, status, usage = os.wait4(-1, 0)
        used.add(usage)
        if pid == main_pid:
            return os.waitstatus_to_exitcode(status)


def serve(control: int) -> int:
    """Keep one keeper forked ahead, waiting on ``control``; fork the next once it is taken.

    The fork is thus off the container's path: the driver's connection wakes a keeper that
    already exists. The server ends when the driver closes ``control`` (its spare sees it).
    """
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the keepers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    while True:
        taken, tell = os.pipe()
        if os.fork() == 0:
            status = 126
            try:
                os.close(taken)
                status = spare(control, tell)
            finally:
                os._exit(status)
        os.close(tell)
        said = os.read(taken, 1)  # "t" once the spare took a connection; "" if it ended
        os.close(taken)
        if said != b"t":
            return 0  # the driver is gone (or the spare died: the driver starts a new server)


def spare(control: int, tell: int) -> int:
    """Wait, as a forked keeper, for the driver's next connection; then keep its container."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the keeper waits for its children
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter's
    os.setsid()  # its own session, as a keeper started on its own is
    conn = receive(control)
    if conn is not None:
        try:  # noqa: SIM105
            os.write(tell, b"t")
        except OSError:
            pass  # the server died: the driver starts a new one on its next container
    os.close(tell)
    os.close(control)
    return 0 if conn is None else keep(conn)


def receive(control: int) -> int | None:
    """Return the next connection sent on ``control``, or None once the driver closed it."""
    server = _socket.socket(fileno=control)
    try:
        while True:
            try:
                data, ancillary, _, _ = server.recvmsg(1, _socket.CMSG_SPACE(4), CLOEXEC)
            except InterruptedError:
                continue
            except OSError:
                return None
            if not data:
                return None
            for level, kind, fds in ancillary:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(fds) >= 4:
                    return int.from_bytes(fds[:4], sys.byteorder)
    finally:
        server.detach()  # the descriptor is closed by the caller


def main() -> int:
    mode, fd = sys.argv[1], int(sys.argv[2])
    return serve(fd) if mode == "serve" else keep(fd)


if __name__ == "__main__":
    sys.exit(main())
