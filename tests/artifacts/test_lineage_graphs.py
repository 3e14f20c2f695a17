"""Lineage over any graph the store can hold: loops, shared inputs, lost inputs, hostile text.

References pushed by hand can be tags naming each other, so a lineage graph is any directed
graph, and its annotations any text. Every walk and printer must end, show each artifact
once, stay bounded by the graph's size and print nothing a terminal would act on.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs._printable import unsafe
from k8sjobs.artifacts import open_store
from k8sjobs.artifacts.lineage import mentions, ro_crate, walk

Graph = dict[int, list[int]]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[Graph, set[int], str]:
    """A graph of up to 7 artifacts, edges anywhere (self loops, cycles, shared inputs),
    some artifacts never pushed, and one text (possibly hostile) for their annotations."""
    n = draw(st.integers(1, 7))
    edges = {i: draw(st.lists(st.integers(0, n - 1), max_size=4)) for i in range(n)}
    lost = draw(st.sets(st.integers(1, n - 1), max_size=2)) if n > 1 else set()
    return edges, lost, draw(st.text(max_size=20))


def ref(store: str, i: int) -> str:
    return f"g/a{i}:v1"


async def push(location: str, graph: Graph, lost: set[int], text: str, work: Path) -> None:
    payload = work / "payload"
    payload.write_text("x")
    async with open_store(location) as store:
        for i, inputs in graph.items():
            if i in lost:
                continue
            annotations = {
                "k8sjobs.io/study-name": f"st{text}",
                "k8sjobs.io/step-name": f"a{i}",
                "k8sjobs.io/image": text,
                "k8sjobs.io/inputs": json.dumps(
                    {f"in{k}{text}": ref(location, j) for k, j in enumerate(inputs)}
                ),
            }
            await store.push(ref(location, i), [payload], annotations=annotations)


async def read(location: str) -> object:
    async with open_store(location) as store:
        return await walk(store, ref(location, 0))  # type: ignore[arg-type]


def reachable(graph: Graph, lost: set[int]) -> set[int]:
    found, todo = {0}, [0]
    while todo:
        for j in [] if (i := todo.pop()) in lost else graph[i]:
            if j not in found:
                found.add(j)
                todo.append(j)
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_every_lineage_walk_and_printer_ends_on_any_graph_and_shows_each_artifact_once(
    drawn: tuple[Graph, set[int], str],
) -> None:
    graph, lost, text = drawn
    with tempfile.TemporaryDirectory() as work:
        location = f"oci:{work}/store"
        asyncio.run(push(location, graph, lost, text, Path(work)))
        tree = asyncio.run(read(location))
    nodes = reachable(graph, lost)
    edges = sum(len(graph[i]) for i in nodes if i not in lost)
    firsts = [m for m in mentions(tree) if not m[3]]  # type: ignore[arg-type]
    assert len(firsts) == len(nodes)  # each artifact shown once
    assert len({id(m[0]) for m in firsts}) == len(nodes)
    lines = tree.lines()  # type: ignore[attr-defined]
    assert len(lines) == 1 + edges  # later mentions are one line each: bounded
    assert not any(unsafe(c) for line in lines for c in line)
    steps = [m[0].facts["step"] for m in firsts if not m[0].missing]
    assert sorted(steps) == sorted(f"a{i}" for i in nodes - lost)
    later = [line for line in lines if line.endswith(("(see above)", "(loop: an input of itself)"))]
    assert len(later) == edges - (len(nodes) - 1)
    has_loop = any(m[3] == "loop" for m in mentions(tree))  # type: ignore[arg-type]
    assert has_loop == any("(loop: an input of itself)" in line for line in lines)
    data = json.dumps(tree.to_json())  # type: ignore[attr-defined]
    assert data.count('"see": ') == edges - (len(nodes) - 1)
    crate = ro_crate(tree)  # type: ignore[arg-type]
    ids = [entity["@id"] for entity in crate["@graph"]]
    assert len(ids) == len(set(ids))


def test_a_loop_of_two_artifacts_prints_in_text_json_and_ro_crate_and_says_where(
    tmp_path: Path,
) -> None:
    location = f"oci:{tmp_path / 'store'}"
    asyncio.run(push(location, {0: [1], 1: [0]}, set(), "", tmp_path))

    def cli(*words: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "k8sjobs.cli", "lineage", "g/a0:v1", "--store", location]
        return subprocess.run([*command, *words], capture_output=True, text=True, timeout=120)

    text = cli()
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("\n") == 3 and "g/a0@sha256:" in text.stdout.splitlines()[-1]
    assert "(loop: an input of itself)" in text.stdout.splitlines()[-1]
    shown = cli("--format", "json", "--ro-crate", str(tmp_path / "crate"))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["inputs"]["in0"]["inputs"]["in0"]["see"] == "loop"
    crate = json.loads((tmp_path / "crate" / "ro-crate-metadata.json").read_text())
    steps = [e["name"] for e in crate["@graph"] if e.get("@id", "").startswith("#step-")]
    assert sorted(steps) == ["st/a0", "st/a1"]


def test_a_long_chain_of_artifacts_is_walked_and_printed_without_recursion(
    tmp_path: Path,
) -> None:
    chain = {i: [i + 1] for i in range(259)} | {259: []}
    location = f"oci:{tmp_path / 'store'}"
    asyncio.run(push(location, chain, set(), "", tmp_path))
    tree = asyncio.run(read(location))
    lines = tree.lines()  # type: ignore[attr-defined]
    assert len(lines) == 201 and "deeper than 200 steps" in lines[-1]
    json.dumps(tree.to_json())  # type: ignore[attr-defined]
    ro_crate(tree)  # type: ignore[arg-type]


def test_lineage_of_a_reference_the_store_lacks_exits_1_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    for words in (["lineage", "no/such:v9"], ["artifact", "pull", "no/such:v9"]):
        done = subprocess.run(
            [sys.executable, "-m", "k8sjobs.cli", *words, "--store", f"oci:{tmp_path / 'store'}"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 1, (words, done.stdout, done.stderr)
        assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80))
def test_an_input_reference_that_is_not_one_is_a_node_saying_so_not_a_failed_walk(
    written: str,
) -> None:
    """Another team's manifest can name any text as an input in k8sjobs.io/inputs; the
    walk shows it as a node (with why it was not read) and ends, where an unparsable one
    made the whole lineage an InvalidReference (exit 2, as if the user's own was wrong)."""
    with tempfile.TemporaryDirectory() as work:
        location = f"oci:{Path(work) / 'store'}"
        payload = Path(work) / "payload"
        payload.write_text("x")

        async def run() -> object:
            async with open_store(location) as store:
                inputs = json.dumps({"in": written})
                await store.push("g/a0:v1", [payload], annotations={"k8sjobs.io/inputs": inputs})
                return await walk(store, "g/a0:v1")  # type: ignore[arg-type]

        tree = asyncio.run(run())
        lines = tree.lines()  # type: ignore[attr-defined]
        assert len(lines) == 2 and not any(unsafe(c) for line in lines for c in line)
        json.dumps(tree.to_json())  # type: ignore[attr-defined]
        ro_crate(tree)  # type: ignore[arg-type]
