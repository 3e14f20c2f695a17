"""Session(allocations=...): kept by name, read-only; submit and submit_many refuse a step
naming an allocation the session has not, or one it cannot run in, before anything is sent
(AllocationRefused names the step, the allocation and the fix). Real local backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs import Allocation, AllocationRefused, Resources, Session, Step
from k8sjobs.local import LocalBackend

POOL = Allocation(name="pool", nodes=2, resources=Resources(cores_per_task=2, memory="1Gi"))


def _session(tmp_path: Path, **kwargs: object) -> Session:
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5)
    return Session(study="s", backend=backend, **kwargs)  # type: ignore[arg-type]


def test_the_session_keeps_its_allocations_by_name_read_only(tmp_path: Path) -> None:
    other = Allocation(name="gpus", resources=Resources(gpus=1))
    s = _session(tmp_path, allocations=[POOL, other])
    assert dict(s.allocations) == {"pool": POOL, "gpus": other}
    with pytest.raises(TypeError):
        s.allocations["x"] = POOL  # type: ignore[index]
    assert dict(_session(tmp_path).allocations) == {}


def test_two_allocations_of_one_name_or_not_an_allocation_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='two allocations are called "pool"'):
        _session(tmp_path, allocations=[POOL, POOL.model_copy(update={"nodes": 1})])
    with pytest.raises(TypeError, match="is not an Allocation"):
        _session(tmp_path, allocations=[{"name": "pool"}])


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (
            Step(name="a", script="true", allocation="pol"),
            'Step "a" names allocation "pol", which this session does not have (its '
            'allocations: "pool"); pass it in Session(allocations=[Allocation(...)])',
        ),
        (
            Step(name="a", script="true", allocation="pool", image="ghcr.io/me/x:1"),
            'Step "a" cannot run in allocation "pool": its image "ghcr.io/me/x:1"',
        ),
        (
            Step(name="a", script="true", allocation="pool", resources=Resources(nodes=2, tasks=2)),
            "it asks for 2 nodes",
        ),
        (
            Step(name="a", script="true", allocation="pool", resources=Resources(cores_per_task=3)),
            "it needs 3 cores and each pod",
        ),
        (
            Step(name="a", script="true", allocation="pool", namespace="elsewhere"),
            'it runs in namespace "elsewhere" and the pods of allocation "pool" in "default"',
        ),
    ],
)
async def test_submit_refuses_before_anything_is_sent(
    tmp_path: Path, step: Step, words: str
) -> None:
    async with _session(tmp_path, allocations=[POOL]) as s:
        with pytest.raises(AllocationRefused) as refused:
            await s.submit(step)
        assert words in str(refused.value)
        assert refused.value.step == "a" and refused.value.allocation in ("pool", "pol")
        assert isinstance(refused.value, ValueError)
        assert s.handles == {}  # no handle, nothing sent: the step can be fixed and sent


async def test_submit_many_refuses_the_whole_batch_before_sending_any(tmp_path: Path) -> None:
    steps = [
        Step(name="fine", script="true"),
        Step(name="bad", script="true", allocation="pool", resources=Resources(gpus=1)),
    ]
    async with _session(tmp_path, allocations=[POOL]) as s:
        with pytest.raises(AllocationRefused, match='Step "bad" cannot run in allocation "pool"'):
            await s.submit_many(steps)
        assert s.handles == {}
        # The fixed batch goes: the refusal left nothing behind to collide with.
        handles = await s.submit_many([steps[0]])
        assert (await handles[0].wait(timeout=30)).ok


async def test_a_session_without_the_allocation_names_none(tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        with pytest.raises(AllocationRefused, match=r"\(its allocations: none\)"):
            await s.submit(Step(name="a", script="true", allocation="pool"))
