"""The report's decisions: the first screen (what to forget, what to expose next, how strong
the evidence is) and the decisions section (counts, reason codes, the most consequential rows).

The rows show a short reason code each, with one legend
(:mod:`cmp_bayes.reporting.reason_codes`); ``decisions.csv`` keeps the full sentences.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import pandas as pd

from cmp_bayes.constants import STATUSES
from cmp_bayes.reporting.blocks import Section, fmt, paragraph_html, table_html, table_md
from cmp_bayes.reporting.reason_codes import definitions, reason_codes, reason_legend
from cmp_bayes.text import add_text, texts_from_memories

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions
    from cmp_bayes.posterior.health import SamplerHealth


#: Most decision rows printed per action in the report (the CSV has all of them).
ROWS_PER_ACTION: int = 15
#: Most forgets listed by id on the first screen (a scrollable list; the CSV has all).
MAX_FORGETS_LISTED: int = 2000
#: Memories in the next exposure pool the first screen proposes (``recommend_exposures``'s budget).
NEXT_POOL: int = 10


def decisions_section(
    decisions: Decisions | None,
    note: str = "",
    log: Any = None,
    *,
    texts: pd.Series | None = None,
) -> Section:
    """The decision table under the given (default) costs, with reason codes and their legend.

    Rows show the start of each memory's text (``text``) from the decisions
    (the posterior's ``memory_text``), else from ``texts`` (memory id -> text),
    else from ``log``'s memories file, and a reason code (``why``) instead of
    the reason's sentence; the legend above the table says what each code means.
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
        "then retains (largest expected effect first); the first section lists every forget "
        "and decisions.csv has every row with its full reason."
        if len(decisions) > len(shown)
        else "Every memory is listed; decisions.csv has each row's full reason."
    )
    costs = decisions.costs
    costs_text = (
        f"Costs: forget a useful memory {fmt(costs.forget_cost)}, keep a useless one "
        f"{fmt(costs.retain_cost)}; useful = {costs.estimand} > "
        f"{fmt(costs.threshold)}; forget only when P(useful) < "
        f"{fmt(decisions.rule.forget_below)}. decisions.csv records them on every row "
        "(estimand, threshold, forget_cost, retain_cost, forget_below)."
    )
    # what decide warned of beside the costs (a threshold out of reach, a store average)
    costs_text = " ".join([costs_text, *decisions.cautions()])
    legend = reason_legend(decisions.table)
    defs = definitions(decisions)
    why = shown.pop("reason") if "reason" in shown else None
    if why is not None:
        pos = list(shown.columns).index("action") + 1 if "action" in shown else len(shown.columns)
        shown.insert(pos, "why", reason_codes(shown.assign(reason=why)))
    body = (
        paragraph_html(costs_text)
        + table_html(counts)
        + "<h3>Reason codes</h3>"
        + table_html(legend, classes="legend")
        + "<h3>Most consequential rows</h3>"
        + paragraph_html(more)
        + paragraph_html(defs)
        + table_html(shown, classes="decisions")
    )
    md = (
        costs_text
        + "\n\n"
        + table_md(counts)
        + "\n### Reason codes\n\n"
        + table_md(legend)
        + "\n### Most consequential rows\n\n"
        + more
        + "\n\n"
        + defs
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


# ------------------------------------------------------------------ the first screen


def health_headline(health: SamplerHealth) -> tuple[str, str]:
    """The sampler verdict as the page's first line, and its CSS class (pass / warn / fail).

    A PASS with advisory checks that warn (or were not recorded) says so and
    names them ("PASS: with 2 warnings. ..."), so the first line agrees with the
    health table below it; the verdict itself (what gates forgets) is
    :attr:`SamplerHealth.verdict`'s.
    """
    if not health.ok:
        return health.verdict, "fail"
    warns = [c for c in health.checks if not c.gate and c.ok is not True]
    if not warns:
        return health.verdict, "pass"
    rest = health.verdict.removeprefix("PASS: ")
    # the plain verdict says "every recorded check passed": true of the gating checks only
    rest = rest.replace(
        "every recorded check passed",
        "every check that gates forgets (divergences, hyperparameter R-hat) passed",
    )
    named = "; ".join(
        f"{c.name}: {c.value} ({'not recorded' if c.ok is None else 'pass if ' + c.threshold})"
        for c in warns
    )
    word = "warning" if len(warns) == 1 else "warnings"
    text = (
        f"PASS: with {len(warns)} {word}. {rest} {word.capitalize()} (advisory: they do not "
        f"block forgets; see Sampler health): {named}."
    )
    return text, "warn"


def forget_list(decisions: Decisions) -> pd.DataFrame:
    """Every forget, riskiest (highest P(useful)) first: id, text, P(useful), value, exposures."""
    rows = decisions.forgets.sort_values("p_useful", ascending=False, kind="stable")
    cols = [c for c in ("memory_id", "text", "p_useful", "expected_value", "exposed") if c in rows]
    return rows[cols].reset_index(drop=True)


def next_pool(recommended: pd.DataFrame) -> pd.DataFrame:
    """The selected rows of ``recommend_exposures``, best first, with the columns a person reads."""
    chosen = recommended[recommended["selected"]] if "selected" in recommended else recommended
    cols = [
        c
        for c in ("memory_id", "text", "action", "status", "p_useful", "exposures", "voi")
        if c in chosen
    ]
    return chosen[cols].reset_index(drop=True)


def evidence_sentences(decisions: Decisions) -> list[str]:
    """How strong the evidence behind the decisions is, in numbers a person can weigh."""
    t = decisions.table
    out: list[str] = []
    forgets = decisions.forgets
    below = decisions.rule.forget_below
    if len(forgets):
        worst = forgets.loc[forgets["p_useful"].idxmax()]
        out.append(
            f"Forgets: expected number of useful memories among the {len(forgets):,} forgotten: "
            f"{float(forgets['p_useful'].sum()):.2f} (sum of their P(useful)); the riskiest, "
            f"{worst['memory_id']}, has P(useful) = {float(worst['p_useful']):.3f} against the "
            f"forget threshold {below:.3f}; median exposures per forgotten memory: "
            f"{fmt(float(forgets['exposed'].median()))}."
        )
    else:
        out.append("No memory is forgotten.")
    defers = decisions.defers
    if len(defers):
        by = defers["status"].astype(str).value_counts()
        parts = ", ".join(f"{int(by[s]):,} {s}" for s in STATUSES if s in by.index)
        out.append(
            f"Deferred: {len(defers):,} memories the rule would forget but may not yet ({parts}): "
            "the log has no randomized evidence about them, or too little."
        )
    retains = decisions.retains
    if len(retains) and "p_useful" in t:
        sure = int((retains["p_useful"] >= 0.5).sum())
        out.append(
            f"Retained: {len(retains):,}, of which {sure:,} are more likely useful than not "
            "(P(useful) >= 0.5); the rest are kept because forgetting them is too risky."
        )
    return out


def first_screen(
    decisions: Decisions | None,
    health: SamplerHealth,
    *,
    recommended: pd.DataFrame | None = None,
    recommend_note: str = "",
    texts: pd.Series | None = None,
    note: str = "",
) -> tuple[str, str]:
    """HTML and Markdown of the report's first screen: verdict, forgets, next exposures, evidence.

    Parameters
    ----------
    decisions : Decisions or None
        What ``decide`` returned (None: ``note`` says why there are none).
    health : SamplerHealth
        The report's sampler checks (advisory ones included).
    recommended : pandas.DataFrame, optional
        ``recommend_exposures``' table; its selected rows are the next pool.
    recommend_note : str
        Why there is no recommendation (shown instead).
    texts : pandas.Series, optional
        Memory id -> text, for rows whose decisions carry none.
    """
    headline, cls = health_headline(health)
    body = f"<p class='verdict {cls}'>{html.escape(headline)}</p>"
    md = f"**{headline}**\n\n"
    if decisions is None:
        msg = note or "Decisions not computed."
        return body + paragraph_html(msg), md + msg + "\n\n"
    c = decisions.counts()
    line = (
        f"Under these costs: forget {c['forget']:,}, defer {c['defer']:,} (expose them first), "
        f"retain {c['retain']:,} of {len(decisions):,} memories."
    )
    body += paragraph_html(line)
    md += line + "\n\n"
    # the three answers first, each in a line or two; the tables behind them follow
    forgets = forget_list(decisions)
    if "text" not in forgets:
        forgets = add_text(forgets, texts)
    shown = forgets.head(MAX_FORGETS_LISTED)
    if len(forgets) == 0:
        forget_head, forget_ids = "Forget: none.", (
            "No memory is shown useless with enough evidence under these costs."
        )
    else:
        which = (
            "all of them, riskiest first"
            if len(shown) == len(forgets)
            else f"the {len(shown):,} riskiest; decisions.csv has every one"
        )
        forget_head = f"Forget {len(forgets):,} memories ({which}):"
        forget_ids = ", ".join(str(m) for m in shown["memory_id"])
    pool = next_pool(recommended) if recommended is not None and len(recommended) else None
    if pool is not None and recommended is not None:
        per = int(recommended.attrs.get("exposures", 0))
        each = f"{per} randomized exposures each, " if per else ""
        expose_head = f"Expose next {len(pool):,} memories ({each}then fit and decide again):"
        expose_ids = ", ".join(str(m) for m in pool["memory_id"])
    else:
        expose_head, expose_ids = "Expose next:", recommend_note or "Not computed."
    evidence = evidence_sentences(decisions)
    items = [
        ("forget", forget_head, forget_ids),
        ("expose", expose_head, expose_ids),
    ]
    body += "<ul class='todo'>"
    for cls, head, ids in items:
        body += (
            f"<li class='{cls}'><strong>{html.escape(head)}</strong> "
            f"<span class='ids'>{html.escape(ids)}</span></li>"
        )
    body += (
        "<li class='evidence'><strong>How strong the evidence is:</strong> "
        + " ".join(html.escape(e) for e in evidence)
        + "</li></ul>"
    )
    md += "".join(f"- **{head}** {ids}\n" for _, head, ids in items)
    md += "- **How strong the evidence is:** " + " ".join(evidence) + "\n"
    if len(shown):
        body += "<h3>The forgets</h3><div class='scroll'>" + table_html(shown, classes="forgets")
        body += "</div>"
        md += "\n### The forgets\n\n" + table_md(shown)
    if pool is not None:
        what = (
            "voi = value of information in cost units: the expected loss the exposures remove; "
            "deferred memories come first. Give the list to the next design "
            "(ExposureScheduler(pool=...), or `cmp-bayes recommend POSTERIOR --budget "
            f"{len(pool)} -o pool.json`)."
        )
        body += "<h3>The next exposure pool</h3>" + paragraph_html(what)
        body += table_html(pool, classes="pool")
        md += f"\n### The next exposure pool\n\n{what}\n\n" + table_md(pool)
    return body, md
