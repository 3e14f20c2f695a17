"""The shell that every wrapper k8sjobs renders shares: run the step as a child, outlive
the signals it is sent, leave what it used in the container's termination message, and leave
its exit code where a handoff container reads it.

The step's argv arrives as ``"$@"``: nothing of the user's is ever spliced into this text.
POSIX sh and its builtins only (``read``, ``printf``, ``case``): an image with /bin/sh and no
coreutils still reports its usage.
"""

from __future__ import annotations

# Centiseconds since boot, from /proc/uptime ("12345.67 ..."): the script's wall time without
# `date +%N`, which busybox and POSIX lack.
MARK_START = """\
k8sjobs_uptime() {
  read -r up _ < /proc/uptime 2>/dev/null || return 0
  printf '%s' "${up%.*}${up#*.}"
}
started=$(k8sjobs_uptime)
"""

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

# One line of the termination message (k8sjobs.usage reads it back): the container's own
# cgroup at exit, v2 (cpu.stat usage_usec, memory.peak) or v1 (cpuacct.usage in ns,
# memory.max_usage_in_bytes). Appended, so a message the script wrote itself stays. The
# local runner sets K8SJOBS_USAGE=keeper: there the cgroup is the machine's, not the step's.
LEAVE_USAGE = """\
k8sjobs_number() {
  case "$1" in ''|*[!0-9]*) return 1 ;; esac
}
k8sjobs_usage() {
  [ "${K8SJOBS_USAGE:-cgroup}" = cgroup ] || return 0
  ended=$(k8sjobs_uptime)
  cg="${K8SJOBS_CGROUP:-/sys/fs/cgroup}"
  cpu=
  peak=
  if [ -r "$cg/cpu.stat" ]; then
    src=cgroup2
    while read -r key value; do
      [ "$key" != usage_usec ] || cpu=$value
    done < "$cg/cpu.stat"
    read -r peak < "$cg/memory.peak" 2>/dev/null
  elif [ -d "$cg/memory" ] || [ -d "$cg/cpuacct" ] || [ -d "$cg/cpu,cpuacct" ]; then
    src=cgroup1
    for acct in "$cg/cpuacct" "$cg/cpu,cpuacct"; do
      if read -r ns < "$acct/cpuacct.usage" 2>/dev/null && k8sjobs_number "$ns"; then
        cpu=$((ns / 1000))
        break
      fi
    done
    read -r peak < "$cg/memory/memory.max_usage_in_bytes" 2>/dev/null
  else
    src=none
  fi
  # A container left in the node's root cgroup reads the node's totals, not its own: say so
  # per figure. Under a private cgroup namespace v2 shows "/" too, but there the mount is a
  # child cgroup, which has cgroup.type (the true root has none).
  root=
  while IFS=: read -r _ controllers path; do
    [ "$path" = / ] || continue
    case "$src:$controllers" in
      cgroup2:) [ -e "$cg/cgroup.type" ] || root=cpu,mem ;;
      cgroup1:*cpuacct*) root="cpu${root:+,$root}" ;;
      cgroup1:*memory*) root="${root:+$root,}mem" ;;
    esac
  done < "${K8SJOBS_PROC_CGROUP:-/proc/self/cgroup}" 2>/dev/null
  cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)
  node_mem=
  while read -r key kb _; do
    [ "$key" != MemTotal: ] || ! k8sjobs_number "$kb" || node_mem=$((kb * 1024))
  done < /proc/meminfo 2>/dev/null
  line="k8sjobs-usage v1 src=$src"
  [ -z "$root" ] || line="$line root=$root"
  ! k8sjobs_number "$cores" || line="$line cores=$cores"
  ! k8sjobs_number "$node_mem" || line="$line node_mem=$node_mem"
  if k8sjobs_number "$started" && k8sjobs_number "$ended"; then
    line="$line wall_ms=$(( (ended - started) * 10 ))"
  fi
  ! k8sjobs_number "$cpu" || line="$line cpu_us=$cpu"
  ! k8sjobs_number "$peak" || line="$line mem_peak=$peak"
  case "${NVIDIA_VISIBLE_DEVICES:-}" in
    ''|all|none|void) ;;
    *[!A-Za-z0-9,:._-]*) ;;
    *) line="$line gpus=$NVIDIA_VISIBLE_DEVICES" ;;
  esac
  ! k8sjobs_number "${K8SJOBS_GPUS:-}" || line="$line gpu_req=$K8SJOBS_GPUS"
  printf '%s\\n' "$line" >> "${K8SJOBS_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null
}
k8sjobs_usage
"""


def leave_exit_code(status_dir: str) -> str:
    """Return the lines that write ``$rc`` to ``status_dir``/exitcode atomically (a rename, so
    a reader never sees half a number) and exit with it."""
    return (
        f'printf \'%s\\n\' "$rc" > "{status_dir}/exitcode.tmp"\n'
        f'mv "{status_dir}/exitcode.tmp" "{status_dir}/exitcode"\n'
        'exit "$rc"\n'
    )
