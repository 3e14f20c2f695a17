"""What a step is: the validated models every backend runs (pure, no I/O).

A ``Step`` holds everything needed to run one workflow step: its script and shell, its
image, its ``Resources`` in the terms Flux and Maestro use (nodes, tasks, cores per task,
GPUs) plus memory, and the artifacts it reads and writes. Bad input is refused here, with
the field and the fix in the message, before anything reaches a cluster.
"""

from __future__ import annotations

import difflib
import math
import posixpath
import re
import string
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .._textfile import read_text_file
from ..artifacts._reference import parse_reference, redact
from .failure import Disruptions, check_exit_code_rules, check_exit_codes
from .names import check_label_key
from .quantity import parse_bytes as parse_quantity
from .quantity import parse_cores
from .scheduling import Affinity, ObjectName, check_spread
from .volumes import Volume, check_volumes

__all__ = [
    "ANNOTATIONS_LIMIT",
    "DEFAULT_IMAGE",
    "DEFAULT_LAUNCHER",
    "KNOWN_SHELLS",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "SCRIPT_LIMIT",
    "LauncherCall",
    "Resources",
    "SecretKeyRef",
    "Step",
    "StepOutput",
    "StepTarget",
    "Toleration",
    "check_dns_label",
    "find_launcher_calls",
    "parse_duration",
    "parse_quantity",
]

#: What a step runs as: a Job, a JobSet or a Flux Operator MiniCluster (docs/steps.md).
StepTarget = Literal["job", "jobset", "minicluster"]

DEFAULT_IMAGE = "python:3.12-slim"
DEFAULT_LAUNCHER = "mpirun -np {procs} --host {hosts}"
SSH_DIR_ROOT = "/root/.ssh"
SSH_DIR_NONROOT = "/home/nonroot/.ssh"
# Kueue reads a queued workload's LocalQueue and WorkloadPriorityClass from these labels.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LAUNCHER_FIELDS = ("procs", "nodes", "procs_per_node", "cores_per_task", "hosts", "hostfile")
KNOWN_SHELLS: dict[str, tuple[str, ...]] = {
    "bash": ("/bin/bash",),
    "sh": ("/bin/sh",),
    "dash": ("/bin/dash",),
    "zsh": ("/bin/zsh",),
    "ksh": ("/bin/ksh",),
    "python": ("python3",),
    "python3": ("python3",),
    "perl": ("perl",),
    "Rscript": ("Rscript",),
    "julia": ("julia",),
}
# The API server refuses a ConfigMap whose data passes 1 MiB (keys and values counted);
# the rest of the room is kept for the handoff configuration that shares the ConfigMap.
CONFIGMAP_LIMIT = 1024 * 1024
SCRIPT_LIMIT = CONFIGMAP_LIMIT - 16 * 1024
# The API server refuses an object whose annotations (keys and values) pass 256 KiB.
ANNOTATIONS_LIMIT = 256 * 1024
# Counts and seconds that land in int32 fields of a Job (completions, backoffLimit,
# ttlSecondsAfterFinished): larger ones would pass here and be refused by the API server.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The longest duration Python can hold in whole days (timedelta.max): 2.7 million years.
_MAX_SECONDS = timedelta.max.days * 86400

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# The K8SJOBS_ names a step may set: the limits of its inputs' pull (docs/artifacts.md).
USER_SETTABLE_ENV = ("K8SJOBS_PULL_MAX_BYTES", "K8SJOBS_PULL_MAX_RATIO")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ARTIFACT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,127}$")
_LAUNCHER = re.compile(r"\$\(LAUNCHER\)(?:\[(?P<args>[^\]]*)\])?")
_LAUNCHER_ARG = re.compile(r"^\s*(\d+)\s*([np])\s*$")
_RESERVED_PREFIXES = ("k8sjobs.io/",)


def parse_duration(value: Any) -> timedelta | None:
    """Return a timedelta from seconds, "HH:MM:SS" (Maestro's walltime), "1h30m" or a timedelta."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a duration; write a finite number of seconds")
        return _duration(value, value)
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return _duration(float(text), value)
    if re.fullmatch(r"(\d+:){1,2}\d+(\.\d+)?", text):
        seconds = 0.0
        for part in text.split(":"):
            seconds = seconds * 60 + float(part)
        return _duration(seconds, value)
    parts = _DURATION_PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text.replace(" ", ""):
        unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        return _duration(sum(float(n) * unit[u] for n, u in parts), value)
    raise ValueError(
        f'"{value}" is not a duration; write seconds (3600), "HH:MM:SS" (01:00:00) or "1h30m"'
    )


def _duration(seconds: float, value: Any) -> timedelta:
    """Return ``seconds`` as a timedelta, refusing what no timedelta (or cluster) can hold."""
    # A huge int or a float of inf (from "9" * 400) would raise OverflowError in timedelta.
    if not -_MAX_SECONDS <= seconds <= _MAX_SECONDS:
        shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:40]}..."
        raise ValueError(
            f'"{shown}" is not a duration this can run: it is longer than '
            f"{timedelta.max.days} days; write a shorter one"
        )
    return timedelta(seconds=seconds)


def _check_label_key(key: str) -> None:
    check_label_key(key)
    if key.startswith(_RESERVED_PREFIXES):
        raise ValueError(f'key "{key}": the k8sjobs.io/ prefix is reserved for k8sjobs')


def annotations_size(annotations: dict[str, str]) -> int:
    """Return the bytes the API server counts against its annotation limit (keys + values)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def check_dns_label(value: str | None, what: str) -> str | None:
    """Return ``value`` if None or an RFC 1123 label; else raise ValueError naming ``what``."""
    if value is not None and (len(value) > 63 or not _DNS_LABEL.match(value)):
        raise ValueError(
            f'"{value}" is not a valid {what}; use at most 63 lowercase letters, '
            "digits and '-', starting and ending with a letter or digit"
        )
    return value


#: Why a NUL byte is refused in what becomes a process's argument or environment.
_NUL_REFUSED = (
    "contains a NUL byte (\\0), which no process can receive in its arguments or "
    "environment (the container would fail with exit code 128 and no log); remove it"
)

Duration = Annotated[timedelta | None, BeforeValidator(parse_duration)]
ExitCodes = Annotated[list[int], AfterValidator(check_exit_codes)]
# A count of nodes, tasks or cores: each ends up in an int32 field of the Job or pod.
Count = Annotated[int, Field(gt=0, le=INT32_MAX)]


def _kueue_label_value(value: str | None, what: str) -> str | None:
    """Return ``value`` if Kueue can read it from its label (a name, 63 characters at most)."""
    if value is not None and (len(value) > 63 or not _DNS_SUBDOMAIN.match(value)):
        raise ValueError(f'"{value}" is not a valid {what}')
    return value


def _field_error(
    model: str, loc: tuple[str | int, ...], message: str, value: Any
) -> ValidationError:
    """Return a ValidationError located at ``loc`` (a model validator's own errors have none)."""
    # The message is passed as a context value so that braces in it are not format fields.
    error = PydanticCustomError("value_error", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        model, [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class _Model(BaseModel):
    # hide_input_in_errors: pydantic would append the whole input (env values, references
    # with credentials) to every error; the messages name the field and what is wrong.
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, hide_input_in_errors=True
    )

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        # extra="forbid" alone says "Extra inputs are not permitted"; a typo deserves the
        # name it was probably meant to be.
        if not isinstance(data, dict):
            return data
        known = cls._known_field_names()
        for key in data:
            if isinstance(key, str) and key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                hint = (
                    f'did you mean "{close[0]}"?'
                    if close
                    else "known fields: " + ", ".join(sorted(cls.model_fields))
                )
                raise _field_error(
                    cls.__name__,
                    (key,),
                    f'"{key}" is not a field of {cls.__name__}; {hint}',
                    data[key],
                )
        return data

    @classmethod
    def _known_field_names(cls) -> set[str]:
        names = set(cls.model_fields)
        for info in cls.model_fields.values():
            if isinstance(info.validation_alias, AliasChoices):
                names.update(c for c in info.validation_alias.choices if isinstance(c, str))
        return names


_MIB = 2**20


def _cpu_text(cores: float) -> str:
    """Return ``cores`` as Kubernetes writes a CPU quantity: whole cores, else millicores."""
    milli = math.ceil(round(cores * 1000, 6))  # the API server rounds a request up to 1m
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


class Resources(_Model):
    """What one step asks of the cluster, in Flux/Maestro terms plus memory.

    ``tasks`` (Maestro's ``procs``) is the total number of processes across ``nodes``;
    every node (pod) gets ``ceil(tasks / nodes) * cores_per_task`` cores, ``gpus`` GPUs
    and ``memory``. Requests equal limits, so the pods get the Guaranteed QoS class that
    HPC codes expect. ``cpu`` is the Kubernetes way, a quantity per pod (``250m``, ``0.5``,
    ``2``), in place of the whole cores: thousands of small steps need not each hold a
    core. The launcher's counts (``$(LAUNCHER)``, ``OMP_NUM_THREADS``) stay whole numbers
    from tasks and cores_per_task.
    """

    nodes: Count = 1
    tasks: Count = Field(1, validation_alias=AliasChoices("tasks", "procs"))
    cores_per_task: Count = Field(
        1, validation_alias=AliasChoices("cores_per_task", "cores per task")
    )
    gpus: int = Field(0, ge=0, le=INT32_MAX, description="GPUs per node (pod).")
    gpu_resource: str = "nvidia.com/gpu"
    memory: str | int | None = Field(None, description="Per node: a quantity or bytes.")
    cpu: str | float | None = Field(
        None, description="Per node (pod): a Kubernetes CPU quantity, over cores_per_task."
    )

    @field_validator("cores_per_task", mode="before")
    @classmethod
    def _cores_are_whole(cls, value: Any) -> Any:
        fractional = isinstance(value, float) and not value.is_integer()
        if fractional or (isinstance(value, str) and not value.strip().isdigit()):
            raise ValueError(
                f'"{value}" is not a whole number of cores: cores_per_task counts the cores '
                f"of each task (the launcher's -c); for a part of a core write cpu: "
                f'"{value if isinstance(value, str) else f"{round(value * 1000)}m"}" instead'
            )
        return value

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu_is_quantity(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f'{value!r} is not a CPU quantity; write "250m", 0.5 or 2')
        try:
            cores = parse_cores(value)
        except ValueError:
            raise ValueError(
                f'"{value}" is not a Kubernetes CPU quantity; write "250m", 0.5 or 2'
            ) from None
        if cores < 0.001:
            raise ValueError(
                f'"{value}" is less than the smallest CPU request (1m, a thousandth of a core)'
            )
        return value

    @field_validator("memory")
    @classmethod
    def _memory_is_quantity(cls, value: str | int | None) -> str | int | None:
        if value is None:
            return None
        amount = parse_quantity(value)
        if amount <= 0:
            raise ValueError(f'"{value}" must be more than zero bytes')
        bare = isinstance(value, int) or str(value).strip().isdigit()
        if bare and amount < _MIB:
            raise ValueError(
                f"{value} is {value} bytes, less than 1Mi: a number without a suffix is "
                f'bytes; write "{value}Mi" for {value} mebibytes (or "{value}M", '
                f"{value} megabytes)"
            )
        return value

    @field_validator("gpu_resource")
    @classmethod
    def _gpu_resource_is_name(cls, value: str) -> str:
        _check_label_key(value)
        # The API server accepts an unprefixed resource name only for its own (cpu, memory,
        # ...), and a GPU count written over "cpu" would silently replace the cores; a
        # "requests." name is a quota's, never a container's (IsExtendedResourceName).
        prefix = value.split("/")[0]
        if "/" not in value or prefix.endswith("kubernetes.io") or prefix.startswith("requests."):
            raise ValueError(
                f'"{value}" is not an extended resource name; write it with its vendor '
                'domain, e.g. "nvidia.com/gpu" or "amd.com/gpu"'
            )
        return value

    @model_validator(mode="after")
    def _tasks_cover_nodes(self) -> Resources:
        if self.tasks < self.nodes:
            raise _field_error(
                "Resources",
                ("tasks",),
                f"tasks ({self.tasks}) is smaller than nodes ({self.nodes}): some nodes "
                "would run nothing; raise tasks or lower nodes",
                self.tasks,
            )
        return self

    @property
    def tasks_per_node(self) -> int:
        """Return how many processes each node (pod) runs."""
        return math.ceil(self.tasks / self.nodes)

    @property
    def cpu_per_node(self) -> int:
        """Return the whole cores the launcher counts for each node (pod)."""
        return self.tasks_per_node * self.cores_per_task

    @property
    def cpu_quantity(self) -> str:
        """Return the CPU each node (pod) requests, as Kubernetes writes it ("250m", "2")."""
        if self.cpu is None:
            return str(self.cpu_per_node)
        return _cpu_text(parse_cores(self.cpu))

    @property
    def cpu_cores(self) -> float:
        """Return the cores each node (pod) requests, as a number (0.25 for "250m")."""
        return float(self.cpu_per_node) if self.cpu is None else parse_cores(self.cpu)

    @property
    def memory_bytes(self) -> int | None:
        """Return the per-node memory in bytes, or None when not set."""
        return None if self.memory is None else parse_quantity(self.memory)


#: The most attempts a ``retry_oom`` step may make (the first included); more is refused at load.
MAX_OOM_ATTEMPTS = 20
#: What a grown attempt's memory is rounded up to, so that each attempt asks for more.
OOM_MEMORY_UNIT = 1024 * 1024


class RetryOOM(_Model):
    """Run an OOMKilled step again with more memory: ``factor`` times the last attempt's,
    up to ``max`` (a quantity or bytes). The attempt that ran at ``max`` is the last.

    Written ``retry_oom: {factor: 2, max: "64Gi"}``; the step must ask for ``memory``.
    """

    factor: float = Field(2.0, gt=1.0, le=1024.0, description="Each attempt's memory multiplier.")
    max: str | int = Field(description="The most memory an attempt may ask for.")

    @field_validator("max")
    @classmethod
    def _max_is_quantity(cls, value: str | int) -> str | int:
        if parse_quantity(value) <= 0:
            raise ValueError(f'"{value}" must be more than zero bytes')
        return value

    @property
    def max_bytes(self) -> int:
        """Return ``max`` in bytes."""
        return int(parse_quantity(self.max))

    def next_memory(self, current: int) -> int | None:
        """Return the next attempt's memory after one that ran out with ``current`` bytes,
        or None when ``current`` was already the most allowed.

        Always more than ``current``: ``factor`` times it, rounded up to a whole MiB (a
        factor such as 1.0000001 would otherwise ask for the same bytes again, forever).
        """
        if current >= self.max_bytes:
            return None
        grown = max(math.ceil(current * self.factor), current + 1)
        return min(-(-grown // OOM_MEMORY_UNIT) * OOM_MEMORY_UNIT, self.max_bytes)

    def attempts_from(self, memory: int) -> list[int]:
        """Return the memory of every attempt from ``memory`` up to ``max``, stopping after
        ``MAX_OOM_ATTEMPTS + 1`` sizes (enough to tell the step makes too many)."""
        sizes = [memory]
        following = self.next_memory(memory)
        while following is not None and len(sizes) <= MAX_OOM_ATTEMPTS:
            sizes.append(following)
            following = self.next_memory(following)
        return sizes


class SecretKeyRef(_Model):
    """An environment value read from an existing Secret in the step's namespace."""

    secret: str
    key: str

    @field_validator("secret")
    @classmethod
    def _secret_is_name(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value) or len(value) > 253:
            raise ValueError(f'"{value}" is not a valid Secret name')
        return value


class Toleration(_Model):
    """A pod toleration, as Kubernetes spells it but in snake case."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=-INT64_MAX, le=INT64_MAX)

    @model_validator(mode="after")
    def _fits_kubernetes_rules(self) -> Toleration:
        # The API server's own rules, checked here so that a bad toleration fails before
        # anything is sent rather than as a rejected Job.
        if self.operator == "Exists" and self.value:
            message, loc = (
                'operator "Exists" takes no value; drop the value or use "Equal"',
                "value",
            )
        elif self.key is None and self.operator != "Exists":
            message, loc = 'a toleration without a key must use operator "Exists"', "operator"
        elif self.toleration_seconds is not None and self.effect != "NoExecute":
            message, loc = 'toleration_seconds needs effect "NoExecute"', "effect"
        else:
            return self
        raise _field_error("Toleration", (loc,), message, getattr(self, loc))


class StepOutput(_Model):
    """A named output of a step, used as another step's input before it exists."""

    step: str
    output: str


class LauncherCall(_Model):
    """One ``$(LAUNCHER)`` or ``$(LAUNCHER)[2n, 8p]`` found in a script."""

    start: int
    end: int
    nodes: int | None = None
    procs: int | None = None

    def counts(self, resources: Resources) -> tuple[int, int]:
        """Return the (nodes, processes) this call launches within ``resources``.

        Bare ``$(LAUNCHER)`` runs all ``tasks`` on all nodes; ``[Np]`` fills as few nodes
        as hold N processes; ``[Nn]`` runs the tasks those N nodes hold.
        """
        per_node = resources.tasks_per_node
        if self.nodes is not None:
            nodes = self.nodes
        elif self.procs is not None:
            nodes = math.ceil(self.procs / per_node)
        else:
            nodes = resources.nodes
        nodes = min(nodes, resources.nodes)
        procs = self.procs or min(resources.tasks, nodes * per_node)
        return nodes, procs


def find_launcher_calls(script: str) -> list[LauncherCall]:
    """Return every ``$(LAUNCHER)`` use in ``script``, with its bracketed counts if any."""
    calls = []
    for match in _LAUNCHER.finditer(script):
        counts: dict[str, int] = {}
        for arg in filter(str.strip, (match["args"] or "").split(",")):
            parsed = _LAUNCHER_ARG.match(arg)
            if not parsed or int(parsed[1]) <= 0:
                raise ValueError(
                    f'script: "{match[0]}" is not understood; write $(LAUNCHER), '
                    "$(LAUNCHER)[4p] or $(LAUNCHER)[2n, 8p] with positive counts"
                )
            counts["nodes" if parsed[2] == "n" else "procs"] = int(parsed[1])
        calls.append(LauncherCall(start=match.start(), end=match.end(), **counts))
    return calls


def _check_reference(key: str, ref: str) -> None:
    """Refuse an input reference the pod's pull could not parse, before anything is sent."""
    # The same parser the pull uses, so that a malformed reference fails here and not
    # inside the pod; white space is refused first (it would split the handoff's argv).
    if not ref.strip() or any(c.isspace() for c in ref):
        why = "it holds white space"
    else:
        try:
            parse_reference(ref)
            return
        except ValueError as exc:  # InvalidReference, or a codec error on a bad host
            why = str(exc).rstrip(".")
    raise ValueError(
        f'"{key}": "{redact(ref)}" is not an artifact reference ({why}); write "repository:tag", '
        '"host[:port]/repository:tag" or another step\'s output'
    )


def _check_relative_path(path: str, what: str) -> str:
    normal = posixpath.normpath(path)
    if not path or path.startswith("/") or normal == ".." or normal.startswith("../"):
        raise ValueError(
            f'{what} "{path}" must be a path inside the work directory (relative, no "..")'
        )
    return normal


EnvValue = str | SecretStr | SecretKeyRef


class Step(_Model):
    """One workflow step: a script, how and where to run it, and what it reads and writes.

    ``env`` values may be plain text, ``pydantic.SecretStr`` (rendered into a Secret, never
    into the ConfigMap or the Job) or a ``SecretKeyRef`` to an existing Secret. ``inputs``
    map a name to an artifact reference or another step's ``output(...)``; input ``x``
    appears as ``$K8SJOBS_INPUTS/x``. ``outputs`` map a name to a path relative to the
    work directory, pushed as an artifact when the script succeeds (and, with
    ``push_outputs="always"``, apart as a failed step's outputs when it fails).
    ``disruptions``, ``retry_on_exit_codes`` and ``fail_on_exit_codes`` say which pod
    failures spend ``retries`` (``k8sjobs.steps.failure``, docs/failures.md). ``cache``
    says whether a recorded success with the same key (``k8sjobs.steps.key``) is reused
    instead of running again (docs/reruns.md).
    """

    name: str = Field(min_length=1, max_length=253)
    script: str = Field(min_length=1)
    shell: str = "/bin/bash"
    image: str = DEFAULT_IMAGE
    resources: Resources = Resources()
    env: dict[str, EnvValue] = {}
    workdir: str = "/work"
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    namespace: str | None = None
    retries: int = Field(0, ge=0, le=INT32_MAX, description="Pod retries: the Job's backoffLimit.")
    # How pod failures are treated (k8sjobs.steps.failure, docs/failures.md).
    disruptions: Disruptions = "ignore"
    retry_on_exit_codes: ExitCodes = []
    fail_on_exit_codes: ExitCodes = []
    push_outputs: Literal["on_success", "always"] = "on_success"
    # OOMKilled: run again with more memory (the session's, on both backends; docs/usage.md).
    retry_oom: RetryOOM | None = None
    walltime: Duration = None
    # Fail a step not started this long after it was sent (k8sjobs.status, docs/states.md).
    pending_timeout: Duration = None
    ttl_after_finished: Duration = None
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    service_account: str | None = None
    image_pull_secrets: list[str] = []
    queue: str | None = Field(None, description="Kueue LocalQueue name.")
    # Kueue's WorkloadPriorityClass (the kueue.x-k8s.io/priority-class label): the step's
    # place in its queue and whom it may preempt; priority_class is the pod's, for kubelet
    # and scheduler. docs/kueue.md.
    priority: str | None = Field(None, description="Kueue WorkloadPriorityClass name.")
    inputs: dict[str, str | StepOutput] = {}
    outputs: dict[str, str] = {}
    launcher: str = DEFAULT_LAUNCHER
    security: Literal["default", "restricted"] = "default"
    # Multi-node steps (nodes > 1): how the launcher (index 0) reaches the workers; see
    # k8sjobs/render/multinode.py. None means "ssh" when nodes > 1.
    launch: Literal["ssh", "none"] | None = None
    mpi: Literal["openmpi", "mpich", "intel"] = "openmpi"
    ssh_dir: str | None = Field(None, description="Where the step's key pair is mounted.")
    worker_wait: Duration = Field(
        timedelta(minutes=5), description="How long the launcher waits for its workers."
    )
    # What runs the step: a Job, a JobSet (k8sjobs/render/jobset.py), or a Flux Operator
    # MiniCluster (k8sjobs/render/minicluster.py).
    target: StepTarget = "job"
    flux_in_image: bool = Field(False, description="The image has Flux: no Flux view.")
    # Volumes (volumes.py) and scheduling knobs (scheduling.py): each concept in its module.
    volumes: list[Volume] = []
    shm: str | int | None = Field(None, description='Memory-backed /dev/shm size, e.g. "8Gi".')
    priority_class: ObjectName | None = None
    runtime_class: ObjectName | None = None
    affinity: Affinity | None = None
    spread: Annotated[str | None, AfterValidator(check_spread)] = None
    cache: bool | None = Field(
        None,
        description="Reuse a recorded success with the same key (None: when the step has "
        "outputs and no writable volume; docs/reruns.md).",
    )
    allocation: str | None = Field(
        None, description="The allocation (held pods) the step runs in (docs/allocations.md)."
    )
    key_env: list[str] = Field(
        [],
        description="Names of the driver's environment variables whose values enter the "
        "step's key (unset counts as a value): what the key does not see otherwise, such as "
        "a tool's version on PATH (docs/reruns.md).",
    )

    @classmethod
    def from_script_file(cls, path: str | Path, **fields: Any) -> Step:
        """Return a Step whose script is read from ``path`` (the name defaults to its stem)."""
        path = Path(path)
        fields.setdefault("name", path.stem)
        # Bounded (a script lives in a ConfigMap) and UTF-8, or an error naming file and line.
        return cls(script=read_text_file(path, limit=SCRIPT_LIMIT, what="script file"), **fields)

    def output(self, name: str) -> StepOutput:
        """Return a reference to this step's output ``name``, to use as another step's input."""
        if name not in self.outputs:
            known = ", ".join(sorted(self.outputs)) or "none"
            raise KeyError(f'Step "{self.name}" has no output "{name}" (its outputs: {known})')
        return StepOutput(step=self.name, output=name)

    @property
    def argv(self) -> tuple[str, ...]:
        """Return the interpreter command line that runs the script (without the script)."""
        parts = tuple(self.shell.split())
        return KNOWN_SHELLS.get(parts[0], parts[:1]) + parts[1:]

    @field_validator("shell", "workdir", "image")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError(f"{value!r} {_NUL_REFUSED}")
        return value

    @field_validator("name")
    @classmethod
    def _name_is_printable(cls, value: str) -> str:
        if not value.strip() or any(ch in value for ch in "\0\n\r\t"):
            raise ValueError("must be non-blank text on one line")
        return value

    @field_validator("script")
    @classmethod
    def _script_fits(cls, value: str) -> str:
        if "\0" in value:
            line = value[: value.index("\0")].count("\n") + 1
            raise ValueError(
                f"has a NUL byte on line {line}: shells and interpreters refuse such a file "
                "(bash: cannot execute binary file); remove it, or ship binary data as an input"
            )
        size = len(value.encode())
        if size > SCRIPT_LIMIT:
            raise ValueError(
                f"is {size} bytes, over the {SCRIPT_LIMIT}-byte limit of a ConfigMap; "
                "ship large code in the image or as an input artifact"
            )
        return value

    @field_validator("shell")
    @classmethod
    def _shell_is_known(cls, value: str) -> str:
        first = value.split()[0] if value.strip() else ""
        if first not in KNOWN_SHELLS and not first.startswith("/"):
            names = ", ".join(sorted(KNOWN_SHELLS))
            raise ValueError(
                f'"{value}" is neither an absolute path nor a known shell; '
                f"use an absolute path (/usr/bin/env python3) or one of: {names}"
            )
        return value

    @field_validator("image")
    @classmethod
    def _image_is_reference(cls, value: str) -> str:
        if not value.strip():
            raise ValueError('must name a container image, e.g. "python:3.12-slim"')
        if any(ch.isspace() for ch in value):
            raise ValueError(f'"{value}" is not an image reference: it contains white space')
        return value

    @field_validator("allocation")
    @classmethod
    def _allocation_is_label(cls, value: str | None) -> str | None:
        return check_dns_label(value, "allocation name")

    @field_validator("key_env")
    @classmethod
    def _key_env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f'"{name[:80]}" is not a valid environment variable name')
        return sorted(set(value))

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for key, item in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f'"{key}" is not a valid environment variable name')
            text = item.get_secret_value() if isinstance(item, SecretStr) else item
            if isinstance(text, str) and "\0" in text:
                # The value itself is never shown: it may be a secret.
                raise ValueError(f'"{key}": its value {_NUL_REFUSED}')
            if key.startswith("K8SJOBS_") and key not in USER_SETTABLE_ENV:
                raise ValueError(
                    f'"{key}": names starting with K8SJOBS_ are set by k8sjobs '
                    f"(except {', '.join(USER_SETTABLE_ENV)})"
                )
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir_is_absolute(cls, value: str) -> str:
        normal = posixpath.normpath(value)
        if not value.startswith("/") or normal == "/" or normal.startswith("/k8sjobs"):
            raise ValueError(
                f'"{value}" must be an absolute directory other than "/" and outside /k8sjobs'
            )
        return normal

    @field_validator("labels", "annotations", "node_selector")
    @classmethod
    def _keys_are_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _check_label_key(key)
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations_fit(cls, value: dict[str, str]) -> dict[str, str]:
        size = annotations_size(value)
        if size > ANNOTATIONS_LIMIT:
            raise ValueError(
                f"these take {size} bytes (keys and values), over the {ANNOTATIONS_LIMIT}-byte "
                "limit of the Kubernetes API; keep large data in an input artifact or a ConfigMap"
            )
        return value

    @field_validator("labels", "node_selector")
    @classmethod
    def _values_are_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if text and (len(text) > 63 or not _LABEL_NAME.match(text)):
                raise ValueError(
                    f'"{key}": value "{text}" must be at most 63 characters of '
                    "[A-Za-z0-9-_.], starting and ending with a letter or digit"
                )
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_label(cls, value: str | None) -> str | None:
        return check_dns_label(value, "namespace")

    @field_validator("service_account")
    @classmethod
    def _names_are_subdomains(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f'"{value}" is not a valid Kubernetes object name')
        return value

    @field_validator("queue")
    @classmethod
    def _queue_is_label_value(cls, value: str | None) -> str | None:
        return _kueue_label_value(
            value,
            f"LocalQueue name for queue (lowercase letters, digits, '-' and '.', 63 "
            f"characters at most: it is the {QUEUE_LABEL} label's value)",
        )

    @field_validator("priority")
    @classmethod
    def _priority_is_name(cls, value: str | None) -> str | None:
        return _kueue_label_value(
            value,
            "WorkloadPriorityClass name (priority is Kueue's, the "
            "kueue.x-k8s.io/priority-class label; the pod's PriorityClass is priority_class)",
        )

    @model_validator(mode="after")
    def _priority_is_queued(self) -> Step:
        if self.priority is not None and not self.queue:
            message = (
                "priority names a Kueue WorkloadPriorityClass, which only a queued step has; "
                "set queue to a LocalQueue, or use priority_class for the pod's PriorityClass"
            )
            raise _field_error("Step", ("priority",), message, self.priority)
        if self.queue and QUEUE_LABEL in self.labels:
            message = (
                f"queue and labels[{QUEUE_LABEL}] both name the step's LocalQueue; "
                "keep queue and drop the label"
            )
            raise _field_error("Step", ("queue",), message, self.queue)
        if self.priority is not None and PRIORITY_LABEL in self.labels:
            message = (
                f"priority and labels[{PRIORITY_LABEL}] both set Kueue's priority; "
                "keep priority and drop the label"
            )
            raise _field_error("Step", ("priority",), message, self.priority)
        return self

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets_are_names(cls, value: list[str]) -> list[str]:
        for name in value:
            cls._names_are_subdomains(name)
        return value

    @field_validator("walltime", "pending_timeout")
    @classmethod
    def _walltime_positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value.total_seconds() < 1:
            raise ValueError("must be at least one second")
        return value

    @field_validator("ttl_after_finished")
    @classmethod
    def _ttl_not_negative(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value.total_seconds() < 0:
            raise ValueError("must not be negative")
        if value is not None and value.total_seconds() > INT32_MAX:
            raise ValueError(
                f"must be at most {INT32_MAX} seconds (the Job's ttlSecondsAfterFinished is "
                "a 32-bit number); write a shorter one"
            )
        return value

    @field_validator("inputs", "outputs")
    @classmethod
    def _artifact_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not _ARTIFACT_NAME.match(key):
                raise ValueError(
                    f'"{key}" is not a valid artifact name; use lowercase letters, digits, '
                    "'.', '_' and '-', starting with a letter or digit"
                )
        return value

    @field_validator("inputs")
    @classmethod
    def _inputs_are_references(cls, value: dict[str, str | StepOutput]) -> dict[str, Any]:
        for key, ref in value.items():
            if isinstance(ref, str):
                _check_reference(key, ref)
        return value

    @field_validator("outputs")
    @classmethod
    def _outputs_are_relative(cls, value: dict[str, str]) -> dict[str, str]:
        return {key: _check_relative_path(path, f'"{key}": path') for key, path in value.items()}

    @field_validator("launcher")
    @classmethod
    def _launcher_is_template(cls, value: str) -> str:
        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        unknown = fields - set(LAUNCHER_FIELDS)
        if unknown or "" in fields:
            raise ValueError(
                f"template uses {sorted(unknown) or ['{}']}; it may use only "
                + ", ".join("{" + f + "}" for f in LAUNCHER_FIELDS)
            )
        return value

    @field_validator("ssh_dir")
    @classmethod
    def _ssh_dir_is_absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        normal = posixpath.normpath(value)
        # MPI splits its ssh arguments (which name the key's path) on white space.
        plain = re.fullmatch(r"[A-Za-z0-9._/-]+", value)
        if not plain or not value.startswith("/") or normal == "/" or normal.startswith("/k8sjobs"):
            raise ValueError(
                f'"{value}" must be an absolute directory other than "/" and outside '
                '/k8sjobs, of letters, digits and ._-/ only, e.g. "/home/mpiuser/.ssh"'
            )
        return normal

    @field_validator("worker_wait")
    @classmethod
    def _worker_wait_positive(cls, value: timedelta | None) -> timedelta:
        if value is None or not 1 <= value.total_seconds() <= INT32_MAX:
            raise ValueError(f'must be between 1 and {INT32_MAX} seconds, e.g. 300 or "5m"')
        return value

    @property
    def launch_mode(self) -> Literal["ssh", "none"]:
        """Return how a multi-node step is launched ("none" for one node: nothing to reach)."""
        if self.resources.nodes == 1 or self.target == "minicluster":  # Flux launches
            return "none"
        return self.launch or "ssh"

    @property
    def ssh_home(self) -> str:
        """Return where the key pair is mounted: ``ssh_dir``, else the user's ``~/.ssh``.

        Restricted pods run as uid 65532, the "nonroot" user of distroless and Chainguard
        images, whose home is /home/nonroot.
        """
        if self.ssh_dir is not None:
            return self.ssh_dir
        return SSH_DIR_NONROOT if self.security == "restricted" else SSH_DIR_ROOT

    @property
    def queue_labels(self) -> dict[str, str]:
        """Return the labels that put this step in its Kueue queue (empty when unqueued).

        On a Job or JobSet they go on the object; a MiniCluster passes them to the Job its
        operator makes (``spec.jobLabels``), which Kueue's webhook then suspends and admits.
        """
        if not self.queue:
            return {}
        labels = {QUEUE_LABEL: self.queue}
        if self.priority is not None:
            labels[PRIORITY_LABEL] = self.priority
        return labels

    @model_validator(mode="after")
    def _ssh_dir_outside_workdir(self) -> Step:
        # The key pair must never be pushed as (part of) an output.
        ssh_dir = self.ssh_home
        if self.launch_mode == "ssh" and (ssh_dir + "/").startswith(self.workdir + "/"):
            raise _field_error(
                "Step",
                ("ssh_dir",),
                f'"{ssh_dir}" is inside the work directory "{self.workdir}", whose files may '
                'be pushed as outputs; keep the key pair elsewhere, e.g. "/root/.ssh"',
                ssh_dir,
            )
        return self

    @field_validator("shm")
    @classmethod
    def _shm_is_size(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_quantity(value) <= 0:
            raise ValueError(f'"{value}" must be a size of more than zero bytes, e.g. "8Gi"')
        return value

    @model_validator(mode="after")
    def _volumes_fit(self) -> Step:
        broken = check_volumes(
            self.volumes,
            workdir=self.workdir,
            outputs=self.outputs,
            restricted=self.security == "restricted",
            shm=self.shm,
            taken={self.ssh_home: "the ssh key pair (ssh_dir)"}
            if self.launch_mode == "ssh"
            else {},
        )
        if broken is not None:
            raise _field_error("Step", broken[0], broken[1], None)
        return self

    @model_validator(mode="before")
    @classmethod
    def _minicluster_counts_disruptions(cls, data: Any) -> Any:
        # A MiniCluster's Job has no podFailurePolicy, so a disrupted pod spends a retry like
        # any failed one: its steps' default says so, and an explicit "ignore" is refused.
        if isinstance(data, dict) and data.get("target") == "minicluster":
            data = {"disruptions": "count", **data}
        return data

    @model_validator(mode="after")
    def _minicluster_fits(self) -> Step:
        if self.target == "minicluster":
            for loc, message in minicluster_problems(self):
                raise _field_error("Step", (loc,), message, getattr(self, loc))
        return self

    @model_validator(mode="after")
    def _retry_oom_has_memory_to_grow(self) -> Step:
        grow, memory = self.retry_oom, self.resources.memory_bytes
        if grow is None:
            return self
        if self.target != "job":
            message = (
                f"retry_oom is for target: job steps (a {self.target}'s pods are its "
                "controller's); leave it unset or use target: job"
            )
            raise _field_error("Step", ("retry_oom",), message, grow.model_dump())
        if memory is None:
            message = 'retry_oom needs resources.memory to grow from; set it (e.g. "4Gi")'
            raise _field_error("Step", ("retry_oom",), message, grow.model_dump())
        if grow.max_bytes < memory:
            message = (
                f"retry_oom.max {grow.max} is below resources.memory {self.resources.memory}; "
                "raise max or lower memory"
            )
            raise _field_error("Step", ("retry_oom", "max"), message, grow.max)
        if len(grow.attempts_from(memory)) > MAX_OOM_ATTEMPTS:
            message = (
                f"retry_oom factor {grow.factor} takes more than {MAX_OOM_ATTEMPTS} attempts "
                f"from resources.memory {self.resources.memory} to max {grow.max}; "
                "raise factor or lower max"
            )
            raise _field_error("Step", ("retry_oom", "factor"), message, grow.factor)
        return self

    @model_validator(mode="after")
    def _exit_code_rules_agree(self) -> Step:
        problem = check_exit_code_rules(
            self.retries, self.retry_on_exit_codes, self.fail_on_exit_codes
        )
        if problem is not None:
            loc, message = problem
            raise _field_error("Step", (loc,), message, getattr(self, loc))
        return self

    @model_validator(mode="after")
    def _launcher_counts_fit(self) -> Step:
        res = self.resources
        try:
            calls = find_launcher_calls(self.script)
        except ValueError as error:
            raise _field_error("Step", ("script",), str(error), self.script) from None
        for call in calls:
            text = self.script[call.start : call.end]
            if call.procs is not None and call.procs > res.tasks:
                message = (
                    f"{text} asks for {call.procs} processes but resources.tasks is "
                    f"{res.tasks}; raise resources.tasks or lower the count"
                )
            elif call.nodes is not None and call.nodes > res.nodes:
                message = (
                    f"{text} asks for {call.nodes} nodes but resources.nodes is "
                    f"{res.nodes}; raise resources.nodes or lower the count"
                )
            elif call.counts(res)[1] > call.counts(res)[0] * res.tasks_per_node:
                nodes, procs = call.counts(res)
                message = (
                    f"{text} puts {procs} processes on {nodes} node(s), but each node (pod) "
                    f"has room for {res.tasks_per_node} tasks; ask for more nodes "
                    f"($(LAUNCHER)[{math.ceil(procs / res.tasks_per_node)}n, {procs}p]) "
                    "or fewer processes"
                )
            else:
                continue
            raise _field_error("Step", ("script",), f"script: {message}", text)
        return self


def minicluster_problems(step: Step) -> list[tuple[str, str]]:
    """Return (field, message) for each part of ``step`` a Flux Operator MiniCluster cannot carry.

    What its v1alpha2 API has no room for (see k8sjobs/render/minicluster.py, which renders it).
    """
    found: list[tuple[str, str]] = []
    if step.security == "restricted":
        found.append(
            (
                "security",
                "the Flux Operator runs its Flux view and brokers as root and takes no pod "
                'securityContext beyond fsGroup, so target: minicluster cannot be "restricted"; '
                "use target: job (launch: ssh) in a restricted namespace",
            )
        )
    if step.launch is not None:
        found.append(("launch", "Flux launches a target: minicluster step; leave launch unset"))
    # k8sjobs renders these as the Job's podFailurePolicy; the operator makes its Job without.
    for name in ("retry_on_exit_codes", "fail_on_exit_codes"):
        if getattr(step, name):
            found.append(
                (
                    name,
                    f"the Flux Operator's Job has no podFailurePolicy, so a target: minicluster "
                    f"step cannot carry {name} (every failure spends one of its retries); "
                    "leave it unset, or use target: job (launch: ssh) for exit-code rules",
                )
            )
    if step.disruptions == "ignore":
        found.append(
            (
                "disruptions",
                'the Flux Operator\'s Job has no podFailurePolicy, so "ignore" cannot be '
                "carried: an evicted or preempted MiniCluster pod spends one of its retries "
                'like any failure; leave disruptions unset (it is "count" for target: '
                "minicluster), or use target: job",
            )
        )
    if len(step.image_pull_secrets) > 1:
        found.append(("image_pull_secrets", "a MiniCluster container takes one image pull secret"))
    if any(not word or any(ch.isspace() for ch in word) for word in step.argv):
        found.append(
            ("shell", "the Flux Operator splits the command at spaces; no word may hold one")
        )
    # Volumes and scheduling knobs render into a Job's pod; the MiniCluster does not get them.
    for name in ("volumes", "shm", "priority_class", "runtime_class", "affinity", "spread"):
        if getattr(step, name):
            found.append((name, f"target: minicluster does not carry {name}; use target: job"))
    return found
