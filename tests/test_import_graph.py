"""The package's layers, read from the source: who imports whom.

Every ``import`` and ``from ... import`` of every module counts, including those under
``TYPE_CHECKING`` and inside functions: a cycle hidden there is still two modules that
cannot be understood one without the other. An import of a package's name counts as an
import of that package's ``__init__`` (or of the submodule, when the name is one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import k8sjobs

ROOT = Path(k8sjobs.__file__).parent


def module_files() -> dict[str, tuple[Path, bool]]:
    """Return every module of the package: dotted name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def imports_of(name: str, modules: dict[str, tuple[Path, bool]]) -> set[str]:
    """Return the package's modules that module ``name`` imports."""
    path, is_package = modules[name]
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else source)
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    """Return the package's import graph: module -> the package's modules it imports."""
    modules = module_files()
    return {name: imports_of(name, modules) for name in modules}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """Return one import cycle (its modules in order, the first repeated), or []."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for target in sorted(graph[name]):
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return []

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return []


def test_the_graph_sees_the_imports_it_should() -> None:
    graph = import_graph()
    # Relative, absolute, TYPE_CHECKING-only and function-local imports all count.
    assert "k8sjobs.state" in graph["k8sjobs.status"]
    assert "k8sjobs.kube" in graph["k8sjobs.session"]  # imported inside _make_backend
    assert "k8sjobs.kube.backend" in graph["k8sjobs.kube"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_local_backend_imports_nothing_of_the_kubernetes_backend() -> None:
    graph = import_graph()
    local = {name for name in graph if name.startswith("k8sjobs.local")}
    assert local, "no modules found under k8sjobs/local"
    for name in sorted(local):
        kube = sorted(t for t in graph[name] if t.split(".")[:2] == ["k8sjobs", "kube"])
        assert not kube, f"{name} imports {kube}: put what both backends need beside state.py"


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


# What does I/O, and so may not be imported by the pure core: the backends, the artifact
# transport (registry, layout, transfers), the session layer and the network libraries.
IO_MODULES = ("k8sjobs.kube", "k8sjobs.local", "k8sjobs.testing", "k8sjobs.maestro")
IO_NAMES = {
    "k8sjobs.session",
    "k8sjobs.sync",
    "k8sjobs.study",
    "k8sjobs.backend",
    "k8sjobs.handle",
}
# The pure pieces of artifacts/ the core may use: reference parsing and media types.
PURE_ARTIFACTS = {"k8sjobs.artifacts", "k8sjobs.artifacts._reference", "k8sjobs.artifacts._media"}
IO_LIBRARIES = ("aiohttp", "anyio", "asyncio", "kubernetes_asyncio", "socket", "subprocess")


def third_party_imports(name: str) -> set[str]:
    """Return the top-level names of what module ``name`` imports from outside the package."""
    path, _ = module_files()[name]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"k8sjobs"}


def rule_breaks(graph: dict[str, set[str]], room: str) -> list[str]:
    """Return each import of a module of ``room`` that breaks the pure core's rule."""
    breaks = []
    for name in sorted(n for n in graph if n == room or n.startswith(room + ".")):
        for target in sorted(graph[name]):
            io = (
                target.startswith(IO_MODULES)
                or target in IO_NAMES
                or target.startswith("k8sjobs.cli")
            )
            transport = target.startswith("k8sjobs.artifacts") and target not in PURE_ARTIFACTS
            upward = room == "k8sjobs.steps" and target.startswith("k8sjobs.render")
            if io or transport or upward:
                breaks.append(f"{name} imports {target}")
        breaks += [
            f"{name} imports {lib}"
            for lib in sorted(third_party_imports(name))
            if lib in IO_LIBRARIES
        ]
    return breaks


def test_the_pure_core_imports_nothing_that_does_io() -> None:
    graph = import_graph()
    for room in ("k8sjobs.steps", "k8sjobs.render"):
        assert any(n.startswith(room + ".") for n in graph), f"no modules found under {room}"
        assert rule_breaks(graph, room) == [], "the pure core must stay pure (docs/design.md)"


def test_the_import_rule_catches_a_wrong_import() -> None:
    graph = import_graph()
    wrong = {
        **graph,
        "k8sjobs.steps.spec": graph["k8sjobs.steps.spec"] | {"k8sjobs.render.manifests"},
    }
    assert rule_breaks(wrong, "k8sjobs.steps") == [
        "k8sjobs.steps.spec imports k8sjobs.render.manifests"
    ]
    wrong = {
        **graph,
        "k8sjobs.render.manifests": graph["k8sjobs.render.manifests"] | {"k8sjobs.kube.client"},
    }
    assert "k8sjobs.render.manifests imports k8sjobs.kube.client" in rule_breaks(
        wrong, "k8sjobs.render"
    )


def test_nothing_below_the_command_line_imports_it() -> None:
    graph = import_graph()
    for name in sorted(n for n in graph if not n.startswith("k8sjobs.cli")):
        cli = sorted(t for t in graph[name] if t.startswith("k8sjobs.cli"))
        assert not cli, f"{name} imports {cli}: the command line is the top layer"
