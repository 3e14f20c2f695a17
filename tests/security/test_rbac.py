"""k8sjobs rbac: the Role grants exactly what the Kubernetes backend sends, and a refusal says
which right to grant."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from k8sjobs.cli.main import main
from k8sjobs.cli.rbac import RULES, rbac_objects, rbac_yaml
from k8sjobs.errors import Forbidden
from k8sjobs.render.manifests import LABEL_STUDY, Target
from k8sjobs.render.manifests import render as render_any
from k8sjobs.render.sshkey import generate_key
from k8sjobs.session import Session
from k8sjobs.state import StepState
from k8sjobs.steps.spec import Resources, Step
from k8sjobs.testing import FakeCluster

from ..waiting import wait_until
from .sechelpers import Rbac, forbidden, pairs, run_cli, used

# Multi-node steps are launched over ssh: they render with a key pair.
render = partial(render_any, ssh_key=generate_key())

FAKE = "fake.k8sjobs.io/"
STORE = "registry.invalid:5000/k8sjobs"


def _step(name: str, *, duration: float = 0.05, exit_code: int = 0, **fields: object) -> Step:
    notes = {f"{FAKE}duration": str(duration), f"{FAKE}exit-code": str(exit_code)}
    return Step(name=name, script="echo hi", annotations=notes, **fields)


def _session(cluster: FakeCluster, tmp_path: Path) -> Session:
    return Session(
        study="rbac",
        kubeconfig=cluster.kubeconfig_path,
        store=STORE,
        log_dir=tmp_path / "logs",
        options={"pending_grace": 0.5},
    )


def test_role_is_namespaced_and_binds_the_service_account() -> None:
    account, role, binding = rbac_objects("hpc", "runner")
    assert [o["kind"] for o in (account, role, binding)] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
    ]
    assert {o["metadata"]["namespace"] for o in (account, role, binding)} == {"hpc"}
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "runner",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "runner", "namespace": "hpc"}]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    assert not any(v in pairs(RULES) for v in [("escalate", "roles"), ("bind", "roles")])


def test_bad_namespace_is_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="not a valid namespace"):
        rbac_objects("Not A Namespace")


def test_cli_prints_kubectl_appliable_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rbac", "--namespace", "hpc", "--service-account", "runner"]) == 0
    out = capsys.readouterr().out
    assert out == rbac_yaml("hpc", "runner")
    documents = list(yaml.safe_load_all(out))
    assert documents == rbac_objects("hpc", "runner")
    for rule in RULES:
        assert f"#   {rule.resource}: " in out  # every rule explained next to it


async def _full_run(cluster: FakeCluster, tmp_path: Path) -> None:
    """Drive every path of the Kubernetes backend that talks to the API server."""
    secret = {"TOKEN": SecretStr("s3cret")}
    multi = Resources(nodes=2, tasks=2)
    async with _session(cluster, tmp_path) as s:
        done = await s.submit(
            _step("produce", outputs={"o": "out.txt"}, resources=multi, env=secret)
        )
        failed = await s.submit(_step("fail", exit_code=3))
        await s.submit(_step("slow", duration=30))
        assert (await done.wait(20)).state is StepState.SUCCEEDED  # pods/log: output digests
        assert (await failed.wait(20)).state is StepState.FAILED  # pods/log: saved log
        await done.logs()  # pods/log
        async with _session(cluster, tmp_path) as other:  # k8sjobs cancel, another shell
            found = {h.name: h for h in await other.attach()}
            await found["slow"].cancel()  # patch (marked cancelled), delete jobs
    async with _session(cluster, tmp_path) as s:
        await s.attach()  # list configmaps (orphans)
        # replace: delete the Job and its ConfigMap, Secret and Service, then create again
        changed = _step("produce", duration=0.06, outputs={"o": "out.txt"}, resources=multi)
        changed = changed.model_copy(update={"env": {"TOKEN": SecretStr("s3cret2")}})
        await (await s.submit(changed, replace=True)).wait(20)
    await _stale_leftovers(cluster, tmp_path)
    await _job_unseen_by_the_watch(cluster, tmp_path)


async def _stale_leftovers(cluster: FakeCluster, tmp_path: Path) -> None:
    """A driver died after its ConfigMap/Secret/Service: they are read (get) and rewritten."""
    step = _step("stale", resources=Resources(nodes=2, tasks=2), env={"K": SecretStr("v")})
    old = render(step.model_copy(update={"script": "echo old"}), Target(study="rbac"))
    for obj in old.objects()[:-1]:
        cluster.store.create(obj["kind"].lower() + "s", "default", obj)
    async with _session(cluster, tmp_path) as s:
        assert (await (await s.submit(step)).wait(20)).ok


async def _job_unseen_by_the_watch(cluster: FakeCluster, tmp_path: Path) -> None:
    """A Job of the step's name that the study's watch does not see: create, 409, get, adopt."""
    step = _step("hidden", duration=30)
    job = render(step, Target(study="rbac")).job
    del job["metadata"]["labels"][LABEL_STUDY]
    cluster.store.create("jobs", "default", job)
    async with _session(cluster, tmp_path) as s:
        await s.submit(step)


async def test_role_grants_exactly_what_a_full_run_sends(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    await _full_run(cluster, tmp_path)
    assert rbac.denied == []
    sent = used(cluster)
    granted = pairs(RULES)
    assert sent - granted == set(), "the Role misses rights the backend uses"
    assert granted - sent == set(), "the Role grants rights no code path uses"


async def test_refused_create_names_the_verb_and_resource_to_grant(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    rbac.refuse.add(("create", "jobs"))
    async with _session(cluster, tmp_path) as s:
        with pytest.raises(Forbidden) as caught:
            await s.submit(_step("a"))
    message = str(caught.value)
    assert 'cannot create resource "jobs" in API group "batch"' in message
    assert 'grant verb "create" on resource "jobs" (apiGroup "batch")' in message
    assert caught.value.status == 403


async def test_refused_watch_list_fails_fast_with_the_right_to_grant(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    rbac.refuse.add(("list", "pods"))
    async with _session(cluster, tmp_path) as s:
        with pytest.raises(Forbidden, match=r'grant verb "list" on resource "pods"'):
            await asyncio.wait_for(s.submit(_step("a")), 10)


async def test_refused_log_names_the_log_subresource(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    rbac.refuse.add(("get", "pods/log"))
    async with _session(cluster, tmp_path) as s:
        handle = await s.submit(_step("a"))
        await handle.wait(20)
        with pytest.raises(Forbidden) as caught:
            await handle.logs()
    assert 'on resource "pods/log"' in str(caught.value)


async def _status_refused(cluster: FakeCluster, rbac: Rbac, tmp_path: Path) -> tuple[int, str]:
    rbac.refuse.add(("list", "jobs"))
    argv = ["status", "--study", "rbac", "--backend", "kubernetes"]
    argv += ["--kubeconfig", str(cluster.kubeconfig_path)]
    code, _out, err = await run_cli(argv, cwd=tmp_path)
    return code, err


async def test_cli_reports_a_refusal_with_the_right_to_grant(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    code, err = await _status_refused(cluster, rbac, tmp_path)
    first = err.splitlines()[0]
    assert code == 1  # the cluster refuses: not a mistake on the command line
    # The session's start is refused: one line naming the server, the refusal and the grant.
    assert first.startswith(f"error: Kubernetes API server {cluster.url} ")
    assert 'list jobs in namespace "default": jobs.batch is forbidden' in first
    grant = 'grant verb "list" on resource "jobs" (apiGroup "batch") to this identity'
    assert grant in first and first.endswith(
        "`k8sjobs rbac` prints a Role and RoleBinding that grant what k8sjobs needs."
    )


async def test_cli_refusal_prints_no_traceback(
    cluster: FakeCluster, rbac: Rbac, tmp_path: Path
) -> None:
    _code, err = await _status_refused(cluster, rbac, tmp_path)
    assert len(err.splitlines()) == 1, err


def test_forbidden_helper_matches_a_real_api_server() -> None:
    body = forbidden("create", "jobs", "system:serviceaccount:ns:sa").status()
    assert body["message"] == (
        'jobs.batch is forbidden: User "system:serviceaccount:ns:sa" cannot create resource '
        '"jobs" in API group "batch" in the namespace "default"'
    )
    assert body["code"] == 403 and body["reason"] == "Forbidden"


def test_minicluster_flag_adds_only_the_miniclusters_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain = rbac_objects("hpc")[1]["rules"]
    flux = rbac_objects("hpc", minicluster=True)[1]["rules"]
    assert flux[: len(plain)] == plain
    assert flux[len(plain) :] == [
        {
            "apiGroups": ["flux-framework.org"],
            "resources": ["miniclusters"],
            "verbs": ["create", "get", "delete"],
        }
    ]
    assert main(["rbac", "--namespace", "hpc", "--minicluster"]) == 0
    out = capsys.readouterr().out
    assert out == rbac_yaml("hpc", minicluster=True)
    assert "#   miniclusters: " in out


async def test_minicluster_rules_are_exactly_what_a_flux_run_sends(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    from k8sjobs.cli.rbac import MINICLUSTER_RULES

    from ..render.test_minicluster import crd

    cluster.store.create("customresourcedefinitions", "", crd())  # not through RBAC
    authorizer = Rbac(rules=RULES + MINICLUSTER_RULES)
    authorizer.install(cluster)
    flux: dict[str, Any] = {"target": "minicluster", "resources": Resources(nodes=2, tasks=2)}
    hidden = _step("hidden", duration=30, **flux)
    body = render(hidden, Target(study="rbac")).job
    del body["metadata"]["labels"][LABEL_STUDY]
    del body["spec"]["jobLabels"][LABEL_STUDY]  # its Job is unseen by the study's watch
    served = "the fake serves the MiniCluster kind"
    await wait_until(lambda: "miniclusters" in cluster.store.resources, served)
    cluster.store.create("miniclusters", "default", body)
    async with _session(cluster, tmp_path) as s:
        assert (await (await s.submit(_step("ok", **flux))).wait(20)).ok
        failed = await (await s.submit(_step("bad", exit_code=3, **flux))).wait(20)
        assert (failed.state, failed.exit_code) == (StepState.FAILED, 3)
        slow = await s.submit(_step("slow", duration=30, **flux))
        await slow.cancel()
        await s.submit(hidden)  # create: 409, get, adopt
    assert authorizer.denied == []
    sent = {pair for pair in used(cluster) if pair[1] == "miniclusters"}
    assert sent == pairs(MINICLUSTER_RULES)


async def test_jobset_rules_are_exactly_what_a_jobset_run_sends(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    from k8sjobs.cli.rbac import JOBSET_RULES

    await cluster.install_jobset()  # not through RBAC
    authorizer = Rbac(rules=RULES + JOBSET_RULES)
    authorizer.install(cluster)
    async with _session(cluster, tmp_path) as s:
        assert (await (await s.submit(_step("ok", target="jobset"))).wait(60)).ok
        await s.submit(_step("slow", duration=30, target="jobset"))
        async with _session(cluster, tmp_path) as other:  # k8sjobs cancel, another shell
            found = {h.name: h for h in await other.attach()}
            await found["slow"].cancel()  # patch (marked cancelled), delete the JobSet
        hidden = _step("hidden", duration=30, target="jobset")
        body = render(hidden, Target(study="rbac")).job
        del body["metadata"]["labels"][LABEL_STUDY]  # unseen by the study's watch
        cluster.store.create("jobsets", "default", body)
        await s.submit(hidden)  # create: 409, get, adopt
    assert authorizer.denied == []
    sent = {pair for pair in used(cluster) if pair[1] == "jobsets"}
    assert sent == pairs(JOBSET_RULES)


async def test_kueue_rules_are_exactly_what_a_queued_step_sends(tmp_path: Path) -> None:
    from k8sjobs.cli.rbac import KUEUE_RULES

    from ..kube.conftest import FAST

    async with FakeCluster("simulate", directory=tmp_path, controller=FAST, kueue=True) as fake:
        authorizer = Rbac(rules=RULES + KUEUE_RULES)
        authorizer.install(fake)
        async with _session(fake, tmp_path) as s:
            handle = await s.submit(_step("queued", queue="no-such-queue"))
            missing = "LocalQueue no-such-queue doesn't exist"
            await wait_until(lambda: handle.result.message == missing, "Kueue's word, read")
            await handle.cancel()
        assert authorizer.denied == []
        sent = {pair for pair in used(fake) if pair[1] == "workloads"}
    assert sent == pairs(KUEUE_RULES)


@pytest.mark.parametrize("flag", ["--jobset", "--kueue"])
def test_jobset_and_kueue_flags_add_only_their_rule(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from k8sjobs.cli.rbac import JOBSET_RULES, KUEUE_RULES

    (rule,) = JOBSET_RULES if flag == "--jobset" else KUEUE_RULES
    jobset = flag == "--jobset"
    plain = rbac_objects("hpc")[1]["rules"]
    extended = rbac_objects("hpc", jobset=jobset, kueue=not jobset)[1]["rules"]
    assert extended[: len(plain)] == plain
    added = {"apiGroups": [rule.group], "resources": [rule.resource], "verbs": list(rule.verbs)}
    assert extended[len(plain) :] == [added]
    assert main(["rbac", "--namespace", "hpc", flag]) == 0
    assert capsys.readouterr().out == rbac_yaml("hpc", jobset=jobset, kueue=not jobset)


async def test_a_role_without_patch_still_cancels_from_another_shell(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A Role made before cancel marked the Job (no patch on jobs): `k8sjobs cancel` from
    another shell still deletes it; only the running driver's word is lost (LOST)."""
    authorizer = Rbac(refuse={("patch", "jobs")})
    authorizer.install(cluster)
    async with _session(cluster, tmp_path) as s:
        slow = await s.submit(_step("slow", duration=30))
        async with _session(cluster, tmp_path) as other:
            found = {h.name: h for h in await other.attach()}
            await found["slow"].cancel()
        assert (await slow.wait(20)).state is StepState.LOST
    assert cluster.get("jobs", slow.object_name) is None
    assert [k.verb for k in authorizer.denied] == ["patch"]
