"""LocalBackend through a Session: real processes, real files, no mocks."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from k8sjobs import Resources, Session, SpecMismatch, Step, StepHandle, StepState
from k8sjobs.local import LocalBackend

from ..waiting import wait_until
from .processes import alive


def local(state: Path, **options: float) -> LocalBackend:
    """Return a backend keeping its records under ``state``, quick to kill."""
    return LocalBackend(state_dir=state, kill_grace=0.5, **options)  # type: ignore[arg-type]


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    async with Session(study="unit", backend=local(tmp_path / "state")) as s:
        yield s


async def running(handle: StepHandle) -> None:
    started = asyncio.Event()
    handle.add_listener(lambda h: started.set() if h.state is StepState.RUNNING else None)
    if handle.state is not StepState.RUNNING:
        await asyncio.wait_for(started.wait(), 5)


def pids_in(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


# --- success, failure, logs ---------------------------------------------------------------


async def test_successful_step_ends_succeeded_with_exit_code_zero(session: Session) -> None:
    handle = await session.submit(Step(name="hello", script="echo hello from $K8SJOBS_WORKDIR"))
    result = await handle.wait(timeout=10)
    assert result.state is StepState.SUCCEEDED
    assert result.exit_code == 0
    assert result.log_file is not None and result.log_file.endswith("step.log")
    assert (await handle.logs()).startswith("hello from /")


async def test_exit_code_is_reported_as_failed_with_reason(session: Session) -> None:
    handle = await session.submit(Step(name="bad", script="echo oops >&2; exit 3"))
    result = await handle.wait(timeout=10)
    assert result.state is StepState.FAILED
    assert (result.reason, result.exit_code) == ("ExitCode", 3)
    assert "exited with code 3" in result.message
    assert await handle.logs() == "oops\n"


async def test_a_quick_step_keeps_its_sub_second_duration(session: Session) -> None:
    """The Job's stamps are finer than the API's whole seconds: a 0.3 s step is not "0s"."""
    result = await (await session.submit(Step(name="quick", script="true"))).wait(timeout=10)
    assert result.started_at is not None and result.finished_at is not None
    assert result.duration is not None and result.duration > 0
    assert (result.started_at.microsecond, result.finished_at.microsecond) != (0, 0)
    # However loaded the machine, the figure shown keeps its fraction.
    assert re.fullmatch(r"\d+ms|\d\.\d\ds|\d\d\.\ds", result.took()), result.took()


async def test_logs_tail_and_stream(session: Session) -> None:
    script = "for i in 1 2 3 4; do echo line $i; sleep 0.1; done"
    handle = await session.submit(Step(name="talk", script=script))
    lines = [line async for line in handle.stream_logs()]
    assert lines == ["line 1", "line 2", "line 3", "line 4"]
    assert handle.done
    assert await handle.logs(tail=2) == "line 3\nline 4\n"


async def test_python_shell_runs_the_drivers_interpreter(session: Session) -> None:
    step = Step(name="py", shell="python", script="import sys; print(sys.version_info[0])")
    handle = await session.submit(step)
    assert (await handle.wait(timeout=10)).ok
    assert await handle.logs() == "3\n"


# --- walltime, retries, nodes, cancel -----------------------------------------------------


async def test_walltime_overrun_fails_deadline_exceeded_and_kills(
    session: Session, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f"echo $$ >> {pids}; sleep 30 & echo $! >> {pids}; wait"
    handle = await session.submit(Step(name="slow", script=script, walltime="2s"))
    result = await handle.wait(timeout=30)
    assert (result.state, result.reason) == (StepState.FAILED, "DeadlineExceeded")
    assert "deadline" in result.message
    assert len(pids_in(pids)) == 2
    assert not any(alive(pid) for pid in pids_in(pids))


async def test_retry_runs_a_new_pod_after_a_failure(session: Session, tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    script = f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 1; fi"
    handle = await session.submit(Step(name="flaky", script=script, retries=1))
    result = await handle.wait(timeout=10)
    assert result.state is StepState.SUCCEEDED
    assert await handle.logs() == "second\n"


async def test_retries_exhausted_fail_with_backoff_limit(session: Session, tmp_path: Path) -> None:
    count = tmp_path / "count"
    step = Step(name="never", script=f"echo x >> {count}; exit 2", retries=2)
    handle = await session.submit(step)
    result = await handle.wait(timeout=10)
    assert (result.state, result.exit_code) == (StepState.FAILED, 2)
    assert result.message == "the script exited with code 2, after 3 attempts"
    assert count.read_text() == "x\n" * 3


async def test_two_nodes_run_two_pods_with_completion_indexes(
    session: Session, tmp_path: Path
) -> None:
    out = tmp_path / "indexes"
    out.mkdir()
    script = f"echo $HOSTNAME > {out}/$JOB_COMPLETION_INDEX"
    # launch: none, every index runs the script (launch: ssh is the launcher/worker split).
    step = Step(name="mpi", script=script, resources=Resources(nodes=2, tasks=2), launch="none")
    result = await (await session.submit(step)).wait(timeout=10)
    assert result.ok
    assert sorted(p.name for p in out.iterdir()) == ["0", "1"]
    hosts = {(out / i).read_text().strip() for i in ("0", "1")}
    assert {h.rsplit("-", 1)[1] for h in hosts} == {"0", "1"}


async def test_cancel_stops_a_running_step(session: Session, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"echo $$ >> {pids}; sleep 30 & echo $! >> {pids}; wait"
    handle = await session.submit(Step(name="sleepy", script=script))
    await running(handle)
    await wait_until(lambda: len(pids_in(pids)) == 2)
    await handle.cancel()
    result = await handle.wait(timeout=5)
    assert (result.state, result.reason) == (StepState.CANCELLED, "Cancelled")
    assert not any(alive(pid) for pid in pids_in(pids))


async def test_closing_the_backend_cancels_local_steps(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    async with Session(study="close", backend=local(tmp_path / "state")) as s:
        handle = await s.submit(Step(name="left", script=f"echo $$ > {pids}; exec sleep 30"))
        await wait_until(lambda: len(pids_in(pids)) == 1)
    assert handle.state is StepState.CANCELLED
    assert not alive(pids_in(pids)[0])


# --- the slot scheduler -------------------------------------------------------------------


def max_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """Return the most spans open at one instant."""
    events = sorted((t, d) for start, end in spans for t, d in ((start, 1), (end, -1)))
    most = current = 0
    for _, delta in events:
        current += delta
        most = max(most, current)
    return most


async def test_oversubscribed_steps_never_exceed_the_cores(tmp_path: Path) -> None:
    spans, go = tmp_path / "spans", tmp_path / "go"
    spans.mkdir()
    # Each step holds its cores until the test says go, so the first two are still running
    # when the test looks, however slow the machine.
    hold = f"until [ -e {go} ]; do sleep 0.02; done; sleep 0.2"
    script = f"s=$(date +%s.%N); {hold}; echo $s $(date +%s.%N) > {spans}/$STEP"
    async with Session(study="busy", backend=local(tmp_path / "state", cpu=2)) as s:
        handles = [
            await s.submit(Step(name=f"s{i}", script=script, env={"STEP": str(i)}))
            for i in range(4)
        ]

        def states() -> list[str]:
            return sorted(str(h.state) for h in handles)

        await wait_until(lambda: states().count("RUNNING") == 2, "two steps run")
        assert states() == ["PENDING"] * 2 + ["RUNNING"] * 2
        waiting = [h for h in handles if h.state is StepState.PENDING]
        assert {h.result.reason for h in waiting} == {"WaitingForResources"}
        go.touch()
        results = await s.gather(*handles, timeout=30)
    assert all(r.ok for r in results)
    times = [tuple(map(float, p.read_text().split())) for p in spans.iterdir()]
    assert len(times) == 4
    assert max_overlap((a, b) for a, b in times) == 2


async def test_impossible_request_fails_unschedulable(tmp_path: Path) -> None:
    async with Session(study="big", backend=local(tmp_path / "state", cpu=2)) as s:
        step = Step(name="huge", script="true", resources=Resources(cores_per_task=4))
        result = await (await s.submit(step)).wait(timeout=5)
    assert (result.state, result.reason) == (StepState.FAILED, "Unschedulable")
    assert "4" in result.message and "2" in result.message


# --- records: adopt, mismatch, re-attach --------------------------------------------------


async def test_resubmitting_a_succeeded_step_adopts_it(tmp_path: Path) -> None:
    count = tmp_path / "count"
    step = Step(name="once", script=f"echo run >> {count}")
    async with Session(study="resume", backend=local(tmp_path / "state")) as s:
        first = await (await s.submit(step)).wait(timeout=10)
    async with Session(study="resume", backend=local(tmp_path / "state")) as s:
        second = await (await s.submit(step)).wait(timeout=10)
    assert first.ok and second.ok
    assert second.pods == first.pods
    assert count.read_text() == "run\n"


async def test_a_different_spec_runs_after_an_ended_step_and_is_refused_while_one_runs(
    tmp_path: Path,
) -> None:
    async with Session(study="resume", backend=local(tmp_path / "state")) as s:
        await (await s.submit(Step(name="once", script="echo one"))).wait(timeout=10)
    async with Session(study="resume", backend=local(tmp_path / "state")) as s:
        changed = await s.submit(Step(name="once", script="echo two"))
        assert (await changed.wait(timeout=10)).ok and not changed.adopted
        assert await changed.logs() == "two\n"
    shared = local(tmp_path / "state")  # two drivers of one backend: one step still runs
    async with Session(study="resume", backend=shared) as first:
        running = await first.submit(Step(name="once", script="sleep 30"))
        await wait_until(lambda: running.state is StepState.RUNNING)
        async with Session(study="resume", backend=shared) as s:
            with pytest.raises(SpecMismatch, match=r'"once".*still running.*--replace'):
                await s.submit(Step(name="once", script="echo three"))
            replaced = await s.submit(Step(name="once", script="echo three"), replace=True)
            assert (await replaced.wait(timeout=10)).ok
            assert await replaced.logs() == "three\n"


async def test_resubmitting_a_failed_step_runs_it_again(tmp_path: Path) -> None:
    count = tmp_path / "count"
    step = Step(name="again", script=f"echo run >> {count}; exit 1")
    for _ in range(2):
        async with Session(study="retry", backend=local(tmp_path / "state")) as s:
            assert not (await (await s.submit(step)).wait(timeout=10)).ok
    assert count.read_text() == "run\n" * 2


async def test_second_session_reattaches_to_finished_steps(tmp_path: Path) -> None:
    async with Session(study="attach", backend=local(tmp_path / "state")) as s:
        await s.submit(Step(name="good", script="echo fine"))
        await s.submit(Step(name="bad", script="exit 4"))
        await s.gather(timeout=10)
    async with Session(study="attach", backend=local(tmp_path / "state")) as s:
        handles = {h.name: h for h in await s.attach()}
        assert set(handles) == {"good", "bad"}
        assert handles["good"].done and handles["good"].result.ok
        assert (handles["bad"].state, handles["bad"].result.exit_code) == (StepState.FAILED, 4)
        assert await handles["good"].logs() == "fine\n"


async def test_a_step_is_recorded_before_its_first_process_starts(tmp_path: Path) -> None:
    """Another driver's attach or cancel finds every step whose processes run."""
    state = tmp_path / "state"
    script = f"ls {state}/steps/*/*.json"  # fails (exit 2) while there is no record
    async with Session(study="early", backend=local(state)) as s:
        result = await (await s.submit(Step(name="first", script=script))).wait(timeout=30)
    assert result.ok, result.message


async def test_second_session_cancels_a_running_step_without_retry(tmp_path: Path) -> None:
    pids, done = tmp_path / "pids", tmp_path / "done"
    state = tmp_path / "state"
    step = Step(name="long", script=f"echo $$ >> {pids}; [ -e {done} ] || exec sleep 30", retries=2)
    async with Session(study="live", backend=local(state)) as first:
        running_handle = await first.submit(step)
        await wait_until(lambda: len(pids_in(pids)) == 1)
        async with Session(study="live", backend=local(state)) as second:

            async def running_there() -> bool:  # its RUNNING record is saved in the background
                return [h.state for h in await second.attach()] == [StepState.RUNNING]

            await wait_until(running_there, "the other driver records the step as running")
            (seen,) = await second.attach()
            await seen.cancel()
            assert seen.result.state is StepState.CANCELLED
        result = await running_handle.wait(timeout=5)
    assert (result.state, result.message) == (StepState.CANCELLED, "cancelled from another process")
    assert len(pids_in(pids)) == 1 and not alive(pids_in(pids)[0])
    done.touch()
    async with Session(study="live", backend=local(state)) as third:  # the request is past
        assert (await (await third.submit(step)).wait(timeout=10)).ok


async def test_attach_after_the_driver_died_reports_lost(tmp_path: Path) -> None:
    # A record left RUNNING by a driver that no longer exists (pid 2**22 + 1 is never used).
    state = tmp_path / "state"
    async with Session(study="orphan", backend=local(state)) as s:
        await (await s.submit(Step(name="x", script="true"))).wait(timeout=10)
    (record,) = (state / "steps").rglob("*.json")
    text = record.read_text().replace('"SUCCEEDED"', '"RUNNING"')
    record.write_text(text.replace(f'"driver_pid": {os.getpid()}', '"driver_pid": 4194305'))
    async with Session(study="orphan", backend=local(state)) as s:
        (handle,) = await s.attach()
    assert (handle.state, handle.result.reason) == (StepState.LOST, "DriverExited")


# --- mixed backends -----------------------------------------------------------------------


async def test_a_local_step_hands_its_output_to_a_cluster_step(
    handoff_path: str, tmp_path: Path
) -> None:
    from k8sjobs.testing import ControllerConfig, FakeCluster

    (tmp_path / "cluster").mkdir()
    timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
    prepare = Step(name="prepare", script="echo 21 > n.txt", outputs={"n": "n.txt"})
    simulate = Step(
        name="simulate",
        script='echo $(( $(cat "$K8SJOBS_INPUTS/n/n.txt") * 2 ))',
        inputs={"n": prepare.output("n")},
    )
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster", controller=timings) as cluster,
        Session(
            study="mixed",
            backend=local(tmp_path / "state"),
            kubeconfig=cluster.kubeconfig_path,
            store=f"oci:{tmp_path / 'artifacts'}",
            log_dir=tmp_path / "logs",
        ) as s,
    ):
        first = await s.submit(prepare)
        second = await s.submit(simulate, backend="kubernetes")
        results = await s.gather(first, second, timeout=30)
        assert [r.state for r in results] == [StepState.SUCCEEDED] * 2
        assert (first.backend.kind, second.backend.kind) == ("local", "kubernetes")
        assert cluster.get("jobs", second.object_name) is not None
        assert await second.logs() == "42\n"


async def test_a_listener_that_raises_stops_neither_its_step_nor_the_others(
    session: Session,
) -> None:
    """Listeners are called from the backend's follower of the process: one that raised there
    left its step, and the steps after it, waiting forever."""

    def broken(handle: StepHandle) -> None:
        raise RuntimeError("a display that broke")

    first = await session.submit(Step(name="first", script="sleep 0.2"))
    first.add_listener(broken)
    second = await session.submit(Step(name="second", script="sleep 0.2"))
    second.add_listener(broken)
    results = await asyncio.wait_for(asyncio.gather(first.wait(), second.wait()), 120)
    assert [r.state for r in results] == [StepState.SUCCEEDED, StepState.SUCCEEDED]
