"""The report's model checks: posterior predictive coverage and LOO."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
import xarray as xr

from cmp_bayes.constants import CI_PROB
from cmp_bayes.reporting import plots
from cmp_bayes.reporting.blocks import Section, figure_html, paragraph_html, table_html, table_md


def ppc_section(posterior: xr.DataTree) -> Section:
    """Posterior predictive check of the exposed-arm outcomes."""
    kind = str(posterior.attrs.get("outcome_kind", "binary"))
    coverage = predictive_coverage(posterior)
    cov_text = (
        f"{coverage[0]:.0%} of the {coverage[1]:,} memories with exposures have their observed "
        f"exposed-arm successes inside the {CI_PROB:.0%} posterior predictive interval "
        f"(expect at least {CI_PROB:.0%}; counts are discrete, so more is normal)."
        if coverage
        else "Not computed: " + _no_check_reason(posterior)
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
        body += figure_html(uri, "Posterior predictive check of the exposed-arm outcomes")
    else:
        body += paragraph_html("Figure not computed: " + _no_check_reason(posterior))
    body += paragraph_html(cov_text)
    md = cov_text + "\n"
    return Section("ppc", "Posterior predictive check", lead, body, md, images)


def _no_check_reason(posterior: xr.DataTree) -> str:
    """Why there is nothing to check: missing groups, or no memory was ever exposed."""
    missing = [g for g in ("posterior_predictive", "observed_data") if g not in posterior.children]
    if missing:
        return f"the posterior has no {' / '.join(missing)} group."
    if plots.exposed_arm(posterior) is None:
        return "the predictive groups hold no exposed-arm success counts (exposed_outcome_sum)."
    return "no memory has exposed-arm outcomes (none was ever exposed at random)."


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
        return Section("loo", "LOO model comparison", lead, paragraph_html(msg), msg + "\n")
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
        body += paragraph_html(msg)
        md += msg + "\n"
    for e in errors:
        body += paragraph_html("Not computed: " + e)
        md += f"Not computed: {e}\n"
    return Section("loo", "LOO model comparison", lead, body, md)
