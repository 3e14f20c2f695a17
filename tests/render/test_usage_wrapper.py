"""The main container's wrapper leaves its cgroup's figures in the termination message.

The wrapper runs here under the machine's /bin/sh with ``K8SJOBS_CGROUP`` pointed at a
directory laid out as a container's cgroup v2 or v1 mount, and its line is read back by the
same ``parse_usage`` that ``judge`` uses.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from k8sjobs.render.manifests import MEASURE_WRAPPER, RUN_WRAPPER
from k8sjobs.usage import NO_LINE, parse_usage, split_message


def _run(tmp_path: Path, wrapper: str, env: dict[str, str], *argv: str) -> tuple[int, str]:
    script = tmp_path / "run"
    script.write_text(wrapper)
    log = tmp_path / "termination-log"
    own = tmp_path / "proc-self-cgroup"  # a container's own cgroup, as /proc/self/cgroup says
    own.write_text(
        "0::/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n2:cpuacct:/kubepods/pod1/c1\n"
    )
    full = {
        "PATH": os.environ["PATH"],
        "K8SJOBS_TERMINATION_LOG": str(log),
        "K8SJOBS_PROC_CGROUP": str(own),
        **env,
    }
    done = subprocess.run(["/bin/sh", str(script), *argv], env=full, timeout=60, check=False)
    return done.returncode, log.read_text() if log.exists() else ""


def _v2(root: Path, *, peak: bool = True, usec: int = 5987) -> Path:
    root.mkdir()
    (root / "cgroup.type").write_text("domain\n")  # a child cgroup: the root has none
    (root / "cpu.stat").write_text(f"usage_usec {usec}\nuser_usec 5000\nsystem_usec 987\n")
    if peak:
        (root / "memory.peak").write_text("1288490188\n")
    return root


def test_cgroup_v2_figures_reach_the_termination_message(tmp_path: Path) -> None:
    cgroup = _v2(tmp_path / "cg")
    env = {"K8SJOBS_CGROUP": str(cgroup), "K8SJOBS_GPUS": "1", "NVIDIA_VISIBLE_DEVICES": "GPU-1a"}
    code, message = _run(tmp_path, MEASURE_WRAPPER, env, "sh", "-c", "exit 3")
    assert code == 3  # the script's exit code, through the wrapper
    usage = parse_usage(split_message(message)[1])
    assert (usage.source, usage.memory_peak) == ("cgroup2", 1288490188)
    assert usage.cpu_seconds == pytest.approx(0.005987)
    assert usage.wall_seconds is not None and usage.wall_seconds >= 0
    assert usage.devices == ("GPU-1a",)
    assert "not sampled" in usage.missing["gpu_seconds"]


def test_cgroup_v2_without_memory_peak_says_why(tmp_path: Path) -> None:
    cgroup = _v2(tmp_path / "cg", peak=False)
    _, message = _run(tmp_path, MEASURE_WRAPPER, {"K8SJOBS_CGROUP": str(cgroup)}, "true")
    usage = parse_usage(split_message(message)[1])
    assert usage.memory_peak is None and usage.cpu_seconds == pytest.approx(0.005987)
    assert "Linux before 5.19" in usage.missing["memory_peak"]


def test_cgroup_v1_figures_reach_the_termination_message(tmp_path: Path) -> None:
    cgroup = tmp_path / "cg"
    (cgroup / "memory").mkdir(parents=True)
    (cgroup / "cpu,cpuacct").mkdir()
    (cgroup / "memory" / "memory.max_usage_in_bytes").write_text("268435456\n")
    (cgroup / "cpu,cpuacct" / "cpuacct.usage").write_text("25000000\n")
    _, message = _run(tmp_path, MEASURE_WRAPPER, {"K8SJOBS_CGROUP": str(cgroup)}, "true")
    usage = parse_usage(split_message(message)[1])
    assert (usage.source, usage.memory_peak) == ("cgroup1", 268435456)
    assert usage.cpu_seconds == pytest.approx(0.025)


def test_no_readable_cgroup_leaves_a_line_that_says_so(tmp_path: Path) -> None:
    env = {"K8SJOBS_CGROUP": str(tmp_path / "absent")}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "true")
    usage = parse_usage(split_message(message)[1])
    assert usage.source == "none" and usage.cpu_seconds is None
    assert "could not be read" in usage.missing["cpu_seconds"]


def test_the_script_s_own_message_stays_beside_the_line(tmp_path: Path) -> None:
    cgroup = _v2(tmp_path / "cg")
    log = tmp_path / "termination-log"
    env = {"K8SJOBS_CGROUP": str(cgroup), "LOG": str(log)}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "sh", "-c", 'echo "my own words" > "$LOG"')
    own, line = split_message(message)
    assert own == "my own words" and line is not None


def test_the_outputs_wrapper_measures_and_leaves_the_exit_code(tmp_path: Path) -> None:
    cgroup = _v2(tmp_path / "cg")
    status = tmp_path / "status"
    status.mkdir()
    env = {"K8SJOBS_CGROUP": str(cgroup), "K8SJOBS_STATUS_DIR": str(status)}
    code, message = _run(tmp_path, RUN_WRAPPER, env, "sh", "-c", "exit 4")
    assert code == 4 and (status / "exitcode").read_text() == "4\n"
    assert parse_usage(split_message(message)[1]).memory_peak == 1288490188


def test_the_local_runner_s_mode_leaves_the_cgroup_alone(tmp_path: Path) -> None:
    env = {"K8SJOBS_CGROUP": str(_v2(tmp_path / "cg")), "K8SJOBS_USAGE": "keeper"}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "true")
    assert message == ""


@pytest.mark.skipif(not Path("/sys/fs/cgroup").is_dir(), reason="no cgroup mount here")
def test_this_machine_s_own_cgroup_gives_a_line(tmp_path: Path) -> None:
    _, message = _run(tmp_path, MEASURE_WRAPPER, {}, "true")
    usage = parse_usage(split_message(message)[1])
    assert usage.source in ("cgroup2", "cgroup1", "none"), message


def test_no_line_at_all_says_why_every_figure_is_missing() -> None:
    usage = parse_usage(None)
    assert usage.wall_seconds is None and usage.missing["memory_peak"] == NO_LINE


@pytest.mark.parametrize(
    ("proc_cgroup", "child", "at_root"),
    [
        ("0::/\n", False, {"cpu_seconds", "memory_peak"}),  # v2, the node's root cgroup
        ("0::/\n", True, set()),  # v2 under a private cgroup namespace: its own child cgroup
        ("0::/kubepods/pod1/c1\n", False, set()),
    ],
    ids=["v2-root", "v2-namespaced", "v2-own"],
)
def test_figures_of_the_node_s_root_cgroup_are_missing_saying_so(
    tmp_path: Path, proc_cgroup: str, child: bool, at_root: set[str]
) -> None:
    cgroup = _v2(tmp_path / "cg")
    if not child:
        (cgroup / "cgroup.type").unlink()
    where = tmp_path / "proc-cgroup"
    where.write_text(proc_cgroup)
    env = {"K8SJOBS_CGROUP": str(cgroup), "K8SJOBS_PROC_CGROUP": str(where)}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "true")
    usage = parse_usage(split_message(message)[1])
    for name in ("cpu_seconds", "memory_peak"):
        if name in at_root:
            assert getattr(usage, name) is None, usage
            assert "the node's root cgroup" in usage.missing[name]
        else:
            assert getattr(usage, name) is not None, usage


def test_cgroup_v1_figures_at_the_root_are_missing_each_on_its_own(tmp_path: Path) -> None:
    cgroup = tmp_path / "cg"
    (cgroup / "memory").mkdir(parents=True)
    (cgroup / "cpuacct").mkdir()
    (cgroup / "memory" / "memory.max_usage_in_bytes").write_text("268435456\n")
    (cgroup / "cpuacct" / "cpuacct.usage").write_text("25000000\n")
    where = tmp_path / "proc-cgroup"  # as this very machine says: memory its own, cpu the root
    where.write_text("4:memory:/process_api/a9\n2:cpuacct:/\n1:cpu:/\n0::/\n")
    env = {"K8SJOBS_CGROUP": str(cgroup), "K8SJOBS_PROC_CGROUP": str(where)}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "true")
    usage = parse_usage(split_message(message)[1])
    assert usage.cpu_seconds is None and "root cgroup" in usage.missing["cpu_seconds"]
    assert usage.memory_peak == 268435456


def test_the_line_says_the_cores_and_memory_the_step_could_see(tmp_path: Path) -> None:
    env = {"K8SJOBS_CGROUP": str(_v2(tmp_path / "cg"))}
    _, message = _run(tmp_path, MEASURE_WRAPPER, env, "true")
    words = dict(w.partition("=")[::2] for w in (split_message(message)[1] or "").split())
    assert int(words["cores"]) == len(os.sched_getaffinity(0))
    total = next(
        line for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line
    )
    assert int(words["node_mem"]) == int(total.split()[1]) * 1024
