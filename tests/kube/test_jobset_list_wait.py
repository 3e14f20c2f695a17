"""A target: jobset step sent while the study's first JobSet list fails (the server
answers 503 to it, say an overloaded or half-started apiserver): the wait is bounded by
``connect_timeout`` and the step is refused naming what it waited on, in the server's
words, before anything is written. It waited forever, in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs.errors import ServerUnavailable
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster

from .kubehelpers import session


async def test_a_jobset_step_whose_jobset_list_fails_is_refused_within_the_bound(
    tmp_path: Path,
) -> None:
    async with FakeCluster("simulate", directory=tmp_path) as fake:
        await fake.install_jobset()
        fake.faults.fail("list", "jobsets", status=503, times=None)
        async with session(fake, tmp_path, connect_timeout=1.0) as s:
            with pytest.raises(ServerUnavailable) as refused:
                await s.submit(Step(name="a", script="true", target="jobset"))
            said = str(refused.value)
            assert 'JobSets of namespace "default" were not listed within 1 s' in said, said
            assert "The server is currently unable to handle the request" in said, said
            for kind in ("jobsets", "configmaps", "secrets"):
                assert fake.objects(kind, "default") == [], kind
            fake.faults.clear()  # the server recovers: the same step goes
            handle = await s.submit(Step(name="a", script="true", target="jobset"))
            assert fake.get("jobsets", handle.object_name) is not None
