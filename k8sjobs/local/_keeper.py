"""The keeper: a small process that holds one container's whole process tree, and outlives it.

Started by the runner as ``python -I -S _keeper.py STATE GRACE PROGRAM ARGS...`` (standalone: it
imports nothing of k8sjobs, so it starts in milliseconds). It makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): every process the container starts and then orphans —
a ``setsid`` daemon, a double fork, ``nohup ... &`` — is re-parented to the keeper instead of
to init, so the keeper always knows the whole tree: its descendants in ``/proc``.

- It starts PROGRAM in its own session (the keeper is in another one), stdout and stderr to
  the log it was given as its own stderr, and tells the runner on its stdout: ``started <pid>``
  or ``error <why>``.
- When PROGRAM exits, it kills every descendant left (SIGKILL), reaps them all, writes the exit
  code to ``STATE.exit`` and exits with it (``128 + n`` for signal n, as a kubelet reports it).
  Nothing of the container survives the keeper.
- SIGTERM: SIGTERM to every descendant, and SIGKILL to those left after GRACE seconds.
  SIGUSR1: SIGKILL to every descendant at once (the runner's memory limit).
- It does not die with its driver: a driver killed with ``kill -9`` leaves the step running,
  still contained, and the next driver adopts it through ``STATE.keeper`` (the keeper's pid and
  its start time in clock ticks, so a reused pid is never mistaken for it) and ``STATE.exit``.
"""

# Only what the keeper needs, the cheapest way: it starts once per container. ``_signal`` is
# the C module under ``signal``, without the enums whose creation costs more than all the rest.
import _signal as signal  # type: ignore[import-not-found]
import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36


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


def start(program: str, argv: list[str]) -> int:
    """Fork and exec the container's program in its own session; returns its pid or raises."""
    ready, report = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: only async-signal-safe work until exec
        try:
            os.setsid()  # the container's session, as before the keeper: its pid is its id
            os.dup2(2, 1)
            for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGUSR1):
                signal.signal(signum, signal.SIG_DFL)  # as subprocess restores them
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.execv(program, [program, *argv])
        except OSError as error:
            os.write(report, (error.strerror or str(error)).encode())
        finally:
            os._exit(127)
    os.close(report)
    failure = os.read(ready, 4096)
    os.close(ready)
    if failure:
        os.waitpid(pid, 0)
        raise OSError(failure.decode(errors="replace"))
    return pid


def main() -> int:
    state, grace, program, *argv = sys.argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"error prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}", flush=True)
        return 126
    write_atomically(f"{state}.keeper", f"{os.getpid()} {start_time(os.getpid())}\n")
    signal.signal(signal.SIGTERM, lambda *_: terminate(float(grace)))
    signal.signal(signal.SIGUSR1, lambda *_: signal_all(signal.SIGKILL))
    signal.signal(signal.SIGALRM, lambda *_: signal_all(signal.SIGKILL))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        main_pid = start(program, argv)
    except OSError as error:
        print(f"error {error}", flush=True)
        return 127
    print(f"started {main_pid}", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the runner's pipe: closed, so a driver that died does not matter
    code = wait_for(main_pid)
    while has_children():  # kill what the program left; as subreaper, orphans come back to us
        signal_all(signal.SIGKILL)
        try:  # noqa: SIM105
            os.waitpid(-1, 0)
        except ChildProcessError:
            pass
    write_atomically(f"{state}.exit", f"{code}\n")
    return code if code >= 0 else 128 - code


def terminate(grace: float) -> None:
    """SIGTERM to the tree now, SIGKILL to what is left after ``grace`` seconds."""
    signal_all(signal.SIGTERM)
    if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        signal.setitimer(signal.ITIMER_REAL, max(grace, 0.001))


def has_children() -> bool:
    """Return whether any child is left, reaping one that has ended (no /proc scan needed)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def wait_for(main_pid: int) -> int:
    """Reap children until the program itself exits; returns its exit code (-n: signal n)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == main_pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
