"""The report's posterior predictive checks as PNG data URIs: PAVA calibration of binary
outcomes (arviz_plots) and the fractional outcomes' observed vs replicated means."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from cmp_bayes.constants import CI_PROB
from cmp_bayes.reporting.plots import pyplot, to_data_uri

#: Draws used for the PAVA calibration band (enough for a stable band, cheap).
PPC_DRAWS: int = 200


def exposed_arm(posterior: xr.DataTree) -> tuple[xr.Dataset, xr.Dataset, str] | None:
    """(observed_data, posterior_predictive, name of the exposed success count) or None."""
    if not {"posterior_predictive", "observed_data"} <= set(posterior.children):
        return None
    obs = posterior["observed_data"].to_dataset()
    pp = posterior["posterior_predictive"].to_dataset()
    name = "exposed_outcome_sum"
    if "exposed" not in obs or name not in obs or name not in pp:
        return None
    # a per-query posterior keeps the arms per (memory, query): summed over the
    # other dims they are the memory's exposed trials and successes (a sum of
    # replicated counts is a replicate of the sum)
    obs = obs[["exposed", name]]
    extra = [d for d in obs.dims if d != "memory"]
    if extra:
        obs = obs.sum(extra)
    pp_extra = [d for d in pp[name].dims if d not in ("chain", "draw", "memory")]
    pp = pp[[name]].sum(pp_extra) if pp_extra else pp[[name]]
    if "memory" not in obs.dims or "memory" not in pp[name].dims:
        return None
    return obs, pp, name


def binary_calibration_tree(posterior: xr.DataTree, seed: int = 0) -> xr.DataTree | None:
    """Expand the exposed-arm counts into binary outcomes for a PAVA calibration plot.

    Observed: each memory's ``exposed`` trials with ``exposed_outcome_sum``
    successes become that many 0/1 outcomes. Replicated: in each draw, each of
    those outcomes is 1 with probability ``y_rep / n`` (the draw's replicated
    success share of its memory), so an outcome's predictive mean is the
    memory's predictive success rate. (The exact within-draw sum constraint is
    dropped; it does not change any outcome's predictive probability.)

    Returns
    -------
    xarray.DataTree or None
        Groups ``posterior_predictive`` (``outcome`` over chain, draw, obs) and
        ``observed_data`` (``outcome`` over obs); None when there is nothing to
        check (no exposures, or the groups are missing).
    """
    found = exposed_arm(posterior)
    if found is None:
        return None
    obs, pp, name = found
    n = obs["exposed"].to_numpy().astype(np.int64)
    y = np.rint(obs[name].to_numpy()).astype(np.int64)
    keep = n > 0
    if not keep.any():
        return None
    rep = pp[name].stack(sample=("chain", "draw")).transpose("sample", "memory")
    step = max(1, rep.sizes["sample"] // PPC_DRAWS)
    rep_share = rep.to_numpy()[::step][:, keep] / n[keep]
    idx = np.repeat(np.arange(keep.sum()), n[keep])
    observed = np.concatenate(
        [np.r_[np.ones(k), np.zeros(m - k)] for k, m in zip(y[keep], n[keep], strict=True)]
    ).astype(np.int64)
    rng = np.random.default_rng(seed)
    replicated = (rng.random((rep_share.shape[0], idx.size)) < rep_share[:, idx]).astype(np.int64)
    return xr.DataTree.from_dict(
        {
            "posterior_predictive": xr.Dataset(
                {"outcome": (("chain", "draw", "obs"), replicated[None])}
            ),
            "observed_data": xr.Dataset({"outcome": ("obs", observed)}),
        }
    )


def ppc_binary_plot(tree: xr.DataTree) -> str:
    """:func:`ppc_binary_figure` as a PNG data URI."""
    return to_data_uri(ppc_binary_figure(tree))


#: Axis labels of the PAVA calibration plot (arviz_plots calls the y axis "CEP", the conditional
#: event probability: the observed success rate at each predicted probability).
PPC_XLABEL: str = "predicted success probability (posterior predictive mean)"
PPC_YLABEL: str = "observed success rate (PAVA-calibrated)"


def ppc_binary_figure(tree: xr.DataTree) -> Any:
    """PAVA calibration of the exposed-arm outcomes (arviz_plots.plot_ppc_pava), axes in
    probability units (:data:`PPC_XLABEL`, :data:`PPC_YLABEL`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import arviz_plots

    pyplot()
    pc = arviz_plots.plot_ppc_pava(
        tree,
        var_names=["outcome"],
        data_type="binary",
        ci_prob=CI_PROB,
        backend="matplotlib",
        figure_kwargs={"figsize": (5.5, 4.5)},
    )
    fig = pc.get_viz("figure")
    for ax in fig.axes:
        if ax.get_visible() and ax.has_data():
            ax.set_xlabel(PPC_XLABEL)
            ax.set_ylabel(PPC_YLABEL)
            ax.set_title(f"Exposed-arm outcomes: calibration, {CI_PROB:.0%} band")
    return fig


def ppc_fractional_plot(posterior: xr.DataTree) -> str | None:
    """Observed vs predicted exposed-arm mean per memory, with CI_PROB predictive intervals."""
    found = exposed_arm(posterior)
    if found is None:
        return None
    obs, pp, name = found
    n = obs["exposed"].to_numpy().astype(float)
    keep = n > 0
    if not keep.any():
        return None
    plt = pyplot()
    rep = pp[name].stack(sample=("chain", "draw")).transpose("memory", "sample")
    share = rep.to_numpy()[keep] / n[keep, None]
    lo, hi = np.quantile(share, [(1 - CI_PROB) / 2, (1 + CI_PROB) / 2], axis=1)
    mean = share.mean(axis=1)
    observed = obs[name].to_numpy()[keep] / n[keep]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.errorbar(mean, observed, xerr=[mean - lo, hi - mean], fmt="o", ms=3, alpha=0.5, lw=0.6)
    ax.plot([0, 1], [0, 1], ls="--", color="grey")
    ax.set_xlabel("predicted exposed-arm mean outcome (outcome scale, 0 to 1)")
    ax.set_ylabel("observed exposed-arm mean outcome (0 to 1)")
    ax.set_title(f"Posterior predictive check ({CI_PROB:.0%} intervals)")
    return to_data_uri(fig)
