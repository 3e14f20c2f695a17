"""Job policies the recorded transcripts do not cover: successPolicy counts, failed indexes,
FailIndex, podReplacementPolicy, the Eviction API; in both kubelet modes.

Each test states the real controller's behaviour (pkg/controller/job, v1.36) as a
transcript-style expectation: which conditions, with which reasons, in which order, and which
status fields.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.testing import FakeCluster, KubeletConfig, NodeConfig, PodPlan
from k8sjobs.testing.controllers.job_policies import (
    format_indexes,
    match_success_policy,
    parse_indexes,
)

from .conftest import FAST, api_client, batch_api, core_api, wait_until
from .test_controller_and_kubelet import conditions, finished, job_body

INDEX = "batch.kubernetes.io/job-completion-index"


def by_index(plans: dict[int, PodPlan]) -> KubeletConfig:
    """A simulated kubelet running each index's pod by `plans` (others: 30 s, exit 0)."""

    def rule(pod: dict[str, Any]) -> PodPlan:
        index = int((pod["metadata"].get("annotations") or {}).get(INDEX, -1))
        return plans.get(index, PodPlan(duration=30))

    return KubeletConfig(schedule_delay=0.001, start_delay=0.003, rule=rule)


def status(cluster: FakeCluster, name: str) -> dict[str, Any]:
    return dict((cluster.get("jobs", name) or {}).get("status") or {})


# ---------------------------------------------------------------------- pure policies


@given(st.sets(st.integers(min_value=0, max_value=60)))
def test_index_lists_round_trip_and_write_pairs_as_the_controller_does(indexes: set[int]) -> None:
    text = format_indexes(indexes)
    assert parse_indexes(text) == indexes
    assert "-" not in text or all(
        int(b) - int(a) >= 2 for a, b in (p.split("-") for p in text.split(",") if "-" in p)
    )


def test_index_list_formatting_matches_the_real_writer() -> None:
    assert format_indexes({0, 1}) == "0,1"
    assert format_indexes({0, 1, 2, 4, 6, 7}) == "0-2,4,6,7"
    assert format_indexes(set()) == ""


def test_success_policy_rules() -> None:
    def job(*rules: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"completions": 5, "successPolicy": {"rules": list(rules)}}}

    assert match_success_policy(job({"succeededIndexes": "0"}), {0}) == "Matched rules at index 0"
    assert match_success_policy(job({"succeededIndexes": "0-2"}), {0, 2}) is None
    both = job({"succeededIndexes": "0-2", "succeededCount": 2})
    assert match_success_policy(both, {0, 2}) == "Matched rules at index 0"
    count = job({"succeededIndexes": "4"}, {"succeededCount": 3})
    assert match_success_policy(count, {0, 1, 2}) == "Matched rules at index 1"
    assert match_success_policy(count, set()) is None


# ---------------------------------------------------------------------- controller


async def run_indexed(
    tmp_path: Path, plans: dict[int, PodPlan], name: str, **spec: Any
) -> FakeCluster:
    """Run an Indexed Job to its end and until no pod is terminating; return the cluster."""
    kubelet = by_index(plans)
    async with (
        FakeCluster(directory=tmp_path, controller=FAST, kubelet_config=kubelet) as fake,
        await api_client(fake) as api,
    ):
        body = job_body(name, completionMode="Indexed", **spec)
        await batch_api(api).create_namespaced_job("default", body)
        await wait_until(lambda: finished(fake, name))
        await wait_until(
            lambda: not any(p["metadata"].get("deletionTimestamp") for p in fake.objects("pods"))
        )
    return fake


async def test_success_policy_count_completes_and_stops_the_rest(tmp_path: Path) -> None:
    plans = {0: PodPlan(duration=0.02), 2: PodPlan(duration=0.05)}
    rule = {"succeededCount": 2}
    fake = await run_indexed(
        tmp_path, plans, "sc", completions=4, parallelism=4, successPolicy={"rules": [rule]}
    )
    assert conditions(fake, "sc") == [
        ("SuccessCriteriaMet", "True", "SuccessPolicy"),
        ("Complete", "True", "SuccessPolicy"),
    ]
    final = status(fake, "sc")
    assert (final["succeeded"], final["completedIndexes"]) == (2, "0,2")
    assert "failed" not in final and "active" not in final
    assert final["conditions"][-1]["message"] == "Matched rules at index 0"
    assert {p["status"]["phase"] for p in fake.objects("pods")} <= {"Succeeded"}


async def test_max_failed_indexes_fails_the_job_early(tmp_path: Path) -> None:
    plans = {1: PodPlan(duration=0.02, exit_code=1)}
    fake = await run_indexed(
        tmp_path,
        plans,
        "mf",
        completions=3,
        parallelism=3,
        backoffLimitPerIndex=0,
        maxFailedIndexes=0,
    )
    assert conditions(fake, "mf") == [
        ("FailureTarget", "True", "MaxFailedIndexesExceeded"),
        ("Failed", "True", "MaxFailedIndexesExceeded"),
    ]
    final = status(fake, "mf")
    assert final["failedIndexes"] == "1"
    assert final["failed"] == 3  # the failed pod and the two stopped ones
    assert fake.get("jobs", "mf")["spec"]["backoffLimit"] == 2**31 - 1  # type: ignore[index]


async def test_fail_index_rule_fails_the_index_without_retries(tmp_path: Path) -> None:
    plans = {0: PodPlan(duration=0.02), 1: PodPlan(duration=0.02, exit_code=3)}
    rule = {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}
    fake = await run_indexed(
        tmp_path,
        plans,
        "fi",
        completions=2,
        parallelism=2,
        backoffLimitPerIndex=5,
        podFailurePolicy={"rules": [rule]},
    )
    assert conditions(fake, "fi") == [
        ("FailureTarget", "True", "FailedIndexes"),
        ("Failed", "True", "FailedIndexes"),
    ]
    final = status(fake, "fi")
    assert (final["completedIndexes"], final["failedIndexes"]) == ("0", "1")
    assert (final["succeeded"], final["failed"]) == (1, 1)
    assert len(fake.objects("pods")) == 2  # no retry of index 1


@pytest.mark.parametrize(
    ("policy", "replaced_while_terminating"),
    [("TerminatingOrFailed", True), ("Failed", False)],
)
async def test_pod_replacement_policy(
    tmp_path: Path, policy: str, replaced_while_terminating: bool
) -> None:
    kubelet = KubeletConfig(schedule_delay=0.001, start_delay=0.003, default_duration=30)
    async with (
        FakeCluster(directory=tmp_path, controller=FAST, kubelet_config=kubelet) as fake,
        await api_client(fake) as api,
    ):
        body = job_body("rp", backoffLimit=3, podReplacementPolicy=policy)
        await batch_api(api).create_namespaced_job("default", body)
        await wait_until(
            lambda: any(p["status"].get("phase") == "Running" for p in fake.objects("pods"))
        )
        fake.faults.pause_kubelet()  # the deleted pod stays terminating
        first = fake.objects("pods")[0]["metadata"]["name"]
        await core_api(api).delete_namespaced_pod(first, "default")
        await wait_until(lambda: status(fake, "rp").get("terminating") == 1)
        if replaced_while_terminating:
            await wait_until(lambda: len(fake.objects("pods")) == 2)
            assert status(fake, "rp")["failed"] == 1
        else:
            assert len(fake.objects("pods")) == 1
            assert "failed" not in status(fake, "rp")
        fake.faults.resume_kubelet()
        await wait_until(lambda: status(fake, "rp").get("failed") == 1)
        await wait_until(
            lambda: len(fake.objects("pods")) == 1 and status(fake, "rp").get("active") == 1
        )


# ---------------------------------------------------------------------- eviction


async def test_eviction_api_marks_and_deletes_the_pod(cluster: FakeCluster) -> None:
    core = core_api(await api_client(cluster))
    pod = {
        "metadata": {"name": "p", "annotations": {"fake.k8sjobs.io/duration": "30"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }
    try:
        await core.create_namespaced_pod("default", pod)
        await wait_until(
            lambda: (cluster.get("pods", "p") or {})["status"].get("phase") == "Running"
        )
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}
        url = f"{cluster.url}/api/v1/namespaces/default/pods/{{}}/eviction"
        async with aiohttp.ClientSession() as http:
            async with http.post(url.format("p"), json=eviction) as response:
                assert response.status == 201
                assert await response.json() == {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                }
            missing = dict(eviction, metadata={"name": "nope"})
            async with http.post(url.format("nope"), json=missing) as response:
                assert response.status == 404
                body = await response.json()
                assert (body["reason"], body["message"]) == ("NotFound", 'pods "nope" not found')
                assert body["details"] == {"name": "nope", "kind": "pods"}
            async with http.post(url.format("p"), data=json.dumps(missing)) as response:
                assert response.status == 400
        await wait_until(lambda: cluster.get("pods", "p") is None)
    finally:
        await core.api_client.close()


async def test_evicted_pod_keeps_its_disruption_condition(cluster: FakeCluster) -> None:
    history: list[dict[str, Any]] = []
    cluster.store.listen(lambda e: history.append(e.obj) if e.resource == "pods" else None)
    pod = {
        "metadata": {"name": "e", "annotations": {"fake.k8sjobs.io/duration": "30"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }
    cluster.store.create("pods", "default", pod)
    await wait_until(lambda: (cluster.get("pods", "e") or {})["status"].get("phase") == "Running")
    cluster.evict("e")
    await wait_until(lambda: cluster.get("pods", "e") is None)
    last = history[-1]
    assert last["status"]["phase"] == "Failed"
    disruption = [c for c in last["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["status"], c["reason"], c["message"]) for c in disruption] == [
        ("True", "EvictionByEvictionAPI", "Eviction API: evicting")
    ]


async def test_evicting_a_pod_that_never_started_fails_it_and_it_is_replaced(
    tmp_path: Path,
) -> None:
    """An unschedulable pod evicted under podReplacementPolicy Failed (a podFailurePolicy)
    ends Failed, as the pod GC marks it, so the Job replaces it instead of waiting forever."""
    node = NodeConfig(cpu="1", memory="1Gi")
    async with FakeCluster(directory=tmp_path, controller=FAST, node=node) as fake:
        ignore = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
        body = job_body(
            "pend",
            backoffLimit=0,
            resources={"requests": {"cpu": "2"}},
            podFailurePolicy={"rules": [ignore]},
        )
        fake.store.create("jobs", "default", body)
        await wait_until(lambda: len(fake.objects("pods")) == 1)
        first = fake.objects("pods")[0]["metadata"]["name"]
        fake.evict(first)
        await wait_until(lambda: fake.get("pods", first) is None)
        await wait_until(lambda: len(fake.objects("pods")) == 1)
        assert fake.objects("pods")[0]["metadata"]["name"] != first
        assert "failed" not in status(fake, "pend") and not finished(fake, "pend")


async def test_execute_mode_eviction_is_ignored_and_the_pod_replaced(tmp_path: Path) -> None:
    """A real process evicted mid-run; the podFailurePolicy ignores it; the retry succeeds."""
    pytest.importorskip("k8sjobs.local.podrunner")
    flag = tmp_path / "ran-once"
    script = f"test -f {shlex.quote(str(flag))} && exit 0; touch {shlex.quote(str(flag))}; sleep 30"
    kubelet = KubeletConfig(kill_grace=0.5)
    async with FakeCluster(
        "execute", directory=tmp_path / "c", controller=FAST, kubelet_config=kubelet
    ) as fake:
        body = job_body(
            "ev",
            backoffLimit=0,
            podFailurePolicy={
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
        )
        body["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
        async with await api_client(fake) as api:
            await batch_api(api).create_namespaced_job("default", body)
            await wait_until(lambda: flag.exists(), timeout=20)
            first = fake.objects("pods")[0]["metadata"]["name"]
            fake.evict(first)
            await wait_until(lambda: finished(fake, "ev"), timeout=20)
        assert conditions(fake, "ev")[-1] == ("Complete", "True", "CompletionsReached")
        final = status(fake, "ev")
        assert final["succeeded"] == 1 and "failed" not in final


async def test_execute_mode_success_policy_stops_the_workers(tmp_path: Path) -> None:
    """A launcher/worker Job: index 0 decides; the workers' real processes are stopped."""
    pytest.importorskip("k8sjobs.local.podrunner")
    script = 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then exit 0; else sleep 30; fi'
    kubelet = KubeletConfig(kill_grace=0.5)
    async with FakeCluster(
        "execute", directory=tmp_path, controller=FAST, kubelet_config=kubelet
    ) as fake:
        body = job_body(
            "lw",
            completionMode="Indexed",
            completions=3,
            parallelism=3,
            successPolicy={"rules": [{"succeededIndexes": "0"}]},
        )
        body["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
        async with await api_client(fake) as api:
            await batch_api(api).create_namespaced_job("default", body)
            await wait_until(lambda: finished(fake, "lw"), timeout=20)
        assert conditions(fake, "lw") == [
            ("SuccessCriteriaMet", "True", "SuccessPolicy"),
            ("Complete", "True", "SuccessPolicy"),
        ]
        final = status(fake, "lw")
        assert (final["succeeded"], final["completedIndexes"]) == (1, "0")
        assert "failed" not in final
