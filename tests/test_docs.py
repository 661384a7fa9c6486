"""The docs site's sources agree with the package (the Sphinx build itself is its own CI step).

Cheap checks that catch what a build would only show as a missing page: the
spec's copy is the spec, every public name has an API entry, every CLI verb a
help block, every results page a place in the site, every tutorial notebook a
place in the index and no committed outputs (the build executes them).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: in CI ``shared/`` sits beside the clone; the docs build reads only the copy
SHARED_SPEC = ROOT.parent / "shared" / "spec" / "exposure-log.md"


def _conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cmp_bayes_docs_conf", DOCS / "conf.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fences(page: str, kind: str) -> list[tuple[str, list[str]]]:
    """``(argument, body lines)`` of every ```{kind} ...``` fence of a MyST page."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = re.findall(r"^```\{" + re.escape(kind) + r"\}([^\n]*)\n(.*?)^```", text, flags=re.M | re.S)
    return [(arg.strip(), body.splitlines()) for arg, body in found]


def _toctree_entries(page: str) -> list[str]:
    return [
        line.strip()
        for _, body in _fences(page, "toctree")
        for line in body
        if line.strip() and not line.strip().startswith(":")
    ]


def test_spec_copy_is_the_spec() -> None:
    if not SHARED_SPEC.exists():
        pytest.skip(f"{SHARED_SPEC} is not here (only CI and the project's machines have shared/)")
    assert (DOCS / "spec" / "exposure-log.md").read_bytes() == SHARED_SPEC.read_bytes(), (
        "docs/spec/exposure-log.md differs from shared/spec/exposure-log.md: copy it again"
    )


def test_every_public_name_has_an_api_entry() -> None:
    import cmp_bayes

    listed = [
        line.strip()
        for _, body in _fences("api.md", "eval-rst")
        for line in body
        if re.fullmatch(r"\s{3}\w+", line)
    ]
    dupes = sorted({n for n in listed if listed.count(n) > 1})
    assert not dupes, f"listed twice in docs/api.md: {dupes}"
    assert set(listed) == set(cmp_bayes.__all__), (
        f"missing from docs/api.md: {sorted(set(cmp_bayes.__all__) - set(listed))}; "
        f"not public: {sorted(set(listed) - set(cmp_bayes.__all__))}"
    )


def test_every_cli_verb_has_its_help_on_the_cli_page() -> None:
    import argparse

    from cmp_bayes.cli.main import VERBS, build_parser

    shown = {arg for arg, _ in _fences("cli.md", "cmp-bayes-help")}
    want = {""} | set(VERBS)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                want |= {f"{verb} {name}" for name in action.choices}
    assert shown == want, f"missing: {sorted(want - shown)}; unknown: {sorted(shown - want)}"


def test_every_results_page_is_in_the_site() -> None:
    entries = _toctree_entries("results.md")
    pages = [p for p in _conf().report_pages() if p.suffix == ".md"]
    assert pages, "no results pages found under reports/"
    for page in pages:
        docname = f"_generated/reports/{page.with_suffix('').as_posix()}"
        assert any(fnmatch.fnmatch(docname, e) for e in entries), (
            f"reports/{page} is copied into the site but no toctree of docs/results.md lists it"
        )


def test_links_into_reports_are_rewritten_for_the_site() -> None:
    conf = _conf()
    guide = ["See [the gated model](../reports/simulation/gated.md) and [x](https://a.b/c/)."]
    conf.rewrite_links(None, "model", guide)
    assert guide[0] == "See [the gated model](_generated/reports/simulation/gated.md) and [x](https://a.b/c/)."
    page = ["Files under [`results/`](results/) and [one](results/a.json); [next](mem0.md)."]
    conf.rewrite_links(None, "_generated/reports/replication/README", page)
    assert page[0] == (
        "Files under `results/` (`reports/replication/results/` in the repository) and "
        "one (`reports/replication/results/a.json` in the repository); [next](mem0.md)."
    )


def test_tutorial_notebooks_are_in_the_index_without_outputs() -> None:
    entries = set(_toctree_entries("tutorials/index.md"))
    notebooks = sorted((DOCS / "tutorials").glob("*.ipynb"))
    assert len(notebooks) >= 3
    for path in notebooks:
        assert path.stem in entries, f"{path.name} is in no toctree of docs/tutorials/index.md"
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), (
            f"{path.name} is committed with outputs: the docs build executes it; clear them"
        )
        last = "".join(nb["cells"][-1]["source"])
        assert nb["cells"][-1]["cell_type"] == "markdown" and "what to do next" in last.lower(), (
            f"{path.name} does not end with what to look at and what to do next"
        )
        # a check cell: a failing assert fails the docs build
        assert any("assert " in "".join(c["source"]) for c in code), f"{path.name} checks nothing"
