"""Every kind of step renders, in restricted mode, a pod the Pod Security "restricted" level
admits; the handoff containers meet it in every mode; the checker catches each rule."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from pydantic import SecretStr

from k8sjobs.render.manifests import PULL_CONTAINER as PULL
from k8sjobs.render.manifests import PUSH_CONTAINER as PUSH
from k8sjobs.render.manifests import Manifests, Target
from k8sjobs.render.manifests import render as render_any
from k8sjobs.render.podsecurity import check_baseline, check_restricted
from k8sjobs.render.sshkey import generate_key
from k8sjobs.steps.spec import Resources, SecretKeyRef, Step, Toleration

# Multi-node steps are launched over ssh: they render with a key pair.
render = partial(render_any, ssh_key=generate_key())

REGISTRY = Target(study="sec", store="registry.example:5000/k8sjobs", registry_secret="regcred")
LAYOUT = Target(study="sec", store="oci:/srv/artifacts")


def _kinds() -> dict[str, tuple[Step, Target]]:
    """Return one step of every shape render() knows, with the target it needs."""
    base = {"name": "s", "script": "echo hi"}
    many = Resources(nodes=3, tasks=12, cores_per_task=2, memory="4Gi")
    return {
        "single": (Step(**base), Target()),
        "multi-node": (Step(name="m", script="$(LAUNCHER) ./a.out", resources=many), Target()),
        "gpus": (Step(**base, resources=Resources(gpus=2, gpu_resource="amd.com/gpu")), Target()),
        "inputs-outputs-registry-secret": (
            Step(**base, inputs={"data": "registry.example:5000/d:1"}, outputs={"r": "out"}),
            REGISTRY,
        ),
        "outputs-only-layout": (Step(**base, outputs={"r": "out/r.txt"}), LAYOUT),
        "inputs-only": (Step(**base, inputs={"data": "registry.example:5000/d:1"}), REGISTRY),
        "secret-env": (
            Step(**base, env={"T": SecretStr("x"), "D": SecretKeyRef(secret="db", key="pw")}),
            Target(),
        ),
        "queue": (Step(**base, queue="team-a"), Target()),
        "tolerations-selector": (
            Step(
                **base,
                tolerations=[Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
                node_selector={"pool": "hpc"},
            ),
            Target(),
        ),
        "service-account-pull-secrets": (
            Step(**base, service_account="runner", image_pull_secrets=["pull"]),
            Target(),
        ),
        "python-walltime-retries": (
            Step(**base, shell="python", walltime="1h", retries=2, ttl_after_finished=60),
            Target(),
        ),
        "everything": (
            Step(
                **base,
                resources=many.model_copy(update={"gpus": 1}),
                env={"T": SecretStr("x"), "PLAIN": "1"},
                inputs={"data": "registry.example:5000/d:1"},
                outputs={"r": "out"},
                queue="q",
                labels={"team": "a"},
                annotations={"note": "n"},
            ),
            REGISTRY,
        ),
    }


KINDS = _kinds()


def _pod(manifests: Manifests) -> tuple[dict[str, Any], dict[str, str]]:
    template = manifests.job["spec"]["template"]
    return template["spec"], template["metadata"].get("annotations", {})


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_restricted_mode_passes_pod_security_restricted(kind: str) -> None:
    step, target = KINDS[kind]
    spec, annotations = _pod(render(step.model_copy(update={"security": "restricted"}), target))
    assert check_restricted(spec, annotations) == []


def test_render_refuses_a_restricted_step_whose_pod_the_level_would_refuse() -> None:
    # A user's pod annotation can undo what restricted mode sets; render says so before
    # anything is sent, instead of the namespace's admission refusing the pod later.
    key = "container.apparmor.security.beta.kubernetes.io/step"
    step = Step(name="s", script="echo hi", security="restricted", annotations={key: "unconfined"})
    with pytest.raises(ValueError, match=r'Step "s" asks for security="restricted".*AppArmor'):
        render(step)
    assert check_restricted(*_pod(render(step.model_copy(update={"security": "default"}))))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_default_mode_passes_baseline(kind: str) -> None:
    step, target = KINDS[kind]
    assert check_baseline(*_pod(render(step, target))) == []


@pytest.mark.parametrize(
    "kind", sorted(k for k in KINDS if KINDS[k][0].inputs or KINDS[k][0].outputs)
)
@pytest.mark.parametrize("security", ["default", "restricted"])
def test_handoff_containers_are_restricted_in_every_mode(kind: str, security: str) -> None:
    step, target = KINDS[kind]
    spec, _ = _pod(render(step.model_copy(update={"security": security}), target))
    handoff = {
        "initContainers": [c for c in spec.get("initContainers", []) if c["name"] == PULL],
        "containers": [c for c in spec["containers"] if c["name"] == PUSH],
        "volumes": spec["volumes"],
    }
    assert handoff["initContainers"] or handoff["containers"]
    assert check_restricted(handoff) == []
    for container in handoff["initContainers"] + handoff["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["runAsUser"] != 0
        # A read-only root still needs somewhere to stage archives.
        assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}


def test_registry_credentials_reach_only_the_handoff_containers() -> None:
    step, target = KINDS["everything"]
    spec, _ = _pod(render(step, target))
    for container in spec.get("initContainers", []) + spec["containers"]:
        mounts = {m["name"] for m in container["volumeMounts"]}
        env = {e["name"] for e in container["env"]}
        handoff = container["name"] in (PULL, PUSH)
        assert ("registry-auth" in mounts) is handoff
        assert ("DOCKER_CONFIG" in env) is handoff
    (auth,) = [v for v in spec["volumes"] if v["name"] == "registry-auth"]
    assert auth["secret"]["secretName"] == "regcred"


def test_service_account_token_is_mounted_only_when_asked() -> None:
    plain, _ = _pod(render(KINDS["single"][0], Target()))
    assert plain["automountServiceAccountToken"] is False
    with_account, _ = _pod(render(*KINDS["service-account-pull-secrets"]))
    assert with_account["automountServiceAccountToken"] is True


# --- the checker itself: each rule is caught -----------------------------------------


def _good() -> dict[str, Any]:
    spec, _ = _pod(render(Step(name="s", script="x", security="restricted"), Target()))
    return spec


def _with(path: str, value: Any) -> dict[str, Any]:
    spec = _good()
    node: Any = spec
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return spec


BREAKS = {
    "hostNetwork": ("hostNetwork", True, "Host Namespaces"),
    "hostPID": ("hostPID", True, "Host Namespaces"),
    "privileged": ("containers.0.securityContext.privileged", True, "Privileged"),
    "capability add": (
        "containers.0.securityContext.capabilities.add",
        ["SYS_ADMIN"],
        "Capabilities",
    ),
    "capability add (baseline-allowed)": (
        "containers.0.securityContext.capabilities.add",
        ["CHOWN"],
        "may hold only NET_BIND_SERVICE",
    ),
    "no drop ALL": ("containers.0.securityContext.capabilities.drop", [], "drop must include"),
    "escalation": (
        "containers.0.securityContext.allowPrivilegeEscalation",
        True,
        "Privilege Escalation",
    ),
    "root uid": ("securityContext.runAsUser", 0, "runAsUser must not be 0"),
    "root container": ("containers.0.securityContext.runAsNonRoot", False, "Non-root"),
    "unconfined": ("securityContext.seccompProfile", {"type": "Unconfined"}, "Seccomp"),
    "selinux": ("securityContext.seLinuxOptions", {"type": "spc_t"}, "SELinux"),
    "apparmor": (
        "containers.0.securityContext.appArmorProfile",
        {"type": "Unconfined"},
        "AppArmor",
    ),
    "procMount": ("containers.0.securityContext.procMount", "Unmasked", "/proc Mount"),
    "sysctl": ("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}], "Sysctls"),
    "hostPort": ("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "hostPort"),
    "hostPath": ("volumes", [{"name": "h", "hostPath": {"path": "/"}}], "HostPath"),
    "nfs": ("volumes", [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "restricted allows"),
    "hostProcess": (
        "securityContext.windowsOptions",
        {"hostProcess": True},
        "hostProcess",
    ),
}


def test_the_rendered_restricted_pod_is_the_checkers_good_case() -> None:
    assert check_restricted(_good()) == []


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_checker_catches(case: str) -> None:
    path, value, words = BREAKS[case]
    problems = check_restricted(_with(path, value))
    assert problems, case
    assert any(words in p for p in problems), problems


def test_checker_needs_seccomp_somewhere() -> None:
    spec = _good()
    del spec["securityContext"]["seccompProfile"]
    for container in spec["containers"]:
        del container["securityContext"]["seccompProfile"]
    assert any("seccompProfile" in p for p in check_restricted(spec))
    for container in spec["containers"]:
        container["securityContext"]["seccompProfile"] = {"type": "Localhost"}
    assert check_restricted(spec) == []


def test_apparmor_annotation_must_be_runtime_default_or_localhost() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/step"
    assert check_restricted(_good(), {key: "runtime/default"}) == []
    assert check_restricted(_good(), {key: "localhost/mine"}) == []
    assert any("AppArmor" in p for p in check_restricted(_good(), {key: "unconfined"}))
