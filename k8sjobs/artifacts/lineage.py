"""Lineage: where a pushed output came from, read back from its manifest's annotations.

Every output a step pushes carries (``render.manifests.lineage_annotations`` and the push's
``run_facts``): its study and step, the step's key, the script's digest, the image, each
input's reference pinned by digest (``k8sjobs.io/inputs``), the exit code, start and end,
the k8sjobs version and the backend. ``walk`` follows the inputs back to their sources
(artifacts that carry no lineage: data pushed by hand), reading each manifest once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArtifactNotFound
from . import _media
from ._reference import pin
from .stepcache import CacheStore

__all__ = ["Origin", "walk"]

_FIELDS = {
    "study": "k8sjobs.io/study-name",
    "step": "k8sjobs.io/step-name",
    "key": "k8sjobs.io/step-key",
    "script_digest": "k8sjobs.io/script-digest",
    "image": "k8sjobs.io/image",
    "exit_code": "k8sjobs.io/exit-code",
    "started": "k8sjobs.io/started",
    "finished": "k8sjobs.io/finished",
    "version": "k8sjobs.io/version",
    "backend": "k8sjobs.io/backend",
}
MAX_DEPTH = 1000  # a chain of steps that long is a study; a longer one a loop of references


@dataclass
class Origin:
    """One artifact in a lineage tree: its facts, and the artifacts its step read."""

    reference: str
    facts: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, Origin] = field(default_factory=dict)
    missing: bool = False  # the store no longer has it

    @property
    def source(self) -> bool:
        """Return whether no k8sjobs step made it (no lineage annotations)."""
        return not self.facts

    def to_json(self) -> dict[str, Any]:
        """Return the tree as plain data."""
        return {
            "reference": self.reference,
            **self.facts,
            **({"missing": True} if self.missing else {}),
            "inputs": {name: node.to_json() for name, node in self.inputs.items()},
        }

    def lines(self, name: str = "", indent: str = "") -> list[str]:
        """Return the tree as indented text lines, one per artifact."""
        head = f"{name}: " if name else ""
        if self.missing:
            what = "not in the store"
        elif self.source:
            what = "source"
        else:
            f = self.facts
            what = f"{f.get('study', '?')}/{f.get('step', '?')}"
            what += f" exit {f['exit_code']}" if "exit_code" in f else ""
            what += f" {f['finished']}" if "finished" in f else ""
            what += f" image {f['image']}" if "image" in f else ""
        out = [f"{indent}{head}{self.reference} ({what})"]
        for input_name, node in self.inputs.items():
            out += node.lines(input_name, indent + "  ")
        return out


async def walk(store: CacheStore, reference: str) -> Origin:
    """Return the lineage tree of ``reference``, read from ``store`` (one GET per artifact)."""
    seen: dict[str, Origin] = {}

    async def visit(ref: str, depth: int) -> Origin:
        if ref in seen:
            return seen[ref]
        try:
            data, _, digest = await store.get_manifest(store._ref(ref))
        except ArtifactNotFound:
            seen[ref] = Origin(ref, missing=True)
            return seen[ref]
        pinned = pin(ref, digest) if "@" not in ref else ref
        annotations = _media.decode_manifest(data, ref).annotations
        node = Origin(pinned, {k: annotations[a] for k, a in _FIELDS.items() if a in annotations})
        seen[ref] = node
        if depth < MAX_DEPTH:
            for name, source in _inputs(annotations).items():
                node.inputs[name] = await visit(source, depth + 1)
        return node

    return await visit(reference, 0)


def _inputs(annotations: Any) -> dict[str, str]:
    try:
        found = json.loads(annotations.get("k8sjobs.io/inputs", "{}"))
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}
