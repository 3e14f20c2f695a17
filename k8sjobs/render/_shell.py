"""The shell that every wrapper k8sjobs renders shares: run the step as a child, outlive
the signals it is sent, and leave its exit code where a handoff container reads it.

The step's argv arrives as ``"$@"``: nothing of the user's is ever spliced into this text.
"""

from __future__ import annotations

# `wait` returns early when a trapped signal arrives; the loop waits again until the child
# is really gone, so the exit code left behind is the child's, never the trap's.
RUN_CHILD = """\
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
while :; do
  wait "$child"
  rc=$?
  kill -0 "$child" 2>/dev/null || break
done
"""


def leave_exit_code(status_dir: str) -> str:
    """Return the lines that write ``$rc`` to ``status_dir``/exitcode atomically (a rename, so
    a reader never sees half a number) and exit with it."""
    return (
        f'printf \'%s\\n\' "$rc" > "{status_dir}/exitcode.tmp"\n'
        f'mv "{status_dir}/exitcode.tmp" "{status_dir}/exitcode"\n'
        'exit "$rc"\n'
    )
