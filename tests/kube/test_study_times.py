"""On Kubernetes a study's steps read to the millisecond, though the API stamps whole seconds.

The fake cluster stamps a Job's start and end as kube-apiserver does (RFC 3339, to the
second), so a step's own result reads "<1s" or "1s"; the runner's record times it on the
driver's clock, and what ``k8sjobs run`` shows (``StepRecord.seen``) and ``k8sjobs status``
(``runrecord.retime``) keep the fraction.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from k8sjobs.runrecord import retime
from k8sjobs.session import Session
from k8sjobs.study import StudyRun, parse_study
from k8sjobs.testing import FakeCluster

from .conftest import FAST

STUDY = """
name: timed
steps:
  - name: short
    script: sleep 0.3
"""


@pytest_asyncio.fixture
async def executing(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async with FakeCluster("execute", directory=tmp_path / "fake", controller=FAST) as fake:
        yield fake


async def test_a_short_step_on_kubernetes_shows_its_sub_second_time(
    executing: FakeCluster, tmp_path: Path
) -> None:
    study = parse_study(textwrap.dedent(STUDY), base_dir=tmp_path)
    async with Session(study="timed", kubeconfig=executing.kubeconfig_path) as session:
        run = StudyRun(study, session)
        (result,) = await run.run()
    assert result.ok and result.started_at is not None and result.finished_at is not None
    # The API's stamps: whole seconds, shown as such, never an invented fraction.
    assert (result.started_at.microsecond, result.finished_at.microsecond) == (0, 0)
    assert re.fullmatch(r"<1s|\d+s", result.took()), result.took()
    seen = run.records["short"].seen()
    assert re.fullmatch(r"\d+ms|\d+\.\d+s", seen.took()), seen.took()
    assert seen.duration is not None and seen.duration > 0
    # `k8sjobs status` reads the step again from the API, and times it by the run record.
    record = json.loads(json.dumps(run.timeline()))
    assert retime(result, record).took() == seen.took()
    earlier = {**record, "steps": [{**record["steps"][0], "ran": {"started": 1.0}}]}
    assert retime(result, earlier) is result  # another run's record: not this result's times
    assert retime(result, None) is result
