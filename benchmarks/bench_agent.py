"""Steps per second through one allocation agent, against spawning the same process bare.

    python benchmarks/bench_agent.py                  # 2,000 steps, 1 and 2 cores
    python benchmarks/bench_agent.py --steps 500 --cores 1 2 4

Each row starts ``agent.py serve --cpu C`` in a temp dir and drives it as the driver will: a
real ``agent.py attach`` subprocess, the line protocol on its stdin and stdout, a window of
submits kept queued beyond what runs (each `exit` is acked and answered with the next
submit, no round trip between one step and the next). Every step is the script ``true`` run by
``sh`` (a step's shell and script file, as the driver sends them). Columns: steps/s from the
first submit to the last exit; CPU per step (user+system from /proc, children excluded) of the
agent's loop (its main thread), of the whole agent (with its janitor thread, which empties
acked step dirs) and of the relay (the attach process). The baseline, in the
same run: ``subprocess.run`` of ``true`` and of ``sh script`` one after another. Floor
(ALLOCATIONS-SPEC "Speed"): >= 150 steps/s with 1 core; the agent's CPU per step well under 1 ms.
"""

from __future__ import annotations

import argparse
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from k8sjobs.allocations import agent as agent_module
from k8sjobs.allocations.protocol import decode_event, encode

AGENT = Path(agent_module.__file__)
FLOOR = 150.0
WINDOW = 64
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """Return the user+system CPU seconds of process ``pid`` (or its ``thread``), children out."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def through_agent(steps: int, cores: int) -> tuple[float, float, float, float]:
    """Return steps/s and the CPU ms per step of the agent's loop, the agent, attach."""
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        directory = Path(tmp) / "alloc"
        serve = subprocess.Popen(
            [sys.executable, str(AGENT), "serve", "--dir", str(directory), "--cpu", str(cores)],
            stderr=subprocess.DEVNULL,
        )
        attach = subprocess.Popen(
            [sys.executable, str(AGENT), "attach", "--dir", str(directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            return drive(serve.pid, attach, steps)
        finally:
            attach.kill()
            attach.wait(30)
            serve.terminate()
            serve.wait(30)


def drive(
    agent_pid: int, attach: subprocess.Popen[bytes], steps: int
) -> tuple[float, float, float, float]:
    """Run ``steps`` steps through an attached agent; return its figures."""
    assert attach.stdin is not None and attach.stdout is not None
    stdin, out = attach.stdin, attach.stdout.fileno()
    os.set_blocking(out, False)
    buffer = b""

    def events(timeout: float = 30.0) -> list[dict[str, object]]:
        nonlocal buffer
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError(f"no event from the agent in {timeout}s")
        data = os.read(out, 1 << 20)
        if not data:
            raise EOFError("the agent closed the stream")
        lines = (buffer + data).split(b"\n")
        buffer = lines.pop()
        return [dict(decode_event(line)) for line in lines]

    def send(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    def submit(i: int) -> bytes:
        op = {"op": "submit", "id": f"s{i}", "hash": "h", "script": "true\n", "shell": ["sh"]}
        return encode(op)

    send(encode({"op": "hello", "protocol": 1}))
    while not any(e["ev"] == "hello" for e in events()):
        pass
    before = (cpu_seconds(agent_pid, agent_pid), cpu_seconds(agent_pid), cpu_seconds(attach.pid))
    started = time.perf_counter()
    sent = min(WINDOW, steps)
    send(b"".join(submit(i) for i in range(sent)))
    done = 0
    while done < steps:
        batch = b""
        for event in events():
            if event["ev"] == "exit":
                if event["code"] != 0:
                    raise RuntimeError(f"a step failed: {event}")
                done += 1
                batch += encode({"op": "ack", "id": event["id"]})
                if sent < steps:
                    batch += submit(sent)
                    sent += 1
        if batch:
            send(batch)
    elapsed = time.perf_counter() - started
    after = (cpu_seconds(agent_pid, agent_pid), cpu_seconds(agent_pid), cpu_seconds(attach.pid))
    loop, agent, relay = ((b - a) * 1000 / steps for a, b in zip(before, after, strict=True))
    return steps / elapsed, loop, agent, relay


def bare(steps: int, argv: list[str]) -> float:
    """Return the steps/s of running ``argv`` with subprocess.run, one after another."""
    started = time.perf_counter()
    for _ in range(steps):
        subprocess.run(argv, check=True)
    return steps / (time.perf_counter() - started)


def main() -> int:
    """Print the table; return 1 when the 1-core figure is under the floor."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script"
        script.write_text("true\n")
        bare_true = bare(args.steps, ["true"])
        bare_sh = bare(args.steps, ["sh", str(script)])
    print(f"{args.steps} steps of `true`; load average {os.getloadavg()[0]:.2f}")
    print(
        "how                                steps/s  vs bare   CPU ms per step: loop  agent  attach"
    )
    print(f"subprocess.run(true), sequential  {bare_true:>9.0f} {bare_true / bare_sh:>7.2f}x")
    print(f"subprocess.run(sh script), seq.   {bare_sh:>9.0f} {1.0:>7.2f}x")
    failed = False
    for cores in args.cores:
        rate, loop, agent, relay = through_agent(args.steps, cores)
        name = f"agent, {cores} core{'s' if cores > 1 else ''}, via attach"
        print(
            f"{name:<33} {rate:>9.0f} {rate / bare_sh:>7.2f}x {'':>16}"
            f"{loop:>5.3f}  {agent:>5.3f}   {relay:>5.3f}"
        )
        failed = failed or (cores == 1 and rate < FLOOR)
    verdict = "under" if failed else "meets"
    print(f"floor: >= {FLOOR:.0f} steps/s with 1 core: {verdict} it")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
