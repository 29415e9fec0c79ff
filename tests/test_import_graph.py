"""The package's modules import one another without a cycle.

A cycle is how the layout stops showing how the tool works: the core reaches into a
transform, the transform reaches back into the core, and neither can be read (or
loaded) alone.  The graph is built from the source (no imports run), so the test costs
nothing and sees modules that need torch too.  Function-local imports count as edges:
moving an import into a function hides a cycle from the interpreter, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: package name -> directory, as pyproject.toml's package-dir maps them
PACKAGES = {
    "vllm_codemod": ROOT / "src" / "vllm_codemod",
    "vllm_codemod.transforms": ROOT / "transforms",
    "vllm_codemod.kernels": ROOT / "kernels",
}
#: benchmarks are scripts run from the repository root, importing each other by name
BENCHMARKS = ROOT / "benchmarks"


def _modules() -> Dict[str, Path]:
    found: Dict[str, Path] = {}
    for package, directory in PACKAGES.items():
        for path in sorted(directory.rglob("*.py")):
            rel = path.relative_to(directory).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            # a sub-directory of src/vllm_codemod that is really a mapped package
            found.setdefault(name, path)
    for path in sorted(BENCHMARKS.glob("*.py")):
        found[f"benchmarks.{path.stem}"] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The known module ``name`` refers to (the longest known prefix), else None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> Dict[str, Set[str]]:
    modules = _modules()
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: List[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                if (
                    name.startswith("benchmarks.")
                    and not node.level
                    and source
                    in (n.split(".", 1)[1] for n in modules if n.startswith("benchmarks."))
                ):
                    source = f"benchmarks.{source}"
                # `from pkg import sub` imports the submodule when there is one
                names = [f"{source}.{alias.name}" for alias in node.names] + [source]
            else:
                continue
            if name.startswith("benchmarks."):
                names += [f"benchmarks.{n}" for n in names if "." not in n]
            for imported in names:
                target = _target(imported, modules)
                # importing a.b.c runs a/__init__ and a/b/__init__ first
                while target is not None:
                    if target != name and not name.startswith(target + "."):
                        graph[name].add(target)
                    target = _target(target.rpartition(".")[0], modules)
    return graph


def find_cycle(graph: Dict[str, Set[str]], scope: str) -> Optional[List[str]]:
    """One import cycle among the modules whose names start with ``scope``, else None."""
    nodes = sorted(n for n in graph if n.startswith(scope))
    colour: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in colour:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return None

    for node in nodes:
        if node not in colour:
            cycle = visit(node)
            if cycle and any(n.startswith(scope) for n in cycle):
                return cycle
    return None


def test_the_graph_sees_relative_absolute_and_local_imports():
    graph = import_graph()
    # relative (`from .discovery import VllmTree`) and absolute (`vllm_codemod.transforms...`)
    assert "vllm_codemod.discovery" in graph["vllm_codemod.engine.changes"]
    assert "vllm_codemod.transforms.base" in graph["vllm_codemod.engine.changes"]
    # a function-local import (`from .. import engine` inside the command function)
    assert "vllm_codemod.engine" in graph["vllm_codemod.commands.apply"]


def test_find_cycle_reports_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph, "") == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}, "") is None


#: sub-packages that are layers of their own; the modules directly in src/vllm_codemod
#: are the core everything else may use (errors, filesystem, discovery, reports)
LAYERS = ("engine", "commands", "transforms", "tuning", "tune_config", "kernels")


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "benchmarks":
        return "benchmarks"
    if len(parts) >= 2 and parts[1] in LAYERS:
        return ".".join(parts[:2])
    return "vllm_codemod (core)"


def layer_graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for module, targets in import_graph().items():
        edges = graph.setdefault(layer(module), set())
        edges.update(layer(t) for t in targets if layer(t) != layer(module))
    return graph


@pytest.mark.parametrize(
    "scope",
    [
        "vllm_codemod.",
        "vllm_codemod.transforms",
        "vllm_codemod.kernels",
        "benchmarks",
    ],
)
def test_no_import_cycle(scope):
    cycle = find_cycle(import_graph(), scope)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_cycle_between_the_core_the_transforms_and_tuning():
    """Transforms and tuning may use the core; the core never uses them back (the engine,
    a layer above all three, is what brings them together)."""
    graph = layer_graph()
    assert "vllm_codemod.transforms" in graph["vllm_codemod.engine"]
    cycle = find_cycle(graph, "")
    assert cycle is None, "import cycle between layers: " + " -> ".join(cycle or [])
    assert graph["vllm_codemod (core)"] == set(), "the core imports " + ", ".join(
        sorted(graph["vllm_codemod (core)"])
    )
