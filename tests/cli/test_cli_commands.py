"""The ``k8sjobs`` command, run as a subprocess the way a person runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ..waiting import wait_until_sync

EXAMPLES = Path(__file__).parents[2] / "examples"
PIPELINE = EXAMPLES / "pipeline" / "study.yaml"
# A unique word in every process the sleeping study starts, found again with pgrep -f.
MARKER = f"k8sjobs-cli-test-{os.getpid()}"

SLEEPY = f"""
name: sleepy
steps:
  - name: first
    script: echo started; bash -c 'sleep 30; true' {MARKER}
  - name: second
    script: bash -c 'sleep 30; true' {MARKER}
  - name: third
    depends: [first]
    script: echo never
"""

FAILING = """
name: mixed
steps:
  - name: good
    script: echo fine
  - name: bad
    script: echo about to fail; exit 7
  - name: after-bad
    depends: [bad]
    script: echo never
"""


def k8sjobs(
    cwd: Path, *args: str, check: int | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``k8sjobs ARGS`` in ``cwd`` (stdout a pipe: not a terminal); check the exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check is not None:
        assert done.returncode == check, done.stdout + done.stderr
    return done


def start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "k8sjobs.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def study_file(folder: Path, text: str) -> Path:
    path = folder / "study.yaml"
    path.write_text(text)
    return path


def marked_processes() -> list[str]:
    found = subprocess.run(["pgrep", "-f", MARKER], capture_output=True, text=True)
    return found.stdout.split()


@pytest.fixture
def sleepy_run(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A `k8sjobs run` of two 30 s steps, started and seen running; killed if a test fails."""
    study_file(tmp_path, SLEEPY)
    process = start(tmp_path, "run", "study.yaml")
    try:
        wait_until_sync(lambda: len(marked_processes()) == 2, "both sleepers run")
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # it did not stop: never leave the driver behind
                process.kill()
                process.communicate()
                raise
        for pid in marked_processes():  # never leave a sleeper behind, even on failure
            os.kill(int(pid), signal.SIGKILL)


# --- run ----------------------------------------------------------------------------------


def test_run_pipeline_example_succeeds(tmp_path: Path) -> None:
    done = k8sjobs(tmp_path, "run", str(PIPELINE), check=0)
    assert "5 steps in" in done.stdout and "5 succeeded" in done.stdout
    assert k8sjobs(tmp_path, "logs", "--study", "pipeline", "aggregate", check=0).stdout.startswith(
        "rows=3000 mean_square="
    )


def test_run_failing_step_exits_1_and_says_which_and_why(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    done = k8sjobs(tmp_path, "run", "study.yaml", check=1)
    lines = done.stdout.splitlines()
    # Not a terminal: one plain line per change, no live table, no escape codes.
    assert "\x1b[" not in done.stdout
    # Each end says how long the step took, with a fraction of a second (it took under a minute).
    took = r"(\d+ms|\d+\.\d+s)"
    # ... and what it used: "; cpu 3ms, mem 7.4Mi peak, wall 5ms".
    used = rf"; cpu {took}, mem [\d.]+\w+ peak, wall {took}"
    assert any(
        re.search(rf"good: SUCCEEDED in {took} \(Completed\){used}$", line) for line in lines
    )
    assert "3 steps in" in done.stdout and "1 succeeded, 2 failed" in done.stdout
    summary = lines[lines.index("") + 2 :]
    assert re.match(rf"  bad: FAILED after {took} \(the script exited with code 7", summary[0])
    assert "; log: " in summary[0] and summary[0].endswith("step.log")
    assert summary[1] == "  after-bad: FAILED (not run: upstream bad FAILED)"


def test_run_bad_study_exits_2_with_line_and_field(tmp_path: Path) -> None:
    study_file(tmp_path, "name: s\nsteps:\n  - name: a\n    script: echo\n    retires: 2\n")
    done = k8sjobs(tmp_path, "run", "study.yaml", check=2)
    assert done.stderr.startswith('error: study.yaml:5: step "a": retires:')
    assert 'did you mean "retries"?' in done.stderr


@pytest.mark.parametrize(
    ("content", "located"),
    [
        (b"name: s\nsteps:\n  - name: a\n    script: echo\n    depends: 1\n", "study.yaml:5"),
        (b"name: s\nsteps:\n  - name: [a]\n    script: echo\n", "study.yaml:3"),
        (b"name: s\nsteps:\n  - name: a\n    script: echo\n    inputs: [A]\n", "study.yaml:5"),
        (b"steps:\n  - name: a\n    script: echo\n    walltime: " + b"9" * 20, "study.yaml:4"),
        (b"steps:\n  - name: a\n    script: echo\n    inputs: {i: '::::'}\n", "study.yaml:4"),
        (b"steps:\n  - name: caf\xe9\n    script: echo\n", "study.yaml:2"),
        (
            b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"
            + b"".join(
                b"%c: &%c [%s]\n" % (c, c, b",".join([b"*%c" % (c - 1)] * 10))
                for c in range(ord("b"), ord("j"))
            )
            + b"steps: [{name: a, script: echo, env: {E: *i}}]\n",
            "study.yaml:6",
        ),
    ],
    ids=["depends-int", "name-list", "inputs-list", "walltime", "reference", "latin-1", "laughs"],
)
def test_bad_study_files_exit_2_with_a_location_never_a_traceback(
    tmp_path: Path, content: bytes, located: str
) -> None:
    (tmp_path / "study.yaml").write_bytes(content)
    for command in ("run", "render"):
        done = k8sjobs(tmp_path, command, "study.yaml", check=2)
        assert done.stderr.startswith(f"error: {located}: "), done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / ".k8sjobs").exists()  # refused before anything ran


def test_ctrl_c_cancels_every_step_and_exits_130(
    tmp_path: Path, sleepy_run: subprocess.Popen[str]
) -> None:
    sleepy_run.send_signal(signal.SIGINT)
    out, _ = sleepy_run.communicate(timeout=15)
    assert sleepy_run.returncode == 130
    assert marked_processes() == []
    assert "3 steps in" in out and "3 cancelled" in out
    for step in ("first", "second", "third"):
        assert f"  {step}: CANCELLED" in out
    status = k8sjobs(tmp_path, "status", "--study", "sleepy", check=1).stdout
    # "third" never started: its row comes from the run's record, CANCELLED before it started
    assert status.count("CANCELLED") == 3 and "stopped before it ended" in status


# --- status, logs, cancel from another process --------------------------------------------


def test_status_logs_and_cancel_from_a_second_process(
    tmp_path: Path, sleepy_run: subprocess.Popen[str]
) -> None:
    status = k8sjobs(tmp_path, "status", "--study", "sleepy", check=1).stdout
    assert [line.split()[:3] for line in status.splitlines()[2:]] == [
        ["first", "│", "RUNNING"],
        ["second", "│", "RUNNING"],
        ["third", "│", "PENDING"],  # from the run's journal: it waits for first
        ["a", "run", "is"],  # going: a live run says so, "so far: 2 ran, 1 waiting"
    ]
    assert "so far: 2 ran, 1 waiting" in status
    assert status.count("RUNNING") == 2
    # A running step shows its time so far, with a fraction under a minute.
    assert len(re.findall(r"RUNNING\s+│\s+(\d+ms|\d+\.\d+s)\s+│", status)) == 2, status
    wait_until_sync(lambda: k8sjobs(tmp_path, "logs", "--study", "sleepy", "first").stdout)
    assert k8sjobs(tmp_path, "logs", "--study", "sleepy", "first", check=0).stdout == "started\n"
    cancel = k8sjobs(tmp_path, "cancel", "--study", "sleepy", check=0).stdout
    assert sorted(cancel.splitlines()) == ["first: cancelled", "second: cancelled"]
    out, _ = sleepy_run.communicate(timeout=15)
    assert sleepy_run.returncode == 1
    assert marked_processes() == []
    assert re.search(r"  first: CANCELLED after \S+ \(cancelled from another process\)", out)
    assert "  third: FAILED (not run: upstream first CANCELLED)" in out
    # After the run: the records stay, and cancel has nothing left to do.
    after = k8sjobs(tmp_path, "status", "--study", "sleepy", check=1).stdout
    assert after.count("CANCELLED") == 3  # first, second, and third's "upstream first CANCELLED"
    nothing = k8sjobs(tmp_path, "cancel", "--study", "sleepy", check=0).stdout
    assert nothing == 'study "sleepy": nothing running to cancel\n'


def test_status_and_logs_after_a_run(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    status = k8sjobs(tmp_path, "status", "--study", "mixed", check=1).stdout
    assert "SUCCEEDED" in status and "the script exited with code 7" in status
    assert k8sjobs(tmp_path, "status", "--study", "mixed", "good", check=0)
    logs = k8sjobs(tmp_path, "logs", "--study", "mixed", "bad", check=0)
    assert logs.stdout == "about to fail\n"
    missing = k8sjobs(tmp_path, "logs", "--study", "mixed", "nope", check=1)
    assert 'has no step "nope" (steps: after-bad, bad, good)' in missing.stderr
    assert k8sjobs(tmp_path, "status", "--study", "other", check=1).stderr == (
        'no study "other" in .k8sjobs; run it first (k8sjobs run STUDY.yaml)\n'
    )


def test_state_dir_option_keeps_everything_there(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "--state-dir", "elsewhere", "run", "study.yaml", check=1)
    assert not (tmp_path / ".k8sjobs").exists()
    assert {p.name for p in (tmp_path / "elsewhere").iterdir()} >= {"steps", "pods", "runs"}
    k8sjobs(tmp_path, "--state-dir", "elsewhere", "status", "--study", "mixed", check=1)


# --- render and report --------------------------------------------------------------------


def test_render_prints_yaml_that_validates(tmp_path: Path) -> None:
    registry = ["--registry", "registry.example:5000/k8sjobs"]
    done = k8sjobs(tmp_path, "render", str(PIPELINE), *registry, "--unordered", check=0)
    documents = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [d["kind"] for d in documents] == ["ConfigMap", "Job"] * 5
    for document in documents:
        kubernetes_validate.validate(document, "1.30", strict=True)
    jobs = [d for d in documents if d["kind"] == "Job"]
    assert jobs[1]["metadata"]["name"].startswith("pipeline-transform-shard-0-")


def test_render_of_a_study_with_dependencies_makes_its_pulls_wait(tmp_path: Path) -> None:
    """kubectl apply starts every Job at once (issue 28 item 12): render sets the pull's wait
    for its inputs (1 h unless --wait-inputs), so a consumer waits for its producer's push."""
    registry = ["--registry", "registry.example:5000/k8sjobs"]
    done = k8sjobs(tmp_path, "render", str(PIPELINE), *registry, check=0)
    waits = _waits(done.stdout)
    assert waits[()] is None  # produce pulls nothing
    assert set(waits.values()) == {None, 3600.0}
    shorter = k8sjobs(tmp_path, "render", str(PIPELINE), *registry, "--wait-inputs", "1h30m")
    assert set(_waits(shorter.stdout).values()) == {None, 5400.0}


def _waits(rendered: str) -> dict[tuple[str, ...], object]:
    """Return each rendered handoff config's wait_inputs, by the names of its inputs."""
    configs = [
        json.loads(d["data"]["handoff.json"])
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap"
    ]
    return {tuple(c["inputs"]): c.get("wait_inputs") for c in configs}


def test_render_refuses_what_a_waiting_pull_cannot_order(tmp_path: Path) -> None:
    """A step that waits for one it takes no input from (depends: only), or any dependency
    with --wait-inputs 0, would start too early: refused, naming the step and what to use."""
    registry = ["--registry", "registry.example:5000/k8sjobs"]
    done = k8sjobs(tmp_path, "render", str(PIPELINE), *registry, "--wait-inputs", "0", check=2)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert 'step "transform[SHARD=0]"' in done.stderr and "waits for produce" in done.stderr
    assert "k8sjobs run --backend kubernetes" in done.stderr and "--unordered" in done.stderr
    study_file(
        tmp_path,
        "name: s\nsteps:\n  - {name: a, script: 'true'}\n"
        "  - {name: b, script: 'true', depends: [a]}\n",
    )
    order = k8sjobs(tmp_path, "render", "study.yaml", *registry, check=2)
    assert 'step "b"' in order.stderr and "it takes none from them" in order.stderr
    assert k8sjobs(tmp_path, "render", "study.yaml", *registry, "--unordered", check=0).stdout
    bad = k8sjobs(tmp_path, "render", "study.yaml", "--wait-inputs", "soon", check=2)
    assert "--wait-inputs" in bad.stderr and bad.stderr.count("\n") == 1


def test_render_plain_http_reaches_the_pods_handoff(tmp_path: Path) -> None:
    step = tmp_path / "step.yaml"
    step.write_text("name: a\nscript: echo > o\noutputs: {o: o}\n")
    registry = ["--registry", "127.0.0.1:5000/k8sjobs"]
    plain = k8sjobs(tmp_path, "render", "step.yaml", *registry, "--plain-http", check=0)
    tls = k8sjobs(tmp_path, "render", "step.yaml", *registry, check=0)
    assert '"plain_http": true' in plain.stdout and '"plain_http": true' not in tls.stdout


def test_render_one_step_file(tmp_path: Path) -> None:
    (tmp_path / "step.yaml").write_text("name: solo\nscript: echo hi\n")
    done = k8sjobs(tmp_path, "render", "step.yaml", "--namespace", "lab", check=0)
    job = next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Job")
    assert job["metadata"]["namespace"] == "lab"


def test_report_without_a_run_exits_1(tmp_path: Path) -> None:
    done = k8sjobs(tmp_path, "report", "nothing", check=1)
    assert 'no recorded run of study "nothing"' in done.stderr


def test_rerun_adopts_succeeded_steps_and_runs_a_changed_one(tmp_path: Path) -> None:
    count = tmp_path / "count"
    study_file(tmp_path, f"name: again\nsteps:\n  - name: a\n    script: echo x >> {count}\n")
    k8sjobs(tmp_path, "run", "study.yaml", check=0)
    again = k8sjobs(tmp_path, "run", "study.yaml", check=0)
    assert count.read_text() == "x\n"  # adopted, not rerun
    assert "a: SUCCEEDED" in again.stdout and "(adopted" in again.stdout, again.stdout
    assert "1 adopted" in again.stdout, again.stdout
    study_file(tmp_path, f"name: again\nsteps:\n  - name: a\n    script: echo y >> {count}\n")
    k8sjobs(tmp_path, "run", "study.yaml", check=0)  # no SpecMismatch: the old run ended
    assert count.read_text() == "x\ny\n"


RETRIED = """\
name: retried
steps:
  - name: flaky
    shell: sh
    retries: 2
    fail_on_exit_codes: [42]
    script: |
      n=$(cat ../count 2>/dev/null || echo 0); echo $((n+1)) > ../count
      [ "$n" -ge 1 ] || exit 3
      exit 42
"""


def test_status_prints_each_retry_and_the_rule_that_ended_the_step(tmp_path: Path) -> None:
    study_file(tmp_path, RETRIED.replace("../count", str(tmp_path / "count")))
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    status = k8sjobs(tmp_path, "status", "--study", "retried", check=1).stdout
    lines = [line.strip() for line in status.splitlines() if line.startswith("  flaky:")]
    assert len(lines) == 2
    assert "the script exited with code 3 (counted against retries)" in lines[0]
    assert "the script exited with code 42 (the step fails)" in lines[1]
    assert "fail_on_exit_codes" in status


def test_rerun_runs_the_named_steps_and_their_dependents_and_no_cache_runs_all(
    tmp_path: Path,
) -> None:
    count = tmp_path / "count"
    steps = "".join(
        f"  - name: {name}\n    script: echo {name} >> {count}; echo {name} > out.txt\n"
        f"    outputs: {{out: out.txt}}\n" + (f"    inputs: {{up: {up}.out}}\n" if up else "")
        for name, up in (("a", None), ("b", "a"), ("c", None))
    )
    study_file(tmp_path, f"name: reruns\nsteps:\n{steps}")

    def ran() -> list[str]:
        return count.read_text().split()

    k8sjobs(tmp_path, "run", "study.yaml", check=0)
    again = k8sjobs(tmp_path, "run", "study.yaml", check=0)
    assert sorted(ran()) == ["a", "b", "c"]  # the second run reused all three
    assert "3 reused" in again.stdout, again.stdout
    shown = k8sjobs(tmp_path, "status", "study.yaml", check=0).stdout
    assert "last run: 3 reused" in shown, shown
    as_json = json.loads(k8sjobs(tmp_path, "status", "study.yaml", "-o", "json", check=0).stdout)
    assert {s["name"]: s["origin"] for s in as_json["steps"]} == dict.fromkeys("abc", "reused")
    rerun = k8sjobs(tmp_path, "run", "study.yaml", "--rerun", "a", check=0)
    assert sorted(ran()) == ["a", "a", "b", "b", "c"]  # a and its dependent b
    assert "2 ran, 1 reused" in rerun.stdout, rerun.stdout
    assert "last run: 2 ran, 1 reused" in k8sjobs(tmp_path, "status", "study.yaml").stdout
    k8sjobs(tmp_path, "run", "study.yaml", "--rerun-all", check=0)
    assert len(ran()) == 8
    k8sjobs(tmp_path, "run", "study.yaml", "--no-cache", check=0)
    assert len(ran()) == 11
    wrong = k8sjobs(tmp_path, "run", "study.yaml", "--rerun", "aa", check=2)
    assert wrong.stderr.strip().splitlines() == [
        'error: --rerun: study "reruns" has no step "aa"; did you mean "a"?'
    ]
