"""The import structure of cmp_bayes: no module imports, directly or through others, itself.

Every ``import`` / ``from ... import`` of a cmp_bayes module counts, wherever it
stands (module top, inside a function, under ``TYPE_CHECKING`` or a ``try``): an
import deferred into a function still ties the two modules together, it only
hides the circle from the interpreter until the function runs.

Not counted: the implicit import of a package's ``__init__`` that Python runs
before any of its submodules. A package that re-exports its submodules would
otherwise form a circle with each of them; what is checked is what the code
says it needs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "cmp_bayes"

#: an edge: (importing module, imported module) -> where ("path:line") the import stands
Graph = dict[str, dict[str, str]]


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (a package directory)."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _resolve(name: str, known: Iterable[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``pkg.mod.func`` -> ``pkg.mod``)."""
    known = set(known)
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in known:
            return cand
    return None


def import_graph(root: Path) -> Graph:
    """Every import between modules of the package at ``root``, with where it stands."""
    modules = module_names(root)
    top = root.name
    graph: Graph = {m: {} for m in modules}
    for mod, file in modules.items():
        is_pkg = file.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` the module
                targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem for a in node.names]
            for t in targets:
                if t != top and not t.startswith(top + "."):
                    continue
                dst = _resolve(t, modules)
                if dst is not None and dst != mod:
                    where = f"{file.relative_to(root.parent).as_posix()}:{node.lineno}"
                    graph[mod].setdefault(dst, where)
    return graph


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module.

    Tarjan's algorithm (iterative: the graph may be deeper than Python's recursion
    limit), then a breadth-first search inside the component for a shortest cycle
    through its smallest name, so the report is short and stable.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, {})))))
                elif nxt in on_stack:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    cycles = []
    for comp in sorted(comps):
        members, first = set(comp), comp[0]
        prev: dict[str, str] = {}
        frontier, found = [first], None
        while frontier and found is None:
            nxt_frontier = []
            for v in frontier:
                for w in sorted(graph.get(v, {})):
                    if w not in members:
                        continue
                    if w == first:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt_frontier.append(w)
                if found is not None:
                    break
            frontier = nxt_frontier
        path = [first]
        v = found
        while v != first:
            path.append(v)
            v = prev[v]
        path.append(first)
        cycles.append([path[0], *reversed(path[1:-1]), first])
    return cycles


def describe(cycle: list[str], graph: Graph) -> str:
    """``a -> b (a.py:3) -> a (b.py:7)``: each arrow with the import statement that makes it."""
    out = cycle[0]
    for a, b in zip(cycle, cycle[1:], strict=False):
        out += f" -> {b} ({graph[a][b]})"
    return out


def test_no_import_cycle_in_cmp_bayes():
    graph = import_graph(ROOT)
    assert len(graph) > 50  # the walk found the package
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(describe(c, graph) for c in cycles)


# --------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_checker_finds_a_cycle_through_a_deferred_and_a_relative_import(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import f\n",
        "pkg/sub/__init__.py": "",
        # relative, and inside a function: still an edge
        "pkg/b.py": "def f():\n    from .sub import c\n    return c\n",
        "pkg/sub/c.py": "import pkg.a as a\n",
        "pkg/d.py": "import numpy\nfrom pkg import a\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.sub.c": "pkg/b.py:2"}
    assert graph["pkg.d"] == {"pkg.a": "pkg/d.py:2"}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    assert describe(cycles[0], graph) == (
        "pkg.a -> pkg.b (pkg/a.py:1) -> pkg.sub.c (pkg/b.py:2) -> pkg.a (pkg/sub/c.py:1)"
    )


def test_checker_accepts_a_package_that_reexports_its_submodules(tmp_path):
    # the package __init__ imports its submodule, which imports a sibling: no circle
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.stats import run\n",
        "pkg/stats/__init__.py": "from pkg.stats.kernels import k\ndef run():\n    from pkg.engine import e\n",
        "pkg/stats/kernels.py": "import numpy as np\n",
        "pkg/engine.py": "from pkg.stats.kernels import k\n",
    })
    graph = import_graph(pkg)
    assert find_cycles(graph) == []
    # ... but the engine importing the dispatch back is one
    (pkg / "engine.py").write_text("from pkg.stats import run\n", encoding="utf-8")
    assert find_cycles(import_graph(pkg)) == [["pkg.engine", "pkg.stats", "pkg.engine"]]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_checker_reports_each_component_once(n):
    ring = {f"m{i}": {f"m{(i + 1) % n}": f"m{i}.py:1"} for i in range(n)}
    ring["x"] = {"m0": "x.py:1"}  # leads into the ring but is not on it
    assert find_cycles(ring) == [[*(f"m{i}" for i in range(n)), "m0"]]


def reachable(graph: Graph, start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for w in graph.get(todo.pop(), {}):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_statistics_layers_import_downward_only():
    graph = import_graph(ROOT)
    # the dispatch imports the Dask engine (lazily); nothing the engine needs imports the dispatch
    assert "cmp_bayes.scale.dask_stats" in graph["cmp_bayes.statistics"]
    for engine in ("cmp_bayes.scale.dask_stats", "cmp_bayes.statistics.pandas_engine"):
        assert "cmp_bayes.statistics" not in reachable(graph, engine), engine
    # the kernels read no log and build no Dataset; the log layer knows nothing above it
    below = reachable(graph, "cmp_bayes.statistics.kernels")
    assert not below & {"cmp_bayes.log.read", "cmp_bayes.log.parquet", "cmp_bayes.statistics.dataset"}
    for mod in [m for m in graph if m.startswith("cmp_bayes.log.")]:
        up = {m for m in reachable(graph, mod) if m.startswith(("cmp_bayes.statistics", "cmp_bayes.scale"))}
        assert not up, (mod, up)
