"""The slot scheduler: FIFO grants over cores, memory and GPUs, never oversubscribing."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from k8sjobs.local.slots import Capacity, SlotScheduler, machine_cpus, machine_memory

GiB = 2**30


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_defaults_come_from_this_machine() -> None:
    scheduler = SlotScheduler()
    assert scheduler.capacity == Capacity(float(machine_cpus()), machine_memory(), 0)
    assert machine_memory() > 0


def test_a_request_that_can_never_fit_fails_at_once_naming_both_sides() -> None:
    scheduler = SlotScheduler(cpu=4, memory=8 * GiB, gpus=0)
    with pytest.raises(ValueError) as raised:
        scheduler.try_reserve(cpu=2, memory=16 * GiB, gpus=1, label="train")
    message = str(raised.value)
    assert "'train'" in message
    assert "2 cores, 16.00 GiB of memory and 1 GPUs" in message
    assert "4 cores, 8.00 GiB of memory and 0 GPUs" in message


async def test_reserve_raises_for_an_impossible_request_without_waiting() -> None:
    scheduler = SlotScheduler(cpu=2, memory=GiB)
    with anyio.fail_after(1), pytest.raises(ValueError, match="can never run"):
        async with scheduler.reserve(cpu=3):
            pass
    assert scheduler.waiting == 0


def test_try_reserve_grants_until_full_and_release_gives_back() -> None:
    scheduler = SlotScheduler(cpu=2, memory=4 * GiB, gpus=1)
    first = scheduler.try_reserve(cpu=1.5, memory=GiB, gpus=1)
    assert first is not None
    assert scheduler.try_reserve(cpu=1, memory=GiB) is None  # cores are short
    assert scheduler.try_reserve(cpu=0.5, gpus=1) is None  # the GPU is taken
    assert scheduler.in_use == Capacity(1.5, GiB, 1)
    scheduler.release(first)
    assert scheduler.in_use == Capacity(0.0, 0, 0)
    with pytest.raises(ValueError, match="not held"):
        scheduler.release(first)


async def test_waiters_are_granted_in_fifo_order() -> None:
    scheduler = SlotScheduler(cpu=1, memory=GiB)
    order: list[str] = []
    gate = anyio.Event()

    async def step(label: str) -> None:
        async with scheduler.reserve(cpu=1, label=label):
            order.append(label)
            await gate.wait()

    async with anyio.create_task_group() as group:
        for label in "abcde":
            group.start_soon(step, label)
            await settle()  # submit in a known order
        assert (order, scheduler.waiting, scheduler.holders) == (["a"], 4, 1)
        gate.set()
    assert order == list("abcde")
    assert scheduler.in_use == Capacity(0.0, 0, 0)


async def test_a_large_request_is_not_starved_by_small_ones() -> None:
    scheduler = SlotScheduler(cpu=4, memory=GiB)
    small = scheduler.try_reserve(cpu=1, label="small-0")
    assert small is not None
    granted: list[str] = []

    async def want(label: str, cpu: float) -> None:
        async with scheduler.reserve(cpu=cpu, label=label):
            granted.append(label)

    async with anyio.create_task_group() as group:
        group.start_soon(want, "large", 4.0)
        await settle()
        # A small request would fit now, but the large one came first: it must wait.
        assert scheduler.try_reserve(cpu=1, label="small-1") is None
        group.start_soon(want, "small-2", 1.0)
        await settle()
        assert granted == []
        scheduler.release(small)
    assert granted == ["large", "small-2"]


async def test_concurrency_never_exceeds_the_machine() -> None:
    scheduler = SlotScheduler(cpu=3, memory=4 * GiB)
    running = 0
    peak = 0

    async def step(index: int) -> None:
        nonlocal running, peak
        async with scheduler.reserve(cpu=1, memory=GiB, label=f"s{index}"):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    async with anyio.create_task_group() as group:
        for index in range(12):
            group.start_soon(step, index)
    assert peak == 3
    assert (scheduler.holders, scheduler.waiting) == (0, 0)


async def test_a_cancelled_waiter_leaves_the_queue_and_unblocks_the_next() -> None:
    scheduler = SlotScheduler(cpu=2, memory=GiB)
    held = scheduler.try_reserve(cpu=1)
    assert held is not None
    granted: list[str] = []

    async def want(label: str, cpu: float) -> None:
        async with scheduler.reserve(cpu=cpu, label=label):
            granted.append(label)
            await anyio.sleep_forever()

    big = asyncio.create_task(want("big", 2.0))  # waits for `held`
    await settle()
    small = asyncio.create_task(want("small", 1.0))  # fits, but queued behind "big"
    await settle()
    assert (granted, scheduler.waiting) == ([], 2)
    big.cancel()
    await settle()
    assert (granted, scheduler.waiting) == (["small"], 0)
    small.cancel()
    await asyncio.gather(big, small, return_exceptions=True)
    assert scheduler.in_use == Capacity(1.0, 0, 0)
