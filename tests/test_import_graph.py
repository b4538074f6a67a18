"""The import graph of src/tokenspace: imports flow one way, down the layers.

Layers, lowest first (a module may import its own layer and the layers below it, never above):

    0 base      tokenspace (the package root), atomic, assets, vocab, sparse, outputs
    1 storage   data/, index/
    2 models    models/
    3 analysis  eval/, explain/        (they import only base today: sparse, atomic, assets; explain
                                        imports eval; train/tracking imports eval)
    4 train     train/
    5 pipeline  pipeline, encode,      (the end-to-end steps the app layer shares: training, ingestion,
                searcher                one search session)
    6 app       cli/ (one module per command), __main__, demo, serve/

The checker parses every .py under src/tokenspace with ``ast`` (nothing is imported) and reports, as
``file:line  a -> b``:

(a) a cycle between modules at module level (imports at the top of a file or in a class body; imports
    inside functions and under ``if TYPE_CHECKING:`` do not run at import time and are left out);
(b) an edge from a lower layer to a higher one, wherever the import sits (function bodies and
    ``TYPE_CHECKING`` blocks included: train importing pipeline is forbidden anywhere);
(c) index/ importing torch, anywhere (the index side stays torch-free);
(d) an import inside a function body (of anything: tokenspace or third party) without a comment
    saying why, on the import's own line (any line of it) or on the line just above it. Any ``#``
    comment counts; the convention is a short reason, e.g. ``# optional: onnxruntime``,
    ``# start-up: torch is heavy, --help must stay fast``, ``# lazy: registry member loaded by name``.

Edges: ``import a.b`` and ``from a.b import c`` point at module ``a.b``, or at ``a.b.c`` when that is
a module of the package (a submodule import does not count as an edge to the package's __init__).
Registries that load their members by name (``importlib.import_module``) make no edge: that is the point.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "tokenspace"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("tokenspace", "tokenspace.atomic", "tokenspace.assets", "tokenspace.vocab", "tokenspace.sparse",
              "tokenspace.outputs")),
    ("storage", ("tokenspace.data", "tokenspace.index")),
    ("models", ("tokenspace.models",)),
    ("analysis", ("tokenspace.eval", "tokenspace.explain")),
    ("train", ("tokenspace.train",)),
    ("pipeline", ("tokenspace.pipeline", "tokenspace.encode", "tokenspace.searcher", "tokenspace.query_table")),
    ("app", ("tokenspace.cli", "tokenspace.__main__", "tokenspace.demo", "tokenspace.serve")),
]

# upward edges that are deliberate, each with its reason
ALLOWED_UPWARD = {
    ("tokenspace", "tokenspace.models.registry"):
        "the package root's load() facade: tokenspace.load(name) without importing torch at import time",
    ("tokenspace", "tokenspace.searcher"):
        "the package root's Searcher facade: tokenspace.Searcher, imported on first use (the root stays light)",
}

# files whose in-function imports are not checked for a reason comment (rule d), each with its reason
UNCOMMENTED_OK: dict[str, str] = {}


@dataclass(frozen=True)
class Edge:
    src: str  # importing module
    dst: str  # imported module (tokenspace.* or third party)
    file: str
    line: int
    in_function: bool
    type_checking: bool

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, mod: str, is_pkg: bool, modules: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if sub in modules else base)
    return list(dict.fromkeys(out))


def parse_sources(sources: dict[str, str]) -> tuple[list[Edge], list[str]]:
    """``{relative path: source}`` -> (edges, problems of rule d). Paths are like ``tokenspace/x/y.py``."""
    root = Path("/")
    modules = {module_name(root / p, root) for p in sources}
    edges: list[Edge] = []
    uncommented: list[str] = []
    for rel, src in sorted(sources.items()):
        mod = module_name(root / rel, root)
        is_pkg = rel.endswith("__init__.py")
        lines = src.splitlines()

        def has_reason(node: ast.stmt) -> bool:
            first, last = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
            span = lines[first - 1: last]
            above = lines[first - 2].strip() if first >= 2 else ""
            return any("#" in ln for ln in span) or above.startswith("#")

        def walk(node: ast.AST, in_function: bool, type_checking: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in _targets(child, mod, is_pkg, modules):
                        edges.append(Edge(mod, t, rel, child.lineno, in_function, type_checking))
                    if in_function and rel not in UNCOMMENTED_OK and not has_reason(child):
                        uncommented.append(f"{rel}:{child.lineno}  in-function import without a comment "
                                           f"saying why: {ast.unparse(child)}")
                    continue
                tc = type_checking or (isinstance(child, ast.If) and _is_type_checking(child.test))
                fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.If) and _is_type_checking(child.test):
                    for b in child.body:
                        walk_one(b, fn, True)
                    for b in child.orelse:
                        walk_one(b, fn, type_checking)
                    continue
                walk(child, fn, tc)

        def walk_one(stmt: ast.stmt, in_function: bool, type_checking: bool) -> None:
            wrapper = ast.Module(body=[stmt], type_ignores=[])
            walk(wrapper, in_function, type_checking)

        walk(ast.parse(src, filename=rel), False, False)
    return edges, uncommented


def layer_of(module: str) -> int | None:
    best, best_len = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            inside = module == p or (p != PACKAGE and module.startswith(p + "."))  # the root: itself only
            if inside and len(p) > best_len:
                best, best_len = rank, len(p)
    return best


def find_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle per strongly connected component of the module-level tokenspace graph."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        if e.in_function or e.type_checking or not e.dst.startswith(PACKAGE) or e.src == e.dst:
            continue
        graph.setdefault(e.src, {}).setdefault(e.dst, e)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = min(comp)
        # walk inside the component back to the start: a shortest cycle through it (BFS)
        prev: dict[str, Edge] = {}
        frontier, seen = [start], {start}
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w, e in sorted(graph.get(v, {}).items()):
                    if w not in members:
                        continue
                    if w == start:
                        found = e
                        break
                    if w not in seen:
                        seen.add(w)
                        prev[w] = e
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        path = [found]
        while path[0].src != start:
            path.insert(0, prev[path[0].src])
        cycles.append(path)
    return cycles


def check(sources: dict[str, str]) -> list[str]:
    """Every violation of rules (a)-(d), one readable line each (empty: the graph is clean)."""
    edges, problems = parse_sources(sources)
    for cycle in find_cycles(edges):
        chain = " -> ".join([cycle[0].src] + [e.dst for e in cycle])
        steps = "; ".join(f"{e.where()} {e.src} -> {e.dst}" for e in cycle)
        problems.append(f"module-level import cycle: {chain}  ({steps})")
    for e in edges:
        if not e.dst.startswith(PACKAGE + ".") and e.dst != PACKAGE:
            if e.src.startswith("tokenspace.index") and (e.dst == "torch" or e.dst.startswith("torch.")):
                problems.append(f"{e.where()}  {e.src} -> {e.dst}: index/ must not import torch")
            continue
        a, b = layer_of(e.src), layer_of(e.dst)
        if a is None or b is None:
            problems.append(f"{e.where()}  {e.src} -> {e.dst}: module not in any layer (add it to LAYERS)")
        elif b > a and (e.src, e.dst) not in ALLOWED_UPWARD:
            where = " (in a function)" if e.in_function else ""
            problems.append(f"{e.where()}  {e.src} -> {e.dst}: upward import{where}, "
                            f"layer {LAYERS[a][0]} -> layer {LAYERS[b][0]}")
    return problems


def package_sources() -> dict[str, str]:
    return {str(p.relative_to(SRC)): p.read_text(encoding="utf-8")
            for p in sorted((SRC / PACKAGE).rglob("*.py"))}


# ------------------------------------------------------------------------------------------------ tests
def test_import_graph_of_src_tokenspace_flows_one_way():
    problems = check(package_sources())
    assert not problems, "import graph violations (see tests/test_import_graph.py):\n" + "\n".join(problems)


def test_every_module_has_a_layer():
    edges, _ = parse_sources(package_sources())
    mods = {e.src for e in edges}
    assert mods and not [m for m in mods if layer_of(m) is None]


def test_the_allow_lists_are_still_needed():
    edges, _ = parse_sources(package_sources())
    used = {(e.src, e.dst) for e in edges}
    assert set(ALLOWED_UPWARD) <= used, "an ALLOWED_UPWARD edge is gone: drop it from the list"
    files = set(package_sources())
    assert set(UNCOMMENTED_OK) <= files


# the checker itself must be able to fail
BAD = {
    "tokenspace/__init__.py": "",
    "tokenspace/sparse.py": "from tokenspace.vocab import Vocabulary\n",
    "tokenspace/vocab.py": "import tokenspace.sparse\n",  # a cycle with sparse
    "tokenspace/index/__init__.py": "",
    "tokenspace/index/inverted.py": "import numpy\n\ndef f():\n    import torch  # optional\n",
    "tokenspace/train/__init__.py": "",
    "tokenspace/train/scale.py": ("def f():\n    from tokenspace import pipeline  # a reason, still upward\n"
                                  "    import yaml\n"),
    "tokenspace/pipeline.py": "from tokenspace.train import scale\n",
    "tokenspace/models/__init__.py": "",
    "tokenspace/models/registry.py": "from tokenspace.models import dual\n",
    "tokenspace/models/dual.py": ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from tokenspace.models import registry\n"
                                  "def g():\n    # lazy: a reason on the line above\n"
                                  "    from tokenspace.models import registry\n"),
    "tokenspace/models/stair.py": "from . import dual\nfrom .registry import thing\n",
}


def test_checker_reports_each_kind_of_violation():
    problems = check(BAD)
    text = "\n".join(problems)
    cycles = [p for p in problems if "cycle" in p]
    assert len(cycles) == 1 and "tokenspace.sparse" in cycles[0] and "tokenspace.vocab" in cycles[0]
    assert "tokenspace/vocab.py:1" in cycles[0] and "tokenspace/sparse.py:1" in cycles[0]
    # (a) in-function and TYPE_CHECKING imports make no cycle: registry <-> dual is not reported
    assert "tokenspace.models.dual ->" not in " ".join(cycles)
    # (b) upward, in a function, with a reason comment: still reported
    assert ("tokenspace/train/scale.py:2  tokenspace.train.scale -> tokenspace.pipeline: upward import "
            "(in a function), layer train -> layer pipeline") in problems
    # (c) torch in index/, even in a function with a comment
    assert "tokenspace/index/inverted.py:4  tokenspace.index.inverted -> torch: index/ must not import torch" \
        in problems
    # (d) an in-function import without a comment; the commented ones pass
    assert [p for p in problems if "without a comment" in p] == \
        ["tokenspace/train/scale.py:3  in-function import without a comment saying why: import yaml"]
    # relative imports resolve; the pipeline -> train edge is downward, fine
    assert "tokenspace/models/stair.py" not in text and "tokenspace/pipeline.py" not in text


def test_checker_passes_a_clean_graph():
    clean = {
        "tokenspace/__init__.py": "from tokenspace.sparse import SparseBatch\n",
        "tokenspace/sparse.py": "import numpy as np\n",
        "tokenspace/models/__init__.py": "",
        "tokenspace/models/registry.py": ("import importlib\n\ndef build(name):\n"
                                          "    return importlib.import_module(name)  # by name: no edge\n"),
        "tokenspace/cli.py": ("def main():\n    from tokenspace.models.registry import build"
                              "  # start-up: --help stays fast\n"),
    }
    assert check(clean) == []


def test_a_module_outside_every_layer_is_reported():
    problems = check({"tokenspace/__init__.py": "", "tokenspace/newthing.py": "import tokenspace\n"})
    assert problems == ["tokenspace/newthing.py:1  tokenspace.newthing -> tokenspace: module not in any layer "
                        "(add it to LAYERS)"]
