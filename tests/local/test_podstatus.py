"""The kubelet-shaped PodStatus on its own: phases, conditions and the QoS class."""

from __future__ import annotations

from typing import Any

import pytest

from k8sjobs.local._podstatus import PodStatus


def _pod(*resources: dict[str, Any], init: bool = False) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)]
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = [{"name": "setup", "image": "x"}]
    return {"metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ([{}], "BestEffort"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1"}}], "Guaranteed"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}], "Burstable"),
        ([{"limits": {"cpu": "1"}}], "Burstable"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
    ],
)
def test_qos_class_follows_requests_and_limits(resources: list[dict[str, Any]], qos: str) -> None:
    assert PodStatus(_pod(*resources), lambda _: None).snapshot()["qosClass"] == qos


def test_reports_only_changes_and_keeps_transition_times_until_a_status_moves() -> None:
    sent: list[dict[str, Any]] = []
    status = PodStatus(_pod({}, init=True), sent.append)
    first = status.report()
    status.report()
    assert len(sent) == 1 and first["phase"] == "Pending"
    assert [c["type"] for c in first["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    status.sandbox_ready = True
    status.running("setup", 10, "2026-01-01T00:00:00Z")
    status.terminated("setup", 0, "Completed", None, "2026-01-01T00:00:00Z", 10)
    status.running("c0", 11, "2026-01-01T00:00:01Z")
    running = status.report()
    assert running["phase"] == "Running" and len(sent) == 2
    kinds = {c["type"]: c for c in running["conditions"]}
    assert kinds["Initialized"]["status"] == kinds["Ready"]["status"] == "True"
    assert (
        kinds["PodScheduled"]["lastTransitionTime"] == first["conditions"][4]["lastTransitionTime"]
    )
    assert running["initContainerStatuses"][0]["ready"] is True
    status.terminated("c0", 3, "Error", None, "2026-01-01T00:00:01Z", 11)
    status.finish(succeeded=False)
    final = status.report()
    assert final["phase"] == "Failed"
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert {c["type"]: c.get("reason") for c in final["conditions"]}["Ready"] == "PodCompleted"
