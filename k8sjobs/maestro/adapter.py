"""KubernetesScriptAdapter: run the steps of a Maestro (maestrowf) study as Kubernetes Jobs.

Maestro creates a new adapter for every generate, submit, check and cancel, pickles job ids
between calls and is synchronous. So the adapter keeps nothing in memory between calls:

- a job id is the string ``"<namespace>/<job name>"``, and the Job itself carries what a
  later call needs (the step workspace and log name, as annotations);
- ``check_jobs`` asks the API server once per namespace (one Job list, plus one Pod list
  only in a call where some job has just ended), whatever the number of jobs;
- the async core runs on k8sjobs' private loop thread (``k8sjobs.sync``), where one API
  client per kubeconfig and context lives for the whole process: no reconnect per call.

The ``run:`` block of a Maestro spec is schema-locked, so the Kubernetes settings (image,
shell, namespace, artifact registry, memory, ...) come from the ``batch:`` block, with
per-step overrides under ``batch.steps.<step name>`` (see docs/maestro.md). ``maestro run``
finds ``type: kubernetes`` through ``k8sjobs.maestro._hook``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import difflib
import functools
import logging
import math
import os
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import ApiError, NotFound
from ..kube.client import JOBS, PODS, Kind, KubeClient
from ..kube.config import load_config
from ..kube.create import create_step, ended, top_kind
from ..kube.watch import wait_deleted
from ..render import minicluster, multinode
from ..render.manifests import MAIN_CONTAINER, Manifests, Target, render
from ..render.sshkey import key_for
from ..state import StepResult, StepState
from ..status import judge
from ..steps.names import is_dns_label, job_name
from ..steps.scheduling import Affinity
from ..steps.spec import DEFAULT_IMAGE, DEFAULT_LAUNCHER, Step, StepOutput, StepTarget
from ..steps.volumes import Volume
from ..sync import run

with warnings.catch_warnings():
    # maestrowf 1.2 scans its adapters with the deprecated loader.load_module(); that is
    # its business, and must not fail programs that run with warnings as errors.
    warnings.simplefilter("ignore", DeprecationWarning)
    from maestrowf.abstracts.enums import CancelCode, JobStatusCode, State, SubmissionCode
    from maestrowf.abstracts.interfaces import SchedulerScriptAdapter
    from maestrowf.interfaces.script import CancellationRecord, SubmissionRecord

__all__ = [
    "ANNOTATION_LOG",
    "ANNOTATION_WORKSPACE",
    "LABEL_ADAPTER",
    "BatchSettings",
    "KubernetesScriptAdapter",
    "StepSettings",
    "format_job_id",
    "maestro_state",
    "parse_job_id",
]

log = logging.getLogger("k8sjobs.maestro")

LABEL_ADAPTER = "maestro.k8sjobs.io/adapter"
ANNOTATION_WORKSPACE = "maestro.k8sjobs.io/workspace"
ANNOTATION_LOG = "maestro.k8sjobs.io/log-name"
#: The environment variable holding the Job's name inside its pods; multi-node launcher
#: commands build the host list from it (pods are ``<job>-<index>.<job>``).
JOB_NAME_VARIABLE = "KUBE_JOB_NAME"
#: The run-block key under which a step's launch settings reach get_parallelize_command.
_LAUNCH_PLAN = "k8sjobs launch"
#: A multi-node step's hostfile, as its script names it.
HOSTFILE = multinode.HOSTFILE_REFERENCE
#: Seconds one blocking call may take before Maestro is told it failed.
CALL_TIMEOUT = 300.0
#: Pod failure reasons that say the machine, not the step, failed: Maestro resubmits.
_HARDWARE_REASONS = frozenset({"Evicted", "NodeLost", "Preempted", "NodeShutdown"})
_DISRUPTIONS = frozenset(
    {
        "DeletionByTaintManager",
        "TerminationByKubelet",
        "PreemptionByScheduler",
        "EvictionByEvictionAPI",
    }
)


# ---- settings from the batch block ----------------------------------------------------


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # extra="forbid" says only "Extra inputs are not permitted"; name the likely key.
        if isinstance(data, dict):
            known = set(cls.model_fields)
            for key in data:
                if key not in known:
                    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
                    hint = (
                        f'did you mean "{close[0]}"?'
                        if close
                        else "known keys: " + ", ".join(sorted(known))
                    )
                    raise ValueError(f'"{key}" is not a {cls._what()} key; {hint}')
        return data

    @classmethod
    def _what(cls) -> str:
        return "batch"


class _VolumesAndPlacement(_Settings):
    """Volumes and scheduling knobs, as Step spells them (a step's list replaces batch's)."""

    volumes: list[Volume] = []
    shm: str | int | None = None
    priority_class: str | None = None
    priority: str | None = None
    runtime_class: str | None = None
    affinity: Affinity | None = None
    spread: str | None = None


_PASSED_THROUGH = tuple(_VolumesAndPlacement.model_fields)


class StepSettings(_VolumesAndPlacement):
    """Kubernetes settings of one Maestro step (``batch.steps.<name>``), overriding ``batch``."""

    image: str | None = None
    shell: str | None = None
    namespace: str | None = None
    memory: str | int | None = None
    env: dict[str, str] = {}
    node_selector: dict[str, str] = {}
    service_account: str | None = None
    queue: str | None = None
    retries: int | None = Field(None, ge=0)
    # The failure policy (k8sjobs.steps.failure); checked by Step, with the field in the error.
    disruptions: Literal["ignore", "count"] | None = None
    retry_on_exit_codes: list[int] | None = None
    fail_on_exit_codes: list[int] | None = None
    push_outputs: Literal["on_success", "always"] | None = None
    launcher: str | None = None
    launch: Literal["ssh", "none"] | None = None
    mpi: Literal["openmpi", "mpich", "intel"] | None = None
    ssh_dir: str | None = None
    target: StepTarget | None = None
    flux_in_image: bool | None = None
    inputs: dict[str, str] = Field(
        {}, description='name -> "<step>:<output>" of this study, or an artifact reference'
    )
    outputs: dict[str, str] = {}

    @classmethod
    def _what(cls) -> str:
        return "batch.steps.<step>"


class BatchSettings(_VolumesAndPlacement):
    """The ``batch:`` block of a Maestro spec with ``type: kubernetes``."""

    type: Literal["kubernetes"] = "kubernetes"
    shell: str = "/bin/bash"
    image: str = DEFAULT_IMAGE
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    registry: str | None = Field(None, description="Artifact store for step inputs/outputs.")
    plain_http: bool = False
    registry_secret: str | None = None
    memory: str | int | None = None
    env: dict[str, str] = {}
    node_selector: dict[str, str] = {}
    service_account: str | None = None
    queue: str | None = None
    retries: int = Field(0, ge=0)
    # None: the Step's default ("ignore"; "count" for target: minicluster, which has no other).
    disruptions: Literal["ignore", "count"] | None = None
    retry_on_exit_codes: list[int] = []
    fail_on_exit_codes: list[int] = []
    push_outputs: Literal["on_success", "always"] = "on_success"
    launcher: str = DEFAULT_LAUNCHER
    # Multi-node steps (k8sjobs/render/multinode.py): None means "ssh" when nodes > 1.
    launch: Literal["ssh", "none"] | None = None
    mpi: Literal["openmpi", "mpich", "intel"] = "openmpi"
    ssh_dir: str | None = None
    # A Job, or a Flux Operator MiniCluster (k8sjobs/render/minicluster.py).
    target: StepTarget = "job"
    flux_in_image: bool = False
    study: str | None = Field(None, description="Study name when no Maestro workspace is found.")
    steps: dict[str, StepSettings] = {}

    @field_validator("launcher")
    @classmethod
    def _launcher_is_template(cls, value: str) -> str:
        try:
            launcher_command(value, 2, 2)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f'"{value}" is not a launcher template ({exc!r}); it may use '
                "{procs}, {nodes}, {procs_per_node}, {cores_per_task} and {hosts}"
            ) from None
        return value

    def for_step(self, name: str) -> dict[str, Any]:
        """Return this block's settings with the overrides of step ``name`` applied.

        A key names a step ("sim") and applies to all its parameter combinations
        ("sim_SIZE.10"); the longest matching key wins.
        """
        keys = [k for k in self.steps if name == k or name.startswith(f"{k}_")]
        merged = self.model_dump(exclude={"steps"})
        if keys:
            override = self.steps[max(keys, key=len)]
            for key, value in override.model_dump(exclude_defaults=True).items():
                merged[key] = {**merged[key], **value} if key == "env" else value
            merged["inputs"], merged["outputs"] = override.inputs, override.outputs
        else:
            merged["inputs"], merged["outputs"] = {}, {}
        return merged


def load_batch(batch: Mapping[str, Any]) -> BatchSettings:
    """Return the validated ``batch:`` block, or raise ValueError naming the key at fault."""
    try:
        return BatchSettings.model_validate(dict(batch))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        located = f'"{where}": {message}' if where else message
        raise ValueError(f"Maestro batch block: {located}") from None


# ---- job ids and states ---------------------------------------------------------------


def format_job_id(namespace: str, name: str) -> str:
    """Return the job id Maestro keeps for a Job: ``"<namespace>/<name>"``."""
    return f"{namespace}/{name}"


def parse_job_id(job_id: object) -> tuple[str, str]:
    """Return (namespace, name) from a job id, or raise ValueError for anything else."""
    text = str(job_id)
    namespace, _, name = text.partition("/")
    if not (is_dns_label(namespace) and name and is_dns_label(name)):
        raise ValueError(f'"{text}" is not a k8sjobs job id; expected "<namespace>/<job name>"')
    return namespace, name


def maestro_state(result: StepResult, *, hardware: bool = False) -> State:
    """Return the Maestro State for a step's result (``hardware``: its node failed it)."""
    state = result.state
    if state is StepState.SUCCEEDED:
        return State.FINISHED
    if state is StepState.RUNNING:
        return State.RUNNING
    if state is StepState.PENDING:
        return State.PENDING
    if state in (StepState.CANCELLED, StepState.LOST):
        return State.CANCELLED
    if result.reason == "DeadlineExceeded":
        return State.TIMEDOUT
    if hardware or result.reason in _HARDWARE_REASONS:
        return State.HWFAILURE
    return State.FAILED


def _hardware_failure(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Return whether the newest failed pod was lost to its node (eviction, shutdown, taint)."""
    failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
    if not failed:
        return False
    status = failed[-1].get("status") or {}
    if status.get("reason") in _HARDWARE_REASONS:
        return True
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") in _DISRUPTIONS
        for c in status.get("conditions") or ()
    )


# ---- launcher ---------------------------------------------------------------------------


def launcher_command(
    template: str, procs: int, nodes: int, cores_per_task: int = 1, *, hostfile: str = ""
) -> str:
    """Return the launcher for ``procs`` processes on ``nodes`` pods of the running Job.

    One node runs on ``localhost``; more name the Job's indexed pods through the headless
    Service, using ``$KUBE_JOB_NAME`` (set in every pod) so the script text stays the same
    whatever the Job is called. ``hostfile`` is the multi-node step's hostfile, if any.
    """
    per_node = math.ceil(procs / nodes)
    if nodes <= 1:
        hosts = f"localhost:{per_node}"
    else:
        job = "${" + JOB_NAME_VARIABLE + "}"
        hosts = ",".join(f"{job}-{i}.{job}:{per_node}" for i in range(nodes))
    return template.format(
        procs=procs,
        nodes=nodes,
        procs_per_node=per_node,
        cores_per_task=cores_per_task,
        hosts=hosts,
        hostfile=hostfile,
    )


def _count(value: Any, what: str, default: int) -> int:
    """Return a run-block count ("", None, 0 mean ``default``) as a positive int."""
    if value in ("", None, 0, "0"):
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f'run.{what}: "{value}" is not a whole number') from None
    if number <= 0:
        raise ValueError(f'run.{what}: "{value}" must be positive')
    return number


# ---- the adapter ------------------------------------------------------------------------


class KubernetesScriptAdapter(SchedulerScriptAdapter):  # type: ignore[misc]
    """A Maestro script adapter whose steps run as Kubernetes Jobs (``batch: type: kubernetes``).

    Keyword arguments are the ``batch:`` block (see ``BatchSettings``); constructing one
    validates them and does no I/O.
    """

    key = "kubernetes"

    def __init__(self, **kwargs: Any) -> None:
        self.settings = load_batch(kwargs)
        super().__init__(shell=self.settings.shell)
        self._extension = ".k8s.sh"
        # Here, not at import: Maestro's adapter scan imports this module while its
        # execution graph module may still be loading.
        install_job_times()

    @property
    def extension(self) -> str:
        """Return the extension of the scripts this adapter writes."""
        return self._extension

    # ---- scripts -----------------------------------------------------------------

    def get_header(self, step: Any) -> str:
        """Return the script's first lines: the shebang and what the step asks of the cluster."""
        run_block = step.run
        nodes = _count(run_block.get("nodes"), "nodes", 1)
        procs = _count(run_block.get("procs"), "procs", nodes)
        merged = self.settings.for_step(step.name)
        lines = [
            f"#!{merged['shell']}",
            f"# k8sjobs: image {merged['image']}, nodes {nodes}, procs {procs}",
        ]
        if run_block.get("walltime"):
            lines.append(f"# k8sjobs: walltime {run_block['walltime']}")
        if merged["memory"]:
            lines.append(f"# k8sjobs: memory {merged['memory']} per node")
        return "\n".join(lines)

    def get_parallelize_command(self, procs: Any, nodes: Any = None, **kwargs: Any) -> str:
        """Return the launcher for ``procs`` processes over ``nodes`` pods.

        A multi-node step launched over ssh (the default) gets the same command as a
        k8sjobs step: ``mpirun``/``mpiexec`` reading the step's hostfile.
        """
        count = _count(procs, "procs", 1)
        pods = min(_count(nodes, "nodes", 1), count)
        cores = _count(kwargs.get("cores per task"), "cores per task", 1)
        plan = kwargs.get(_LAUNCH_PLAN) or {}
        step_nodes = int(plan.get("nodes") or pods)
        launch = plan.get("launch") or self.settings.launch
        mode = "none" if step_nodes <= 1 else (launch or "ssh")
        mpi = plan.get("mpi") or self.settings.mpi
        chosen = plan.get("launcher") or self.settings.launcher
        template = multinode.command_template(chosen, mode, mpi)
        if (plan.get("target") or self.settings.target) == "minicluster":
            template = minicluster.LAUNCHER if chosen == DEFAULT_LAUNCHER else chosen
        return launcher_command(template, count, pods, cores, hostfile=HOSTFILE)

    def _write_script(self, ws_path: str, step: Any) -> tuple[bool, str, str | None]:
        """Write the step's script (and restart script) to ``ws_path``; every step is scheduled.

        A step without ``nodes``/``procs`` still runs in the cluster, on one pod with one
        process: on Kubernetes there is no login node to run it on.
        """
        run_block = dict(step.run)
        run_block["nodes"] = _count(run_block.get("nodes"), "nodes", 1)
        run_block["procs"] = _count(run_block.get("procs"), "procs", run_block["nodes"])
        # $(LAUNCHER) is expanded by maestrowf, which hands the run block to
        # get_parallelize_command: the step's launch settings travel with it.
        merged = self.settings.for_step(step.name)
        run_block[_LAUNCH_PLAN] = {
            "nodes": run_block["nodes"],
            "launch": merged["launch"],
            "mpi": merged["mpi"],
            "launcher": merged["launcher"],
            "target": merged["target"],
        }
        header = self.get_header(step)
        script_path = os.path.join(ws_path, f"{step.name}{self._extension}")
        _write_text(script_path, self._script(header, run_block["cmd"], run_block))
        restart_path = None
        if run_block.get("restart"):
            restart_path = os.path.join(ws_path, f"{step.name}.restart{self._extension}")
            _write_text(restart_path, self._script(header, run_block["restart"], run_block))
        return True, script_path, restart_path

    def _script(self, header: str, command: str, run_block: dict[str, Any]) -> str:
        body = self._substitute_parallel_command(command, **run_block)
        return f"{header}\n\n{body}\n"

    # ---- submit --------------------------------------------------------------------

    def submit(
        self,
        step: Any,
        path: Any,
        cwd: Any,
        job_map: Any = None,
        env: Mapping[str, str] | None = None,
    ) -> Any:
        """Create the step's Job; return a SubmissionRecord whose job id is "namespace/name".

        mini-MuMMI's batched form, ``submit(steps, scripts, cwds)``, returns
        ``[(job_id, step_name)]`` instead, with ``None`` for a step that was refused.
        ``env`` (Maestro's submission environment) is not sent: a pod gets only the
        variables of ``batch.env`` and ``batch.steps.<name>.env``.
        """
        if isinstance(step, list | tuple):
            return self.submit_many(step, path, cwd)
        try:
            manifests = self.manifests(step, Path(path).read_text(), str(cwd))
            run(self._create(manifests), CALL_TIMEOUT)
        except (ValueError, ApiError, OSError, TimeoutError) as exc:
            log.error('Step "%s" was not submitted: %s', step.name, exc)
            record = SubmissionRecord(SubmissionCode.ERROR, 1)
            record.add_info("stderr", str(exc))
            return record
        job_id = format_job_id(manifests.namespace, manifests.name)
        log.info('Step "%s" submitted as Job %s.', step.name, job_id)
        return SubmissionRecord(SubmissionCode.OK, 0, job_id)

    def submit_many(
        self, steps: Sequence[Any], paths: Sequence[Any], cwds: Sequence[Any]
    ) -> list[tuple[str | None, str]]:
        """Submit several steps at once; return ``[(job_id or None, step_name)]`` in order."""
        if not len(steps) == len(paths) == len(cwds):
            raise ValueError(
                f"submit: got {len(steps)} steps, {len(paths)} scripts and {len(cwds)} "
                "working directories; pass one of each per step"
            )
        built: list[Manifests | None] = []
        for step, path, cwd in zip(steps, paths, cwds, strict=True):
            try:
                built.append(self.manifests(step, Path(path).read_text(), str(cwd)))
            except (ValueError, OSError) as exc:
                log.error('Step "%s" was not submitted: %s', step.name, exc)
                built.append(None)
        errors = run(self._create_many([m for m in built if m is not None]), CALL_TIMEOUT)
        results: list[tuple[str | None, str]] = []
        for step, manifests in zip(steps, built, strict=True):
            if manifests is None or manifests.name in errors:
                if manifests is not None:
                    log.error('Step "%s" was not submitted: %s', step.name, errors[manifests.name])
                results.append((None, step.name))
            else:
                results.append((format_job_id(manifests.namespace, manifests.name), step.name))
        return results

    def manifests(self, step: Any, script: str, cwd: str) -> Manifests:
        """Return the objects that run Maestro ``step`` (its script text, from workspace ``cwd``).

        Raises ValueError naming the setting at fault.
        """
        merged = self.settings.for_step(step.name)
        study = _study_name(cwd) or merged["study"] or "maestro"
        namespace = merged["namespace"] or _default_namespace(merged) or "default"
        name = job_name(study, step.name)
        run_block = step.run
        nodes = _count(run_block.get("nodes"), "nodes", 1)
        inputs: dict[str, str | StepOutput] = {}
        for key, source in merged["inputs"].items():
            producer, sep, output = source.rpartition(":")
            is_step = sep and "/" not in source and "@" not in source
            inputs[key] = StepOutput(step=producer, output=output) if is_step else source
        try:
            spec = Step(
                name=step.name,
                script=script,
                shell=merged["shell"],
                image=merged["image"],
                namespace=namespace,
                resources={
                    "nodes": nodes,
                    "tasks": _count(run_block.get("procs"), "procs", nodes),
                    "cores_per_task": _count(run_block.get("cores per task"), "cores per task", 1),
                    "gpus": _count(run_block.get("gpus"), "gpus", 0),
                    "memory": merged["memory"],
                },
                walltime=run_block.get("walltime") or None,
                env={**merged["env"], JOB_NAME_VARIABLE: name},
                labels={LABEL_ADAPTER: "kubernetes"},
                annotations={ANNOTATION_WORKSPACE: cwd, ANNOTATION_LOG: step.name},
                node_selector=merged["node_selector"],
                service_account=merged["service_account"],
                queue=merged["queue"],
                retries=merged["retries"],
                launch=merged["launch"],
                mpi=merged["mpi"],
                ssh_dir=merged["ssh_dir"],
                target=merged["target"],
                flux_in_image=merged["flux_in_image"],
                **({"disruptions": merged["disruptions"]} if merged["disruptions"] else {}),
                retry_on_exit_codes=merged["retry_on_exit_codes"],
                fail_on_exit_codes=merged["fail_on_exit_codes"],
                push_outputs=merged["push_outputs"],
                inputs=inputs,
                outputs=merged["outputs"],
                **{key: merged[key] for key in _PASSED_THROUGH},
            )
            target = Target(
                study=study,
                namespace=namespace,
                store=merged["registry"],
                plain_http=merged["plain_http"],
                registry_secret=merged["registry_secret"],
            )
            return render(spec, target, ssh_key=key_for(spec))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(f'Step "{step.name}": {where}: {message}') from None

    async def _create_many(self, all_manifests: list[Manifests]) -> dict[str, str]:
        gate = asyncio.Semaphore(64)

        async def one(manifests: Manifests) -> tuple[str, str] | None:
            async with gate:
                try:
                    await self._create(manifests)
                except ApiError as exc:
                    return manifests.name, str(exc)
            return None

        found = await asyncio.gather(*(one(m) for m in all_manifests))
        return dict(item for item in found if item is not None)

    async def _create(self, manifests: Manifests) -> None:
        """Create the step's objects; an ended or different Job of that name is replaced.

        A live Job with the same spec hash is adopted: Maestro retried a submission that
        had in fact gone through. An ended one is deleted first, so that a resubmission
        after a hardware failure or a restart runs again instead of re-reading the end.
        """
        client = await _client(self.settings)
        namespace, name = manifests.namespace, manifests.name
        try:
            current = await client.get(JOBS, namespace, name)
        except NotFound:
            current = None
        timeout = client.options.timeout * 4
        await create_step(
            client,
            manifests,
            current=current,
            replace=True,
            gone=lambda: wait_deleted(client, JOBS, namespace, name, timeout=timeout),
            rerun=ended,
        )

    # ---- check and cancel ------------------------------------------------------------

    def check_jobs(self, joblist: Sequence[Any]) -> tuple[Any, dict[Any, Any]]:
        """Return (JobStatusCode, {job id: State}) from one Job list per namespace.

        A Job that no longer exists reads CANCELLED (it was deleted: ``maestro cancel``,
        kubectl); a malformed id reads NOTFOUND. When a job has ended, its log is written
        to ``<step>.out`` in the step workspace and k8sjobs' verdict to ``<step>.err``.
        """
        if not joblist:
            return JobStatusCode.NOJOBS, {}
        try:
            states = run(self._check(list(joblist)), CALL_TIMEOUT)
        except (ApiError, OSError, TimeoutError) as exc:
            log.error("Checking %d job(s) failed: %s", len(joblist), exc)
            return JobStatusCode.ERROR, {}
        return JobStatusCode.OK, states

    async def _check(self, joblist: list[Any]) -> dict[Any, State]:
        wanted: dict[str, dict[str, Any]] = {}
        states: dict[Any, State] = {}
        for job_id in joblist:
            try:
                namespace, name = parse_job_id(job_id)
            except ValueError:
                states[job_id] = State.NOTFOUND
                continue
            wanted.setdefault(namespace, {})[name] = job_id
        if not wanted:
            return states
        client = await _client(self.settings)
        now = datetime.now(UTC)
        for namespace, names in wanted.items():
            jobs = await _own_objects(client, JOBS, namespace)
            by_name = {j["metadata"]["name"]: j for j in jobs}
            finished = [n for n in names if n in by_name and ended(by_name[n])]
            pods = await _pods_by_job(client, namespace) if finished else {}
            for name, job_id in names.items():
                job = by_name.get(name)
                if job is None:
                    states[job_id] = State.CANCELLED
                    continue
                job_pods = pods.get(name, [])
                result = judge(job, job_pods, now=now, pending_grace=120.0)
                states[job_id] = maestro_state(result, hardware=_hardware_failure(job_pods))
                _job_times[job_id] = (result.started_at, result.finished_at)
                if name in finished:
                    await _keep_logs(client, job, job_pods, result, states[job_id])
        return states

    def cancel_jobs(self, joblist: Sequence[Any]) -> Any:
        """Delete the Jobs of ``joblist`` (their pods go with them); return a CancellationRecord."""
        if not joblist:
            return CancellationRecord(CancelCode.OK, 0)
        try:
            failed = run(self._cancel(list(joblist)), CALL_TIMEOUT)
        except (ApiError, OSError, TimeoutError) as exc:
            log.error("Cancelling %d job(s) failed: %s", len(joblist), exc)
            failed = set(joblist)
        record = CancellationRecord(
            CancelCode.ERROR if failed else CancelCode.OK, int(bool(failed))
        )
        for job_id in joblist:
            record.add_status(job_id, CancelCode.ERROR if job_id in failed else CancelCode.OK)
        return record

    async def _cancel(self, joblist: list[Any]) -> set[Any]:
        client = await _client(self.settings)

        async def one(job_id: Any) -> Any:
            try:
                namespace, name = parse_job_id(job_id)
                # A Flux Operator step is deleted as its MiniCluster (the operator would make
                # its Job again).
                kind = top_kind(await client.get(JOBS, namespace, name))
                await client.delete(kind, namespace, name, propagation="Background")
            except NotFound:
                return None
            except (ValueError, ApiError) as exc:
                log.error("Job %s was not cancelled: %s", job_id, exc)
                return job_id
            return None

        found = await asyncio.gather(*(one(j) for j in joblist))
        return {j for j in found if j is not None}

    def _state(self, job_state: Any) -> Any:
        """Return the Maestro State for a StepResult (or a StepState name)."""
        if isinstance(job_state, StepResult):
            return maestro_state(job_state)
        return maestro_state(StepResult(name="", state=StepState(str(job_state))))


# ---- helpers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ClientKey:
    kubeconfig: str | None
    context: str | None


_clients: dict[_ClientKey, KubeClient] = {}
_clients_lock = threading.Lock()


async def _client(settings: BatchSettings) -> KubeClient:
    """Return this process's API client for the batch block's cluster (made on first use)."""
    key = _ClientKey(settings.kubeconfig or os.environ.get("KUBECONFIG"), settings.context)
    client = _clients.get(key)
    if client is None:
        config = await load_config(key.kubeconfig, key.context)
        with _clients_lock:
            client = _clients.setdefault(key, KubeClient(config))
    return client


def _default_namespace(merged: Mapping[str, Any]) -> str | None:
    key = _ClientKey(merged["kubeconfig"] or os.environ.get("KUBECONFIG"), merged["context"])
    client = _clients.get(key)
    if client is None:
        client = run(_client(BatchSettings(kubeconfig=key.kubeconfig, context=key.context)))
    return client.config.namespace


@atexit.register
def _close_clients() -> None:
    if not _clients:
        return

    async def close() -> None:
        for client in list(_clients.values()):
            await client.aclose()
        _clients.clear()

    # Best effort: at interpreter exit the loop thread may already be gone.
    with contextlib.suppress(Exception):
        run(close(), 5.0)


async def _own_objects(client: KubeClient, kind: Kind, namespace: str) -> list[Any]:
    """Return every object of ``kind`` this adapter made in ``namespace`` (none if it is gone)."""
    try:
        # No page limit: one request per namespace, whatever the number of jobs, while the
        # server answers in one; its continue tokens are followed if it does not.
        found = await client.list_all(kind, namespace, f"{LABEL_ADAPTER}=kubernetes", limit=0)
    except NotFound:
        return []
    return list(found["items"])


async def _pods_by_job(client: KubeClient, namespace: str) -> dict[str, list[Any]]:
    pods: dict[str, list[Any]] = {}
    for pod in await _own_objects(client, PODS, namespace):
        labels = pod["metadata"].get("labels") or {}
        job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if job:
            pods.setdefault(str(job), []).append(pod)
    for group in pods.values():
        group.sort(
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
        )
    return pods


async def _keep_logs(
    client: KubeClient, job: Mapping[str, Any], pods: list[Any], result: StepResult, state: State
) -> None:
    """Write an ended step's log and verdict into its Maestro workspace, once."""
    annotations = job["metadata"].get("annotations") or {}
    workspace, name = annotations.get(ANNOTATION_WORKSPACE), annotations.get(ANNOTATION_LOG)
    if not workspace or not name:
        return
    out = Path(workspace) / f"{name}.out"
    if not await asyncio.to_thread(_wanted, out):
        return
    texts = []
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        try:
            text = await client.log(job["metadata"]["namespace"], pod_name, MAIN_CONTAINER)
        except ApiError as exc:
            text = f"[k8sjobs: the log of pod {pod_name} could not be read: {exc}]\n"
        texts.append(text if len(pods) == 1 else f"==> pod {pod_name} <==\n{text}")
    verdict = f"{result.describe()}\nreason: {result.reason}\nMaestro state: {state.name}\n"
    if result.exit_code is not None:
        verdict += f"exit code: {result.exit_code}\n"
    await asyncio.to_thread(_write_logs, out, "".join(texts), verdict)


def _wanted(out: Path) -> bool:
    """Return whether ``out`` is still to be written (its workspace exists, it does not)."""
    return out.parent.is_dir() and not out.exists()


def _write_logs(out: Path, text: str, verdict: str) -> None:
    # The verdict first, the log last: a reader seeing <step>.out knows both are complete.
    out.with_suffix(".err").write_text(verdict)
    partial = out.with_suffix(".out.partial")
    partial.write_text(text)
    partial.replace(out)


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _study_name(cwd: str) -> str | None:
    """Return the Maestro study directory's name above ``cwd`` (it holds batch.info)."""
    here = Path(cwd).resolve()
    for directory in (here, *here.parents):
        if (directory / "batch.info").is_file() and (directory / "meta").is_dir():
            return directory.name
    return None


# ---- the times of Maestro's status --------------------------------------------------------

#: Job id -> (started, finished) from the Job's status, as this process last checked it.
#: Maestro's status API (``check_jobs``) returns a State per job and nothing else; Maestro
#: stamps a record's Start Time with its own clock when a poll first sees RUNNING, so a step
#: that ran between two polls (most k8sjobs steps, at Maestro's 60 s default) showed no Start
#: Time and no Run Time, and one that was seen showed the poll's time, not the Job's.
_job_times: dict[Any, tuple[datetime | None, datetime | None]] = {}


def _maestro_time(moment: datetime) -> datetime:
    """Return ``moment`` as Maestro keeps its times: local, naive, whole seconds."""
    local = moment.astimezone().replace(tzinfo=None)
    return local.replace(microsecond=0) + (
        timedelta(seconds=1) if local.microsecond >= 500_000 else timedelta()
    )


def _apply_job_times(record: Any) -> None:
    """Give a Maestro step record its Job's start and end, where this process checked them.

    The earlier start is kept (a restarted step's Run Time counts from its first Job, as
    Maestro's does); the end is replaced only once Maestro has marked one.
    """
    jobids = getattr(record, "jobid", None)
    times = _job_times.get(jobids[-1]) if jobids else None
    if times is None:
        return
    started, finished = times
    if started is not None:
        start = _maestro_time(started)
        current = getattr(record, "_start_time", None)
        record._start_time = start if current is None else min(current, start)
    if finished is not None and getattr(record, "_end_time", None) is not None:
        record._end_time = _maestro_time(finished)


def _with_job_times(mark: Any) -> Any:
    @functools.wraps(mark)
    def marked(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = mark(self, *args, **kwargs)
        _apply_job_times(self)
        return done

    marked._k8sjobs_job_times = True  # type: ignore[attr-defined]
    return marked


def install_job_times() -> bool:
    """Make Maestro's step records take their k8sjobs Job's times when they are marked
    running or ended; return whether it did (False: this maestrowf has no such records).

    Records of other adapters' jobs are left as they are: only a job id this adapter
    checked has times. Done once, by the first adapter Maestro makes in a process.
    """
    try:
        from maestrowf.datastructures.core.executiongraph import _StepRecord
    except ImportError:
        return False
    for name in ("mark_running", "mark_end"):
        mark = getattr(_StepRecord, name, None)
        if mark is None:
            return False
        if not getattr(mark, "_k8sjobs_job_times", False):
            setattr(_StepRecord, name, _with_job_times(mark))
    return True
