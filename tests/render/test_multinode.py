"""Multi-node steps with launch: ssh: what render makes of them, and the role wrapper run for real.

The rendered objects validate against the Kubernetes schema for each MPI; the wiring (hostfile,
launcher environment, Secret, probe, Job policies) is pinned field by field; and the wrapper
is run with a real OpenSSH sshd and ssh client, as a worker and as a launcher waiting for it.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sjobs.render import multinode
from k8sjobs.render.manifests import Target, render
from k8sjobs.render.sshkey import generate_key
from k8sjobs.steps.spec import Resources, Step

from ..ssh_keys import TEST_KEY
from .test_render import assert_valid

TARGET = Target(study="hpc", namespace="lab")
AGENT_VARIABLES = (
    "OMPI_MCA_plm_rsh_agent",
    "PRTE_MCA_plm_ssh_agent",
    "HYDRA_LAUNCHER_EXEC",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC",
)


def _step(**fields: Any) -> Step:
    fields.setdefault("resources", Resources(nodes=3, tasks=12))
    return Step(name="sim", script="$(LAUNCHER) ./a.out\n$(LAUNCHER)[2p] ./b", **fields)


def _main(manifests: Any) -> dict[str, Any]:
    return manifests.job["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def _env(manifests: Any) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _main(manifests)["env"]}


@pytest.mark.parametrize("mpi", ["openmpi", "mpich", "intel"])
@pytest.mark.parametrize("security", ["default", "restricted"])
def test_launched_objects_validate_for_each_mpi(mpi: str, security: str) -> None:
    m = render(_step(mpi=mpi, security=security), TARGET, ssh_key=TEST_KEY)
    assert_valid(m)
    assert [o["kind"] for o in m.objects()] == ["ConfigMap", "Secret", "Service", "Job"]


@pytest.mark.parametrize(
    ("mpi", "line", "command"),
    [
        ("openmpi", "{h} slots=4", 'mpirun -np {n} --hostfile "$K8SJOBS_HOSTFILE"'),
        ("mpich", "{h}:4", 'mpiexec -n {n} -f "$K8SJOBS_HOSTFILE"'),
        ("intel", "{h}:4", 'mpiexec -n {n} -ppn {p} -f "$K8SJOBS_HOSTFILE"'),
    ],
)
def test_hostfile_and_launcher_command_per_mpi(mpi: str, line: str, command: str) -> None:
    m = render(_step(mpi=mpi), TARGET, ssh_key=TEST_KEY)
    data = m.configmap["data"]
    hosts = [f"{m.name}-{i}.{m.name}.lab.svc" for i in range(3)]
    assert data["hostfile"] == "".join(line.format(h=h) + "\n" for h in hosts)
    assert m.service is not None and m.service["metadata"]["name"] == m.name
    expected = f"{command.format(n=12, p=4)} ./a.out\n{command.format(n=2, p=2)} ./b"
    assert data["entrypoint"] == expected


def test_a_custom_launcher_template_is_kept_and_may_name_the_hostfile() -> None:
    step = _step(launcher="srun-like -n {procs} --file {hostfile} --hosts {hosts}")
    data = render(step, TARGET, ssh_key=TEST_KEY).configmap["data"]
    assert data["entrypoint"].startswith('srun-like -n 12 --file "$K8SJOBS_HOSTFILE" ')
    assert ".lab.svc:4," in data["entrypoint"]


@pytest.mark.parametrize(
    ("mpi", "hostfile_var", "args_var"),
    [
        ("openmpi", "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args"),
        ("openmpi", "PRTE_MCA_prte_default_hostfile", "PRTE_MCA_plm_ssh_args"),
        ("mpich", "HYDRA_HOST_FILE", "HYDRA_LAUNCHER_EXTRA_ARGS"),
        ("intel", "I_MPI_HYDRA_HOST_FILE", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"),
    ],
)
def test_launcher_environment_per_mpi(mpi: str, hostfile_var: str, args_var: str) -> None:
    env = _env(render(_step(mpi=mpi), TARGET, ssh_key=TEST_KEY))
    assert env[hostfile_var] == "/k8sjobs/entrypoint/hostfile"
    assert env["K8SJOBS_HOSTFILE"] == env[hostfile_var]  # what $(LAUNCHER) reads
    args = env[args_var].split()
    assert args[:4] == ["-p", "2222", "-i", "/root/.ssh/id_ed25519"]
    for option in ("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"):
        assert option in args
    assert env["K8SJOBS_SSH_ARGS"] == env[args_var]
    # The local backend sets the remote-shell agent; render never does.
    assert not set(AGENT_VARIABLES) & set(env)
    if mpi == "intel":
        assert env["I_MPI_PERHOST"] == "4"  # 12 tasks on 3 nodes
    if mpi == "openmpi":
        assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
        assert env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "1"


def test_the_users_env_wins_over_the_launcher_environment() -> None:
    m = render(_step(env={"OMPI_MCA_plm_rsh_args": "-p 22"}), TARGET, ssh_key=TEST_KEY)
    values = [e["value"] for e in _main(m)["env"] if e["name"] == "OMPI_MCA_plm_rsh_args"]
    assert values[-1] == "-p 22"  # Kubernetes keeps the last of a repeated name


def test_workers_and_wait_reach_the_role_wrapper() -> None:
    m = render(_step(worker_wait="90s"), TARGET, ssh_key=TEST_KEY)
    env = _env(m)
    assert env["K8SJOBS_WORKER_HOSTS"].split() == [f"{m.name}-{i}.{m.name}.lab.svc" for i in (1, 2)]
    assert env["K8SJOBS_WORKER_WAIT"] == "90"
    main = _main(m)
    assert main["command"][:2] == ["/bin/sh", "/k8sjobs/entrypoint/launch"]
    assert main["command"][2:] == [
        "/bin/sh",
        "/k8sjobs/entrypoint/run",
        "/bin/bash",
        "/k8sjobs/entrypoint/entrypoint",
    ]
    assert m.configmap["data"]["launch"] == multinode.ROLE_WRAPPER
    probe = main["readinessProbe"]["exec"]["command"]
    assert probe[-1] == '[ "${JOB_COMPLETION_INDEX:-0}" = 0 ] || [ -s /k8sjobs/sshd/sshd.pid ]'


def test_the_job_lets_index_0_decide_and_fails_at_once_on_any_index() -> None:
    spec = render(_step(retries=2), TARGET, ssh_key=TEST_KEY).job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (2, 0)
    assert "backoffLimit" not in spec


def test_the_key_pair_is_an_ssh_auth_secret_mounted_0600() -> None:
    m = render(_step(env={"TOKEN": "plain"}), TARGET, ssh_key=TEST_KEY)
    assert m.secret is not None and m.secret["type"] == "kubernetes.io/ssh-auth"
    data = {k: base64.b64decode(v).decode() for k, v in m.secret["data"].items()}
    assert data == {"ssh-privatekey": TEST_KEY.private, "authorized_keys": TEST_KEY.public}
    volumes = {v["name"]: v for v in m.job["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["ssh"]["secret"]
    assert secret["secretName"] == m.name and secret["defaultMode"] == 0o600
    assert {(i["key"], i["path"], i["mode"]) for i in secret["items"]} == {
        ("ssh-privatekey", "id_ed25519", 0o600),
        ("authorized_keys", "authorized_keys", 0o600),
    }
    mounts = {v["name"]: v for v in _main(m)["volumeMounts"]}
    assert mounts["ssh"] == {"name": "ssh", "mountPath": "/root/.ssh", "readOnly": True}
    assert volumes["sshd"] == {"name": "sshd", "emptyDir": {}}


def test_no_key_material_outside_the_secret_and_the_hash_ignores_the_key() -> None:
    first, second = generate_key(), generate_key()
    a = render(_step(), TARGET, ssh_key=first)
    b = render(_step(), TARGET, ssh_key=second)
    assert a.spec_hash == b.spec_hash
    body = first.private.splitlines()[1]
    for obj in (a.configmap, a.job, a.service):
        assert body not in yaml.safe_dump(obj)
    assert body not in repr(a) and body not in repr(first)


def test_secret_env_values_share_the_ssh_secret() -> None:
    from pydantic import SecretStr

    m = render(_step(env={"TOKEN": SecretStr("s3")}), TARGET, ssh_key=TEST_KEY)
    assert m.secret is not None and set(m.secret["data"]) == {
        "TOKEN",
        "ssh-privatekey",
        "authorized_keys",
    }


def test_a_launched_step_without_a_key_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r'ssh_key=k8sjobs.render.generate_key\(\).*"none"'):
        render(_step(), TARGET)


def test_env_names_of_the_key_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="would overwrite the key pair"):
        render(_step(env={"ssh-privatekey": "x"}), TARGET, ssh_key=TEST_KEY)


def test_restricted_mode_mounts_the_key_in_the_nonroot_home() -> None:
    m = render(_step(security="restricted"), TARGET, ssh_key=TEST_KEY)
    mounts = {v["name"]: v["mountPath"] for v in _main(m)["volumeMounts"]}
    assert mounts["ssh"] == "/home/nonroot/.ssh"
    assert (
        "AuthorizedKeysFile /home/nonroot/.ssh/authorized_keys"
        in m.configmap["data"]["sshd_config"]
    )
    assert "-i /home/nonroot/.ssh/id_ed25519" in _env(m)["OMPI_MCA_plm_rsh_args"]


def test_ssh_dir_moves_the_key() -> None:
    m = render(_step(ssh_dir="/home/mpiuser/.ssh"), TARGET, ssh_key=TEST_KEY)
    assert {v["name"]: v["mountPath"] for v in _main(m)["volumeMounts"]}["ssh"] == (
        "/home/mpiuser/.ssh"
    )


def test_launch_none_runs_the_script_on_every_index_as_before() -> None:
    m = render(_step(launch="none"))
    spec = m.job["spec"]
    assert "successPolicy" not in spec and spec["backoffLimit"] == 0
    assert _main(m)["command"][2:] == ["/bin/bash", "/k8sjobs/entrypoint/entrypoint"]
    assert m.secret is None and "hostfile" not in m.configmap["data"]
    assert m.configmap["data"]["entrypoint"].startswith(
        f"mpirun -np 12 --host {m.name}-0.{m.name}:4,"
    )


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        ({"launch": "rsh"}, "launch", "'ssh' or 'none'"),
        ({"mpi": "mvapich"}, "mpi", "'openmpi', 'mpich' or 'intel'"),
        ({"ssh_dir": "relative/.ssh"}, "ssh_dir", "absolute directory"),
        ({"ssh_dir": "/home/a b/.ssh"}, "ssh_dir", "letters, digits"),
        ({"ssh_dir": "/k8sjobs/ssh"}, "ssh_dir", "outside /k8sjobs"),
        ({"ssh_dir": "/work/.ssh"}, "ssh_dir", "inside the work directory"),
        ({"worker_wait": 0}, "worker_wait", "between 1 and"),
    ],
)
def test_bad_multinode_fields_are_named(fields: dict[str, Any], loc: str, words: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        _step(**fields)
    error = caught.value.errors()[0]
    assert error["loc"] == (loc,)
    assert words in str(caught.value)


# --- the role wrapper with a real sshd --------------------------------------------------

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
needs_openssh = pytest.mark.skipif(
    not (os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("ssh-keygen")),
    reason="needs OpenSSH (Debian openssh-server, installed by scripts/test)",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pod_files(tmp_path: Path, step: Step, port: int) -> dict[str, str]:
    """Lay out what the pod would mount, under tmp_path; return the wrapper's environment."""
    key = generate_key()
    home, sshd_dir = tmp_path / "ssh", tmp_path / "sshd"
    home.mkdir(mode=0o700)
    sshd_dir.mkdir()
    for name, text in (("id_ed25519", key.private), ("authorized_keys", key.public)):
        (home / name).write_text(text)
        (home / name).chmod(0o600)
    # The rendered config, with the pod's paths moved under tmp_path.
    config = multinode.sshd_config(step).replace(step.ssh_home, str(home))
    config = config.replace(multinode.SSHD_DIR, str(sshd_dir))
    (tmp_path / "sshd_config").write_text(config)
    (tmp_path / "launch").write_text(multinode.ROLE_WRAPPER)
    args = multinode.ssh_args(step).replace("2222", str(port)).replace(step.ssh_home, str(home))
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "K8SJOBS_SSH_ARGS": args,
        "K8SJOBS_SSH_PORT": str(port),
        "K8SJOBS_SSHD_CONFIG": str(tmp_path / "sshd_config"),
        "K8SJOBS_SSHD_DIR": str(sshd_dir),
        "K8SJOBS_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }


@needs_openssh
def test_the_rendered_sshd_config_is_accepted_by_sshd(tmp_path: Path) -> None:
    env = _pod_files(tmp_path, _step(), _free_port())
    if os.getuid() == 0:  # as the wrapper does: sshd run by root needs it
        os.makedirs("/run/sshd", exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{tmp_path}/sshd/host_ed25519"],
        check=True,
    )
    checked = subprocess.run(
        [SSHD, "-t", "-f", env["K8SJOBS_SSHD_CONFIG"]], capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stderr


@needs_openssh
def test_a_launcher_waits_for_its_worker_then_runs_over_ssh(tmp_path: Path) -> None:
    port = _free_port()
    env = _pod_files(tmp_path, _step(), port)
    worker = subprocess.Popen(
        ["/bin/sh", str(tmp_path / "launch"), "never-run"],
        env={**env, "JOB_COMPLETION_INDEX": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Started at once: the launcher's own wait is what bridges sshd's start-up.
        script = 'ssh $K8SJOBS_SSH_ARGS 127.0.0.1 "echo rank on worker; exit 0"'
        launcher = subprocess.run(
            ["/bin/sh", str(tmp_path / "launch"), "/bin/sh", "-c", script],
            env={**env, "JOB_COMPLETION_INDEX": "0", "K8SJOBS_WORKER_HOSTS": "127.0.0.1"}
            | {"K8SJOBS_WORKER_WAIT": "60"},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert launcher.returncode == 0, launcher.stderr
        assert launcher.stdout == "rank on worker\n"
        assert worker.poll() is None  # the worker serves until the Job ends
        assert (tmp_path / "sshd" / "sshd.pid").stat().st_size > 0  # what the probe reads
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


@needs_openssh
def test_a_worker_that_never_answers_ends_the_launcher_naming_it(tmp_path: Path) -> None:
    env = _pod_files(tmp_path, _step(), _free_port())  # nothing listens on that port
    env |= {"JOB_COMPLETION_INDEX": "0", "K8SJOBS_WORKER_WAIT": "1"}
    env["K8SJOBS_WORKER_HOSTS"] = "127.0.0.1 no-such-worker.invalid"
    launcher = subprocess.run(
        ["/bin/sh", str(tmp_path / "launch"), "/bin/sh", "-c", "echo ran"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launcher.returncode == 1 and "ran" not in launcher.stdout
    said = (tmp_path / "termination-log").read_text()
    assert said.startswith("WorkersUnreachable: worker 127.0.0.1 did not answer on port ")
    assert "within 1s (" in said and "Connection refused" in said
    assert f"k8sjobs: {said}" in launcher.stderr


def test_a_wait_command_replaces_the_ssh_check(tmp_path: Path) -> None:
    # The local backend's contract: $K8SJOBS_WAIT_WORKERS <host>, retried until it exits 0.
    seen = tmp_path / "asked"
    check = tmp_path / "check"
    check.write_text(f'#!/bin/sh\necho "$1" >> {seen}\n[ "$(wc -l < {seen})" -ge 3 ]\n')
    check.chmod(0o755)
    (tmp_path / "launch").write_text(multinode.ROLE_WRAPPER)
    env = {
        "PATH": os.environ["PATH"],
        "JOB_COMPLETION_INDEX": "0",
        "K8SJOBS_WORKER_HOSTS": "w-1.w.ns.svc w-2.w.ns.svc",
        "K8SJOBS_WORKER_WAIT": "60",
        "K8SJOBS_WAIT_WORKERS": str(check),
        "K8SJOBS_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    done = subprocess.run(
        ["/bin/sh", str(tmp_path / "launch"), "/bin/echo", "ran"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    assert seen.read_text().split() == ["w-1.w.ns.svc"] * 3 + ["w-2.w.ns.svc"]


def test_a_worker_runs_the_serve_command_when_given(tmp_path: Path) -> None:
    (tmp_path / "launch").write_text(multinode.ROLE_WRAPPER)
    env = {
        "PATH": os.environ["PATH"],
        "JOB_COMPLETION_INDEX": "2",
        "K8SJOBS_WORKER_SERVE": "/bin/echo serving",
    }
    done = subprocess.run(
        ["/bin/sh", str(tmp_path / "launch"), "/bin/echo", "script"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "serving\n")


def test_the_multi_node_example_study_renders_valid_objects() -> None:
    from k8sjobs.render.sshkey import key_for
    from k8sjobs.study import parse_study

    path = Path(__file__).parents[2] / "examples" / "mpi" / "study.yaml"
    study = parse_study(path.read_text(), base_dir=path.parent, source=str(path))
    target = Target(study=study.name, store="registry.example:5000/k8sjobs")
    hello, summary = (render(s, target, ssh_key=key_for(s)) for s in study.steps)
    assert_valid(hello)
    assert_valid(summary)
    assert hello.job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert hello.configmap["data"]["entrypoint"].startswith(
        'set -euo pipefail\nmpirun -np 4 --hostfile "$K8SJOBS_HOSTFILE" sh -c'
    )
    assert summary.secret is None
