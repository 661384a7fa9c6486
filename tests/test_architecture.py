"""ARCHITECTURE.md is true of the tree: every module named, imports only downward, no circle.

The file has two parts this test reads:

* "## Modules": one bullet per module, ``- `cmp_bayes/x/y.py`: its one job``;
  every ``.py`` file of the package must be there, and nothing else.
* "## Layers": a table ``| layer | modules | may import |`` whose module cells
  list package folders (``cmp_bayes/log/``) or files (``cmp_bayes/errors.py``)
  in backticks, and whose "may import" cell names other layers ("none", or
  "every"). A module may import its own layer and the layers its row names,
  nothing else. Imports
  inside functions count too: a lazy import still points one way.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import import_graph, module_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cmp_bayes"
DOC = ROOT / "ARCHITECTURE.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, f"ARCHITECTURE.md has no '## {title}' section"
    return m.group(1)


def _modules() -> dict[str, Path]:
    return module_names(PACKAGE)


def _graph() -> dict[str, set[str]]:
    return {mod: set(deps) for mod, deps in import_graph(PACKAGE).items()}


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
        assert may <= set(allowed) | {"none", "every"}, f"layer {layer}: unknown layers {may}"
    homeless = [m for m in _modules() if _layer_of(m, owner) is None]
    assert not homeless, f"modules in no layer of ARCHITECTURE.md: {homeless}"


def test_imports_point_only_to_allowed_layers() -> None:
    owner, allowed = _layers()
    bad = []
    for mod, deps in _graph().items():
        layer = _layer_of(mod, owner)
        for dep in sorted(deps):
            target = _layer_of(dep, owner)
            may = allowed.get(layer, set())
            if target != layer and target not in may and "every" not in may:
                bad.append(f"{mod} ({layer}) -> {dep} ({target})")
    assert not bad, "imports against the layers of ARCHITECTURE.md:\n" + "\n".join(bad)
