"""Exit-code rules, step events, outputs on failure and handoff logs on the local backend."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from k8sjobs import Session, Step, StepState
from k8sjobs.local import LocalBackend


def _session(tmp_path: Path) -> Session:
    return Session(study="pol", backend=LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5))


async def test_fail_on_exit_codes_is_not_retried(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        handle = await s.submit(
            Step(name="bad", script="exit 42", shell="sh", retries=3, fail_on_exit_codes=[42])
        )
        result = await handle.wait(30)
    assert (result.state, result.reason, result.exit_code) == (
        StepState.FAILED,
        "PodFailurePolicy",
        42,
    )
    assert result.message.startswith("exit code 42 is in fail_on_exit_codes [42]")
    assert len(result.pods) == 1
    assert [(e.reason, e.action) for e in handle.events] == [("ExitCode", "FailJob")]


async def test_retry_on_exit_codes_spends_retries_on_those_only(tmp_path: Path) -> None:
    script = (
        'n=$(cat count 2>/dev/null || echo 0); echo $((n+1)) > count; [ "$n" -ge 2 ] || exit 75'
    )
    async with _session(tmp_path) as s:
        flaky = Step(
            name="flaky",
            script=f"cd {tmp_path} && {script}",
            shell="sh",
            retries=2,
            retry_on_exit_codes=[75],
        )
        other = Step(name="other", script="exit 3", shell="sh", retries=2, retry_on_exit_codes=[75])
        flaky_h, other_h = await s.submit(flaky), await s.submit(other)
        ok, bad = await flaky_h.wait(30), await other_h.wait(30)
    assert ok.ok and len(ok.pods) == 3
    assert [(e.reason, e.action) for e in flaky_h.events] == [("ExitCode", "Count")] * 2
    assert (bad.reason, len(bad.pods)) == ("PodFailurePolicy", 1)
    assert bad.message.startswith("exit code 3 is not in retry_on_exit_codes [75]")


async def test_events_reach_a_handle_attached_from_another_session(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        await (await s.submit(Step(name="bad", script="exit 5", shell="sh", retries=1))).wait(30)
    async with _session(tmp_path) as s:
        (handle,) = await s.attach("pol")
    assert [e.reason for e in handle.events] == ["ExitCode", "ExitCode"]
    assert "the script exited with code 5" in handle.events[0].describe()


async def test_push_outputs_always_pushes_a_failed_step_apart(tmp_path: Path) -> None:
    script = "mkdir -p out && echo partial > out/state.txt && exit 9"
    async with _session(tmp_path) as s:
        failed = Step(
            name="sim",
            script=script,
            shell="sh",
            outputs={"state": "out"},
            push_outputs="always",
        )
        consumer = Step(name="use", script="true", shell="sh", inputs={"s": failed.output("state")})
        handle = await s.submit(failed)
        use = await s.submit(consumer)
        result, used = await handle.wait(30), await use.wait(30)
        push_log = await handle.logs(container="k8sjobs-push")
    assert (result.state, result.exit_code) == (StepState.FAILED, 9)
    assert "/sim-" in result.outputs["state"] and "/failed@sha256:" in result.outputs["state"]
    assert "pushing as failed" in push_log
    assert (used.state, used.reason) == (StepState.FAILED, "DependencyFailed")


async def test_logs_reach_the_handoff_containers(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        make = Step(name="make", script="echo hi > f", shell="sh", outputs={"f": "f"})
        use = Step(
            name="use", script="cat $K8SJOBS_INPUTS/f/f", shell="sh", inputs={"f": make.output("f")}
        )
        await (await s.submit(make)).wait(30)
        handle = await s.submit(use)
        assert (await handle.wait(30)).ok
        pull = await handle.logs(container="k8sjobs-pull")
        main = await handle.logs()
    assert "sha256:" in pull
    assert main == "hi\n"


def _nothing_listens() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("handoff", ["in-process", "subprocess"])
async def test_a_failed_push_says_why_in_the_steps_own_message(
    tmp_path: Path, handoff: str
) -> None:
    """The push container's one-line error reaches the step's message through its
    termination message (no log read): here, a registry nothing listens on."""
    store = f"{_nothing_listens()}/x"
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5, handoff=handoff)
    async with Session(study="pol", backend=backend, store=store, plain_http=True) as s:
        handle = await s.submit(
            Step(name="out", script="echo hi > o.txt", shell="sh", outputs={"o": "o.txt"})
        )
        result = await handle.wait(120)
    assert (result.state, result.reason) == (StepState.FAILED, "OutputPushFailed")
    said = "the step exited 0 but pushing its outputs failed with exit code 1: "
    assert result.message.startswith(said), result.message
    assert f"{store}/" in result.message and "cannot connect" in result.message
