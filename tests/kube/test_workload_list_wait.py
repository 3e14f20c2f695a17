"""Queued steps sent while the namespace's first Workload list fails (the server answers
503 to it): the wait for that list is one ``connect_timeout`` for all of them, not one
per step (200 steps x 10 s was half an hour of silence), and one WARNING says on what it
waited, in the server's words (it waited in silence, each step again); once the list
comes, Kueue's reason is shown. The shared bound is not timed here (no wall-clock
assertions): the one WARNING for six steps is what it is seen by."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from k8sjobs.handle import StepHandle
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .kubehelpers import session, step

BOUND = 2.0


async def test_queued_steps_share_one_bounded_wait_for_the_workload_list_and_say_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeCluster("simulate", directory=tmp_path, kueue=True) as fake:
        fake.faults.fail("list", "workloads", status=503, times=None)
        caplog.set_level(logging.WARNING, logger="k8sjobs")
        handles: list[StepHandle] = []
        async with session(fake, tmp_path, connect_timeout=BOUND) as s:
            for i in range(6):
                handles.append(await s.submit(step(f"s{i}", queue="nope")))
            said = [r.getMessage() for r in caplog.records if "Workloads" in r.getMessage()]
            assert len(said) == 1, said
            assert 'namespace "default" were not listed within 2 s (connect_timeout' in said[0]
            assert "The server is currently unable to handle the request" in said[0], said[0]
            fake.faults.clear()
            missing = "LocalQueue nope doesn't exist"
            await wait_until(
                lambda: all(missing in h.result.message for h in handles), "Kueue's reason"
            )
