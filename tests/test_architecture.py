"""The shape of the code, checked: layers that only point down (docs/architecture.md), no
import circle between files (lazy imports inside functions count too), no flat folder of more
than 15 modules in analysis/, no module over 500 lines and no function over 100 lines outside
tests.

The layers: pipeline/vocab/ is the shared vocabulary (what a run is, its FLOPs, the ledger's
keys, the plan manifest), imported by both sides and importing nothing else of the project
nor anything outside the standard library; the analysis imports from pipeline/ only the
vocabulary, and the rest of pipeline/ never imports the analysis. Only the entry points (the
`python -m` commands of README.md) compose both: the sweep fits its held-out budgets and
writes its report, analysis.predict --write plans a follow-up sweep.

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
VOCABULARY = "pipeline.vocab"
ENTRY_POINTS = frozenset({
    "pipeline.sweep", "pipeline.sample", "pipeline.train.__main__", "pipeline.data.__main__",
    "pipeline.ledger.__main__", "analysis.fit", "analysis.report", "analysis.predict",
    "analysis.compare",
})
"""The `python -m` commands (README.md): the only modules that may import both sides."""


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
    assert "pipeline.vocab.flops" in graph["pipeline.planner.ladder"]
    assert all(graph[m] <= set(graph) for m in graph)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _imports_outside(path: Path) -> set[str]:
    """Top-level names of what ``path`` imports that are not the project's (absolute only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
    return found - set(PACKAGES)


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the layers: the vocabulary importing the rest of the project, the
    analysis importing pipeline/ outside the vocabulary, pipeline/ importing the analysis;
    entry points excepted."""
    bad = []
    for mod, targets in sorted(graph.items()):
        for t in sorted(targets):
            if _within(mod, VOCABULARY) and not _within(t, VOCABULARY):
                bad.append(f"{mod} -> {t} (the vocabulary imports only itself)")
            elif mod in ENTRY_POINTS or _within(mod, VOCABULARY):
                continue
            elif _within(mod, "analysis") and _within(t, "pipeline") \
                    and not _within(t, VOCABULARY):
                bad.append(f"{mod} -> {t} (the analysis imports only pipeline.vocab)")
            elif _within(mod, "pipeline") and _within(t, "analysis"):
                bad.append(f"{mod} -> {t} (pipeline/ never imports the analysis)")
    return bad


def test_the_layer_check_finds_crossings() -> None:
    graph = {"pipeline.vocab.keys": {"pipeline.planner"}, "analysis.x": {"pipeline.planner"},
             "analysis.y": {"pipeline.vocab.keys"}, "pipeline.planner": {"analysis.y"},
             "analysis.fit": {"pipeline.planner"}}
    assert crossings(graph) == [
        "analysis.x -> pipeline.planner (the analysis imports only pipeline.vocab)",
        "pipeline.planner -> analysis.y (pipeline/ never imports the analysis)",
        "pipeline.vocab.keys -> pipeline.planner (the vocabulary imports only itself)"]


def test_layers_only_point_down() -> None:
    graph = import_graph()
    assert set(graph) >= ENTRY_POINTS, ENTRY_POINTS - set(graph)
    bad = crossings(graph)
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_entry_points_are_the_readmes_commands() -> None:
    """A module is exempt from the layer rules only as a documented command."""
    import re

    named = set(re.findall(r"python -m ((?:pipeline|analysis)[\w.]*)",
                           (ROOT / "README.md").read_text()))
    graph = import_graph()
    as_modules = {f"{m}.__main__" if f"{m}.__main__" in graph else m for m in named}
    assert as_modules == ENTRY_POINTS


def test_the_vocabulary_needs_only_the_standard_library() -> None:
    """No torch, MLflow, Ray or pydantic: the analysis reads the vocabulary without them."""
    import sys

    outside = {str(p.relative_to(ROOT)): sorted(names) for p in (ROOT / "pipeline" / "vocab")
               .rglob("*.py") if (names := _imports_outside(p) - sys.stdlib_module_names)}
    assert not outside, f"the vocabulary imports outside the standard library: {outside}"


PLANNER = ("pipeline.config", "pipeline.planner", "pipeline.next_sweep", "pipeline.planned_view")
"""The planner: sweep file -> RunSpecs. Pure: what it plans depends on the file and its
explicit inputs, not on the machine it runs on."""
HARDWARE = "pipeline.estimate.device"


def _path(module: str) -> Path:
    path = ROOT / (module.replace(".", "/") + ".py")
    return path if path.exists() else ROOT / module.replace(".", "/") / "__init__.py"


def test_the_planner_asks_no_hardware_and_needs_no_torch_ray_or_mlflow() -> None:
    """Run ids must not depend on the planning machine (the target device is an input of
    pipeline.planner.expand), and a sweep file is planned, or refused, without the heavy
    libraries; every module the planner reaches, lazily or not, is checked."""
    graph = import_graph()
    reached: set[str] = set()
    stack = [m for m in graph if any(_within(m, p) for p in PLANNER)]
    while stack:
        if (m := stack.pop()) not in reached:
            reached.add(m)
            stack += graph[m]
    assert HARDWARE not in reached
    heavy = {m: sorted(names) for m in sorted(reached)
             if (names := _imports_outside(_path(m)) & {"torch", "ray", "mlflow"})}
    assert not heavy, f"the planner reaches modules importing {heavy}"


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
