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
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .spec import (
    DEFAULT_IMAGE,
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

    @field_validator("image")
    @classmethod
    def _image_is_reference(cls, value: str) -> str:
        if not value.strip() or any(ch.isspace() or ch == "\0" for ch in value):
            raise ValueError(f'"{value[:80]}" is not an image reference, e.g. "python:3.12-slim"')
        return value

    @model_validator(mode="after")
    def _whole_pods(self) -> Allocation:
        if self.resources.nodes != 1:
            raise _field_error(
                "Allocation",
                ("resources", "nodes"),
                f"resources.nodes is {self.resources.nodes}: an allocation's resources are "
                f"each pod's; write nodes: {self.resources.nodes} on the allocation itself",
                self.resources.nodes,
            )
        for key, value in (
            ("idle_timeout", self.idle_timeout),
            ("max_lifetime", self.max_lifetime),
        ):
            if value is None or value <= timedelta(0):
                raise _field_error(
                    "Allocation", (key,), f"{key} must be a positive duration, e.g. 5m", value
                )
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
    own = [
        name
        for name in ("target", "volumes", "node_selector", "tolerations", "queue", "priority")
        if name in step.model_fields_set and getattr(step, name) not in (None, [], {}, "job")
    ]
    if own:
        fields = ", ".join(own)
        return (
            f"it sets {fields}, which only a pod of its own gives; set them on {where} "
            "or run the step without an allocation"
        )
    return None
