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

__all__ = ["Origin", "ro_crate", "walk"]

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


#: The profiles a crate written by ``ro_crate`` conforms to.
WORKFLOW_RUN = "https://w3id.org/ro/wfrun/workflow/0.6"
PROCESS_RUN = "https://w3id.org/ro/wfrun/process/0.6"
WORKFLOW_RO_CRATE = "https://w3id.org/workflowhub/workflow-ro-crate/1.1"


def ro_crate(tree: Origin) -> dict[str, Any]:
    """Return ``ro-crate-metadata.json`` of a Workflow Run RO-Crate describing ``tree``.

    The main entity (``lineage.json``, written beside it: the tree as ``--format json``
    prints it) stands for the workflow; one ``CreateAction`` per step that made an
    artifact of the tree names its script (by digest) and image as instrument, its inputs
    as ``object``, its output as ``result``, with start and end; artifacts are data entities
    identified by their pinned references.
    """
    graph: list[dict[str, Any]] = []
    nodes: dict[str, Origin] = {}

    def collect(node: Origin) -> None:
        if node.reference not in nodes:
            nodes[node.reference] = node
            for child in node.inputs.values():
                collect(child)

    collect(tree)

    def artifact_id(node: Origin) -> str:
        return "#artifact-" + node.reference.rpartition("@")[2].replace(":", "-")

    sources = [n for n in nodes.values() if n.source]
    graph += [
        {
            "@id": "ro-crate-metadata.json",
            "@type": "CreativeWork",
            "about": {"@id": "./"},
            "conformsTo": {"@id": "https://w3id.org/ro/crate/1.3"},
        },
        {
            "@id": "./",
            "@type": "Dataset",
            "name": f"Lineage of {tree.reference}",
            "conformsTo": [{"@id": PROCESS_RUN}, {"@id": WORKFLOW_RUN}, {"@id": WORKFLOW_RO_CRATE}],
            "hasPart": [{"@id": "lineage.json"}],
            "mainEntity": {"@id": "lineage.json"},
            "mentions": [{"@id": "#run"}],
        },
        *(
            {"@id": profile, "@type": "CreativeWork", "name": name, "version": version}
            for profile, name, version in (
                (PROCESS_RUN, "Process Run Crate", "0.6"),
                (WORKFLOW_RUN, "Workflow Run Crate", "0.6"),
                (WORKFLOW_RO_CRATE, "Workflow RO-Crate", "1.1"),
            )
        ),
        {
            "@id": "lineage.json",
            "@type": ["File", "SoftwareSourceCode", "ComputationalWorkflow"],
            "name": f"k8sjobs steps that made {tree.reference}",
            "encodingFormat": "application/json",
            "programmingLanguage": {"@id": "#k8sjobs"},
        },
        {"@id": "#k8sjobs", "@type": "ComputerLanguage", "name": "k8sjobs"},
        {
            "@id": "#run",
            "@type": "CreateAction",
            "name": f"k8sjobs run that made {tree.reference}",
            "instrument": {"@id": "lineage.json"},
            "object": [{"@id": artifact_id(n)} for n in sources],
            "result": [{"@id": artifact_id(tree)}],
            "actionStatus": {"@id": "http://schema.org/CompletedActionStatus"},
        },
    ]  # fmt: skip
    for node in nodes.values():
        graph.append(
            {
                "@id": artifact_id(node),
                "@type": "Dataset",
                "name": node.reference,
                "identifier": node.reference,
                **({"description": "not in the store any more"} if node.missing else {}),
            }
        )
        if node.source:
            continue
        f = node.facts
        action: dict[str, Any] = {
            "@id": f"#step-{artifact_id(node)[1:]}",
            "@type": "CreateAction",
            "name": f"{f.get('study', '?')}/{f.get('step', '?')}",
            "object": [{"@id": artifact_id(child)} for child in node.inputs.values()],
            "result": [{"@id": artifact_id(node)}],
            "actionStatus": {
                "@id": "http://schema.org/"
                + ("CompletedActionStatus" if f.get("exit_code") == "0" else "FailedActionStatus")
            },
        }
        if "script_digest" in f:
            script = "#script-" + f["script_digest"].replace(":", "-")
            action["instrument"] = {"@id": script}
            graph.append(
                {
                    "@id": script,
                    "@type": "SoftwareSourceCode",
                    "name": f"script of {action['name']}",
                    "identifier": f["script_digest"],
                }
            )
        if "image" in f:
            action["containerImage"] = f["image"]
        for ours, theirs in (("started", "startTime"), ("finished", "endTime")):
            if ours in f:
                action[theirs] = f[ours]
        graph.append(action)
    return {"@context": "https://w3id.org/ro/crate/1.3/context", "@graph": graph}
