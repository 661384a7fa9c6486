"""The report's decisions section: counts per action and the most consequential rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from cmp_bayes.reporting.blocks import Section, fmt, paragraph_html, table_html, table_md

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions


#: Most decision rows printed per action in the report (the CSV has all of them).
ROWS_PER_ACTION: int = 15


def decisions_section(decisions: Decisions | None, note: str = "", log: Any = None) -> Section:
    """The decision table under the given (default) costs, with reasons."""
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
    text = _memory_text(log)
    if text is not None:
        shown = shown.merge(text, on="memory_id", how="left")
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


def _memory_text(log: Any) -> pd.DataFrame | None:
    mem = getattr(log, "memories", None)
    if mem is None or "text" not in mem or mem["text"].isna().all():
        return None
    text = mem[["memory_id", "text"]].copy()
    text["memory_id"] = text["memory_id"].astype(str)
    text["text"] = text["text"].astype(str).str.slice(0, 80)
    return text
