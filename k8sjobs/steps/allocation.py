"""An allocation: pods held once for a study, into which many short steps are streamed.

A step that is a whole Job pays two API writes, a pod start and a pod end; for a flood of short
steps that is the whole cost. An ``Allocation`` names a set of ``nodes`` pods, each holding
``resources`` (per pod, as a one-node step's), that stay up while steps arrive and leave after
``idle_timeout`` with nothing to run, or at ``max_lifetime``. A step names its allocation with
``Step(allocation="pool")`` and runs in one of its pods, packed with others into the pod's
cores, memory and GPUs (docs/allocations.md).

``refusal`` is the pure rule that says, before anything is sent, why a step cannot run in an
allocation: it does not fit a pod, or it asks for what only a pod of its own gives.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .spec import (
    DEFAULT_IMAGE,
    INT32_MAX,
    Count,
    Duration,
    Resources,
    Step,
    Toleration,
    _field_error,
    _kueue_label_value,
    _Model,
    check_dns_label,
)

__all__ = ["ALLOCATION_NAME_LIMIT", "Allocation", "refusal"]

#: An allocation's name is a DNS label short enough that its Job's name (``alloc-<study>-<name>``
#: cut to fit) and its pods' names (``<job>-<index>-<5 random>``) stay valid.
ALLOCATION_NAME_LIMIT = 40


class Allocation(_Model):
    """A named set of pods held for a study, that runs the steps which name it.

    ``nodes`` pods, each with ``resources`` (its cores, GPUs and memory: ``nodes`` of the
    resources is the allocation's own ``nodes`` and must stay 1), run ``image`` (which needs
    ``python3``: the agent that runs steps in each pod is a Python script). ``queue`` and
    ``priority`` are Kueue's, for the whole allocation (one Workload); ``target`` "jobset"
    holds the pods as a JobSet instead of an Indexed Job.
    """

    name: str = Field(min_length=1, max_length=ALLOCATION_NAME_LIMIT)
    nodes: Count = 1
    image: str = DEFAULT_IMAGE
    resources: Resources = Resources()
    namespace: str | None = None
    queue: str | None = Field(None, description="Kueue LocalQueue name.")
    priority: str | None = Field(None, description="Kueue WorkloadPriorityClass name.")
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    security: Literal["default", "restricted"] = "default"
    service_account: str | None = None
    image_pull_secrets: list[str] = []
    idle_timeout: Duration = Field(
        timedelta(minutes=10),
        description="How long a pod waits with nothing to run before it leaves.",
    )
    max_lifetime: Duration = Field(
        timedelta(hours=24), description="The longest a pod of the allocation lives."
    )
    target: Literal["job", "jobset"] = "job"

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        check_dns_label(value, "allocation name (lower-case letters, digits and '-')")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_label(cls, value: str | None) -> str | None:
        return check_dns_label(value, "namespace")

    @field_validator("queue")
    @classmethod
    def _queue_is_label(cls, value: str | None) -> str | None:
        return _kueue_label_value(value, "Kueue LocalQueue name")

    @field_validator("priority")
    @classmethod
    def _priority_is_label(cls, value: str | None) -> str | None:
        return _kueue_label_value(value, "Kueue WorkloadPriorityClass name")

    @field_validator("node_selector")
    @classmethod
    def _selector_is_labels(cls, value: dict[str, str]) -> dict[str, str]:
        # The same rules as a step's node_selector: the API server's, named before a Job fails.
        return Step._values_are_labels(Step._keys_are_labels(value))

    @field_validator("service_account")
    @classmethod
    def _account_is_name(cls, value: str | None) -> str | None:
        return Step._names_are_subdomains(value)

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets_are_names(cls, value: list[str]) -> list[str]:
        return Step._pull_secrets_are_names(value)

    @field_validator("image")
    @classmethod
    def _image_is_reference(cls, value: str) -> str:
        if not value.strip() or any(ch.isspace() or ch == "\0" for ch in value):
            raise ValueError(f'"{value[:80]}" is not an image reference, e.g. "python:3.12-slim"')
        return value

    @field_validator("resources", mode="before")
    @classmethod
    def _one_pod_resources(cls, value: Any) -> Any:
        # Before Resources reads them: its own check ("tasks (1) is smaller than nodes (2)")
        # would otherwise speak first, of a field the allocation does not want at all.
        nodes = value.get("nodes", 1) if isinstance(value, dict) else getattr(value, "nodes", 1)
        if nodes != 1:
            raise ValueError(
                f"resources.nodes is {nodes}: an allocation's resources are each pod's; "
                f"write nodes: {nodes} on the allocation itself"
            )
        return value

    @model_validator(mode="after")
    def _whole_pods(self) -> Allocation:
        for key, value in (
            ("idle_timeout", self.idle_timeout),
            ("max_lifetime", self.max_lifetime),
        ):
            # At least a second: the agent's own clock; at most an int32 of seconds, as
            # every duration that lands in a Job field (activeDeadlineSeconds from it).
            if value is None or not 1 <= value.total_seconds() <= INT32_MAX:
                raise _field_error(
                    "Allocation",
                    (key,),
                    f"{key} must be a duration from 1 second to {INT32_MAX} seconds, e.g. 5m",
                    value,
                )
        if self.priority is not None and not self.queue:
            message = (
                "priority names a Kueue WorkloadPriorityClass, which only a queued allocation "
                "has; set queue to a LocalQueue"
            )
            raise _field_error("Allocation", ("priority",), message, self.priority)
        return self

    @property
    def pod_cpu(self) -> float:
        """Return the cores each pod holds (what the steps in it share)."""
        return self.resources.cpu_cores

    @property
    def pod_memory(self) -> int | None:
        """Return the memory (bytes) each pod holds, None when the allocation sets none."""
        return self.resources.memory_bytes

    @property
    def pod_gpus(self) -> int:
        """Return the GPUs each pod holds."""
        return self.resources.gpus


#: What a step can only have with a pod of its own: set on a step in an allocation (and unlike
#: the allocation's own setting), it would be silently dropped, so it is refused instead.
_OWN_POD_FIELDS = (
    "target",
    "volumes",
    "shm",
    "node_selector",
    "tolerations",
    "queue",
    "priority",
    "priority_class",
    "runtime_class",
    "affinity",
    "spread",
    "service_account",
    "image_pull_secrets",
)


def refusal(step: Step, allocation: Allocation) -> str | None:
    """Return why ``step`` cannot run in ``allocation`` (a sentence with the fix), or None.

    A step in an allocation runs as a process in one of its pods: it must fit one pod, use the
    pod's image, and ask for nothing that only a pod of its own would give (more nodes, a
    target, volumes, its own scheduling).
    """
    where = f'allocation "{allocation.name}"'
    res = step.resources
    if step.image != allocation.image and "image" in step.model_fields_set:
        return (
            f'its image "{step.image}" is not the image of {where} ("{allocation.image}"); '
            "steps run in the allocation's pods: drop the step's image or use the same one"
        )
    if res.nodes > 1:
        return (
            f"it asks for {res.nodes} nodes; a step in {where} runs in one pod: "
            "run a multi-node step as a Job of its own (no allocation)"
        )
    if res.cpu_cores > allocation.pod_cpu:
        return (
            f"it needs {res.cpu_cores:g} cores and each pod of {where} holds "
            f"{allocation.pod_cpu:g}; lower the step's cores or raise the allocation's"
        )
    if res.gpus > allocation.pod_gpus:
        return (
            f"it needs {res.gpus} GPUs and each pod of {where} holds {allocation.pod_gpus}; "
            "lower the step's gpus or raise the allocation's"
        )
    memory, held = res.memory_bytes, allocation.pod_memory
    if memory is not None and held is not None and memory > held:
        return (
            f"it needs {res.memory} of memory and each pod of {where} holds "
            f"{allocation.resources.memory}; lower the step's memory or raise the allocation's"
        )
    if step.namespace is not None and step.namespace != (allocation.namespace or step.namespace):
        return (
            f'it runs in namespace "{step.namespace}" and the pods of {where} in '
            f'"{allocation.namespace}"; drop the step\'s namespace or use the same one'
        )
    if step.security == "restricted" and allocation.security != "restricted":
        return (
            f'it asks for security "restricted" and the pods of {where} are not restricted; '
            'set security: "restricted" on the allocation'
        )
    own = [
        name
        for name in _OWN_POD_FIELDS
        if name in step.model_fields_set
        and getattr(step, name) not in (None, [], {}, "job")
        and getattr(step, name) != getattr(allocation, name, None)
    ]
    if own:
        fields = ", ".join(own)
        return (
            f"it sets {fields}, which only a pod of its own gives; set them on {where} "
            "or run the step without an allocation"
        )
    return None
