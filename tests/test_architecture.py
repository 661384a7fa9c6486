"""ARCHITECTURE.md is true of the tree: every module named, imports only downward, no circle.

The file has two parts this test reads:

* "## Modules": one bullet per module, ``- `cmp_bayes/x/y.py`: its one job``;
  every ``.py`` file of the package must be there, and nothing else.
* "## Layers": a table ``| layer | modules | may import |`` whose module cells
  list package folders (``cmp_bayes/log/``) or files (``cmp_bayes/errors.py``)
  in backticks, and whose "may import" cell names other layers. A module may
  import its own layer and the layers its row names, nothing else. Imports
  inside functions count too: a lazy import still points one way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cmp_bayes"
DOC = ROOT / "ARCHITECTURE.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, f"ARCHITECTURE.md has no '## {title}' section"
    return m.group(1)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every cmp_bayes module ``name`` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the submodule when one exists by that name
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            if t == "cmp_bayes" or t.startswith("cmp_bayes."):
                # the nearest module that exists (an attribute import names its module)
                while t not in known and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t != name:
                    yield t


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: set(_imports(name, path, known)) for name, path in mods.items()}


def _layers() -> tuple[dict[str, str], dict[str, set[str]]]:
    """(module prefix -> layer, layer -> layers it may import)."""
    owner: dict[str, str] = {}
    allowed: dict[str, set[str]] = {}
    for line in _section("Layers").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-", ":"}:
            continue
        layer, modules, may = cells
        layer = layer.strip("`* ")
        for ref in re.findall(r"`([^`]+)`", modules):
            prefix = ref.removesuffix(".py").removesuffix("/").replace("/", ".")
            owner[prefix.removesuffix(".__init__")] = layer
        allowed[layer] = {w.strip("`* ") for w in re.split(r"[,\s]+", may) if w.strip("`* —-")}
    return owner, allowed


def _layer_of(module: str, owner: dict[str, str]) -> str | None:
    best = None
    for prefix in owner:
        # the package root names only cmp_bayes/__init__.py, never everything below it
        inside = module.startswith(prefix + ".") and prefix != "cmp_bayes"
        if (module == prefix or inside) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return owner[best] if best is not None else None


def test_every_module_is_named_once() -> None:
    listed = re.findall(r"^\s*[-*] `(cmp_bayes/[^`]+\.py)`", _section("Modules"), flags=re.M)
    on_disk = sorted(str(p.relative_to(ROOT)) for p in _modules().values())
    dupes = sorted({m for m in listed if listed.count(m) > 1})
    assert not dupes, f"named twice in ARCHITECTURE.md: {dupes}"
    missing = sorted(set(on_disk) - set(listed))
    stale = sorted(set(listed) - set(on_disk))
    assert not missing, f"modules ARCHITECTURE.md does not name: {missing}"
    assert not stale, f"ARCHITECTURE.md names modules that do not exist: {stale}"


def test_every_module_has_a_job() -> None:
    for line in _section("Modules").splitlines():
        m = re.match(r"^\s*[-*] `(cmp_bayes/[^`]+\.py)`(.*)$", line)
        if m:
            assert len(m.group(2).strip(" :—-")) >= 10, f"{m.group(1)}: no job stated"


def test_every_module_belongs_to_a_layer() -> None:
    owner, allowed = _layers()
    assert len(allowed) >= 5, "the Layers table is missing or unreadable"
    for layer, may in allowed.items():
        assert may <= set(allowed) | {"none"}, f"layer {layer} may import unknown layers {may}"
    homeless = [m for m in _modules() if _layer_of(m, owner) is None]
    assert not homeless, f"modules in no layer of ARCHITECTURE.md: {homeless}"


def test_imports_point_only_to_allowed_layers() -> None:
    owner, allowed = _layers()
    bad = []
    for mod, deps in _graph().items():
        layer = _layer_of(mod, owner)
        for dep in sorted(deps):
            target = _layer_of(dep, owner)
            if target != layer and target not in allowed.get(layer, set()):
                bad.append(f"{mod} ({layer}) -> {dep} ({target})")
    assert not bad, "imports against the layers of ARCHITECTURE.md:\n" + "\n".join(bad)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle() -> None:
    # a package's __init__ is imported whenever one of its submodules is, so a submodule
    # importing its own package's __init__ is part of the same unit, not a circle
    graph = {
        mod: {d for d in deps if not mod.startswith(d + ".")} for mod, deps in _graph().items()
    }
    found = _cycle(graph)
    assert found is None, "import circle: " + " -> ".join(found or [])


@pytest.mark.parametrize(
    ("graph", "has_cycle"),
    [({"a": {"b"}, "b": {"c"}, "c": set()}, False), ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True)],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], has_cycle: bool) -> None:
    assert (_cycle(graph) is not None) is has_cycle
