"""A queued step carries Kueue's queue and priority labels on every target, and priority is
refused with both fields named where Kueue would ignore it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from k8sjobs.render.manifests import render
from k8sjobs.steps.spec import PRIORITY_LABEL, QUEUE_LABEL, Step

QUEUED = {QUEUE_LABEL: "lq", PRIORITY_LABEL: "high"}


def queued(**fields: object) -> Step:
    return Step(name="s", script="true", queue="lq", priority="high", **fields)


@pytest.mark.parametrize("nodes", [1, 3])
def test_a_job_is_labelled_and_suspended_for_kueue(nodes: int) -> None:
    job = render(queued(resources={"nodes": nodes, "tasks": nodes}, launch="none")).job
    assert QUEUED.items() <= job["metadata"]["labels"].items()
    assert job["spec"]["suspend"] is True
    assert PRIORITY_LABEL not in job["spec"]["template"]["metadata"]["labels"]


def test_a_minicluster_passes_the_labels_to_its_operators_job() -> None:
    mc = render(queued(target="minicluster")).job
    assert QUEUED.items() <= mc["spec"]["jobLabels"].items()
    assert QUEUE_LABEL not in mc["metadata"]["labels"]


def test_a_jobset_is_labelled_and_suspended_itself() -> None:
    js = render(queued(target="jobset")).job
    assert QUEUED.items() <= js["metadata"]["labels"].items()
    assert js["spec"]["suspend"] is True
    for rjob in js["spec"]["replicatedJobs"]:
        assert QUEUE_LABEL not in rjob["template"]["metadata"]["labels"]


def test_priority_without_a_queue_names_both_priorities() -> None:
    with pytest.raises(ValidationError) as caught:
        Step(name="s", script="true", priority="high")
    text = str(caught.value)
    assert "priority" in text and "priority_class" in text and "queue" in text


@pytest.mark.parametrize("value", ["High", "a" * 64, "x_y", ""])
def test_a_bad_priority_name_says_what_priority_is(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Step(name="s", script="true", queue="lq", priority=value)
    assert "WorkloadPriorityClass" in str(caught.value) and "priority_class" in str(caught.value)


def test_priority_and_its_raw_label_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="drop the label"):
        queued(labels={PRIORITY_LABEL: "low"})


@pytest.mark.parametrize("value", ["a" * 64, "a." * 40 + "b", "q" * 253, "Q_1", ""])
def test_a_queue_name_that_is_no_label_value_is_refused_naming_queue(value: str) -> None:
    """queue is the kueue.x-k8s.io/queue-name label's value: 63 characters at most.

    A 64-253 character DNS subdomain was accepted, and the cluster refused the Job (422).
    """
    with pytest.raises(ValidationError) as caught:
        Step(name="s", script="true", queue=value)
    text = str(caught.value)
    assert "queue" in text and "LocalQueue" in text and "63" in text


def test_a_queue_name_of_63_characters_is_its_label() -> None:
    step = Step(name="s", script="true", queue="a" * 63)
    assert step.queue_labels == {QUEUE_LABEL: "a" * 63}


def test_queue_and_its_raw_label_together_are_refused() -> None:
    """Two queue names, one silently lost, were accepted."""
    with pytest.raises(ValidationError, match="drop the label") as caught:
        Step(name="s", script="true", queue="lq", labels={QUEUE_LABEL: "other"})
    assert "queue" in str(caught.value)
