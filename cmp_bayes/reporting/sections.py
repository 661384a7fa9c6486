"""The report's sections on the posterior: overview, sampler health, hyperparameters,
traces, the tau forest and identification.

Every builder takes the posterior (and what else it needs), returns a
:class:`~cmp_bayes.reporting.blocks.Section` and never raises on a missing
optional piece: it says what is missing. The model checks (PPC, LOO) are in
:mod:`cmp_bayes.reporting.checks`, the decisions in :mod:`cmp_bayes.reporting.actions`.
"""

from __future__ import annotations

import html
import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import CI_KIND, CI_PROB, IDENTIFIED, STATUSES, UNIDENTIFIED
from cmp_bayes.posterior.health import SamplerHealth, hyperparameter_names
from cmp_bayes.reporting import plots
from cmp_bayes.reporting.blocks import (
    FOREST_EACH_END,
    MAX_LISTED,
    Section,
    figure_html,
    memory_var,
    paragraph_html,
    table_html,
    table_md,
    tau_summary,
)

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions


# ----------------------------------------------------------------- formatting


# ------------------------------------------------------------------- sections


def overview(
    health: SamplerHealth,
    ident: pd.DataFrame,
    decisions: Decisions | None,
    posterior: xr.DataTree,
    *,
    recommended: pd.DataFrame | None = None,
    recommend_note: str = "",
    texts: pd.Series | None = None,
    note: str = "",
) -> Section:
    """The first screen: the verdict, what to forget, what to expose next, how strong the
    evidence is, then the identification counts (:func:`cmp_bayes.reporting.actions.first_screen`).

    ``recommended`` is ``recommend_exposures``' table (its selected rows are the
    next pool); ``recommend_note`` says why there is none.
    """
    from cmp_bayes.reporting.actions import first_screen

    body, md = first_screen(
        decisions,
        health,
        recommended=recommended,
        recommend_note=recommend_note,
        texts=texts,
        note=note,
    )
    counts = ident["status"].value_counts() if len(ident) else pd.Series(dtype=int)
    n = len(ident)
    if n:
        ident_text = (
            f"{n:,} memories: "
            + ", ".join(f"{int(counts.get(s, 0)):,} {s}" for s in STATUSES)
            + ". An unidentified memory's posterior is its prior (the population's, learned "
            "from the other memories): the log cannot say whether it helps, so it is never "
            "forgotten."
        )
        body += "<h3>Identification</h3>" + paragraph_html(ident_text)
        md += f"\n### Identification\n\n{ident_text}\n"
    attrs = posterior.attrs
    meta = {
        "log": attrs.get("log_path", "?"),
        "outcomes": attrs.get("outcome_kind", "?"),
        "created": attrs.get("created_at", "?"),
        "cmp_bayes": attrs.get("cmp_bayes_version", "?"),
        "intervals": f"{CI_PROB:.0%} {CI_KIND.upper()}",
    }
    if attrs.get("log_id"):
        meta["log id"] = attrs["log_id"]  # a live session's log: what decisions are checked against
    lead = (
        "What to do: the sampler verdict (if it fails, act on nothing below), the memories to "
        "forget, the memories to expose next, and how strong the evidence is. The sections "
        "below show where each number comes from."
    )
    body += (
        "<p class='meta'>"
        + " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in meta.items())
        + "</p>"
    )
    md += "\n" + " · ".join(f"{k}: {v}" for k, v in meta.items()) + "\n"
    return Section("overview", "Decision: what to do", lead, body, md)


def sampler_health_section(
    health: SamplerHealth, attempts: list[dict[str, Any]] | None = None
) -> Section:
    """Table of the sampler checks with verdicts and what to do on fail.

    ``attempts`` (the posterior's ``fit_attempts``,
    :func:`cmp_bayes.posterior.contract.fit_attempts`) adds the table of fit's
    retries and which attempt the posterior holds.
    """
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
    from cmp_bayes.reporting.actions import health_headline

    verdict, cls = health_headline(health)  # "PASS with 2 warnings" when the table warns
    body = f"<p class='verdict {cls}'>{html.escape(verdict)}</p>" + table_html(frame)
    md = f"**{verdict}**\n\n" + table_md(frame)
    if attempts:
        note, table = _attempts_table(attempts)
        body += paragraph_html(note) + table_html(table)
        md += f"\n{note}\n\n" + table_md(table)
    lead = (
        "Checks of the hyperparameters (the only parameters NUTS samples; each memory's tau "
        "and rho are drawn exactly given them), from cmp_bayes.posterior.health: the verdict "
        "rests on divergences and R-hat, the same verdict fit and decide give; the other "
        "checks are advisory ('warn'). R-hat gates only the hyperparameters the decision's "
        "estimand depends on (tau: tau_* and weight_*; utility: all of them)."
    )
    return Section("sampler-health", "Sampler health", lead, body, md)


def _attempts_table(attempts: list[dict[str, Any]]) -> tuple[str, pd.DataFrame]:
    """A sentence on fit's retries and one row per attempt."""
    kept = next((a for a in attempts if a.get("kept")), attempts[-1])
    if len(attempts) == 1:
        note = "fit ran one attempt."
    elif kept.get("ok"):
        note = (
            f"fit ran {len(attempts)} attempts; the posterior holds attempt {kept['attempt']}, "
            "the first that passed the sampler checks."
        )
    else:
        note = (
            f"fit ran {len(attempts)} attempts and none passed the sampler checks; the "
            f"posterior holds the last, attempt {kept['attempt']}."
        )
    rows = []
    for a in attempts:
        rh = a.get("max_rhat")
        rows.append(
            {
                "attempt": a["attempt"],
                "seed": a["seed"],
                "target_accept": a["target_accept"],
                "tune": a["tune"],
                "divergences": "n/a" if a.get("divergences") is None else a["divergences"],
                "max R-hat": "n/a" if rh is None else f"{rh:.3f} ({a.get('worst_variable')})",
                "healthy": "yes" if a.get("ok") else "no",
                "seconds": a["seconds"],
                "kept": "yes" if a.get("kept") else "",
            }
        )
    return note, pd.DataFrame(rows)


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
            paragraph_html("No hyperparameters."),
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
    note = ""
    recorded = _recorded_rhat(posterior, hyper)
    if recorded is not None and "r_hat" in frame and frame["parameter"].isin(recorded.index).all():
        # the stored draws are thinned for memory: R-hat on them is noise, the verdict reads the fit's
        frame["r_hat"] = frame["parameter"].map(recorded).to_numpy()
        group = posterior["hyper_diagnostics"]
        note = (
            f"R-hat: the fit's, on its {group.attrs.get('fit_draws')} draws per chain (the posterior "
            f"stores {group.attrs.get('draws')} per chain, thinned to fit its pair variables in memory; "
            "the other columns are computed from the stored draws)."
        )
    # R-hat is read against 1.01: three decimals, not three significant digits
    if "r_hat" in frame:
        frame["r_hat"] = frame["r_hat"].map(lambda v: f"{v:.3f}")
    for col in ("ess_bulk", "ess_tail"):
        if col in frame:
            frame[col] = frame[col].map(lambda v: f"{v:,.0f}" if np.isfinite(v) else "–")
    body, md = table_html(frame), table_md(frame)
    if note:
        body, md = body + paragraph_html(note), md + "\n" + note + "\n"
    return Section("hyperparameters", "Hyperparameters", lead, body, md)


def _recorded_rhat(posterior: xr.DataTree, hyper: list[str]) -> pd.Series | None:
    """The fit's recorded R-hat per element label (``hyper_diagnostics``), while it describes the draws."""
    from cmp_bayes.posterior.hyper_diagnostics import stored_hyper_rhat
    from cmp_bayes.posterior.sampling_checks import element_labels

    ds = posterior["posterior"].to_dataset()[hyper]
    values = stored_hyper_rhat(posterior, ds)
    return None if values is None else pd.Series(values, index=element_labels(ds))


def trace_rank_section(posterior: xr.DataTree, hyper: list[str]) -> Section:
    """Trace + density and rank plots of the hyperparameters."""
    lead = (
        "Trace: chains should overlap like noise around one level (left: each chain's density; "
        "right: its draws). Rank: each chain's line is its rank ECDF minus the uniform one and "
        "should stay near 0; p in each panel is the multi-chain uniformity test (below "
        "alpha = 0.01 the chains disagree, and the points driving it are marked)."
    )
    if not hyper:
        return Section(
            "trace-rank",
            "Trace and rank plots",
            lead,
            paragraph_html("No hyperparameters."),
            "No hyperparameters.\n",
        )
    shown = hyper[: plots.MAX_TRACE_VARS]
    trace = plots.trace_plot(posterior, shown)
    notes = []
    if len(hyper) > len(shown):
        notes.append(
            f"Showing {len(shown)} of {len(hyper)} hyperparameters; all are in the table above."
        )
    if plots.divergences_on_draws(posterior) is None and "sample_stats" in posterior.children:
        notes.append(
            "Divergences not marked on the trace: sample_stats.diverging does not match the "
            "posterior's chains and draws."
        )
    body = figure_html(trace, "Trace and marginal posterior of each hyperparameter")
    images = [trace]
    chains = int(posterior["posterior"].sizes.get("chain", 0))
    if chains >= 2:
        rank = plots.rank_plot(posterior, shown)
        body += figure_html(rank, "Rank plot per chain")
        images.append(rank)
    else:
        # ranks compare chains with each other: one chain has nothing to compare
        notes.append(
            f"Not computed: rank plot: it compares chains and the posterior has {chains}; "
            "fit with two or more chains to check that they agree."
        )
    body += "".join(paragraph_html(n) for n in notes)
    what = "Trace and rank plots" if len(images) == 2 else "Trace plot"
    md = f"{what} of {', '.join(shown)}: see index.html. {' '.join(notes)}\n"
    return Section("trace-rank", "Trace and rank plots", lead, body, md, images)


def forest_section(
    posterior: xr.DataTree, ident: pd.DataFrame, *, threshold: float | None = None
) -> Section:
    """Forest plot of memory-level tau for the most useful and the most harmful memories.

    ``threshold`` (outcome units; the decisions' ``Costs.threshold`` when their
    estimand is tau) is drawn as a dashed line; None draws none.
    """
    var = memory_var(posterior, "tau")
    keep = [c for c in ("memory_id", "text", "status") if c in ident]
    summ = tau_summary(posterior).merge(ident[keep], on="memory_id", how="left")
    if "text" in summ:
        summ.insert(1, "text", summ.pop("text"))  # beside the id, as in every table
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
        f"{CI_PROB:.0%} ({CI_KIND.upper()}); solid line at 0 (no effect)"
        + (
            f", dashed line at the decision threshold {threshold:g} (useful above it)"
            if threshold is not None
            else ""
        )
        + ". Hollow points with dashed or dotted bars are memories the design does not "
        "identify (retrieved-only, unidentified): their interval is not evidence about them."
    )
    status = (
        dict(zip(ident["memory_id"].astype(str), ident["status"].astype(str), strict=True))
        if "status" in ident
        else {}
    )
    uri = plots.forest_plot(
        posterior, var, chosen["memory_id"].tolist(), status=status, threshold=threshold
    )
    frame = chosen.rename(
        columns={
            "tau_mean": "tau mean",
            "tau_lo": f"{CI_PROB:.0%} low",
            "tau_hi": f"{CI_PROB:.0%} high",
        }
    )
    body = figure_html(uri, f"Posterior of {var} for the most useful and most harmful memories")
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
        return Section("identification", "Identification", lead, paragraph_html(msg), msg + "\n")
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
    body = figure_html(scatter, "Retrieved vs exposed count per memory") + table_html(counts)
    body += paragraph_html(
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
        for c in ("memory_id", "text", "retrieved", "exposed", "in_store", "mean_shift", "contraction")
        if c in unid
    ]
    listed = unid[cols].head(MAX_LISTED)
    more = f" (first {MAX_LISTED} of {len(unid):,})" if len(unid) > MAX_LISTED else ""
    body += f"<h3>Unidentified memories{html.escape(more)}</h3>"
    md += f"\n### Unidentified memories{more}\n\n"
    if unid.empty:
        body += paragraph_html("None: every memory was in some context.")
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
            body += figure_html(pp, caption) + paragraph_html(explain)
            md += f"\n{caption} See index.html for the figure. {explain}\n"
        else:
            body += paragraph_html("No prior group in the posterior file: prior vs posterior not shown.")
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


__all__ = [
    "forest_section",
    "hyperparameter_names",
    "hyperparameter_section",
    "identification_section",
    "overview",
    "sampler_health_section",
    "trace_rank_section",
]
