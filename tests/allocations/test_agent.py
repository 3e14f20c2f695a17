"""The agent as the driver sees it: a real ``serve`` process driven through a real ``attach``.

Steps that must stay running while the test looks block on a file the test creates
(``wait_for_go``), so no test depends on how fast this machine runs them.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

from k8sjobs.allocations.protocol import MAX_LINE
from k8sjobs.allocations.protocol import encode as encode_line

from .agentproc import AGENT, Client, attached, running_agent, submit

# A step that waits for the test to say go (at most 60 s, so nothing outlives a failed test).
WAIT_FOR_GO = 'i=0; while [ ! -e "{go}" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done\n'


def wait_for_go(go: Path, then: str = "") -> str:
    """Return a script that waits until ``go`` exists, then runs ``then``."""
    return WAIT_FOR_GO.format(go=go) + then


def test_500_steps_succeed_with_their_logs_and_exit_codes(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "2") as client:
        for i in range(500):
            client.send(submit(f"s{i}", f"echo out {i}; echo err {i} >&2; exit {i % 2}"))
        exits = client.exits(500, timeout=120)
        for i in range(500):
            done = exits[f"s{i}"]
            assert done["code"] == i % 2
            assert done["reason"] == ("Completed" if i % 2 == 0 else "Error")
            assert done["log"] == f"out {i}\nerr {i}\n"
            assert done["log_bytes"] == len(done["log"])
            assert done["usage"]["wall"] >= 0 and done["usage"]["max_rss"] > 0
            assert done["started"] is not None and done["finished"] >= done["started"]


def test_a_step_exiting_3_fails_alone(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with attached(tmp_path / "a", "--cpu", "2") as client:
        client.send(submit("long", wait_for_go(go, "echo done")))
        client.send(submit("bad", "echo failing; exit 3"))
        bad = client.exit_of("bad")
        assert (bad["code"], bad["reason"]) == (3, "Error")
        assert "exited with code 3" in bad["message"]
        go.touch()
        long = client.exit_of("long")
        assert (long["code"], long["reason"], long["log"]) == (0, "Completed", "done\n")


def test_a_step_killed_by_a_signal_reports_128_plus_the_signal(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("k", "kill -KILL $$"))
        client.send(submit("s", "kill -SEGV $$"))
        assert client.exit_of("k")["code"] == 128 + signal.SIGKILL
        assert client.exit_of("s")["code"] == 128 + signal.SIGSEGV


def test_a_step_gets_its_scratch_dirs_env_and_shell(tmp_path: Path) -> None:
    script = (
        'import os\nprint(os.getcwd() == os.environ["K8SJOBS_WORKDIR"], os.environ["GREETING"])\n'
        'for v in ("K8SJOBS_WORKDIR", "K8SJOBS_INPUTS", "K8SJOBS_OUTPUTS"):\n'
        "    print(os.path.isdir(os.environ[v]), os.environ[v])\n"
    )
    with attached(tmp_path / "a", "--cpu", "1") as client:
        op = submit("p", script, shell=[sys.executable], env={"GREETING": "hi"})
        client.send(op)
        lines = client.exit_of("p")["log"].splitlines()
        step = tmp_path / "a" / "steps" / "p"
        assert lines == [
            "True hi",
            f"True {step / 'work'}",
            f"True {step / 'inputs'}",
            f"True {step / 'outputs'}",
        ]
        client.send(submit("b", "echo ${BASH_VERSION:+bash}", shell=["bash"]))
        assert client.exit_of("b")["log"] == "bash\n"
        client.send(submit("x", "true", shell=["no-such-shell-here"]))
        missing = client.exit_of("x")
        assert (missing["code"], missing["reason"]) == (None, "StartError")
        assert "no-such-shell-here" in missing["message"]


def test_what_a_step_leaves_running_ends_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("bg", f"sleep 300 & echo $! > {pidfile}; exit 0"))
        assert client.exit_of("bg")["code"] == 0
        pid = int(pidfile.read_text())
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(f"/proc/{pid}").exists(), "the step's background sleep outlived it"


def test_cancel_kills_a_running_step_and_dequeues_a_queued_one(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("run", wait_for_go(go)))
        client.send(submit("queued", "echo never"))
        client.started("run")
        client.send({"op": "cancel", "id": "queued"})
        queued = client.exit_of("queued")
        assert (queued["reason"], queued["code"], queued["started"]) == ("Cancelled", None, None)
        client.send({"op": "cancel", "id": "run"})
        run = client.exit_of("run")
        assert (run["reason"], run["code"]) == ("Cancelled", 128 + signal.SIGTERM)
        client.send({"op": "cancel", "id": "never-sent"})
        unknown = client.wait_for(lambda e: e["ev"] == "refused")
        assert unknown["ev"] == "refused" and unknown["reason"] == "UnknownId"


def test_walltime_kills_with_deadline_exceeded(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "1") as client:
        # It ignores SIGTERM: the agent's SIGKILL two seconds later ends it.
        client.send(submit("slow", "trap '' TERM; echo going; sleep 60", walltime=0.5))
        slow = client.exit_of("slow")
        assert slow["reason"] == "DeadlineExceeded"
        assert slow["code"] == 128 + signal.SIGKILL
        assert "walltime of 0.5s" in slow["message"]
        assert slow["log"] == "going\n"
        assert 2.0 <= slow["finished"] - (slow["started"] or 0) < 20


def test_reattach_reports_everything_once_per_client_and_keeps_steps_running(
    tmp_path: Path,
) -> None:
    go, go2 = tmp_path / "go", tmp_path / "go2"
    with running_agent(tmp_path / "a", "--cpu", "2") as agent:
        first = agent.client()
        first.hello()
        first.send(submit("done-before", "echo early"))
        first.send(submit("running", wait_for_go(go, "echo late")))
        first.exit_of("done-before")  # seen by the first client, never acked
        first.started("running")
        first.send(submit("done-unseen", wait_for_go(go2, "echo unseen")))
        first.started("done-unseen")
        first.kill()  # the stream is cut; "done-unseen" ends with no client to tell
        go2.touch()

        second = agent.client()
        hello = second.hello()
        assert hello["ev"] == "hello" and "running" in hello["running"]
        replay = second.exits(2)
        assert set(replay) == {"done-before", "done-unseen"}
        assert replay["done-before"]["log"] == "early\n"
        second.wait_for(lambda e: e["ev"] == "started" and e["id"] == "running")
        second.send({"op": "ack", "id": "done-before"})
        second.send({"op": "hello", "protocol": 1})  # a second hello replays nothing again
        second.wait_for(lambda e: e["ev"] == "hello")
        go.touch()
        assert second.exit_of("running")["log"] == "late\n"
        second.send({"op": "logs", "id": "running", "tail": None})
        second.wait_for(lambda e: e["ev"] == "logs")
        exits = [e["id"] for e in second.events if e["ev"] == "exit"]
        assert sorted(exits) == ["done-before", "done-unseen", "running"]

        third = agent.client()  # "second" is replaced; acked results are gone for good
        third.hello()
        assert set(third.exits(2)) == {"done-unseen", "running"}
        assert second.close() == 0
        third.send({"op": "hello", "protocol": 1})
        third.wait_for(lambda e: e["ev"] == "hello")
        assert [e["id"] for e in third.events if e["ev"] == "exit"].count("running") == 1


def test_a_replay_larger_than_the_outbox_bound_reaches_a_new_client(tmp_path: Path) -> None:
    # 1,100 kept exits of 64 KiB of log each: 70 MB, more than a client may leave unread.
    count, script = 1100, "head -c 65536 /dev/zero | tr '\\0' x"
    with running_agent(tmp_path / "a", "--cpu", "2") as agent:
        first = agent.hello_client()
        for i in range(count):
            first.send(submit(f"s{i}", script))
        assert all(e["log_bytes"] == 65536 for e in first.exits(count, timeout=120).values())
        first.kill()
        second = agent.hello_client()
        assert len(second.exits(count, timeout=120)) == count


def test_ack_removes_the_scratch_dir(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("s", "echo x > $K8SJOBS_OUTPUTS/f; echo y > left-behind"))
        client.exit_of("s")
        step = tmp_path / "a" / "steps" / "s"
        assert (step / "outputs" / "f").exists()
        client.send({"op": "ack", "id": "s"})
        client.send({"op": "logs", "id": "s", "tail": None})  # answered after the ack ran
        refused = client.wait_for(lambda e: e["ev"] == "refused")
        assert refused["ev"] == "refused" and refused["reason"] == "UnknownId"
        assert not step.exists()


def test_every_step_starts_in_empty_dirs_though_acked_ones_are_reused(tmp_path: Path) -> None:
    # Lists what the step finds (headers and blank lines of ls left out), then litters.
    script = (
        'ls -A "$K8SJOBS_WORKDIR" "$K8SJOBS_INPUTS" "$K8SJOBS_OUTPUTS" | grep -v "^/" | grep .\n'
        "ls -A .. | grep -v -x -e script -e log -e work -e inputs -e outputs\n"
        "mkdir -p d/e; echo junk > d/e/f; echo x > $K8SJOBS_OUTPUTS/o; touch ../extra\n"
        "echo y > $K8SJOBS_INPUTS/i; exit 0\n"
    )
    with attached(tmp_path / "a", "--cpu", "1") as client:
        for i in range(30):
            client.send(submit(f"s{i}", script))
            done = client.exit_of(f"s{i}")
            assert (done["code"], done["log"]) == (0, ""), f"step {i} found {done['log']!r}"
            client.send({"op": "ack", "id": f"s{i}"})


def test_submit_is_idempotent_by_id_and_hash(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("s", "echo once >> $K8SJOBS_WORKDIR/../../../count"))
        client.exit_of("s")
        client.send(submit("s", "echo once >> $K8SJOBS_WORKDIR/../../../count"))
        assert client.exit_of("s")["code"] == 0  # the kept result again, not a second run
        client.send(submit("s", "echo other", hash="h2"))
        refused = client.wait_for(lambda e: e["ev"] == "refused")
        assert refused["ev"] == "refused" and refused["reason"] == "IdInUse"
        assert (tmp_path / "a" / "count").read_text() == "once\n"
        client.send({"op": "ack", "id": "s"})
        client.send(submit("s", "echo again", hash="h2"))  # an acked id may be used again
        assert client.exit_of("s")["log"] == "again\n"


def test_a_step_that_does_not_fit_is_refused_with_the_reason(tmp_path: Path) -> None:
    resources = ("--cpu", "1", "--memory", "1000", "--gpus", "1")
    with attached(tmp_path / "a", *resources) as client:
        client.send(submit("big", "true", cpu=2, memory=2000, gpus=2))
        refused = client.wait_for(lambda e: e["ev"] == "refused")
        assert refused["ev"] == "refused" and refused["reason"] == "DoesNotFit"
        for words in ("cpu 2 cores (the pod has 1)", "memory 2000", "gpus 2"):
            assert words in refused["message"]
        client.send(submit("fits", "true", cpu=0.5, memory=1000, gpus=1))
        assert client.exit_of("fits")["reason"] == "Completed"


def test_steps_are_packed_fifo_into_the_cores(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with attached(tmp_path / "a", "--cpu", "2") as client:
        client.send(submit("a", wait_for_go(go), cpu=1))
        client.send(submit("b", wait_for_go(go), cpu=0.5))
        client.send(submit("c", "true", cpu=1))  # does not fit beside a and b: waits
        client.send(submit("d", "true", cpu=0.5))  # would fit, but never jumps the queue
        for step_id in ("a", "b"):
            client.started(step_id)
        hello = client.hello()
        assert hello["ev"] == "hello"
        assert (hello["running"], hello["queued"]) == (["a", "b"], ["c", "d"])
        assert hello["free"] == {"cpu": 0.5, "memory": 0, "gpus": 0}
        go.touch()
        assert set(client.exits(4)) == {"a", "b", "c", "d"}


def test_gpus_are_pinned_each_step_its_own(tmp_path: Path) -> None:
    go = tmp_path / "go"
    show = 'echo "$CUDA_VISIBLE_DEVICES/$NVIDIA_VISIBLE_DEVICES"'
    with attached(tmp_path / "a", "--cpu", "4", "--gpus", "2") as client:
        client.send(submit("g1", wait_for_go(go, show), gpus=1))
        client.send(submit("g2", wait_for_go(go, show), gpus=1))
        client.send(submit("none", show))
        assert sorted(client.started(i)["gpus"] for i in ("g1", "g2")) == [[0], [1]]
        assert client.exit_of("none")["log"] == "/void\n"  # a step without GPUs sees none
        go.touch()
        logs = {client.exit_of(i)["log"] for i in ("g1", "g2")}
        assert logs == {"0/0\n", "1/1\n"}


def test_pull_and_push_run_around_the_script(tmp_path: Path) -> None:
    pull = {"argv": ["sh", "-c", 'echo pulled > "$K8SJOBS_INPUTS/in"'], "env": {}}
    push = {
        "argv": ["sh", "-c", 'echo pushing; echo "{\\"out\\": \\"$REF\\"}"'],
        "env": {"REF": "registry/x@sha256:1"},
    }
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("ok", 'cat "$K8SJOBS_INPUTS/in"', pull=pull, push=push))
        ok = client.exit_of("ok")
        assert (ok["reason"], ok["code"], ok["log"]) == ("Completed", 0, "pulled\n")
        assert ok["pushed"] == {"out": "registry/x@sha256:1"}

        marker = tmp_path / "pushed"
        touch = {"argv": ["touch", str(marker)], "env": {}}
        client.send(submit("fails", "exit 1", pull=pull, push=touch))
        assert client.exit_of("fails")["reason"] == "Error"
        assert not marker.exists()  # push only after exit 0

        bad = {"argv": ["sh", "-c", "echo registry unreachable >&2; exit 4"], "env": {}}
        client.send(submit("nopull", "echo ran", pull=bad))
        nopull = client.exit_of("nopull")
        assert (nopull["reason"], nopull["code"], nopull["log"]) == ("HandoffFailed", None, "")
        assert "pull command exited with code 4: registry unreachable" in nopull["message"]
        client.send(submit("nopush", "echo ran", push=bad))
        nopush = client.exit_of("nopush")
        assert (nopush["reason"], nopush["code"], nopush["log"]) == ("HandoffFailed", 0, "ran\n")
        assert "push command exited with code 4" in nopush["message"]


def test_logs_of_a_running_step_and_the_tail_of_a_long_log(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with attached(tmp_path / "a", "--cpu", "1") as client:
        client.send(submit("r", "echo one; echo two; echo three; " + wait_for_go(go)))
        client.wait_for(lambda e: e["ev"] == "started")
        deadline = time.monotonic() + 30
        data = ""
        while data != "two\nthree\n" and time.monotonic() < deadline:
            client.send({"op": "logs", "id": "r", "tail": 2})
            answer = client.wait_for(lambda e: e["ev"] == "logs")
            data = answer["data"] if answer["ev"] == "logs" else ""
        assert data == "two\nthree\n"
        go.touch()
        client.exit_of("r")
        client.send(submit("big", "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done"))
        big = client.exit_of("big")
        assert big["log_bytes"] == sum(len(f"line {i}\n") for i in range(20000))
        first, rest = big["log"].split("\n", 1)
        assert first.startswith("[k8sjobs: ") and first.endswith(" earlier bytes not shown]")
        hidden = int(first.split()[1])
        assert hidden + len(rest) == big["log_bytes"] and len(rest) <= 64 << 10
        assert rest.endswith("line 19999\n") and rest.startswith("line ")


def test_malformed_lines_are_answered_with_error_and_survived(tmp_path: Path) -> None:
    with running_agent(tmp_path / "a", "--cpu", "1") as agent:
        client = agent.client()
        client.send({"op": "submit", "id": "early"})
        early = client.wait_for(lambda e: e["ev"] in ("error", "refused"))
        assert early["ev"] == "refused" and early["reason"] == "Invalid"
        client.send({"op": "ack", "id": "x"})
        first = client.wait_for(lambda e: e["ev"] == "error")
        assert first["ev"] == "error" and "hello" in first["message"]
        client.hello()
        for bad in (b"not json", b"[1]", b'{"op": "dance"}', b"\xff\xfe", b'{"op":"ack"}'):
            client.send_bytes(bad + b"\n")
            error = client.wait_for(lambda e: e["ev"] == "error")
            assert error["ev"] == "error" and error["message"]
        client.send(submit("bad-cpu", "true", cpu=-1))
        refused = client.wait_for(lambda e: e["ev"] == "refused")
        assert refused["ev"] == "refused" and 'field "cpu"' in refused["message"]
        client.send_bytes(b"x" * (MAX_LINE + 10) + b"\n")
        over = client.wait_for(lambda e: e["ev"] == "error")
        assert over["ev"] == "error" and "bound" in over["message"]
        client.send(submit("after", "echo alive"))
        assert client.exit_of("after")["log"] == "alive\n"


def test_idle_timeout_ends_the_agent(tmp_path: Path) -> None:
    with running_agent(tmp_path / "a", "--cpu", "1", "--idle-timeout", "1") as agent:
        client = agent.hello_client()
        client.send(submit("s", "sleep 1.5"))
        client.exit_of("s")  # a running step is not idle: the agent outlived its 1 s
        started = time.monotonic()
        assert agent.wait() == 0
        assert time.monotonic() - started >= 0.5
        assert not (tmp_path / "a" / "agent.sock").exists()


def test_max_lifetime_refuses_new_steps_and_exits_once_the_running_end(tmp_path: Path) -> None:
    go = tmp_path / "go"
    args = ("--cpu", "1", "--max-lifetime", "1", "--heartbeat", "0.2")
    with running_agent(tmp_path / "a", *args) as agent:
        client = agent.hello_client()
        client.send(submit("running", wait_for_go(go, "echo finished")))
        client.send(submit("queued", "true"))
        queued = client.exit_of("queued")  # never started: lost, so the driver retries it
        assert (queued["reason"], queued["started"]) == ("Lost", None)
        client.send(submit("new", "true"))
        refused = client.wait_for(lambda e: e["ev"] == "refused")
        assert refused["ev"] == "refused" and refused["reason"] == "MaxLifetime"
        assert agent.proc.poll() is None
        # Draining, it waits for the running step without spinning: two seconds of
        # heartbeats cost it a few milliseconds (a spinning loop takes a core, or its share).
        cpu = cpu_seconds(agent.proc.pid)
        for _ in range(10):
            client.wait_for(lambda e: e["ev"] == "heartbeat")
        assert cpu_seconds(agent.proc.pid) - cpu < 0.1
        go.touch()
        assert client.exit_of("running")["reason"] == "Completed"
        client.send({"op": "ack", "id": "running"})
        client.send({"op": "ack", "id": "queued"})
        assert agent.wait() == 0


def cpu_seconds(pid: int) -> float:
    """Return the user+system CPU seconds process ``pid`` has used (its children out)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes_with(marker: str) -> list[int]:
    """Return the pids of this user's processes whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in environ:
                found.append(int(entry))
    return found


def test_sigterm_kills_every_child_and_exits_143(tmp_path: Path) -> None:
    marker = f"K8SJOBS_TEST_MARKER={uuid.uuid4()}"
    key, value = marker.split("=")
    go = tmp_path / "go"
    with running_agent(tmp_path / "a", "--cpu", "3") as agent:
        client = agent.hello_client()
        env = {key: value}
        client.send(submit("bg", f"sleep 300 & touch {go}-bg; wait", env=env))
        client.send(submit("fg", f"trap '' TERM; touch {go}-fg; sleep 300", env=env))
        # One that leaves its session: only the agent, as subreaper, can still find it.
        escape = f"setsid sh -c 'touch {go}-es; sleep 300' & sleep 300"
        client.send(submit("escape", escape, env=env))
        deadline = time.monotonic() + 30
        while not all(Path(f"{go}-{s}").exists() for s in ("bg", "fg", "es")):
            assert time.monotonic() < deadline, "the steps did not start"
            time.sleep(0.01)
        assert len(processes_with(marker)) >= 6
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.wait() == 143
        assert processes_with(marker) == []


def test_arbitrary_bytes_never_crash_the_agent(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    with running_agent(tmp_path / "a", "--cpu", "1") as agent:
        client = agent.hello_client()

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.binary(max_size=2000) | st.text(max_size=500).map(str.encode))
        def check(data: bytes) -> None:
            client.send_bytes(data + b'\n{"op":"hello","protocol":1}\n')
            client.wait_for(lambda e: e["ev"] == "hello")

        check()
        client.send(submit("after", "echo alive"))
        assert client.exit_of("after")["log"] == "alive\n"
        assert agent.proc.poll() is None


def test_attach_without_an_agent_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(AGENT), "attach", "--dir", str(tmp_path), "--wait", "0.2"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no agent answers" in done.stderr


def test_attach_exits_0_when_stdin_closes(tmp_path: Path) -> None:
    with running_agent(tmp_path / "a", "--cpu", "1") as agent:
        client = Client(agent.dir)
        client.hello()
        assert client.close() == 0


def test_heartbeats_come_every_interval(tmp_path: Path) -> None:
    with attached(tmp_path / "a", "--cpu", "1", "--heartbeat", "0.2") as client:
        beats = [client.wait_for(lambda e: e["ev"] == "heartbeat") for _ in range(2)]
        assert all(b["ev"] == "heartbeat" and b["running"] == 0 for b in beats)


def test_the_agent_is_one_stdlib_file_for_python_3_9() -> None:
    source = AGENT.read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "agent.py must run alone: no relative import"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    # 3.10+ only: match, dataclass(slots=...), zip(strict=...).
    for node in ast.walk(tree):
        assert not isinstance(node, ast.Match)
        if isinstance(node, ast.keyword):
            assert node.arg not in ("strict", "slots", "kw_only"), ast.unparse(node)
    json.dumps(source)  # plain text, shippable in a ConfigMap


def test_the_agent_refuses_steps_beyond_its_bounds(tmp_path: Path) -> None:
    # In process: filling a queue of 100,000 steps through a pipe would only test the pipe.
    from collections import deque

    from k8sjobs.allocations import agent as agent_module
    from k8sjobs.allocations.protocol import decode_op

    agent = agent_module.Agent(str(tmp_path), cpu=1, memory=0, gpus=0)
    op = decode_op(encode_line(submit("s", "true")))
    assert op["op"] == "submit"
    assert agent._refusal(op) is None
    agent.queue = deque([cast(Any, None)] * agent_module.MAX_QUEUED)
    refusal = agent._refusal(op)
    assert refusal is not None and refusal[0] == "QueueFull" and "100000 steps wait" in refusal[1]
    agent.queue.clear()
    agent.finished = dict.fromkeys(map(str, range(agent_module.MAX_UNACKED)), cast(Any, None))
    refusal = agent._refusal(op)
    assert refusal is not None and refusal[0] == "QueueFull" and "not acked" in refusal[1]
