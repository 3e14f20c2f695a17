"""target: jobset on a cluster without the JobSet API: refused before anything is written,
naming the API group and the fix (checked once, by discovery)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sjobs import Session, Step
from k8sjobs.testing import FakeCluster


async def test_a_cluster_without_jobset_refuses_the_step_before_writing(tmp_path: Path) -> None:
    async with (
        FakeCluster("simulate", directory=tmp_path) as cluster,
        Session(study="js", backend="kubernetes", kubeconfig=cluster.kubeconfig_path) as s,
    ):
        step = Step(name="a", script="true", target="jobset")
        with pytest.raises(ValueError) as refused:
            await s.submit(step)
        said = str(refused.value)
        assert "serves no jobset.x-k8s.io/v1alpha2 API" in said
        assert "install JobSet" in said and "target: job" in said
        assert list(cluster.store.iter("configmaps", "default")) == []
        assert list(cluster.store.iter("jobs", "default")) == []
