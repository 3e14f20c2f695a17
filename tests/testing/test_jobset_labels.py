"""The child Jobs' index labels, for any shape of JobSet (hypothesis): every Job of a JobSet
gets a distinct global index 0..N-1 in spec order, a distinct index within its group, and
the totals the JobSet controller writes (global-replicas, group-replicas)."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.testing.controllers.jobset import _job

P = "jobset.sigs.k8s.io/"

shapes = st.lists(
    st.tuples(st.sampled_from(["default", "a", "b"]), st.integers(min_value=0, max_value=4)),
    min_size=1,
    max_size=5,
)


def jobset(shape: list[tuple[str, int]]) -> dict[str, Any]:
    rjobs = [
        {"name": f"rj{i}", "groupName": group, "replicas": replicas, "template": {"spec": {}}}
        for i, (group, replicas) in enumerate(shape)
    ]
    return {
        "metadata": {"name": "js", "namespace": "ns", "uid": "u-1"},
        "spec": {"replicatedJobs": rjobs, "network": {"enableDNSHostnames": True}},
    }


@given(shapes, st.integers(min_value=0, max_value=3))
def test_index_labels_number_every_job_once(shape: list[tuple[str, int]], restarts: int) -> None:
    js = jobset(shape)
    jobs = [
        _job(js, rjob, index, restarts)
        for rjob in js["spec"]["replicatedJobs"]
        for index in range(rjob["replicas"])
    ]
    total = sum(replicas for _, replicas in shape)
    labels = [job["metadata"]["labels"] for job in jobs]
    assert [int(lab[f"{P}job-global-index"]) for lab in labels] == list(range(total))
    for group in {g for g, _ in shape}:
        mine = [lab for lab in labels if lab[f"{P}group-name"] == group]
        assert sorted(int(lab[f"{P}job-group-index"]) for lab in mine) == list(range(len(mine)))
        assert all(lab[f"{P}group-replicas"] == str(len(mine)) for lab in mine)
    for job, lab in zip(jobs, labels, strict=True):
        name = job["metadata"]["name"]
        assert name == f"js-{lab[P + 'replicatedjob-name']}-{lab[P + 'job-index']}"
        assert lab[f"{P}global-replicas"] == str(total)
        assert lab[f"{P}restart-attempt"] == str(restarts)
        assert lab[f"{P}job-key"] == hashlib.sha1(f"ns/{name}".encode()).hexdigest()
        template = job["spec"]["template"]
        assert template["metadata"]["labels"] == lab == job["metadata"]["annotations"]
        assert template["spec"]["subdomain"] == "js"
