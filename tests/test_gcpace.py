"""The garbage collector's pace while sessions are open: raised once, put back by the last."""

from __future__ import annotations

import collections
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8sjobs import Session, Step, _gcpace
from k8sjobs.local import LocalBackend
from k8sjobs.testing import FakeCluster


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    """Run each test at CPython's default thresholds with no holder; put all back after
    (a session another test left open keeps its hold)."""
    before = gc.get_threshold()
    held = _gcpace._holders, _gcpace._saved, _gcpace._paced
    _gcpace._holders, _gcpace._saved, _gcpace._paced = 0, None, None
    gc.set_threshold(700, 10, 10)
    yield
    _gcpace._holders, _gcpace._saved, _gcpace._paced = held
    gc.set_threshold(*before)


def test_a_hold_raises_the_young_threshold_and_its_release_puts_it_back() -> None:
    _gcpace.hold()
    assert gc.get_threshold() == (_gcpace.YOUNG_THRESHOLD, 10, 10)
    _gcpace.release()
    assert gc.get_threshold() == (700, 10, 10)


def test_the_last_of_several_holders_puts_the_thresholds_back() -> None:
    _gcpace.hold()
    _gcpace.hold()
    _gcpace.release()
    assert gc.get_threshold()[0] == _gcpace.YOUNG_THRESHOLD
    _gcpace.release()
    assert gc.get_threshold() == (700, 10, 10)
    _gcpace.release()  # one release too many changes nothing
    assert gc.get_threshold() == (700, 10, 10)


def test_a_holder_counts_once_however_often_it_holds_or_releases() -> None:
    first, second = _gcpace.Holder(), _gcpace.Holder()
    first.hold()
    first.hold()
    second.hold()
    first.release()
    first.release()
    assert gc.get_threshold()[0] == _gcpace.YOUNG_THRESHOLD  # the second still holds
    second.release()
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("young", [0, 50_000, 100_000])
def test_a_slower_pace_or_collection_turned_off_is_left_alone(young: int) -> None:
    gc.set_threshold(young, 10, 10)
    _gcpace.hold()
    assert gc.get_threshold() == (young, 10, 10)
    _gcpace.release()
    assert gc.get_threshold() == (young, 10, 10)


def test_thresholds_changed_while_held_are_kept_at_release() -> None:
    _gcpace.hold()
    gc.set_threshold(2000, 20, 20)
    _gcpace.release()
    assert gc.get_threshold() == (2000, 20, 20)


async def test_an_open_session_holds_the_pace_once(tmp_path: Path) -> None:
    backend = LocalBackend(state_dir=tmp_path / "state")
    session = Session(study="s", backend=backend)
    assert gc.get_threshold() == (700, 10, 10)
    async with session:
        await session.start()  # a second start holds nothing more
        assert gc.get_threshold()[0] == _gcpace.YOUNG_THRESHOLD
        handle = await session.submit(Step(name="ok", script="true"))
        await handle.wait(timeout=60)
    assert gc.get_threshold() == (700, 10, 10)
    await session.aclose()  # a second close releases nothing more
    assert _gcpace._holders == 0


async def test_a_session_that_fails_to_start_leaves_the_pace_as_it_was(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"kubeconfig .*missing: no such file"):
        async with Session(study="s", kubeconfig=tmp_path / "missing"):
            pass
    assert gc.get_threshold() == (700, 10, 10)
    assert _gcpace._holders == 0


async def test_a_running_fake_cluster_holds_the_pace() -> None:
    async with FakeCluster("simulate"):
        assert gc.get_threshold()[0] == _gcpace.YOUNG_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


def _full_collections(steps: int) -> int:
    """Count full collections while a driver-like loop keeps ~35 objects a step for good
    and holds ~150 more per request for a few requests' time, as a submit does."""
    full = collections.Counter[str]()

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full["full"] += 1

    kept: list[list[object]] = []
    in_flight: collections.deque[list[list[int]]] = collections.deque(maxlen=16)
    # The process's own objects (pytest's, other tests') are set aside: not walked, not
    # counted in the oldest generation.
    gc.collect()
    gc.freeze()
    gc.callbacks.append(count)
    try:
        for _ in range(steps):
            in_flight.append([[] for _ in range(150)])
            kept.append([[] for _ in range(35)])
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
    return full["full"]


def test_held_full_collections_come_only_as_the_kept_state_grows() -> None:
    # Not a timing: CPython's collections follow the allocations, which this loop fixes.
    # At the default pace a full collection (a walk of every kept object) comes every few
    # thousand steps, so its cost per step grows with the steps kept; held, it comes only
    # as the kept state grows by a quarter.
    at_default = _full_collections(20_000)
    _gcpace.hold()
    held = _full_collections(20_000)
    assert at_default >= 4  # 7 here; 5 with 1.5 million other objects in the process
    assert held <= 1
