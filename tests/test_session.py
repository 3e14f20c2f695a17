"""Session behaviour that holds on every backend, shown on the local one (real processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from k8sjobs import Session, Step, StepFailed, StepState, StudyError
from k8sjobs.local import LocalBackend
from k8sjobs.render.manifests import Target, placement
from k8sjobs.session import default_session

from .waiting import wait_until


def _session(tmp_path: Path, **kwargs: object) -> Session:
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5)
    return Session(study="s", backend=backend, **kwargs)  # type: ignore[arg-type]


async def test_submit_returns_at_once_and_wait_gives_the_result(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        handle = await s.submit(Step(name="ok", script="sleep 0.2; echo done"))
        assert not handle.done
        result = await handle.wait(timeout=30)
    assert result.state is StepState.SUCCEEDED
    assert result.exit_code == 0
    assert result.started_at is not None and result.finished_at is not None


async def test_wait_check_raises_step_failed_with_the_result(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        handle = await s.submit(Step(name="bad", script="exit 7"))
        with pytest.raises(StepFailed) as caught:
            await handle.wait(timeout=30, check=True)
    assert caught.value.result.exit_code == 7
    assert "exited with code 7" in str(caught.value)


async def test_wait_timeout_leaves_the_step_running(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        handle = await s.submit(Step(name="slow", script="sleep 30"))
        with pytest.raises(TimeoutError):
            await handle.wait(timeout=0.3)
        assert not handle.done
        await handle.cancel()
        assert (await handle.wait(timeout=10)).state is StepState.CANCELLED


async def test_a_consumer_waits_for_its_producer_and_reads_nothing_when_it_fails(
    tmp_path: Path,
) -> None:
    async with _session(tmp_path) as s:
        producer = await s.submit(Step(name="make", script="exit 1", outputs={"data": "data.txt"}))
        consumer = await s.submit(
            Step(name="use", script="true", inputs={"data": producer.output("data")})
        )
        result = await consumer.wait(timeout=30)
    assert producer.result.state is StepState.FAILED
    assert result.state is StepState.FAILED
    assert result.reason == "DependencyFailed"
    assert "make" in result.message
    assert result.pods == ()  # it never ran


async def test_after_orders_steps_without_artifacts(tmp_path: Path) -> None:
    marker = tmp_path / "first-done"
    async with _session(tmp_path) as s:
        first = await s.submit(Step(name="first", script=f"sleep 0.3; touch {marker}"))
        second = await s.submit(Step(name="second", script=f"test -e {marker}"), after=[first])
        assert (await second.wait(timeout=30)).ok


async def test_as_completed_yields_first_finished_first(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        slow = await s.submit(Step(name="slow", script="sleep 1"))
        fast = await s.submit(Step(name="fast", script="true"))
        order = [h.name async for h in s.as_completed([slow, fast])]
    assert order == ["fast", "slow"]


async def test_gather_returns_every_result_and_check_raises(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        await s.submit_many([Step(name=f"n{i}", script=f"exit {i % 2}") for i in range(4)])
        results = await s.gather(timeout=60)
        assert [r.exit_code for r in results] == [0, 1, 0, 1]
        with pytest.raises(StepFailed):
            await s.gather(check=True, timeout=60)


async def test_submit_many_orders_producers_before_consumers(
    handoff_path: str, tmp_path: Path
) -> None:
    make = Step(name="make", script="echo hi > out.txt", outputs={"out": "out.txt"})
    use = Step(
        name="use",
        script='cat "$K8SJOBS_INPUTS/out/out.txt"',
        inputs={"out": make.output("out")},
    )
    async with _session(tmp_path) as s:
        handles = await s.submit_many([use, make])
        results = [await h.wait(timeout=60) for h in handles]
        assert [r.state for r in results] == [StepState.SUCCEEDED] * 2, results
        assert (await handles[0].logs()).strip() == "hi"


async def test_submitting_a_step_name_twice_is_refused(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        await s.submit(Step(name="once", script="true"))
        with pytest.raises(StudyError, match="already submitted"):
            await s.submit(Step(name="once", script="true"))


async def test_leaving_the_block_on_an_error_cancels_running_steps(tmp_path: Path) -> None:
    session = _session(tmp_path)
    with pytest.raises(RuntimeError):
        async with session:
            handle = await session.submit(Step(name="long", script="sleep 30"))
            await wait_until(lambda: handle.state is StepState.RUNNING, "the step runs")
            raise RuntimeError("driver bug")
    assert handle.state is StepState.CANCELLED


async def test_a_step_is_placed_once_whatever_the_number_of_steps_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # job_name's cache holds 65,536 names: with more steps in flight, each placement worked
    # out again is a miss, so the session renders with the placement it named the handle by.
    rendering = sys.modules["k8sjobs.render.manifests"]
    placed: list[str] = []

    def counting(step: Step, target: Target) -> tuple[str, str]:
        placed.append(step.name)
        return placement(step, target)

    monkeypatch.setattr(rendering, "placement", counting)
    monkeypatch.setattr(sys.modules["k8sjobs.session"], "placement", counting)
    async with _session(tmp_path) as s:
        handles = await s.submit_many([Step(name=f"s{i}", script="true") for i in range(3)])
        await s.gather(*handles, timeout=60)
    assert sorted(placed) == ["s0", "s1", "s2"]


@pytest.mark.parametrize("namespace", ["../../../x", "Bad_NS", "a/b", "", "x" * 64])
def test_a_session_namespace_is_checked_as_a_step_s_before_anything_is_written(
    namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The local backend's sandboxes are directories named after the namespace: "../x"
    # would write outside the state directory.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r'Session: ".*" is not a valid namespace; use at most'):
        Session(study="s", backend="local", namespace=namespace, log_dir=tmp_path / "logs")
    assert list(tmp_path.iterdir()) == []


async def test_the_default_session_names_a_bad_k8sjobs_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("K8SJOBS_BACKEND", "local")
    monkeypatch.setenv("K8SJOBS_NAMESPACE", "../../x")
    with pytest.raises(ValueError, match=r'K8SJOBS_NAMESPACE: "../../x" is not a valid namespace'):
        await default_session()
