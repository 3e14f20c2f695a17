"""The notebook's table of results: the same durations as every other view."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from k8sjobs._display import result_table
from k8sjobs.state import StepResult, StepState

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_notebook_table_keeps_sub_second_durations_and_running_time() -> None:
    end = T0 + timedelta(seconds=0.25)
    quick = StepResult("quick", StepState.SUCCEEDED, started_at=T0, finished_at=end)
    began = datetime.now(UTC) - timedelta(hours=2)
    running = StepResult("busy", StepState.RUNNING, started_at=began)
    page = result_table([quick, running])
    assert "<th>duration</th>" in page
    rows = re.findall(r"<tr>(.*?)</tr>", page)[1:]
    assert "<td>250ms</td>" in rows[0]
    assert re.search(r"<td>2h 0[01]m</td>", rows[1]), rows[1]  # its time so far


def test_the_notebook_table_shows_what_a_step_used() -> None:
    from k8sjobs.usage import Usage

    used = Usage(wall_seconds=2.0, cpu_seconds=1.5, memory_peak=200 * 1024 * 1024)
    page = result_table([StepResult("big", StepState.SUCCEEDED, usage=used)])
    assert "<th>used</th>" in page
    assert "<td>cpu 1.50s, mem 200Mi peak, wall 2.00s</td>" in page
