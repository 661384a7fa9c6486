"""The report's sections: each builds its HTML fragment and its Markdown twin.

A :class:`Section` carries a stable ``id`` (the HTML ``id`` attribute and the
Markdown anchor), a title, a one-paragraph lead (what the section says, in
words) and the two bodies. Every builder takes the posterior (and what else it
needs) and never raises on a missing optional piece: it says what is missing.
HTML is escaped here (tables through pandas, text through ``html.escape``), so
the template may insert the fragments as they are.
"""

from __future__ import annotations

import html
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import CI_KIND, CI_PROB, IDENTIFIED, RETRIEVED_ONLY, STATUSES, UNIDENTIFIED
from cmp_bayes.posterior.health import SamplerHealth, hyperparameter_names
from cmp_bayes.reporting import plots

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions

#: Memories shown at each end of the forest plot.
FOREST_EACH_END: int = 10
#: Most decision rows printed per action in the report (the CSV has all of them).
ROWS_PER_ACTION: int = 15
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


# ----------------------------------------------------------------- formatting


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
    return out


def table_md(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table with :func:`fmt`-formatted cells."""
    if frame.empty:
        return "_(none)_\n"
    cols = [str(c) for c in frame.columns]

    def cell(v: Any) -> str:
        return fmt(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += [
        "| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines) + "\n"


def _img(uri: str, alt: str) -> str:
    return f'<figure><img src="{uri}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}</figcaption></figure>'


def _p(text: str) -> str:
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


# ------------------------------------------------------------------- sections


def overview(
    health: SamplerHealth,
    ident: pd.DataFrame,
    decisions: Decisions | None,
    posterior: xr.DataTree,
) -> Section:
    """What to look at first: the verdict, the identification counts, the decisions."""
    counts = ident["status"].value_counts() if len(ident) else pd.Series(dtype=int)
    n = len(ident)
    items = [f"Sampler: {health.verdict}"]
    if n:
        items.append(
            f"{n:,} memories: "
            + ", ".join(f"{int(counts.get(s, 0)):,} {s}" for s in STATUSES)
            + ". An unidentified memory's posterior is its prior (the population's, learned "
            "from the other memories): the log cannot say whether it helps, so it is never "
            "forgotten."
        )
    if decisions is not None:
        acts = decisions.counts()
        items.append(
            "Decisions under default costs: "
            + ", ".join(f"{int(acts.get(a, 0)):,} {a}" for a in ("retain", "forget", "defer"))
            + "."
        )
    attrs = posterior.attrs
    meta = {
        "log": attrs.get("log_path", "?"),
        "outcomes": attrs.get("outcome_kind", "?"),
        "created": attrs.get("created_at", "?"),
        "cmp_bayes": attrs.get("cmp_bayes_version", "?"),
        "intervals": f"{CI_PROB:.0%} {CI_KIND.upper()}",
    }
    lead = (
        "Read the sampler verdict first: if it fails, nothing below is reliable. Then the "
        "identification panel: it says which memories the log can judge at all."
    )
    body = "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"
    body += (
        "<p class='meta'>"
        + " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in meta.items())
        + "</p>"
    )
    md = (
        "\n".join(f"- {i}" for i in items)
        + "\n\n"
        + " · ".join(f"{k}: {v}" for k, v in meta.items())
        + "\n"
    )
    return Section("overview", "What to look at first", lead, body, md)


def sampler_health_section(health: SamplerHealth) -> Section:
    """Table of the sampler checks with verdicts and what to do on fail."""
    frame = pd.DataFrame(
        [
            {
                "check": c.name,
                "value": c.value,
                "pass if": c.threshold,
                "verdict": c.verdict,
                "what to do": c.advice or "–",
            }
            for c in health.checks
        ]
    )
    cls = "pass" if health.ok else "fail"
    body = f"<p class='verdict {cls}'>{html.escape(health.verdict)}</p>" + table_html(frame)
    md = f"**{health.verdict}**\n\n" + table_md(frame)
    lead = (
        "Checks of the hyperparameters (the only parameters NUTS samples; each memory's tau "
        "and rho are drawn exactly given them), from cmp_bayes.posterior.health: the verdict "
        "rests on divergences and R-hat, the same verdict fit and decide give; the other "
        "checks are advisory ('warn')."
    )
    return Section("sampler-health", "Sampler health", lead, body, md)


def hyperparameter_section(posterior: xr.DataTree, hyper: list[str]) -> Section:
    """arviz_stats.summary of the hyperparameters at CI_PROB / CI_KIND."""
    lead = (
        f"Posterior summary of the hyperparameters ({CI_PROB:.0%} {CI_KIND.upper()} intervals). "
        "They set the prior every memory shares: how often memories help or hurt, and by how much."
    )
    if not hyper:
        return Section(
            "hyperparameters",
            "Hyperparameters",
            lead,
            _p("No hyperparameters."),
            "No hyperparameters.\n",
        )
    import arviz_stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summ = arviz_stats.summary(
            posterior, var_names=hyper, ci_prob=CI_PROB, ci_kind=CI_KIND, round_to="none"
        )
    frame = summ.reset_index().rename(columns={"index": "parameter", "label": "parameter"})
    frame = frame.rename(columns={frame.columns[0]: "parameter"})
    # R-hat is read against 1.01: three decimals, not three significant digits
    if "r_hat" in frame:
        frame["r_hat"] = frame["r_hat"].map(lambda v: f"{v:.3f}")
    for col in ("ess_bulk", "ess_tail"):
        if col in frame:
            frame[col] = frame[col].map(lambda v: f"{v:,.0f}" if np.isfinite(v) else "–")
    return Section("hyperparameters", "Hyperparameters", lead, table_html(frame), table_md(frame))


def trace_rank_section(posterior: xr.DataTree, hyper: list[str]) -> Section:
    """Trace + density and rank plots of the hyperparameters."""
    lead = (
        "Trace: chains should overlap like noise around one level. Rank: each chain's "
        "line should stay inside the band; a chain above or below it sampled a different region."
    )
    if not hyper:
        return Section(
            "trace-rank",
            "Trace and rank plots",
            lead,
            _p("No hyperparameters."),
            "No hyperparameters.\n",
        )
    shown = hyper[: plots.MAX_TRACE_VARS]
    trace = plots.trace_plot(posterior, shown)
    rank = plots.rank_plot(posterior, shown)
    note = ""
    if len(hyper) > len(shown):
        note = f"Showing {len(shown)} of {len(hyper)} hyperparameters; all are in the table above."
    body = _img(trace, "Trace and marginal posterior of each hyperparameter") + _img(
        rank, "Rank plot per chain"
    )
    body += _p(note) if note else ""
    md = f"Trace and rank plots of {', '.join(shown)}: see index.html. {note}\n"
    return Section("trace-rank", "Trace and rank plots", lead, body, md, [trace, rank])


def forest_section(posterior: xr.DataTree, ident: pd.DataFrame) -> Section:
    """Forest plot of memory-level tau for the most useful and the most harmful memories."""
    var = memory_var(posterior, "tau")
    summ = tau_summary(posterior).merge(ident[["memory_id", "status"]], on="memory_id", how="left")
    ordered = summ.sort_values("tau_mean", ascending=False, kind="stable")
    k = FOREST_EACH_END
    chosen = ordered if len(ordered) <= 2 * k else pd.concat([ordered.head(k), ordered.tail(k)])
    which = (
        f"all {len(chosen)} memories"
        if len(chosen) == len(ordered)
        else f"the {k} memories with the highest and the {k} with the lowest posterior mean"
    )
    lead = (
        "Conditional utility tau (change in the success probability when the memory is in "
        f"the context) for {which}, most useful first; thick bar 50%, thin bar "
        f"{CI_PROB:.0%} ({CI_KIND.upper()})."
    )
    uri = plots.forest_plot(posterior, var, chosen["memory_id"].tolist())
    frame = chosen.rename(
        columns={
            "tau_mean": "tau mean",
            "tau_lo": f"{CI_PROB:.0%} low",
            "tau_hi": f"{CI_PROB:.0%} high",
        }
    )
    body = _img(uri, f"Posterior of {var} for the most useful and most harmful memories")
    body += table_html(frame)
    md = "Most useful first, most harmful last:\n\n" + table_md(frame)
    return Section("tau-forest", "Most useful and most harmful memories", lead, body, md, [uri])


def identification_section(posterior: xr.DataTree, ident: pd.DataFrame) -> Section:
    """Retrieved vs exposed scatter, unidentified memories listed, prior vs posterior."""
    lead = (
        "Identification comes from the design, not the posterior: identified = exposed at "
        "random at least once; retrieved-only = only the retriever ever showed it (identified "
        "only if retrieval is unconfounded with the outcome); unidentified = never in any "
        "context, so its tau cannot be learned: its posterior is its prior given the fitted "
        "hyperparameters."
    )
    if ident.empty:
        msg = "The posterior has no identification group."
        return Section("identification", "Identification", lead, _p(msg), msg + "\n")
    images: list[str] = []
    scatter = plots.identification_scatter(posterior["identification"].to_dataset())
    images.append(scatter)
    rows = []
    for s in STATUSES:
        sub = ident[ident["status"] == s]
        rows.append(
            {
                "status": s,
                "memories": len(sub),
                "median mean_shift": float(sub["mean_shift"].median())
                if "mean_shift" in sub and len(sub)
                else math.nan,
                "median contraction": float(sub["contraction"].median())
                if "contraction" in sub and len(sub)
                else math.nan,
            }
        )
    counts = pd.DataFrame(rows)
    body = _img(scatter, "Retrieved vs exposed count per memory") + table_html(counts)
    body += _p(
        "mean_shift = |posterior mean − prior mean| / prior sd of tau: how far the data moved "
        "the memory's estimate; contraction = posterior sd / prior sd. Unidentified memories "
        "should show 0 and 1."
    )
    md = table_md(counts) + (
        "\nmean_shift = |posterior mean − prior mean| / prior sd of tau; contraction = posterior "
        "sd / prior sd. Unidentified memories should show 0 and 1.\n"
    )
    unid = ident[ident["status"] == UNIDENTIFIED]
    cols = [
        c
        for c in ("memory_id", "retrieved", "exposed", "in_store", "mean_shift", "contraction")
        if c in unid
    ]
    listed = unid[cols].head(MAX_LISTED)
    more = f" (first {MAX_LISTED} of {len(unid):,})" if len(unid) > MAX_LISTED else ""
    body += f"<h3>Unidentified memories{html.escape(more)}</h3>"
    md += f"\n### Unidentified memories{more}\n\n"
    if unid.empty:
        body += _p("None: every memory was in some context.")
        md += "None: every memory was in some context.\n"
    else:
        body += table_html(listed)
        md += table_md(listed)
        var = memory_var(posterior, "tau")
        if "prior" in posterior.children and var in posterior["prior"].data_vars:
            shown = unid["memory_id"].tolist()[: plots.MAX_PRIOR_POSTERIOR - 1]
            contrast = _contrast_memory(ident)
            pp = plots.prior_posterior_plot(
                posterior, var, shown + ([contrast] if contrast else [])
            )
            images.append(pp)
            caption = (
                f"Prior group (blue: hyperparameters from their hyperpriors, before any data) and "
                f"posterior (orange) of {var} for unidentified memories"
                + (
                    f", and identified memory {contrast} for contrast (last panel)"
                    if contrast
                    else ""
                )
                + "."
            )
            explain = (
                "An unidentified memory's posterior differs from the prior group only through the "
                "hyperparameters, which the other memories taught (every unidentified memory's "
                "curve has the same shape); nothing about the memory itself was learned: against "
                "its prior given the fitted hyperparameters, its mean_shift is 0 and its "
                "contraction 1 (table above), computed exactly."
                + (f" The identified {contrast} moved away from its prior." if contrast else "")
            )
            body += _img(pp, caption) + _p(explain)
            md += f"\n{caption} See index.html for the figure. {explain}\n"
        else:
            body += _p("No prior group in the posterior file: prior vs posterior not shown.")
            md += "\nNo prior group in the posterior file: prior vs posterior not shown.\n"
    return Section("identification", "Identification", lead, body, md, images)


def _contrast_memory(ident: pd.DataFrame) -> str | None:
    """The identified memory whose data moved its tau the most (largest mean_shift)."""
    if "mean_shift" not in ident:
        return None
    ok = ident[(ident["status"] == IDENTIFIED) & ident["mean_shift"].notna()]
    if ok.empty:
        return None
    return str(ok.loc[ok["mean_shift"].idxmax(), "memory_id"])


def ppc_section(posterior: xr.DataTree) -> Section:
    """Posterior predictive check of the exposed-arm outcomes."""
    kind = str(posterior.attrs.get("outcome_kind", "binary"))
    coverage = predictive_coverage(posterior)
    cov_text = (
        f"{coverage[0]:.0%} of the {coverage[1]:,} memories with exposures have their observed "
        f"exposed-arm successes inside the {CI_PROB:.0%} posterior predictive interval "
        f"(expect at least {CI_PROB:.0%}; counts are discrete, so more is normal)."
        if coverage
        else "No exposed-arm predictions to check."
    )
    images: list[str] = []
    if kind == "binary":
        lead = (
            "Calibration (PAVA) of the exposed-arm outcomes: the line should follow the "
            "diagonal inside the band; above it the model predicts too low, below too high."
        )
        tree = plots.binary_calibration_tree(posterior)
        uri = plots.ppc_binary_plot(tree) if tree is not None else None
    else:
        lead = "Observed vs predicted exposed-arm mean outcome per memory (fractional outcomes)."
        uri = plots.ppc_fractional_plot(posterior)
    body = ""
    if uri:
        images.append(uri)
        body += _img(uri, "Posterior predictive check of the exposed-arm outcomes")
    else:
        body += _p("No posterior_predictive / observed_data groups: not computed.")
    body += _p(cov_text)
    md = cov_text + "\n"
    return Section("ppc", "Posterior predictive check", lead, body, md, images)


def predictive_coverage(posterior: xr.DataTree) -> tuple[float, int] | None:
    """Share of memories with exposures whose observed exposed successes lie in the CI_PROB
    posterior predictive interval, and the number of such memories."""
    found = plots.exposed_arm(posterior)
    if found is None:
        return None
    obs, pp, name = found
    keep = obs["exposed"].to_numpy() > 0
    if not keep.any():
        return None
    q = pp[name].quantile([(1 - CI_PROB) / 2, (1 + CI_PROB) / 2], dim=("chain", "draw"))
    y = obs[name].to_numpy()
    lo, hi = q.isel(quantile=0).to_numpy(), q.isel(quantile=1).to_numpy()
    inside = (y >= lo) & (y <= hi)
    return float(inside[keep].mean()), int(keep.sum())


def decisions_section(decisions: Decisions | None, note: str = "", log: Any = None) -> Section:
    """The decision table under the given (default) costs, with reasons."""
    lead = (
        "retain / forget / defer per memory from the asymmetric Bayes rule (forgetting a useful "
        "memory costs more than keeping a useless one). A memory the design cannot identify is "
        "never forgotten: it is deferred with the exposures it needs."
    )
    if decisions is None:
        msg = note or "Decisions not computed."
        return Section("decisions", "Decisions", lead, _p(msg), msg + "\n")
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
    body = (_p(costs_text) if costs_text else "") + table_html(counts) + _p(more)
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


def loo_section(posterior: xr.DataTree) -> Section:
    """PSIS-LOO of each log-likelihood variable, compared when there are two or more.

    The pooled model vs no pooling comparison needs both models' pointwise
    log-likelihoods in the ``log_likelihood`` group (one variable each); it is
    reported only where the fit wrote them, never approximated here.
    """
    lead = "Leave-one-out predictive accuracy (PSIS-LOO) of the pooled model against no pooling."
    if "log_likelihood" not in posterior.children:
        msg = (
            "Not computed: the posterior has no log_likelihood group (the grid model integrates "
            "each memory's effect out, so it stores no pointwise log-likelihood)."
        )
        return Section("loo", "LOO model comparison", lead, _p(msg), msg + "\n")
    import arviz_stats

    ll = posterior["log_likelihood"].to_dataset()
    results: dict[str, Any] = {}
    errors: list[str] = []
    for name in ll.data_vars:
        tree = xr.DataTree.from_dict(
            {"posterior": posterior["posterior"].to_dataset(), "log_likelihood": ll[[name]]}
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results[str(name)] = (tree, arviz_stats.loo(tree, var_name=str(name)))
        except Exception as exc:  # noqa: BLE001 - a LOO failure is reported, not fatal
            errors.append(f"{name}: {exc}")
    rows = [
        {"model": k, "elpd_loo": float(v.elpd), "se": float(v.se), "p_loo": float(v.p)}
        for k, (_, v) in results.items()
    ]
    frame = pd.DataFrame(rows)
    body = table_html(frame) if rows else ""
    md = table_md(frame) if rows else ""
    if len(results) >= 2:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cmp = arviz_stats.compare({k: t for k, (t, _) in results.items()})
            cmp = cmp.reset_index().rename(columns={"index": "model"})
            body += table_html(cmp)
            md += "\n" + table_md(cmp)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"compare: {exc}")
    elif rows:
        msg = "Only one model's log-likelihood is stored: no comparison."
        body += _p(msg)
        md += msg + "\n"
    for e in errors:
        body += _p("Not computed: " + e)
        md += f"Not computed: {e}\n"
    return Section("loo", "LOO model comparison", lead, body, md)


__all__ = [
    "IDENTIFIED",
    "RETRIEVED_ONLY",
    "SECTION_IDS",
    "Section",
    "decisions_section",
    "forest_section",
    "hyperparameter_names",
    "hyperparameter_section",
    "identification_frame",
    "identification_section",
    "loo_section",
    "overview",
    "ppc_section",
    "sampler_health_section",
    "trace_rank_section",
]
