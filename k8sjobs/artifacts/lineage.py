"""Lineage: where a pushed output came from, read back from its manifest's annotations.

Every output a step pushes carries (``render.manifests.lineage_annotations`` and the push's
``run_facts``): its study and step, the step's key, the script's digest, the image, each
input's reference pinned by digest (``k8sjobs.io/inputs``), the exit code, start and end,
the k8sjobs version and the backend. ``walk`` follows the inputs back to their sources
(artifacts that carry no lineage: data pushed by hand), reading each manifest once.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._printable import printable
from ..errors import ArtifactNotFound, InvalidReference
from . import _media
from ._reference import pin
from .stepcache import CacheStore

__all__ = ["Origin", "mentions", "ro_crate", "walk"]

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
MAX_DEPTH = 200  # deeper than this, json nesting nears Python's recursion limit: not followed
MAX_NODES = 5000  # artifacts read at most: bounds the GETs and the output of any graph


@dataclass(eq=False)
class Origin:
    """One artifact in a lineage graph: its facts, and the artifacts its step read.

    The graph may share nodes (one input of many steps) and, when references are tags
    pushed by hand, hold loops: every walk over it here visits each node once.
    """

    reference: str
    facts: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, Origin] = field(default_factory=dict)
    missing: bool = False  # the store no longer has it
    unread: str = ""  # why its inputs were not followed (depth or size bound), or ""
    invalid: str = ""  # why the reference an input names cannot be read at all, or ""

    @property
    def source(self) -> bool:
        """Return whether no k8sjobs step made it (no lineage annotations)."""
        return not self.facts

    def to_json(self) -> dict[str, Any]:
        """Return the graph as a tree of plain data: each artifact's facts at its first
        mention; a later mention is ``{"reference": ..., "see": "above"}``, or ``"loop"``
        when the artifact is an input of itself, so the output is bounded by the graph."""
        made: list[dict[str, Any]] = []
        for origin, name, depth, seen in mentions(self):
            del made[depth:]
            if seen:
                data: dict[str, Any] = {"reference": origin.reference, "see": seen}
            else:
                data = {
                    "reference": origin.reference,
                    **origin.facts,
                    **({"missing": True} if origin.missing else {}),
                    **({"unread": origin.unread} if origin.unread else {}),
                    **({"invalid": origin.invalid} if origin.invalid else {}),
                    "inputs": {},
                }
            if made:
                made[-1]["inputs"][name] = data
            made.append(data)
        return made[0]

    def lines(self) -> list[str]:
        """Return the graph as indented text lines: each artifact once, at its first
        mention; a later mention says "(see above)", or "(loop: ...)" when the artifact is
        an input of itself. Every line is safe to print (``printable``)."""
        out = []
        for origin, name, depth, seen in mentions(self):
            what = {"": "", "above": "see above", "loop": "loop: an input of itself"}[seen]
            head = f"{name}: " if name else ""
            line = f"{'  ' * depth}{head}{origin.reference} ({what or _describe(origin)})"
            out.append(printable(line))
        return out


def _describe(origin: Origin) -> str:
    if origin.invalid:
        return f"not a reference: {origin.invalid}"
    if origin.missing:
        return "not in the store"
    if origin.source:
        return "source"
    f = origin.facts
    what = f"{f.get('study', '?')}/{f.get('step', '?')}"
    what += f" exit {f['exit_code']}" if "exit_code" in f else ""
    what += f" {f['finished']}" if "finished" in f else ""
    what += f" image {f['image']}" if "image" in f else ""
    return what + (f"; {origin.unread}" if origin.unread else "")


def mentions(root: Origin) -> Iterator[tuple[Origin, str, int, str]]:
    """Yield the graph depth first, without recursion: ``(node, input name, depth, seen)``,
    ``seen`` "" at a node's first mention (its inputs follow), "above" at a later one and
    "loop" when the node is its own ancestor. Each node's inputs are listed once, so this
    ends on any graph and yields at most nodes + edges items."""
    shown: set[int] = set()
    path: list[Origin] = []  # the current node's ancestors: a mention of one is a loop
    stack: list[tuple[Origin, str, int]] = [(root, "", 0)]
    while stack:
        origin, name, depth = stack.pop()
        del path[depth:]
        if id(origin) in shown:
            yield origin, name, depth, "loop" if any(a is origin for a in path) else "above"
            continue
        shown.add(id(origin))
        yield origin, name, depth, ""
        path.append(origin)
        stack += [(child, key, depth + 1) for key, child in reversed(origin.inputs.items())]


async def walk(store: CacheStore, reference: str) -> Origin:
    """Return the lineage graph of ``reference``, read from ``store`` (one GET per artifact).

    Breadth first and without recursion, each reference read once, so loops and shared
    inputs end. At most ``MAX_NODES`` artifacts are read and ``MAX_DEPTH`` steps followed;
    a node whose inputs were not read for either bound says so (``unread``). An input the
    store lost is a node marked ``missing``; ``reference`` itself missing raises
    ArtifactNotFound, as a pull of it does.
    """
    root, inputs = await _read(store, reference, root=True)
    seen = {reference: root}
    queue: deque[tuple[Origin, dict[str, str], int]] = deque([(root, inputs, 0)])
    while queue:
        node, pending, depth = queue.popleft()
        if pending and depth >= MAX_DEPTH:
            node.unread = f"inputs not followed: deeper than {MAX_DEPTH} steps"
            continue
        for name, source in pending.items():
            if source not in seen:
                if len(seen) >= MAX_NODES:
                    node.unread = f"inputs not followed: more than {MAX_NODES} artifacts"
                    break
                seen[source], its_inputs = await _read(store, source)
                queue.append((seen[source], its_inputs, depth + 1))
            node.inputs[name] = seen[source]
    return root


async def _read(
    store: CacheStore, ref: str, *, root: bool = False
) -> tuple[Origin, dict[str, str]]:
    """Return the node of ``ref`` and its inputs' references (none when it is missing)."""
    try:
        data, _, digest = await store.get_manifest(store._ref(ref))
    except ArtifactNotFound:
        if root:
            raise
        return Origin(ref, missing=True), {}
    except InvalidReference as exc:
        if root:
            raise  # the user's own reference: main says it is bad input
        # another manifest's annotation names it: a node that says so, the walk goes on
        return Origin(ref, invalid=str(exc)), {}
    pinned = pin(ref, digest) if "@" not in ref else ref
    annotations = _media.decode_manifest(data, ref).annotations
    node = Origin(pinned, {k: annotations[a] for k, a in _FIELDS.items() if a in annotations})
    return node, _inputs(annotations)


def _inputs(annotations: Any) -> dict[str, str]:
    try:
        found = json.loads(annotations.get("k8sjobs.io/inputs", "{}"))
    except (ValueError, RecursionError):
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
    nodes: dict[str, Origin] = {}
    for node, _, _, seen in mentions(tree):
        if not seen:
            nodes.setdefault(node.reference, node)

    def artifact_id(node: Origin) -> str:
        return "#artifact-" + node.reference.rpartition("@")[2].replace(":", "-")

    sources = [n for n in nodes.values() if n.source]
    graph: list[dict[str, Any]] = [
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
            "object": _ids(artifact_id(n) for n in sources),
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
            "object": _ids(artifact_id(child) for child in node.inputs.values()),
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
    # One entity per @id (RO-Crate requires it): a script many steps ran, or one artifact
    # under two references, is described once, first mention wins.
    unique: dict[str, dict[str, Any]] = {}
    for entity in graph:
        unique.setdefault(entity["@id"], entity)
    return {"@context": "https://w3id.org/ro/crate/1.3/context", "@graph": list(unique.values())}


def _ids(ids: Iterable[str]) -> list[dict[str, str]]:
    """Return ``[{"@id": ...}]`` of ``ids``, each once, in order."""
    return [{"@id": i} for i in dict.fromkeys(ids)]
