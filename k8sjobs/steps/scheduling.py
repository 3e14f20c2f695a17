"""Where a step's pods may run: priority class, node affinity, topology spread, runtime class.

These are the scheduling knobs users of cluster job tools expect beside ``node_selector`` and
``tolerations``: ``Step.priority_class`` and ``Step.runtime_class`` name cluster objects,
``Step.affinity`` asks for nodes by label expressions (``required`` or ``preferred`` with a
weight), and ``Step.spread`` spreads a multi-node step's pods over hostnames or zones. All are
checked here by the API server's rules; ``pod_fields`` renders them (pure, no I/O). The local
backend and the fake cluster's single node have nowhere else to put a pod, so they ignore them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .names import check_label_key, check_object_name

__all__ = ["SPREAD_KEYS", "Affinity", "NodeExpression", "ObjectName", "Preference", "pod_fields"]

#: ``spread`` shorthands and the well-known node labels they stand for.
SPREAD_KEYS = {"hostname": "kubernetes.io/hostname", "zone": "topology.kubernetes.io/zone"}
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_INTEGER = re.compile(r"^\d{1,18}$")  # node label values cannot be negative


def _object_name(value: str) -> str:
    return check_object_name(value, "object")


#: The name of a cluster object (a PriorityClass, a RuntimeClass): a DNS subdomain.
ObjectName = Annotated[str, AfterValidator(_object_name)]


def _label_key(key: str) -> str:
    try:
        return check_label_key(key)
    except ValueError as error:
        raise ValueError(f"label {error}") from None


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeExpression(_Model):
    """A node label expression: ``key`` ``operator`` ``values``, as Kubernetes reads it.

    ``In``/``NotIn`` take one or more values, ``Exists``/``DoesNotExist`` none, and
    ``Gt``/``Lt`` exactly one integer.
    """

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []

    @field_validator("key")
    @classmethod
    def _key_is_label(cls, value: str) -> str:
        return _label_key(value)

    @field_validator("values")
    @classmethod
    def _values_are_labels(cls, value: list[str]) -> list[str]:
        for text in value:
            if text and (len(text) > 63 or not _LABEL_NAME.match(text)):
                raise ValueError(
                    f'"{text}" is not a label value: at most 63 characters of [A-Za-z0-9-_.], '
                    "starting and ending with a letter or digit"
                )
        return value

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeExpression:
        op, values = self.operator, self.values
        if op in ("In", "NotIn") and not values:
            raise ValueError(f'operator "{op}" needs values, e.g. values: [a100, h100]')
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f'operator "{op}" takes no values; drop them or use "In"')
        if op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.match(values[0])):
            raise ValueError(f'operator "{op}" takes exactly one whole number, e.g. ["4"]')
        return self

    def render(self) -> dict[str, Any]:
        """Return the expression as a Kubernetes ``NodeSelectorRequirement``."""
        shown: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            shown["values"] = list(self.values)
        return shown


class Preference(NodeExpression):
    """A preferred node label expression and its weight (1 to 100) among the preferences."""

    weight: int = Field(1, ge=1, le=100)


class Affinity(_Model):
    """Node affinity: every ``required`` expression must hold; ``preferred`` ones add weight."""

    required: list[NodeExpression] = []
    preferred: list[Preference] = []

    @model_validator(mode="after")
    def _not_empty(self) -> Affinity:
        if not self.required and not self.preferred:
            raise ValueError("give required or preferred node expressions, or leave affinity out")
        return self

    def render(self) -> dict[str, Any]:
        """Return the Kubernetes ``affinity`` of a pod spec."""
        node: dict[str, Any] = {}
        if self.required:
            terms = [{"matchExpressions": [e.render() for e in self.required]}]
            node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if self.preferred:
            node["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": p.weight, "preference": {"matchExpressions": [p.render()]}}
                for p in self.preferred
            ]
        return {"nodeAffinity": node}


def check_spread(value: str | None) -> str | None:
    """Return ``value`` if None, a shorthand of ``SPREAD_KEYS`` or a node label key."""
    if value is None or value in SPREAD_KEYS:
        return value
    try:
        return _label_key(value)
    except ValueError as error:
        raise ValueError(
            f'{error}; write "hostname", "zone" or a node label key such as '
            '"topology.kubernetes.io/region"'
        ) from None


def pod_fields(
    *,
    job_name: str,
    priority_class: str | None,
    runtime_class: str | None,
    affinity: Affinity | None,
    spread: str | None,
) -> dict[str, Any]:
    """Return the pod spec fields these knobs set (none of them when none is given).

    ``spread`` renders one hard topology spread constraint (max skew 1) over the pods of the
    step's Job, so a multi-node step's pods land on different hosts or zones, or wait.
    """
    fields: dict[str, Any] = {}
    if priority_class is not None:
        fields["priorityClassName"] = priority_class
    if runtime_class is not None:
        fields["runtimeClassName"] = runtime_class
    if affinity is not None:
        fields["affinity"] = affinity.render()
    if spread is not None:
        fields["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": SPREAD_KEYS.get(spread, spread),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {JOB_NAME_LABEL: job_name}},
            }
        ]
    return fields


def ignored(pod_spec: dict[str, Any]) -> Sequence[str]:
    """Return the scheduling fields a single-machine runner ignores in ``pod_spec``."""
    names = ("priorityClassName", "runtimeClassName", "affinity", "topologySpreadConstraints")
    return [name for name in names if name in pod_spec]
