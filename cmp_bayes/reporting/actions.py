"""The report's decisions section: counts per action and the most consequential rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from cmp_bayes.reporting.blocks import Section, fmt, paragraph_html, table_html, table_md
from cmp_bayes.text import add_text, texts_from_memories

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions


#: Most decision rows printed per action in the report (the CSV has all of them).
ROWS_PER_ACTION: int = 15


def decisions_section(
    decisions: Decisions | None,
    note: str = "",
    log: Any = None,
    *,
    texts: pd.Series | None = None,
) -> Section:
    """The decision table under the given (default) costs, with reasons.

    Rows show the start of each memory's text (``text``) from the decisions
    (the posterior's ``memory_text``), else from ``texts`` (memory id -> text),
    else from ``log``'s memories file.
    """
    lead = (
        "retain / forget / defer per memory from the asymmetric Bayes rule (forgetting a useful "
        "memory costs more than keeping a useless one). A memory the design cannot identify is "
        "never forgotten: it is deferred with the exposures it needs."
    )
    if decisions is None:
        msg = note or "Decisions not computed."
        return Section("decisions", "Decisions", lead, paragraph_html(msg), msg + "\n")
    acts = decisions.counts()
    counts = pd.DataFrame(
        [{"action": a, "memories": int(acts.get(a, 0))} for a in ("retain", "forget", "defer")]
    )
    shown = _consequential(decisions.table)
    if "text" not in shown:
        if texts is None and log is not None:
            texts = texts_from_memories(getattr(log, "memories", None))
        shown = add_text(shown, texts)
    more = (
        f"Showing {len(shown)} of {len(decisions):,} rows: up to {ROWS_PER_ACTION} per action, "
        "defers first (they need an exposure), then forgets (irreversible; riskiest first), "
        "then retains (largest expected effect first); decisions.csv has every row."
        if len(decisions) > len(shown)
        else "Every memory is listed."
    )
    costs = decisions.costs
    costs_text = (
        f"Costs: forget a useful memory {fmt(costs.forget_cost)}, keep a useless one "
        f"{fmt(costs.retain_cost)}; useful = {costs.estimand} > "
        f"{fmt(costs.threshold)}; forget only when P(useful) < "
        f"{fmt(decisions.rule.forget_below)}."
    )
    body = (paragraph_html(costs_text) if costs_text else "") + table_html(counts) + paragraph_html(more)
    body += table_html(shown, classes="decisions")
    md = (
        (costs_text + "\n\n" if costs_text else "")
        + table_md(counts)
        + "\n"
        + more
        + "\n\n"
        + table_md(shown)
    )
    return Section("decisions", "Decisions", lead, body, md)


def _consequential(decisions: pd.DataFrame) -> pd.DataFrame:
    """Up to ROWS_PER_ACTION rows per action, the most consequential first."""
    cols = [
        c
        for c in (
            "memory_id",
            "text",
            "action",
            "status",
            "p_useful",
            "expected_value",
            "exposed",
            "exposures_needed",
            "reason",
        )
        if c in decisions
    ]
    parts = []
    for action, key, ascending in (
        ("defer", "p_useful", False),
        ("forget", "p_useful", False),  # riskiest forget: highest P(useful)
        ("retain", "expected_value", False),
    ):
        sub = decisions[decisions["action"] == action]
        if key in sub:
            sub = sub.sort_values(key, ascending=ascending, kind="stable")
        parts.append(sub[cols].head(ROWS_PER_ACTION))
    return pd.concat(parts, ignore_index=True)
