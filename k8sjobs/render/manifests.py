"""Turn a Step into the Kubernetes objects that run it (pure: no I/O, no clock, no randomness).

One step becomes a ConfigMap (the entrypoint script, expanded, plus the handoff
configuration), a batch/v1 Job, and when needed a Secret (secret env values) and a headless
Service (``nodes > 1``, so that indexed pods resolve each other by hostname). The same
manifests are sent to a cluster, to the fake cluster, and run by the local backend.

Inside every container the script finds its surroundings through environment variables,
never hard-coded paths: ``K8SJOBS_WORKDIR`` (its working directory, an emptyDir),
``K8SJOBS_INPUTS`` (input ``x`` is ``$K8SJOBS_INPUTS/x``), ``K8SJOBS_ENTRYPOINT``, and the
resource counts (``K8SJOBS_NODES``, ``K8SJOBS_TASKS``, ...).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import SecretStr

from .._handoffimage import HANDOFF_IMAGE
from .._version import __version__
from ..artifacts._reference import redact
from ..steps.failure import pod_failure_policy
from ..steps.key import script_digest
from ..steps.names import job_name, label_value
from ..steps.scheduling import pod_fields
from ..steps.spec import (
    ANNOTATIONS_LIMIT,
    CONFIGMAP_LIMIT,
    DEFAULT_LAUNCHER,
    USER_SETTABLE_ENV,
    Resources,
    SecretKeyRef,
    Step,
    StepOutput,
    Toleration,
    annotations_size,
    find_launcher_calls,
)
from ..steps.volumes import Volume, pod_volumes, shm_volume, volume_mounts
from . import jobset, minicluster, multinode
from ._shell import LEAVE_USAGE, MARK_START, RUN_CHILD, leave_exit_code
from .multinode import SshKey
from .podsecurity import check_restricted

__all__ = [
    "HANDOFF_IMAGE",
    "LABEL_HASH",
    "LABEL_STEP",
    "LABEL_STUDY",
    "Manifests",
    "Target",
    "failed_output_reference",
    "output_reference",
    "placement",
    "render",
]

LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_STUDY = "k8sjobs.io/study"
LABEL_STEP = "k8sjobs.io/step"
LABEL_HASH = "k8sjobs.io/spec-hash"
ANNOTATION_STUDY = "k8sjobs.io/study-name"
ANNOTATION_STEP = "k8sjobs.io/step-name"
ANNOTATION_OUTPUTS = "k8sjobs.io/outputs"
ANNOTATION_FAILED_OUTPUTS = "k8sjobs.io/failed-outputs"
#: A step's own pending_timeout (seconds), read by the judgement from the watched Job.
ANNOTATION_PENDING_TIMEOUT = "k8sjobs.io/pending-timeout"
# Lineage on each pushed output's manifest (docs/artifacts.md); the push adds the run's facts.
ANNOTATION_KEY = "k8sjobs.io/step-key"
ANNOTATION_SCRIPT = "k8sjobs.io/script-digest"
ANNOTATION_IMAGE = "k8sjobs.io/image"
ANNOTATION_INPUTS = "k8sjobs.io/inputs"
ANNOTATION_VERSION = "k8sjobs.io/version"
#: The memory (bytes) an OOM retry's Job asks for, where it differs from the step's own.
ANNOTATION_MEMORY_ATTEMPT = "k8sjobs.io/memory-attempt"

MAIN_CONTAINER = "step"
PULL_CONTAINER = "k8sjobs-pull"
PUSH_CONTAINER = "k8sjobs-push"
ENTRYPOINT_DIR = "/k8sjobs/entrypoint"
STATUS_DIR = "/k8sjobs/status"
AUTH_DIR = "/k8sjobs/registry-auth"
HANDOFF_CONFIG = f"{ENTRYPOINT_DIR}/handoff.json"
HANDOFF_UID = 65532
HANDOFF_TMP = "handoff-tmp"

# Runs the user's interpreter as a child, leaves what it used in the termination message
# and, for a step with outputs, its exit code for the push container.
RUN_WRAPPER = (
    "#!/bin/sh\n"
    "# k8sjobs: run the step, then leave what it used and its exit code for the output push.\n"
    + MARK_START
    # When the script started, for its outputs' lineage (never fails the step).
    + '(date -u +%Y-%m-%dT%H:%M:%SZ > "$K8SJOBS_STATUS_DIR/started") 2>/dev/null || :\n'
    + RUN_CHILD
    + LEAVE_USAGE
    + leave_exit_code("$K8SJOBS_STATUS_DIR")
)
#: The wrapper of a step without outputs: no push container waits for its exit code.
MEASURE_WRAPPER = (
    "#!/bin/sh\n"
    "# k8sjobs: run the step, then leave what it used in the termination message.\n"
    + MARK_START
    + RUN_CHILD
    + LEAVE_USAGE
    + 'exit "$rc"\n'
)


def restricted_context() -> dict[str, Any]:
    """Return a container securityContext that the Pod Security "restricted" level admits."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@dataclass(frozen=True)
class Target:
    """Where a step is rendered for: its study and namespace, and the artifact store.

    ``store`` is an artifact store location: a registry (``host[:port][/prefix]``) or an
    OCI layout directory (``oci:/path``). ``registry_secret`` names a Secret of type
    ``kubernetes.io/dockerconfigjson`` mounted only into the handoff containers.
    """

    study: str = "default"
    namespace: str = "default"
    store: str | None = None
    plain_http: bool = False
    registry_secret: str | None = None
    handoff_image: str = HANDOFF_IMAGE
    #: Seconds the rendered pull waits for an input not pushed yet (``k8sjobs render`` for
    #: kubectl apply, which starts every Job at once); 0, a session's, writes no setting.
    wait_inputs: float = 0.0

    def __post_init__(self) -> None:
        # The store location goes into the step's ConfigMap: credentials in it would be
        # readable by anyone who may read ConfigMaps (and printed by kubectl describe).
        store = self.store
        if store is not None and not store.startswith("oci:") and redact(store) != store:
            raise ValueError(
                f'store "{redact(store)}": a store location cannot hold credentials '
                "(user:password@host), which would be written into the step's ConfigMap; "
                "give registry_secret (a kubernetes.io/dockerconfigjson Secret) instead."
            )


@dataclass(frozen=True)
class Manifests:
    """The objects that run one step, and the names that tie them together."""

    name: str
    namespace: str
    spec_hash: str
    configmap: dict[str, Any]
    job: dict[str, Any]
    # Kept out of repr: a logged or printed Manifests must not show secret values (base64
    # is an encoding, not a disguise).
    secret: dict[str, Any] | None = field(default=None, repr=False)
    service: dict[str, Any] | None = None
    outputs: dict[str, str] = field(default_factory=dict)

    def objects(self) -> list[dict[str, Any]]:
        """Return every object in the order they are created (the Job last)."""
        extra = [obj for obj in (self.secret, self.service) if obj is not None]
        return [self.configmap, *extra, self.job]

    def to_yaml(self) -> str:
        """Return the objects as one multi-document YAML stream, ready for kubectl apply."""
        return yaml.dump_all(self.objects(), Dumper=_PlainDumper, sort_keys=False)


class _PlainDumper(yaml.SafeDumper):
    """A YAML dumper that writes shared objects in full (no &anchors), scripts as | blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # A block keeps a script readable; YAML cannot hold trailing spaces or tabs in one.
    plain_lines = all(line == line.rstrip() for line in text.splitlines())
    style = "|" if "\n" in text and plain_lines and "\t" not in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_PlainDumper.add_representer(str, _represent_str)


def output_reference(study: str, step: str, output: str) -> str:
    """Return the store reference (``repository:tag``) under which a step's output is kept."""
    return f"k8sjobs/{label_value(study)}/{label_value(step)}:{output}"


def failed_output_reference(study: str, step: str, output: str) -> str:
    """Return where a failed step's output is kept (``push_outputs: always``).

    A repository of its own (``.../<step>/failed``), never the tag a consumer reads: no
    input resolution can take a failed step's output for a success.
    """
    return f"k8sjobs/{label_value(study)}/{label_value(step)}/failed:{output}"


def placement(step: Step, target: Target) -> tuple[str, str]:
    """Return ``(object name, namespace)`` of ``step``'s Job (and ConfigMap) for ``target``.

    The one place a step's names are worked out: ``render`` fills ``Manifests`` from it, and
    the session names a handle from it before the step is rendered (a step waiting for its
    inputs is rendered only once they are pinned).
    """
    name = job_name(target.study, step.name)
    if step.target == "jobset":  # the controller's child Jobs and hostnames extend it
        name = jobset.object_name(name, step.resources.nodes)
    return name, step.namespace or target.namespace


def render(
    step: Step,
    target: Target = Target(),
    *,
    inputs: Mapping[str, str] = {},
    ssh_key: SshKey | None = None,
    placed: tuple[str, str] | None = None,
    key: str | None = None,
    memory: int | None = None,
) -> Manifests:
    """Return the manifests that run ``step`` for ``target``.

    ``inputs`` pins some inputs to exact references (for example a producer's output by
    digest once it is known); other ``StepOutput`` inputs resolve to the producer's tag.
    ``ssh_key`` is the key pair of a multi-node ``launch: ssh`` step (made by the caller at
    submit time: render has no randomness); it goes into the Secret and not into the hash.
    ``placed`` is ``placement(step, target)`` when the caller has it already (a session
    names each handle with it): with more steps in flight than ``job_name``'s cache holds,
    working it out again cost every step a second miss. ``key`` is the step's cache key
    (``k8sjobs.steps.key``), when the caller made it: its outputs carry it as lineage.
    ``memory`` is an OOM retry's
    (``retry_oom``): the pods ask for that many bytes, while the spec hash stays the step's
    as written, so a re-run of the study adopts the grown attempt's success.
    """
    name, namespace = placed or placement(step, target)
    _check_ssh_key(step, ssh_key)
    refs = _input_references(step, target, inputs)
    outputs = {key: output_reference(target.study, step.name, key) for key in step.outputs}
    if (refs or outputs) and target.store is None:
        raise ValueError(
            f'Step "{step.name}" reads or writes artifacts, so it needs an artifact store: '
            "give a registry (host:port/prefix) or an OCI layout directory (oci:/path)"
        )
    labels = {
        **step.labels,
        LABEL_MANAGED: "k8sjobs",
        LABEL_STUDY: label_value(target.study),
        LABEL_STEP: label_value(step.name),
    }
    annotations = {
        **step.annotations,
        ANNOTATION_STUDY: target.study,
        ANNOTATION_STEP: step.name,
    }
    if outputs:
        annotations[ANNOTATION_OUTPUTS] = json.dumps(outputs, sort_keys=True)
    if step.pending_timeout is not None:
        annotations[ANNOTATION_PENDING_TIMEOUT] = f"{step.pending_timeout.total_seconds():g}"
    failed = _failed_outputs(step, target)
    if failed:
        annotations[ANNOTATION_FAILED_OUTPUTS] = json.dumps(failed, sort_keys=True)
    _check_annotations(step, annotations)
    meta = {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    configmap = _configmap(step, target, meta, refs, outputs, key)
    secret = _secret(step, meta, ssh_key)
    service = _service(meta) if step.resources.nodes > 1 else None
    job = _job(step, target, meta, bool(refs), bool(outputs))
    if step.target == "minicluster":  # the operator makes the Job and the Service
        service, job = None, _minicluster(step, target, meta)
    if step.security == "restricted" and step.target == "job":
        _check_restricted(step, job["spec"]["template"])
    if step.target == "jobset":  # the controller makes the child Jobs and the Service
        service, job = None, _jobset(step, job)
    spec_hash = _spec_hash(configmap, job, secret, service)
    if memory is not None:
        grown = step.model_copy(
            update={"resources": step.resources.model_copy(update={"memory": memory})}
        )
        job = _job(grown, target, meta, bool(refs), bool(outputs))
        job["metadata"]["annotations"][ANNOTATION_MEMORY_ATTEMPT] = str(memory)
    for obj in (configmap, job, secret, service):
        if obj is not None:
            obj["metadata"]["labels"][LABEL_HASH] = spec_hash
    if step.target == "minicluster":  # the operator's Job carries it too (adoption)
        job["spec"]["jobLabels"][LABEL_HASH] = spec_hash
    return Manifests(name, namespace, spec_hash, configmap, job, secret, service, outputs)


def _check_ssh_key(step: Step, ssh_key: SshKey | None) -> None:
    if step.launch_mode == "ssh" and ssh_key is None:
        raise ValueError(
            f'Step "{step.name}" runs on {step.resources.nodes} nodes with launch "ssh", so it '
            "needs its key pair: pass ssh_key=k8sjobs.render.generate_key() to render "
            '(a Session does this), or set launch: "none"'
        )
    multinode.check_env(step)


def _failed_outputs(step: Step, target: Target) -> dict[str, str]:
    """Return where each output goes when the step fails (none unless push_outputs: always)."""
    if step.push_outputs != "always":
        return {}
    return {key: failed_output_reference(target.study, step.name, key) for key in step.outputs}


def _check_annotations(step: Step, annotations: dict[str, str]) -> None:
    # The step's own annotations fit (Step checks them); with the ones added here (names,
    # output references) they may not, and the API server would refuse every object.
    size = annotations_size(annotations)
    if size > ANNOTATIONS_LIMIT:
        added = size - annotations_size(step.annotations)
        raise ValueError(
            f'Step "{step.name}": its annotations, with the {added} '
            f"bytes k8sjobs adds (study, step and output names), take {size} bytes, over the "
            f"{ANNOTATIONS_LIMIT}-byte limit of the Kubernetes API; shorten its annotations"
        )


def _meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    # Each object gets its own copy: they are patched apart later (ownerReferences). Labels
    # and annotations are flat maps of strings, so copying them is copying all there is.
    return {**meta, "labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])}


def _input_references(step: Step, target: Target, pinned: Mapping[str, str]) -> dict[str, str]:
    refs = {}
    for key, source in step.inputs.items():
        if key in pinned:
            refs[key] = pinned[key]
        elif isinstance(source, StepOutput):
            refs[key] = output_reference(target.study, source.step, source.output)
        else:
            refs[key] = source
    return refs


def _configmap(
    step: Step,
    target: Target,
    meta: Mapping[str, Any],
    inputs: Mapping[str, str],
    outputs: Mapping[str, str],
    key: str | None = None,
) -> dict[str, Any]:
    name, namespace = str(meta["name"]), str(meta["namespace"])
    data = {"entrypoint": expand_launcher(step, name, namespace)}
    if step.target == "minicluster":
        if inputs or outputs:
            data[minicluster.RUN_KEY] = minicluster.RUN_WRAPPER
    else:
        data["run"] = RUN_WRAPPER if outputs else MEASURE_WRAPPER
    if step.launch_mode == "ssh":
        data.update(multinode.config_data(step, name, namespace))
    if inputs or outputs:
        handoff = {
            "store": target.store,
            "plain_http": target.plain_http,
            **({"wait_inputs": target.wait_inputs} if target.wait_inputs and inputs else {}),
            "inputs": dict(inputs),
            "outputs": {
                key: {
                    "path": step.outputs[key],
                    "reference": ref,
                    **_failed_push(step, target, key),
                }
                for key, ref in outputs.items()
            },
            "annotations": {
                ANNOTATION_STUDY: target.study,
                ANNOTATION_STEP: step.name,
                **lineage_annotations(step, inputs),
                **({ANNOTATION_KEY: key} if key else {}),
            },
        }
        data["handoff.json"] = json.dumps(handoff, sort_keys=True)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise ValueError(
            f'Step "{step.name}": the expanded script and handoff configuration take {size} '
            f"bytes, over the {CONFIGMAP_LIMIT}-byte ConfigMap limit; shorten the script"
        )
    # Immutable: it never changes after creation, and a kubelet then keeps no watch on it.
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(meta),
        "immutable": True,
        "data": data,
    }


def lineage_annotations(step: Step, inputs: Mapping[str, str]) -> dict[str, str]:
    """Return the lineage every output of ``step`` carries (its push adds the run's facts).

    The script's digest, the image, each input's reference (pinned by digest when the
    session pinned it) and the k8sjobs version (``render`` adds the step's key when given).
    """
    return {
        ANNOTATION_SCRIPT: script_digest(step),
        ANNOTATION_IMAGE: step.image,
        ANNOTATION_INPUTS: json.dumps(dict(inputs), sort_keys=True),
        ANNOTATION_VERSION: __version__,
    }


def _failed_push(step: Step, target: Target, key: str) -> dict[str, str]:
    """Return the handoff config's "failed_reference" of one output, when it has one."""
    failed = _failed_outputs(step, target)
    return {"failed_reference": failed[key]} if key in failed else {}


def _secret(step: Step, meta: Mapping[str, Any], ssh_key: SshKey | None) -> dict[str, Any] | None:
    values = {k: v.get_secret_value() for k, v in step.env.items() if isinstance(v, SecretStr)}
    # A launched step's key pair shares the Secret: its type says what it holds.
    kind = "Opaque"
    if step.launch_mode == "ssh" and ssh_key is not None:
        values.update(ssh_key.secret_data())
        kind = "kubernetes.io/ssh-auth"
    if not values:
        return None
    data = {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(meta),
        "type": kind,
        "immutable": True,
        "data": data,
    }


def _service(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(meta),
        "spec": {
            "clusterIP": "None",
            "selector": {"batch.kubernetes.io/job-name": meta["name"]},
            # MPI ranks look each other up before any pod is Ready.
            "publishNotReadyAddresses": True,
        },
    }


def expand_launcher(step: Step, name: str, namespace: str = "default") -> str:
    """Return the script with every ``$(LAUNCHER)[...]`` replaced by the launcher command."""
    res = step.resources
    template = multinode.launcher_template(step)
    if step.target == "minicluster" and step.launcher == DEFAULT_LAUNCHER:
        template = minicluster.LAUNCHER
    script, pieces, last = step.script, [], 0
    for call in find_launcher_calls(script):
        nodes, procs = call.counts(res)
        per_node = math.ceil(procs / nodes)
        if step.launch_mode == "ssh":
            names = multinode.hosts(name, namespace, nodes, step)
        elif step.target == "jobset" and res.nodes > 1:
            names = jobset.hosts(name, namespace, nodes, "none")
        else:
            names = [f"{name}-{i}.{name}" for i in range(nodes)] if res.nodes > 1 else []
        hosts = ",".join(f"{h}:{per_node}" for h in names) or f"localhost:{per_node}"
        command = template.format(
            procs=procs,
            nodes=nodes,
            procs_per_node=per_node,
            cores_per_task=res.cores_per_task,
            hosts=hosts,
            hostfile=multinode.HOSTFILE_REFERENCE,
        )
        pieces += [script[last : call.start], command]
        last = call.end
    return "".join([*pieces, script[last:]])


def _literal(value: str) -> str:
    """Return ``value`` escaped so that Kubernetes' ``$(VAR)`` expansion gives it back unchanged.

    The kubelet expands ``$(NAME)`` in env values and turns ``$$`` into ``$``: without this a
    value holding ``$(K8SJOBS_STEP)`` or ``$$`` would not arrive as written.
    """
    return value.replace("$", "$$")


def _env(step: Step, target: Target, outputs: bool) -> list[dict[str, Any]]:
    res = step.resources
    env: list[dict[str, Any]] = [
        {"name": "K8SJOBS_STUDY", "value": target.study},
        {"name": "K8SJOBS_STEP", "value": step.name},
        {"name": "K8SJOBS_WORKDIR", "value": step.workdir},
        {"name": "K8SJOBS_INPUTS", "value": posixpath.join(step.workdir, "inputs")},
        {"name": "K8SJOBS_ENTRYPOINT", "value": f"{ENTRYPOINT_DIR}/entrypoint"},
        {"name": "K8SJOBS_NODES", "value": str(res.nodes)},
        {"name": "K8SJOBS_TASKS", "value": str(res.tasks)},
        {"name": "K8SJOBS_TASKS_PER_NODE", "value": str(res.tasks_per_node)},
        {"name": "K8SJOBS_CORES_PER_TASK", "value": str(res.cores_per_task)},
        {"name": "K8SJOBS_GPUS", "value": str(res.gpus)},
    ]
    if outputs:
        env.append({"name": "K8SJOBS_STATUS_DIR", "value": STATUS_DIR})
    return [{"name": e["name"], "value": _literal(e["value"])} for e in env]


def _user_env(step: Step, name: str, namespace: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    if step.launch_mode == "ssh":  # before the user's own, so that theirs win
        pairs = multinode.launcher_env(step, name, namespace, ENTRYPOINT_DIR)
        env += [{"name": key, "value": _literal(value)} for key, value in pairs]
    if "OMP_NUM_THREADS" not in step.env:
        env.append({"name": "OMP_NUM_THREADS", "value": str(step.resources.cores_per_task)})
    for key, value in step.env.items():
        if isinstance(value, SecretStr):
            ref = {"name": name, "key": key}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
        elif isinstance(value, SecretKeyRef):
            ref = {"name": value.secret, "key": value.key}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": key, "value": _literal(value)})
    return env


def container_resources(res: Resources) -> dict[str, Any]:
    """Return a container's ``resources`` for ``res`` (per pod): requests equal to limits.

    Guaranteed QoS, as HPC codes expect; shared by a step's main container and an
    allocation's agent (``k8sjobs.render.allocation``), whose pods hold a step's resources.
    """
    amounts: dict[str, str] = {"cpu": res.cpu_quantity}
    if res.memory is not None:
        amounts["memory"] = str(res.memory)
    if res.gpus:
        amounts[res.gpu_resource] = str(res.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _main_container(
    step: Step, target: Target, meta: Mapping[str, Any], outputs: bool
) -> dict[str, Any]:
    name, namespace = str(meta["name"]), str(meta["namespace"])
    entrypoint = f"{ENTRYPOINT_DIR}/entrypoint"
    argv = [*step.argv, entrypoint]
    command = ["/bin/sh", f"{ENTRYPOINT_DIR}/run", *argv]
    mounts = [
        {"name": "entrypoint", "mountPath": ENTRYPOINT_DIR, "readOnly": True},
        {"name": "work", "mountPath": step.workdir},
    ]
    if outputs:
        mounts.append({"name": "status", "mountPath": STATUS_DIR})
    launched = step.launch_mode == "ssh"
    if launched:  # the role wrapper picks launcher or worker by JOB_COMPLETION_INDEX
        command = ["/bin/sh", f"{ENTRYPOINT_DIR}/{multinode.ROLE_KEY}", *command]
        mounts.append({"name": "ssh", "mountPath": step.ssh_home, "readOnly": True})
        mounts.append({"name": "sshd", "mountPath": multinode.SSHD_DIR})
    mounts += volume_mounts(_user_volumes(step))
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": step.image,
        "command": command,
        "workingDir": step.workdir,
        "env": _env(step, target, outputs) + _user_env(step, name, namespace),
        "resources": container_resources(step.resources),
        "volumeMounts": mounts,
    }
    if launched:
        container["readinessProbe"] = multinode.readiness_probe()
    if step.security == "restricted":
        container["securityContext"] = restricted_context()
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
    return container


def _handoff_container(
    step: Step, target: Target, name: str, verb: str, outputs: bool
) -> dict[str, Any]:
    mounts = [
        {"name": "entrypoint", "mountPath": ENTRYPOINT_DIR, "readOnly": True},
        {"name": "work", "mountPath": step.workdir},
    ]
    env = _env(step, target, outputs)
    # The pull's limits, when the step raises them (plain values only: they are no secret).
    env += [
        {"name": key, "value": _literal(value)}
        for key, value in step.env.items()
        if key in USER_SETTABLE_ENV and verb == "pull" and isinstance(value, str)
    ]
    if outputs:
        mounts.append({"name": "status", "mountPath": STATUS_DIR})
    # The root filesystem is read-only; archives of directory outputs are staged in /tmp.
    mounts.append({"name": HANDOFF_TMP, "mountPath": "/tmp"})
    if target.registry_secret:
        mounts.append({"name": "registry-auth", "mountPath": AUTH_DIR, "readOnly": True})
        env.append({"name": "DOCKER_CONFIG", "value": AUTH_DIR})
    amounts = {"cpu": "100m", "memory": "128Mi"}
    return {
        "name": PULL_CONTAINER if verb == "pull" else PUSH_CONTAINER,
        "image": target.handoff_image,
        "command": ["python", "-m", "k8sjobs.handoff", verb, "--config", HANDOFF_CONFIG],
        "workingDir": step.workdir,
        "env": env,
        "resources": {"requests": amounts, "limits": {"memory": "256Mi"}},
        "volumeMounts": mounts,
        "securityContext": {
            **restricted_context(),
            "runAsUser": HANDOFF_UID,
            "runAsGroup": HANDOFF_UID,
        },
        # The handoff writes its one-line error there; a crash that wrote none leaves the
        # log's tail instead: either way the step's message says why, read from the Pod.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _volumes(step: Step, target: Target, name: str, outputs: bool) -> list[dict[str, Any]]:
    items = [
        {"key": "entrypoint", "path": "entrypoint", "mode": 0o555},
        {"key": "run", "path": "run", "mode": 0o555},
    ]
    if step.inputs or step.outputs:
        items.append({"key": "handoff.json", "path": "handoff.json", "mode": 0o444})
    launched = step.launch_mode == "ssh"
    if launched:
        items += [
            {"key": multinode.ROLE_KEY, "path": multinode.ROLE_KEY, "mode": 0o555},
            {"key": multinode.HOSTFILE_KEY, "path": multinode.HOSTFILE_KEY, "mode": 0o444},
            {"key": multinode.SSHD_CONFIG_KEY, "path": multinode.SSHD_CONFIG_KEY, "mode": 0o444},
        ]
    volumes: list[dict[str, Any]] = [
        {"name": "entrypoint", "configMap": {"name": name, "defaultMode": 0o555, "items": items}},
        {"name": "work", "emptyDir": {}},
    ]
    if launched:
        volumes.append({"name": "ssh", "secret": multinode.secret_volume(name)})
        volumes.append({"name": "sshd", "emptyDir": {}})
    if outputs:
        volumes.append({"name": "status", "emptyDir": {}})
    if step.security == "restricted":
        volumes.append({"name": "tmp", "emptyDir": {}})
    if step.inputs or step.outputs:
        # Not shared with the step's own /tmp: the user's script never meets the handoff's files.
        volumes.append({"name": HANDOFF_TMP, "emptyDir": {}})
    if target.registry_secret and (step.inputs or step.outputs):
        auth = {
            "secretName": target.registry_secret,
            "defaultMode": 0o444,
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
        }
        volumes.append({"name": "registry-auth", "secret": auth})
    return volumes + pod_volumes(_user_volumes(step))


def _user_volumes(step: Step) -> list[Volume]:
    """Return the step's own volumes, with its memory-backed /dev/shm if it asks for one."""
    return [*step.volumes, *([shm_volume(step.shm)] if step.shm is not None else [])]


def _pod_spec(
    step: Step, target: Target, meta: Mapping[str, Any], inputs: bool, outputs: bool
) -> dict[str, Any]:
    name = str(meta["name"])
    containers = [_main_container(step, target, meta, outputs)]
    if outputs:
        containers.append(_handoff_container(step, target, name, "push", outputs))
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": step.service_account is not None,
    }
    if inputs:
        spec["initContainers"] = [_handoff_container(step, target, name, "pull", outputs)]
    spec["containers"] = containers
    spec["volumes"] = _volumes(step, target, name, outputs)
    if step.resources.nodes > 1:
        spec["subdomain"] = name
    spec |= placement_fields(
        step.service_account, step.node_selector, step.tolerations, step.image_pull_secrets
    )
    spec |= pod_fields(
        job_name=name,
        priority_class=step.priority_class,
        runtime_class=step.runtime_class,
        affinity=step.affinity,
        spread=step.spread,
    )
    if step.security == "restricted":
        spec["securityContext"] = restricted_pod_context()
    return spec


def restricted_pod_context() -> dict[str, Any]:
    """Return the pod securityContext of a restricted pod: non-root (the handoff's uid)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": HANDOFF_UID,
        "runAsGroup": HANDOFF_UID,
        "fsGroup": HANDOFF_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def placement_fields(
    service_account: str | None,
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    image_pull_secrets: Sequence[str],
) -> dict[str, Any]:
    """Return the pod spec fields a step (or an allocation) sets of these, those set only.

    Shared with ``k8sjobs.render.allocation``, whose pods take the same fields.
    """
    spec: dict[str, Any] = {}
    if service_account:
        spec["serviceAccountName"] = service_account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [_toleration(t.model_dump()) for t in tolerations]
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    return spec


def _toleration(fields: Mapping[str, Any]) -> dict[str, Any]:
    names = {"toleration_seconds": "tolerationSeconds"}
    return {names.get(k, k): v for k, v in fields.items() if v is not None}


def _job(
    step: Step,
    target: Target,
    meta: Mapping[str, Any],
    inputs: bool,
    outputs: bool,
) -> dict[str, Any]:
    nodes = step.resources.nodes
    template_meta = {"labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])}
    spec: dict[str, Any] = {"backoffLimit": step.retries}
    policy = pod_failure_policy(
        step.disruptions, step.retry_on_exit_codes, step.fail_on_exit_codes, MAIN_CONTAINER
    )
    if policy is not None:  # needs restartPolicy Never, which every k8sjobs pod has
        spec["podFailurePolicy"] = policy
    spec |= {
        "completions": nodes,
        "parallelism": nodes,
        "template": {
            "metadata": template_meta,
            "spec": _pod_spec(step, target, meta, inputs, outputs),
        },
    }
    if nodes > 1:
        spec["completionMode"] = "Indexed"
    if step.launch_mode == "ssh":
        # Index 0 decides success; an index failing past its retries fails the Job at once.
        del spec["backoffLimit"]
        spec.update(multinode.job_policy(step))
    if step.walltime is not None:
        spec["activeDeadlineSeconds"] = math.ceil(step.walltime.total_seconds())
    if step.ttl_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = math.ceil(step.ttl_after_finished.total_seconds())
    job_meta = _meta(meta)
    if step.queue:
        job_meta["labels"] |= step.queue_labels
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": spec}


def _minicluster(step: Step, target: Target, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Return the Flux Operator MiniCluster that stands for the Job (k8sjobs.render.minicluster)."""
    name, namespace = str(meta["name"]), str(meta["namespace"])
    env = _env(step, target, False) + _user_env(step, name, namespace)
    # Secret values reach the operator by reference (its "secrets"), not as env entries.
    env = [e for e in env if "value" in e]
    handoff = None
    if step.inputs or step.outputs:
        # A Job pod's pull container's env, with the sidecar's directories (on the shared
        # volume) in place of the step's; minicluster adds DOCKER_CONFIG with the Secret.
        own = _handoff_container(step, target, name, "pull", False)["env"]
        own += [{"name": k, "value": v} for k, v in minicluster.sidecar_env(HANDOFF_CONFIG).items()]
        mine = {e["name"]: e for e in own if e["name"] != "DOCKER_CONFIG"}
        handoff = minicluster.Handoff(
            image=target.handoff_image,
            env=list(mine.values()),
            config=HANDOFF_CONFIG,
            registry_secret=target.registry_secret,
            auth_dir=AUTH_DIR,
        )
        if target.wait_inputs and step.inputs:
            # The Flux runner's wait for the sidecar's pull must outlast the pull's own wait
            # for the inputs, or it gives up on a pull that is still waiting as told.
            wait = minicluster.INPUT_WAIT + math.ceil(target.wait_inputs)
            env = [*env, {"name": "K8SJOBS_HANDOFF_WAIT", "value": str(wait)}]
    return minicluster.minicluster(
        step,
        _meta(meta),
        env,
        entrypoint_dir=ENTRYPOINT_DIR,
        resources=container_resources(step.resources),
        handoff=handoff,
    )


def _jobset(step: Step, job: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JobSet that stands for the Job (k8sjobs.render.jobset), its pods checked
    against the restricted level when the step asks for it."""
    found = jobset.jobset(step, job, main=MAIN_CONTAINER, ssh_port=multinode.SSH_PORT)
    if step.security == "restricted":
        for rjob in found["spec"]["replicatedJobs"]:
            _check_restricted(step, rjob["template"]["spec"]["template"])
    return found


def _check_restricted(step: Step, template: Mapping[str, Any]) -> None:
    """Raise ValueError, before anything is sent, if a restricted step's pod would be refused.

    A namespace that enforces the "restricted" Pod Security level rejects such a pod at
    creation, long after the step was written; the same rules checked here name the field.
    """
    problems = check_restricted(template["spec"], template["metadata"].get("annotations") or {})
    if problems:
        raise ValueError(
            f'Step "{step.name}" asks for security="restricted", but its pod breaks the '
            "restricted Pod Security level: " + "; ".join(problems)
        )


def _spec_hash(*objects: Mapping[str, Any] | None) -> str:
    # Secret values stay out of the hash (a short hash of a weak secret is a leak); a Secret
    # takes part through its keys only.
    shown = []
    for obj in objects:
        if obj is None:
            continue
        body = dict(obj)
        if body.get("kind") == "Secret":
            body = {**body, "data": sorted(body.get("data", {}))}
        shown.append(body)
    canonical = json.dumps(shown, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]
