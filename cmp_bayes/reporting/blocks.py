"""The report's building blocks: the Section record, number formatting, tables, figures.

A :class:`Section` carries a stable ``id`` (the HTML ``id`` attribute and the
Markdown anchor), a title, a one-paragraph lead (what the section says, in
words) and the two bodies. HTML is escaped here (tables through pandas, text
through ``html.escape``), so the template may insert the fragments as they are.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import CI_KIND, CI_PROB

#: Memories shown at each end of the forest plot.
FOREST_EACH_END: int = 10


#: Most unidentified memories listed by id.
MAX_LISTED: int = 50


#: Stable section ids, in report order (tests and links rely on them).
SECTION_IDS: tuple[str, ...] = (
    "overview",
    "sampler-health",
    "hyperparameters",
    "trace-rank",
    "tau-forest",
    "identification",
    "ppc",
    "decisions",
    "loo",
)


@dataclass
class Section:
    """One report section.

    Attributes
    ----------
    id : str
        Stable anchor (one of :data:`SECTION_IDS`).
    title : str
    lead : str
        Plain-text paragraph: what to read in this section.
    html : str
        Escaped HTML body (tables, figures, lists).
    markdown : str
        The same content as Markdown (figures replaced by what they show).
    images : list of str
        PNG data URIs used in ``html`` (kept for tests and counting).
    """

    id: str
    title: str
    lead: str
    html: str = ""
    markdown: str = ""
    images: list[str] = field(default_factory=list)


def fmt(x: Any) -> str:
    """Numbers for people: integers with separators, floats to 3 significant digits."""
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return "–"
    if isinstance(x, bool | np.bool_):
        return "yes" if x else "no"
    if isinstance(x, int | np.integer):
        return f"{int(x):,}"
    if isinstance(x, float | np.floating):
        x = float(x)
        # round-off (e.g. a mean_shift of 1e-17) reads as exactly what it is: zero
        if abs(x) < 1e-9:
            return "0"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        if abs(x) < 0.001:
            return f"{x:.1e}"
        return f"{x:.3g}"
    return str(x)


def table_html(frame: pd.DataFrame, classes: str = "") -> str:
    """An escaped HTML table with :func:`fmt`-formatted cells."""
    shown = frame.map(fmt) if len(frame) else frame.astype(str)
    out = shown.to_html(index=False, escape=True, border=0, classes=classes or None)
    # a wide table scrolls inside its own box instead of squeezing its columns (800 px screens)
    return f"<div class='table-wrap'>{out}</div>"


def table_md(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table with :func:`fmt`-formatted cells."""
    if frame.empty:
        return "_(none)_\n"
    cols = [str(c) for c in frame.columns]

    def cell(v: Any, col: str) -> str:
        out = fmt(v).replace("|", "\\|").replace("\n", " ")
        # a memory's text is the user's, not ours: a "<" in it must not open raw HTML
        return out.replace("<", "\\<") if col == "text" else out

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += [
        "| " + " | ".join(cell(v, c) for v, c in zip(row, cols, strict=True)) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines) + "\n"


def figure_html(uri: str, alt: str) -> str:
    """A figure (PNG data URI) with its escaped caption."""
    return f'<figure><img src="{uri}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}</figcaption></figure>'


def paragraph_html(text: str) -> str:
    """One escaped paragraph."""
    return f"<p>{html.escape(text)}</p>"


def memory_var(posterior: xr.DataTree, name: str) -> str:
    """The memory-level variable: ``<name>_memory`` in the per-query form, else ``name``."""
    post = posterior["posterior"]
    return f"{name}_memory" if f"{name}_memory" in post.data_vars else name


def identification_frame(posterior: xr.DataTree) -> pd.DataFrame:
    """The ``identification`` group as a DataFrame over memory (empty frame without it)."""
    if "identification" not in posterior.children:
        return pd.DataFrame(columns=["memory_id", "status"])
    ds = posterior["identification"].to_dataset()
    frame = ds.to_dataframe().reset_index().rename(columns={"memory": "memory_id"})
    frame["memory_id"] = frame["memory_id"].astype(str)
    frame["status"] = frame["status"].astype(str)
    return frame


def tau_summary(posterior: xr.DataTree) -> pd.DataFrame:
    """Posterior mean and CI_PROB (CI_KIND) interval of memory-level tau, per memory."""
    var = memory_var(posterior, "tau")
    da = posterior["posterior"][var]
    lo_q, hi_q = (1 - CI_PROB) / 2, (1 + CI_PROB) / 2
    if CI_KIND != "eti":  # pragma: no cover - the constant is "eti"; hdi is arviz_stats' job
        raise NotImplementedError(CI_KIND)
    q = da.quantile([lo_q, hi_q], dim=("chain", "draw"))
    return pd.DataFrame(
        {
            "memory_id": da["memory"].to_numpy().astype(str),
            "tau_mean": da.mean(("chain", "draw")).to_numpy().astype(float),
            "tau_lo": q.isel(quantile=0).to_numpy().astype(float),
            "tau_hi": q.isel(quantile=1).to_numpy().astype(float),
        }
    )
