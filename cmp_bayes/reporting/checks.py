"""The report's model checks: posterior predictive coverage and LOO."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import CI_PROB
from cmp_bayes.reporting import ppc_plots
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
        tree = ppc_plots.binary_calibration_tree(posterior)
        uri = ppc_plots.ppc_binary_plot(tree) if tree is not None else None
    else:
        lead = "Observed vs predicted exposed-arm mean outcome per memory (fractional outcomes)."
        uri = ppc_plots.ppc_fractional_plot(posterior)
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
    if ppc_plots.exposed_arm(posterior) is None:
        return "the predictive groups hold no exposed-arm success counts (exposed_outcome_sum)."
    return "no memory has exposed-arm outcomes (none was ever exposed at random)."


def predictive_coverage(posterior: xr.DataTree) -> tuple[float, int] | None:
    """Share of memories with exposures whose observed exposed successes lie in the CI_PROB
    posterior predictive interval, and the number of such memories."""
    found = ppc_plots.exposed_arm(posterior)
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


#: Pareto k above which PSIS-LOO's estimate for an observation is unreliable (Vehtari et
#: al. 2024; ArviZ's ``good_k`` is this or lower for fewer than 2,200 draws).
PARETO_K_BAD: float = 0.7

#: What the report tells a user who wants to compare model variants on their log.
COMPARE_HOW: str = (
    "To compare model variants on this log, fit it again with another ModelConfig (for example "
    "effect_bound='clip' instead of 'truncate', another null_sd prior, or another grid_size) "
    "and run `cmp-bayes compare A.nc B.nc` (Python: "
    "cmp_bayes.reporting.checks.compare_posteriors({'a': tree_a, 'b': tree_b})): the fits are "
    "ranked by elpd_loo on the same exposed memories."
)


def loo_section(posterior: xr.DataTree) -> Section:
    """PSIS-LOO of each log-likelihood variable, compared when there are two or more.

    A memory-level fit writes one variable, ``tau_obs``: each exposed memory's
    marginal log-likelihood per draw (tau integrated out on the grid), so LOO
    leaves one memory's exposed-arm data out at a time. Variants of the model are
    compared across posteriors with :func:`compare_posteriors`; several variables
    in one group (written by hand) are compared here.
    """
    lead = (
        "Leave-one-out predictive accuracy (PSIS-LOO): how well the model predicts each exposed "
        "memory's outcomes from the other memories' data (elpd_loo, higher is better)."
    )
    if "log_likelihood" not in posterior.children:
        msg = (
            "Not computed: the posterior has no log_likelihood group (per-query fits, posteriors "
            "saved without it and those of older cmp_bayes versions store no pointwise "
            "log-likelihood)."
        )
        return Section("loo", "LOO model comparison", lead, paragraph_html(msg), msg + "\n")
    ll = posterior["log_likelihood"].to_dataset()
    results: dict[str, Any] = {}
    errors: list[str] = []
    for name in ll.data_vars:
        try:
            results[str(name)] = _loo(loo_tree(posterior, str(name)), str(name))
        except Exception as exc:  # noqa: BLE001 - a LOO failure is reported, not fatal
            errors.append(f"{name}: {' '.join(str(exc).split()) or type(exc).__name__}")
    frame = pd.DataFrame([loo_row(k, v) for k, v in results.items()])
    body = table_html(frame) if len(frame) else ""
    md = table_md(frame) if len(frame) else ""
    if len(frame):
        text = pareto_text(frame)
        body += paragraph_html(text)
        md += "\n" + text + "\n"
    if len(results) >= 2:
        try:
            cmp = _compare(results)
            body += table_html(cmp)
            md += "\n" + table_md(cmp)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"compare: {exc}")
    elif results:
        msg = "Only one model's log-likelihood is stored: no comparison. " + COMPARE_HOW
        body += paragraph_html(msg)
        md += msg + "\n"
    for e in errors:
        body += paragraph_html("Not computed: " + e)
        md += f"Not computed: {e}\n"
    return Section("loo", "LOO model comparison", lead, body, md)


def loo_tree(posterior: xr.DataTree, name: str) -> xr.DataTree:
    """The tree ``arviz_stats.loo`` reads: the hyperparameters and one log-likelihood variable.

    The relative efficiency of the draws (``reff``) is taken from the sampled
    hyperparameters, the chain the log-likelihood is a function of; the
    per-memory tau and rho are recovered afresh at every draw, so their ESS says
    nothing about it (and costs a pass over every memory). A posterior without
    hyperparameters (a synthetic one) keeps all its variables.
    """
    post = posterior["posterior"].to_dataset()
    hyper = [v for v in post.data_vars if "memory" not in post[v].dims]
    if hyper:
        post = post[hyper]
        post = post.drop_vars([c for c in ("memory", "query") if c in post.coords])
    return xr.DataTree.from_dict(
        {"posterior": post, "log_likelihood": posterior["log_likelihood"].to_dataset()[[name]]}
    )


def _loo(tree: xr.DataTree, name: str) -> Any:
    """Pointwise PSIS-LOO (ELPDData) of variable ``name``."""
    import arviz_stats

    with warnings.catch_warnings():
        # the Pareto k warning is reported in the table, not as a warning
        warnings.simplefilter("ignore")
        return arviz_stats.loo(tree, var_name=name, pointwise=True)


def _compare(results: dict[str, Any]) -> pd.DataFrame:
    """``arviz_stats.compare`` of pointwise LOO results (ELPDData), best first."""
    import arviz_stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = arviz_stats.compare(results)
    return cmp.reset_index().rename(columns={"index": "model"})


def loo_row(name: str, result: Any) -> dict[str, Any]:
    """One row of the LOO table: elpd_loo, its se, p_loo, observations and Pareto k counts."""
    k = np.asarray(result.pareto_k).reshape(-1)
    return {
        "model": name,
        "elpd_loo": float(result.elpd),
        "se": float(result.se),
        "p_loo": float(result.p),
        "memories": int(result.n_data_points),
        f"k > {PARETO_K_BAD}": int(np.sum(k > PARETO_K_BAD)),
        "k_max": float(np.nanmax(k)) if k.size else float("nan"),
    }


def pareto_text(frame: pd.DataFrame) -> str:
    """What the Pareto k column means for these results."""
    col = f"k > {PARETO_K_BAD}"
    bad = int(frame[col].max())
    base = (
        f"Pareto k > {PARETO_K_BAD} marks a memory whose own data move the hyperparameters so much "
        "that importance sampling cannot remove it from the posterior reliably: its elpd term is "
        "then biased (optimistic)."
    )
    if bad == 0:
        return base + " No memory is above it: the elpd_loo values are reliable."
    return base + (
        f" Here up to {bad} memories are above it: read elpd_loo differences smaller than a few "
        "se with care, or refit with more draws (SamplerConfig.draws / keep_draws)."
    )


def compare_posteriors(posteriors: Mapping[str, xr.DataTree | str | Path]) -> pd.DataFrame:
    """Rank fits of the same log by PSIS-LOO (``arviz_stats.compare`` on ``tau_obs``).

    Parameters
    ----------
    posteriors : mapping name -> DataTree or posterior file
        Two or more fits of the same log (e.g. ModelConfig variants), each with
        a ``log_likelihood`` group.

    Returns
    -------
    pandas.DataFrame
        One row per fit, best first: ``model`` (the name), ``rank``, ``elpd``
        (elpd_loo, log units summed over exposed memories), ``p``, ``elpd_diff``
        and its ``dse`` against the best, ``weight`` (stacking), ``se``,
        ``p_worse``, ArviZ's ``diag_diff`` / ``diag_elpd``, and our
        ``memories`` and ``k > 0.7`` (see :func:`loo_row`).

    Raises
    ------
    ConfigError
        Fewer than two posteriors.
    PosteriorError
        A posterior without the ``log_likelihood`` group, or fits whose exposed
        memories (or log checksums) differ: LOO compares predictions of the same
        observations only.
    """
    from cmp_bayes.errors import ConfigError, PosteriorError
    from cmp_bayes.posterior.contract import LOG_LIKELIHOOD_VAR
    from cmp_bayes.posterior.io import as_posterior

    if len(posteriors) < 2:
        raise ConfigError(f"compare needs at least two posteriors, got {len(posteriors)}")
    trees = {str(k): as_posterior(v) for k, v in posteriors.items()}
    order: np.ndarray | None = None
    checksum = ""
    first = ""
    out: dict[str, xr.DataTree] = {}
    for name, tree in trees.items():
        if "log_likelihood" not in tree.children or LOG_LIKELIHOOD_VAR not in tree["log_likelihood"].data_vars:
            raise PosteriorError(
                f"{name}: no log_likelihood group with {LOG_LIKELIHOOD_VAR!r} (refit it with this "
                "cmp_bayes, memory-level, and save it without dropping the group)"
            )
        ids = np.asarray(tree["log_likelihood"]["memory"].values).astype(str)
        sums = str(tree.attrs.get("log_checksum", "") or "")
        if order is None:
            order, checksum, first = ids, sums, name
        else:
            if sums and checksum and sums != checksum:
                raise PosteriorError(f"{name} and {first} are fits of different logs (log_checksum differs)")
            if set(ids) != set(order):
                raise PosteriorError(
                    f"{name} and {first} have different exposed memories ({ids.size} and {order.size}): "
                    "LOO compares fits of the same log only"
                )
        aligned = tree.copy()
        # compare pairs the pointwise terms by position: the same memory order in every fit
        aligned["log_likelihood"] = xr.DataTree(_reorder(tree["log_likelihood"].to_dataset(), order))
        out[name] = _loo(loo_tree(aligned, LOG_LIKELIHOOD_VAR), LOG_LIKELIHOOD_VAR)
    cmp = _compare(out)
    extra = pd.DataFrame([loo_row(k, v) for k, v in out.items()])
    extra = extra[["model", "memories", f"k > {PARETO_K_BAD}"]]
    return cmp.merge(extra, on="model", how="left")


def _reorder(ds: xr.Dataset, order: np.ndarray) -> xr.Dataset:
    """``ds`` with its memories in ``order`` (the same ids, maybe another order)."""
    ids = np.asarray(ds["memory"].values).astype(str)
    pos = {m: i for i, m in enumerate(ids)}
    return ds.isel(memory=[pos[m] for m in order])
