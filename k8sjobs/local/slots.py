"""A slot scheduler over this machine's cores, GPUs and memory.

The local backend runs every step on the driver's machine; without a limit a study of fifty
steps would start fifty simulations at once and swap the laptop to a halt. Each step reserves
the cores, memory and GPUs it declared before it starts, and waits its turn otherwise.

Order is strict FIFO: a request waits while any earlier request waits, even if it would fit
now. That costs some packing, but a large request is never starved by a stream of small ones,
and steps start in the order they were submitted, which is what a person watching expects.

Shape (anyio's memory streams): ``try_reserve`` holds the whole logic and never waits;
``reserve`` is a thin async context manager that queues when ``try_reserve`` says no.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio

__all__ = ["Capacity", "Reservation", "SlotScheduler", "machine_cpus", "machine_memory"]

# cgroup v1 reports "no limit" as a number near 2**63; anything this large is no limit.
_NO_CGROUP_LIMIT = 2**60


@dataclass(frozen=True)
class Capacity:
    """An amount of cores, bytes of memory and GPUs."""

    cpu: float
    memory: int
    gpus: int

    def fits_in(self, other: Capacity) -> bool:
        """Return whether this amount fits inside ``other``."""
        return self.cpu <= other.cpu and self.memory <= other.memory and self.gpus <= other.gpus

    def __add__(self, other: Capacity) -> Capacity:
        return Capacity(self.cpu + other.cpu, self.memory + other.memory, self.gpus + other.gpus)

    def __sub__(self, other: Capacity) -> Capacity:
        return Capacity(self.cpu - other.cpu, self.memory - other.memory, self.gpus - other.gpus)


@dataclass(frozen=True, eq=False)
class Reservation:
    """Resources granted to one holder until released; compared by identity."""

    amount: Capacity
    label: str


@dataclass(eq=False)
class _Waiter:
    reservation: Reservation
    event: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False


class SlotScheduler:
    """Grants cores, memory and GPUs of this machine in FIFO order, never oversubscribing."""

    def __init__(
        self, *, cpu: float | None = None, memory: int | None = None, gpus: int = 0
    ) -> None:
        """Defaults: the cores this process may run on, the machine's (or cgroup's) memory."""
        self.capacity = Capacity(
            cpu=float(cpu if cpu is not None else machine_cpus()),
            memory=memory if memory is not None else machine_memory(),
            gpus=gpus,
        )
        if self.capacity.cpu <= 0 or self.capacity.memory <= 0 or gpus < 0:
            raise ValueError(f"A slot scheduler needs a positive capacity, not {self.capacity}.")
        self._in_use = Capacity(0.0, 0, 0)
        self._held: set[Reservation] = set()
        self._queue: deque[_Waiter] = deque()

    @property
    def in_use(self) -> Capacity:
        """Return what the current holders have reserved."""
        return self._in_use

    @property
    def holders(self) -> int:
        """Return how many reservations are held now."""
        return len(self._held)

    @property
    def waiting(self) -> int:
        """Return how many requests are queued."""
        return len(self._queue)

    def try_reserve(
        self, *, cpu: float = 1.0, memory: int = 0, gpus: int = 0, label: str = ""
    ) -> Reservation | None:
        """Return a reservation if it can be granted now without jumping the queue, else None.

        Raises ValueError at once for a request that could never fit on this machine.
        """
        reservation = self._request(cpu, memory, gpus, label)
        if self._queue or not self._fits(reservation):
            return None
        self._grant(reservation)
        return reservation

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back, and grant the waiters at the head of the queue that now fit."""
        if reservation not in self._held:
            raise ValueError(f"Reservation {reservation.label!r} is not held by this scheduler.")
        self._held.remove(reservation)
        self._in_use = self._in_use - reservation.amount
        self._grant_queue_head()

    @asynccontextmanager
    async def reserve(
        self, *, cpu: float = 1.0, memory: int = 0, gpus: int = 0, label: str = ""
    ) -> AsyncIterator[Reservation]:
        """Wait in FIFO order for the resources, hold them for the block, then release them."""
        reservation = self.try_reserve(cpu=cpu, memory=memory, gpus=gpus, label=label)
        if reservation is None:
            reservation = await self._wait_for(self._request(cpu, memory, gpus, label))
        try:
            yield reservation
        finally:
            self.release(reservation)

    async def _wait_for(self, reservation: Reservation) -> Reservation:
        waiter = _Waiter(reservation)
        self._queue.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            # Cancelled while queued, or just after being granted: leave no trace either way.
            if waiter.granted:
                self.release(reservation)
            else:
                self._queue.remove(waiter)
                self._grant_queue_head()
            raise
        return reservation

    def _request(self, cpu: float, memory: int, gpus: int, label: str) -> Reservation:
        if cpu < 0 or memory < 0 or gpus < 0:
            raise ValueError(
                f"Slot request {label!r} asks for a negative amount: "
                f"cpu={cpu}, memory={memory}, gpus={gpus}."
            )
        amount = Capacity(float(cpu), int(memory), int(gpus))
        if not amount.fits_in(self.capacity):
            raise ValueError(
                f"Slot request {label!r} can never run on this machine: it asks for "
                f"{_describe(amount)}, and the machine has {_describe(self.capacity)}. "
                "Lower the step's resources, or give the scheduler a larger capacity."
            )
        return Reservation(amount, label)

    def _fits(self, reservation: Reservation) -> bool:
        return (self._in_use + reservation.amount).fits_in(self.capacity)

    def _grant(self, reservation: Reservation) -> None:
        self._held.add(reservation)
        self._in_use = self._in_use + reservation.amount

    def _grant_queue_head(self) -> None:
        while self._queue and self._fits(self._queue[0].reservation):
            waiter = self._queue.popleft()
            self._grant(waiter.reservation)
            waiter.granted = True
            waiter.event.set()


def _describe(amount: Capacity) -> str:
    memory = f"{amount.memory / 2**30:.2f} GiB" if amount.memory >= 2**30 else f"{amount.memory} B"
    return f"{amount.cpu:g} cores, {memory} of memory and {amount.gpus} GPUs"


def machine_cpus() -> int:
    """Return the number of cores this process may run on (its affinity, else os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine_memory() -> int:
    """Return the bytes of memory this machine offers: physical memory, capped by a cgroup."""
    total = _meminfo_total() or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_memory_limit()
    return min(total, limit) if limit else total


def _meminfo_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_memory_limit() -> int | None:
    # A container's memory limit, when the driver itself runs in one (CI, a dev container).
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = int(Path(path).read_text().strip())
        except (OSError, ValueError):  # "max" in cgroup v2 means no limit
            continue
        if value < _NO_CGROUP_LIMIT:
            return value
    return None
