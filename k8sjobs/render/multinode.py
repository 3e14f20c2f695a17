"""Multi-node steps: one launch across the pods of an Indexed Job (pure: no I/O, no randomness).

A step with ``nodes > 1`` and ``launch: ssh`` (the default) is one program launched across
pods, wired the way the Kubeflow MPI Operator v2 wires an MPIJob, so that images built for
it work unchanged. This module owns that wiring; ``render`` places what it returns. The
contract below is what every backend (Kubernetes, the fake cluster, the local backend)
relies on.

Roles. One pod template; the role is decided inside the pod by ``JOB_COMPLETION_INDEX``,
by the wrapper ``/k8sjobs/entrypoint/launch`` (ConfigMap key ``launch``) that runs before
the step's own command:

- index 0 is the **launcher**: its init container pulls the inputs, it waits for the
  workers (below), runs the script (where ``$(LAUNCHER)`` starts the MPI job), and its
  push container pushes the outputs (every pod pulls the inputs, so ranks on every node
  read them; only index 0 pushes);
- indexes 1..N-1 are **workers**: they run ``sshd -De -p 2222 -f
  /k8sjobs/entrypoint/sshd_config`` (a config generated here: the step's key only, no
  strict modes, no passwords; host key made at start in the ``/k8sjobs/sshd`` emptyDir)
  until the Job ends. A readiness probe reports a worker Ready once sshd listens.

The Job. ``completionMode: Indexed``, ``successPolicy: {rules: [{succeededIndexes: "0"}]}``
(the Job completes when the launcher succeeds, and the workers are stopped: by Kubernetes,
or the local backend),
``backoffLimitPerIndex: retries`` and ``maxFailedIndexes: 0`` (an index that fails more
often than ``retries`` fails the whole Job at once, the index named in
``status.failedIndexes``: a dead worker never leaves the launcher hanging until walltime).

The key pair. Made per step at submit time by the backend (``k8sjobs.render.sshkey``), passed to
``render`` like pinned inputs, kept in the step's Secret, of type ``kubernetes.io/ssh-auth``
(keys ``ssh-privatekey`` and ``authorized_keys``; secret env values share it), mounted
read-only with mode 0600 at ``ssh_dir`` (default ``/root/.ssh``; ``/home/nonroot/.ssh``,
the home of uid 65532, in restricted mode) as ``id_ed25519`` and ``authorized_keys``. The
spec hash does not depend on the key. Nothing secret goes into the ConfigMap.

The hostfile. ConfigMap key ``hostfile``, mounted at ``/k8sjobs/entrypoint/hostfile``, one
line per pod, ``<job>-<i>.<job>.<namespace>.svc slots=<tasks per node>`` (Open MPI) or
``<host>:<tasks per node>`` (MPICH, Intel MPI). The headless Service is named after the Job.

The launcher's environment (set on every pod; only the launcher's MPI reads it):
Open MPI 4 ``OMPI_MCA_orte_default_hostfile``, ``OMPI_MCA_plm_rsh_args``,
``OMPI_MCA_orte_keep_fqdn_hostnames=true``, ``OMPI_MCA_plm_rsh_no_tree_spawn=1``; Open MPI 5
the ``PRTE_MCA_prte_default_hostfile``, ``PRTE_MCA_plm_ssh_args``,
``PRTE_MCA_prte_keep_fqdn_hostnames``, ``PRTE_MCA_plm_ssh_no_tree_spawn`` equivalents;
MPICH ``HYDRA_HOST_FILE`` and ``HYDRA_LAUNCHER_EXTRA_ARGS``; Intel MPI
``I_MPI_HYDRA_HOST_FILE``, ``I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS`` and ``I_MPI_PERHOST``.
The ssh arguments are ``SSH_ARGS`` (port 2222, the identity, connection attempts, no
host-key prompts). The remote-shell *agent*
variables (``OMPI_MCA_plm_rsh_agent``, ``PRTE_MCA_plm_ssh_agent``, ``HYDRA_LAUNCHER_EXEC``,
``I_MPI_HYDRA_BOOTSTRAP_EXEC``) are never set here: the local backend sets them to its own
agent, which starts the remote command inside the target index's environment.

Waiting for the workers. Before the script runs, the launcher checks every worker in
``K8SJOBS_WORKER_HOSTS`` (space-separated) in turn, retrying each once a second until
``K8SJOBS_WORKER_WAIT`` seconds (``Step.worker_wait``) have passed since it began. The
check is ``$K8SJOBS_WAIT_WORKERS <host>`` when that variable is set (the local backend's
agent; exit 0 once the host answers, else non-zero with one line on stderr), otherwise
``ssh $K8SJOBS_SSH_ARGS -o BatchMode=yes <host> true``: it resolves the name, connects to
port 2222 and logs in with the step's key, exactly what mpirun will do next. A host that
never answers ends the launcher with exit code 1 and the termination message
``WorkersUnreachable: worker <host> did not answer on port 2222 within <n>s (<last error>)``,
which ``judge()`` reports as the reason. A worker whose image cannot serve sshd ends with
``WorkerSetupFailed: ...``. On a worker, ``$K8SJOBS_WORKER_SERVE`` (when set) is run
instead of sshd.

``$(LAUNCHER)`` expands to ``mpirun -np {procs} --hostfile {hostfile}`` (Open MPI),
``mpiexec -n {procs} -f {hostfile}`` (MPICH) or ``mpiexec -n {procs} -ppn {procs_per_node}
-f {hostfile}`` (Intel MPI) with the call's counts, where
``{hostfile}`` is ``"$K8SJOBS_HOSTFILE"`` (the script names its surroundings by variables, so
that the local runner's path translation reaches them too), unless the
step gives its own ``launcher`` template. ``launch: none`` keeps every index running the
whole script (for users who bring their own bootstrap), with ``--host`` lists as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..steps.spec import DEFAULT_LAUNCHER, Step
from . import jobset

__all__ = [
    "ROLE_WRAPPER",
    "SSH_PORT",
    "SshKey",
    "hostfile",
    "hosts",
    "job_policy",
    "launcher_env",
    "launcher_template",
    "ssh_args",
    "sshd_config",
]

SSH_PORT = 2222
#: The private key's file name under ssh_dir (an ed25519 key, so ssh also finds it unasked).
IDENTITY = "id_ed25519"
#: Where a worker's sshd keeps its host key and pid file (an emptyDir: the root may be read-only).
SSHD_DIR = "/k8sjobs/sshd"
SECRET_PRIVATE_KEY = "ssh-privatekey"
SECRET_AUTHORIZED_KEYS = "authorized_keys"
#: ConfigMap keys this module adds.
HOSTFILE_KEY = "hostfile"
#: How a script names the hostfile: by its variable, never its path (the local runner
#: translates environment values, not script text).
HOSTFILE_REFERENCE = '"$K8SJOBS_HOSTFILE"'
ROLE_KEY = "launch"
SSHD_CONFIG_KEY = "sshd_config"

_TEMPLATES = {
    "openmpi": "mpirun -np {procs} --hostfile {hostfile}",
    "mpich": "mpiexec -n {procs} -f {hostfile}",
    # Intel MPI fills the first host's cores before the next unless told -ppn (its
    # Developer Guide, "Running an MPI Program"); MPICH's Hydra reads "host:n" itself.
    "intel": "mpiexec -n {procs} -ppn {procs_per_node} -f {hostfile}",
}

# The wrapper never splices user text: hosts, paths and limits arrive as environment
# variables, the step's own command as "$@".
ROLE_WRAPPER = """\
#!/bin/sh
# k8sjobs: one pod template, two roles (see k8sjobs/render/multinode.py). Index 0 is the launcher:
# it waits until every worker answers, then runs the step. Other indexes serve sshd for it.
# K8SJOBS_ROLE, when set (a JobSet's workers, whose indexes start at 0), says the role.
set -u
fail() {
  printf 'k8sjobs: %s\\n' "$1" >&2
  printf '%s\\n' "$1" > "${K8SJOBS_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null
  exit 1
}
role=${K8SJOBS_ROLE:-}
if [ -z "$role" ]; then
  if [ "${JOB_COMPLETION_INDEX:-0}" = 0 ]; then role=launcher; else role=worker; fi
fi
if [ "$role" = worker ]; then
  if [ -n "${K8SJOBS_WORKER_SERVE:-}" ]; then
    exec $K8SJOBS_WORKER_SERVE
  fi
  key="$K8SJOBS_SSHD_DIR/host_ed25519"
  [ -s "$key" ] || ssh-keygen -q -t ed25519 -N '' -f "$key" >/dev/null ||
    fail "WorkerSetupFailed: ssh-keygen could not make a host key; the image needs OpenSSH"
  # sshd started as root insists on its privilege separation directory.
  [ "$(id -u)" != 0 ] || mkdir -p /run/sshd
  sshd=$(command -v sshd || echo /usr/sbin/sshd)
  [ -x "$sshd" ] || fail "WorkerSetupFailed: no sshd in the image; install OpenSSH's server"
  exec "$sshd" -De -p "$K8SJOBS_SSH_PORT" -f "$K8SJOBS_SSHD_CONFIG"
fi
answers() {
  if [ -n "${K8SJOBS_WAIT_WORKERS:-}" ]; then
    $K8SJOBS_WAIT_WORKERS "$1"
  else
    ssh $K8SJOBS_SSH_ARGS -o BatchMode=yes -o ConnectTimeout=5 "$1" true </dev/null
  fi
}
start=$(date +%s)
for host in $K8SJOBS_WORKER_HOSTS; do
  until err=$(answers "$host" 2>&1); do
    if [ $(( $(date +%s) - start )) -ge "$K8SJOBS_WORKER_WAIT" ]; then
      last=$(printf '%s\\n' "$err" | tail -n 1)
      fail "WorkersUnreachable: worker $host did not answer on port $K8SJOBS_SSH_PORT \\
within ${K8SJOBS_WORKER_WAIT}s${last:+ ($last)}"
    fi
    sleep 1
  done
done
exec "$@"
"""


@dataclass(frozen=True)
class SshKey:
    """A step's key pair, in OpenSSH formats: the private key (PEM) and the public key line."""

    public: str
    # Kept out of repr: a logged key pair must not show the private half.
    private: str = field(repr=False)

    def secret_data(self) -> dict[str, str]:
        """Return the Secret's ssh entries (plain text; render encodes them)."""
        return {SECRET_PRIVATE_KEY: self.private, SECRET_AUTHORIZED_KEYS: self.public}


def hosts(name: str, namespace: str, nodes: int, step: Step | None = None) -> list[str]:
    """Return the pods' resolvable names, index 0 first (the headless Service is ``name``).

    A ``target: jobset`` ``step``'s pods are named by the JobSet controller instead.
    """
    if step is not None and step.target == "jobset":
        return jobset.hosts(name, namespace, nodes, step.launch_mode)
    return [f"{name}-{i}.{name}.{namespace}.svc" for i in range(nodes)]


def hostfile(step: Step, name: str, namespace: str) -> str:
    """Return the hostfile text: one line per pod with its slots, as ``step.mpi`` reads it."""
    slots = step.resources.tasks_per_node
    found = hosts(name, namespace, step.resources.nodes, step)
    if step.mpi == "openmpi":
        return "".join(f"{host} slots={slots}\n" for host in found)
    return "".join(f"{host}:{slots}\n" for host in found)


def ssh_args(step: Step) -> str:
    """Return the options every ssh to a worker takes (the port, the key, no prompts)."""
    identity = f"{step.ssh_home}/{IDENTITY}"
    return (
        f"-p {SSH_PORT} -i {identity} -o ConnectionAttempts=10 "
        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
    )


def launcher_template(step: Step) -> str:
    """Return the template ``$(LAUNCHER)`` expands to: the step's own, else the MPI's."""
    return command_template(step.launcher, step.launch_mode, step.mpi)


def command_template(launcher: str, launch_mode: str, mpi: str) -> str:
    """Return ``launcher``, or the MPI's hostfile command when it is the default under ssh.

    Shared with the Maestro adapter, so ``$(LAUNCHER)`` in a Maestro study becomes the same
    command as in a k8sjobs step.
    """
    if launcher != DEFAULT_LAUNCHER or launch_mode != "ssh":
        return launcher
    return _TEMPLATES[mpi]


def launcher_env(step: Step, name: str, namespace: str, config_dir: str) -> list[tuple[str, str]]:
    """Return the environment of every pod of a ``launch: ssh`` step, as (name, value) pairs.

    The MPI variables point the launcher's MPI at the hostfile and at sshd on port 2222;
    the ``K8SJOBS_*`` ones configure the role wrapper.
    """
    path = f"{config_dir}/{HOSTFILE_KEY}"
    args = ssh_args(step)
    mpi: dict[str, list[tuple[str, str]]] = {
        "openmpi": [
            ("OMPI_MCA_orte_default_hostfile", path),
            ("OMPI_MCA_plm_rsh_args", args),
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_plm_rsh_no_tree_spawn", "1"),
            ("PRTE_MCA_prte_default_hostfile", path),
            ("PRTE_MCA_plm_ssh_args", args),
            ("PRTE_MCA_prte_keep_fqdn_hostnames", "1"),
            ("PRTE_MCA_plm_ssh_no_tree_spawn", "1"),
        ],
        # Hydra reads HYDRA_LAUNCHER_EXTRA_ARGS; the MPI Operator's HYDRA_LAUNCH_EXTRA_ARGS
        # is read by no MPICH (its images get port 2222 from ssh_config instead).
        "mpich": [("HYDRA_HOST_FILE", path), ("HYDRA_LAUNCHER_EXTRA_ARGS", args)],
        "intel": [
            ("I_MPI_HYDRA_HOST_FILE", path),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", args),
            # Ranks per host for an mpiexec without -ppn (the MPI Operator sets it too).
            ("I_MPI_PERHOST", str(step.resources.tasks_per_node)),
        ],
    }
    workers = hosts(name, namespace, step.resources.nodes, step)[1:]
    assert step.worker_wait is not None  # Step refuses None
    own = [
        ("K8SJOBS_HOSTFILE", path),
        ("K8SJOBS_WORKER_HOSTS", " ".join(workers)),
        ("K8SJOBS_WORKER_WAIT", str(int(step.worker_wait.total_seconds()))),
        ("K8SJOBS_SSH_ARGS", args),
        ("K8SJOBS_SSH_PORT", str(SSH_PORT)),
        ("K8SJOBS_SSHD_CONFIG", f"{config_dir}/{SSHD_CONFIG_KEY}"),
        ("K8SJOBS_SSHD_DIR", SSHD_DIR),
    ]
    return own + mpi[step.mpi]


def sshd_config(step: Step) -> str:
    """Return the workers' sshd configuration: the step's key only, nothing else let in."""
    return "\n".join(
        [
            "# k8sjobs: sshd of a worker; only the step's launcher logs in, with its key.",
            f"Port {SSH_PORT}",
            f"HostKey {SSHD_DIR}/host_ed25519",
            f"PidFile {SSHD_DIR}/sshd.pid",
            f"AuthorizedKeysFile {step.ssh_home}/{SECRET_AUTHORIZED_KEYS}",
            # The Secret's files belong to root with the pod's fsGroup (restricted mode).
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "PermitEmptyPasswords no",
            "AllowTcpForwarding no",
            "X11Forwarding no",
            "PrintMotd no",
            "",
        ]
    )


def job_policy(step: Step) -> dict[str, Any]:
    """Return the Job spec fields that make index 0 decide success and any failure final."""
    return {
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
        "backoffLimitPerIndex": step.retries,
        "maxFailedIndexes": 0,
    }


def readiness_probe() -> dict[str, Any]:
    """Return the probe that makes a worker Ready once sshd listens (the launcher at once)."""
    # One template for both roles: a tcpSocket probe would leave the launcher, which
    # serves nothing, unready for its whole life. sshd writes its pid file after binding.
    check = f'[ "${{JOB_COMPLETION_INDEX:-0}}" = 0 ] || [ -s {SSHD_DIR}/sshd.pid ]'
    return {
        "exec": {"command": ["/bin/sh", "-c", check]},
        "periodSeconds": 2,
        "failureThreshold": 1,
    }


def config_data(step: Step, name: str, namespace: str) -> dict[str, str]:
    """Return the ConfigMap entries of a ``launch: ssh`` step (no secret among them)."""
    return {
        ROLE_KEY: ROLE_WRAPPER,
        HOSTFILE_KEY: hostfile(step, name, namespace),
        SSHD_CONFIG_KEY: sshd_config(step),
    }


def secret_volume(secret: str) -> dict[str, Any]:
    """Return the volume that lays the key pair out as ssh expects it (mode 0600)."""
    items = [
        {"key": SECRET_PRIVATE_KEY, "path": IDENTITY, "mode": 0o600},
        {"key": SECRET_AUTHORIZED_KEYS, "path": SECRET_AUTHORIZED_KEYS, "mode": 0o600},
    ]
    return {"secretName": secret, "defaultMode": 0o600, "items": items}


def check_env(step: Step) -> None:
    """Refuse env names that would collide with the ssh entries of the step's Secret."""
    taken = {SECRET_PRIVATE_KEY, SECRET_AUTHORIZED_KEYS} & set(step.env)
    if taken and step.launch_mode == "ssh":
        raise ValueError(
            f'Step "{step.name}": env {sorted(taken)} would overwrite the key pair in the '
            "step's Secret; rename the variable"
        )


def is_launched(job: Mapping[str, Any]) -> bool:
    """Return whether ``job`` is a launcher/worker Job (index 0 decides its success)."""
    rules = ((job.get("spec") or {}).get("successPolicy") or {}).get("rules") or []
    return any(rule.get("succeededIndexes") == "0" for rule in rules)
