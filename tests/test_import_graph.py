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
