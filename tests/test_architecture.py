"""The shape of the code, checked: no import circle between files (lazy imports inside
functions count too), no flat folder of more than 15 modules in analysis/, no module over 500
lines and no function over 100 lines outside tests.

Why: a circle means two files that cannot be read (or changed) one without the other; a flat
folder of 40 files hides which ones belong together. The limits are the ones the layout issue
set; a file that needs more is a file with two concerns.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "analysis")
CODE_DIRS = (*PACKAGES, "benchmarks")
MAX_MODULES_PER_FOLDER = 15
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100


def _files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in the file)."""
    paths = {_module_name(p): p for p in _files()}
    known = set(paths)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in paths.items():
        package = mod if _is_package(path) else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import name`: name is a submodule or an attribute of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names]
            for t in targets:
                while t and t not in known:  # `import a.b.c` also imports a and a.b
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    graph = import_graph()
    assert "pipeline.vocab.flops" in graph["pipeline.grid"]
    assert all(graph[m] <= set(graph) for m in graph)


def test_no_import_circle_between_files() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_flat_folder_of_more_than_15_modules(package: str) -> None:
    crowded = {}
    for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES_PER_FOLDER:
            crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert not crowded, f"folders of more than {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_no_module_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _files()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_100_lines() -> None:
    long = {}
    for p in _files():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
