"""Sphinx configuration of the cmp_bayes docs site.

Build from the repository root (warnings are errors; the tutorials run):

    .venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

Three things happen here beyond plain configuration:

* the results pages under ``reports/`` are copied into ``docs/_generated/reports``
  at build start (they live outside ``docs/`` and are read on GitHub too);
* links from the user guide to ``../reports/...`` are rewritten at read time
  to point at those copies, so the same Markdown works on GitHub and here;
* the ``cmp-bayes-help`` directive renders ``cmp-bayes VERB --help`` by running
  the CLI's own argparse parser, so the CLI page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"

sys.path.insert(0, str(ROOT))  # document this checkout, whatever an installed cmp_bayes says


def set_environment() -> None:
    """The environment the notebooks' kernels inherit (called when Sphinx starts).

    The kernels import this checkout (``PYTHONPATH``); as ./dev does, one BLAS
    thread (PyTensor's small ops slow down when BLAS threads fight the
    sampler's chains on 2 cores); Mem0 never phones home.
    """
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MEM0_TELEMETRY", "False")


from cmp_bayes import __version__  # noqa: E402

project = "cmp_bayes"
author = "cmp_bayes authors"
copyright = "cmp_bayes authors, MIT licence"  # noqa: A001 - Sphinx's name
version = release = __version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
# .rst first: autosummary writes its stubs with the first suffix, and they are reST
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"

# -- API reference --------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False  # the class template lists members itself
numpydoc_class_members_toctree = False

# -- Markdown and notebooks -----------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3  # the guide links to its own sections by slug
# Every build runs every notebook: the docs build is the notebooks' CI check.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 300  # seconds per cell; the longest (a fit) takes ~20 s
nb_merge_streams = True

# -- HTML -----------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"cmp_bayes {__version__}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []


# -- results pages --------------------------------------------------------
#: reports/ files that become pages (with what they link to that lives beside them)
REPORT_GLOBS = ("**/*.md", "**/*.png", "**/*.svg")
#: report folders that are not results pages (gitignored demo output)
REPORT_SKIP = ("demo",)
#: fragments a generator pastes into the README beside them (already on that page)
REPORT_FRAGMENTS = ("notes.md", "comparison_notes.md")


def report_pages() -> list[Path]:
    """The files of ``reports/`` that become part of the site (paths relative to it)."""
    src = ROOT / "reports"
    found = set()
    for pattern in REPORT_GLOBS:
        for path in src.glob(pattern):
            rel = path.relative_to(src)
            if rel.parts[0] not in REPORT_SKIP and rel.name not in REPORT_FRAGMENTS:
                found.add(rel)
    return sorted(found)


def copy_reports(app: Any = None) -> list[Path]:
    """Copy the results pages into ``docs/_generated/reports``; returns the copies.

    A copy, not an include: the pages link to each other relatively (and to
    their figures), and a copy keeps those links valid with no rewriting.
    """
    dst = GENERATED / "reports"
    shutil.rmtree(dst, ignore_errors=True)
    copied = []
    for rel in report_pages():
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "reports" / rel, out)
        copied.append(out)
    return copied


#: a Markdown link into reports/ from a guide page in docs/ (``](../reports/x.md)``)
_REPORTS_LINK = re.compile(r"\]\(\.\./reports/")
#: a Markdown link to a folder or data file of reports/ (not a page): ``](results/)``
_FOLDER_LINK = re.compile(r"\[([^\]]+)\]\(((?!https?:)(?:[^)#]*/|[^)#]*\.json))\)")


def rewrite_links(app: Any, docname: str, source: list[str]) -> None:
    """Point links at the copies of the results pages; keep the pages' own text.

    Guide pages link ``../reports/...`` (right on GitHub); here those pages live
    at ``_generated/reports/...``. Links from a results page to a folder or a
    JSON file (``results/``) have no page to go to: they become the path in
    code font, which is what the reader needs to find the files in a clone.
    """
    text = source[0]
    if not docname.startswith("_generated/"):
        source[0] = _REPORTS_LINK.sub("](_generated/reports/", text)
        return
    rel = Path(docname).parent.relative_to("_generated")

    def plain(m: re.Match[str]) -> str:
        target = (rel / m.group(2)).as_posix() + ("/" if m.group(2).endswith("/") else "")
        return f"{m.group(1)} (`{target}` in the repository)"

    source[0] = _FOLDER_LINK.sub(plain, text)


# -- API: the docstrings of public constants -------------------------------
def data_docstring(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Give ``cmp_bayes.CI_PROB`` and friends their ``#:`` comment, not ``str``'s docstring.

    The package root re-exports constants, so autodoc looks for their ``#:``
    comment in ``cmp_bayes/__init__.py``, finds none and falls back to the
    docstring of the value's type. The comment is in the defining module.
    """
    if what != "data" or not name.startswith("cmp_bayes."):
        return
    from sphinx.pycode import ModuleAnalyzer

    import cmp_bayes

    short = name.rsplit(".", 1)[1]
    defined = getattr(cmp_bayes, "_LAZY", {}).get(short)
    for module in filter(None, [defined, "cmp_bayes.constants", "cmp_bayes.version"]):
        found = ModuleAnalyzer.for_module(module).find_attr_docs().get(("", short))
        if found:
            lines[:] = list(found)
            return
    lines[:] = []  # never the value type's docstring


# -- the CLI page ---------------------------------------------------------
class CliHelp(Directive):
    """``cmp-bayes-help`` ``[VERB [SUBVERB]]``: the parser's own ``--help`` text."""

    optional_arguments = 2
    has_content = False

    def run(self) -> list[nodes.Node]:
        # A fixed width so the page does not depend on the terminal of the build.
        os.environ["COLUMNS"] = "88"
        from cmp_bayes.cli.main import build_parser

        parser: argparse.ArgumentParser = build_parser()
        for name in self.arguments:
            sub = next(
                a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            )
            if name not in sub.choices:
                raise self.error(f"cmp-bayes has no verb {' '.join(self.arguments)!r}")
            parser = sub.choices[name]
        text = parser.format_help().rstrip()
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app: Any) -> dict[str, Any]:
    set_environment()
    # before the sources are listed, so the copies are read like any page
    app.connect("builder-inited", copy_reports)
    app.add_directive("cmp-bayes-help", CliHelp)
    app.connect("source-read", rewrite_links)
    app.connect("autodoc-process-docstring", data_docstring)
    return {"parallel_read_safe": True}
