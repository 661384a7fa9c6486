"""The report's figures, each returned as a PNG data URI (self-contained HTML).

arviz_plots draws what it has a plot for (trace, rank, forest, prior vs
posterior, PAVA calibration); matplotlib draws the rest (the retrieved vs
exposed scatter, the fractional-outcome calibration). Everything uses the Agg
backend and is closed after encoding, so a report never leaks figures.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np
import xarray as xr

from cmp_bayes.constants import CI_KIND, CI_PROB, IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED

#: Most variables a trace / rank figure shows (one row each).
MAX_TRACE_VARS: int = 8
#: Most memories in the prior-vs-posterior figure.
MAX_PRIOR_POSTERIOR: int = 6
#: Draws used for the PAVA calibration band (enough for a stable band, cheap).
PPC_DRAWS: int = 200

_STATUS_COLORS: dict[str, str] = {
    IDENTIFIED: "#1b7837",
    RETRIEVED_ONLY: "#e08214",
    UNIDENTIFIED: "#b2182b",
}


def _mpl() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_data_uri(figure: Any, dpi: int = 90) -> str:
    """Encode a matplotlib Figure or an arviz_plots PlotCollection as a PNG data URI.

    The figure is closed afterwards.
    """
    plt = _mpl()
    fig = figure.get_viz("figure") if hasattr(figure, "get_viz") else figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def trace_plot(posterior: xr.DataTree, var_names: list[str]) -> str:
    """Trace and marginal density of each hyperparameter (arviz_plots.plot_trace_dist).

    The divergence rug is drawn from :func:`divergences_on_draws`, so a
    posterior thinned after sampling (``sample_stats`` keeps every draw) still
    shows where its divergences were; without a usable record the rug is left out.
    """
    import arviz_plots

    _mpl()
    names = var_names[:MAX_TRACE_VARS]
    groups = {"posterior": posterior["posterior"].to_dataset()[names]}
    diverging = divergences_on_draws(posterior)
    if diverging is not None:
        groups["sample_stats"] = xr.Dataset({"diverging": diverging})
    pc = arviz_plots.plot_trace_dist(
        xr.DataTree.from_dict(groups), var_names=names, backend="matplotlib", compact=True
    )
    return to_data_uri(pc)


def divergences_on_draws(posterior: xr.DataTree) -> xr.DataArray | None:
    """``sample_stats.diverging`` on the posterior's own (chain, draw) grid.

    ``fit`` thins the posterior (``thin_step``) but keeps every sampler draw in
    ``sample_stats`` so that no divergence is lost; the two then differ in
    length and arviz_plots cannot mask one with the other. A kept draw stands
    for the sampler draws from it up to the next kept one, and is marked
    divergent when any of them diverged. Matched by the ``draw`` coordinate
    when the posterior's draws are among the sampler's, else by position when
    the lengths divide evenly.

    Returns
    -------
    xarray.DataArray or None
        Boolean over (chain, draw) with the posterior's coordinates; None when
        there is no ``sample_stats.diverging`` or it cannot be matched (other
        chains, lengths that do not divide).
    """
    if "sample_stats" not in posterior.children:
        return None
    stats = posterior["sample_stats"].to_dataset()
    if "diverging" not in stats:
        return None
    div = stats["diverging"]
    post = posterior["posterior"].to_dataset()
    if set(div.dims) != {"chain", "draw"} or post.sizes.get("chain") != div.sizes["chain"]:
        return None
    div = div.transpose("chain", "draw")
    n_post, n_all = int(post.sizes.get("draw", 0)), int(div.sizes["draw"])
    if n_post == 0:
        return None
    flags = np.asarray(div.to_numpy(), dtype=bool)
    kept = np.asarray(post["draw"].to_numpy()) if "draw" in post.coords else np.arange(n_post)
    every = np.asarray(div["draw"].to_numpy()) if "draw" in div.coords else np.arange(n_all)
    if n_post == n_all:
        out = flags
    elif np.isin(kept, every).all() and np.all(np.diff(kept) > 0):
        # sampler draw -> the last kept draw at or before it (draws before the first: the first)
        block = np.clip(np.searchsorted(kept, every, side="right") - 1, 0, n_post - 1)
        out = np.zeros((flags.shape[0], n_post), dtype=bool)
        for c in range(flags.shape[0]):
            np.logical_or.at(out[c], block, flags[c])
    elif n_all % n_post == 0:
        out = flags.reshape(flags.shape[0], n_post, n_all // n_post).any(axis=2)
    else:
        return None
    return xr.DataArray(
        out, dims=("chain", "draw"), coords={"chain": post["chain"], "draw": post["draw"]}
    )


def rank_plot(posterior: xr.DataTree, var_names: list[str]) -> str:
    """Fractional rank ECDF per chain (arviz_plots.plot_rank): flat means chains agree."""
    import arviz_plots

    _mpl()
    names = var_names[:MAX_TRACE_VARS]
    panels = sum(_panels(posterior, n) for n in names)
    rows = math.ceil(panels / 3)
    pc = arviz_plots.plot_rank(
        posterior,
        var_names=names,
        backend="matplotlib",
        col_wrap=3,
        # room for two-line titles (variable and coordinate)
        figure_kwargs={"figsize": (11, 2.9 * rows), "layout": "constrained"},
    )
    return to_data_uri(pc)


def _panels(posterior: xr.DataTree, name: str) -> int:
    da = posterior["posterior"][name]
    return int(np.prod([da.sizes[d] for d in da.dims if d not in ("chain", "draw")], dtype=int))


def forest_plot(posterior: xr.DataTree, var: str, memories: list[str]) -> str:
    """Forest plot of ``var`` for the listed memories, in the order given.

    Intervals: 50% and CI_PROB (CI_KIND), point estimate the posterior mean.
    """
    import arviz_plots

    _mpl()
    sub = posterior["posterior"].to_dataset()[[var]].sel(memory=memories)
    tree = xr.DataTree.from_dict({"posterior": sub})
    pc = arviz_plots.plot_forest(
        tree,
        var_names=[var],
        combined=True,
        point_estimate="mean",
        ci_kind=CI_KIND,
        ci_probs=[0.5, CI_PROB],
        backend="matplotlib",
        figure_kwargs={"figsize": (9, 0.32 * len(memories) + 1.2)},
    )
    return to_data_uri(pc)


def prior_posterior_plot(posterior: xr.DataTree, var: str, memories: list[str]) -> str:
    """Prior and posterior density of ``var`` for each listed memory, overlaid.

    Identical curves (up to Monte Carlo noise) mean the data taught nothing.
    """
    import arviz_plots

    _mpl()
    memories = memories[:MAX_PRIOR_POSTERIOR]
    groups = {
        g: posterior[g].to_dataset()[[var]].sel(memory=memories) for g in ("prior", "posterior")
    }
    tree = xr.DataTree.from_dict(groups)
    rows = math.ceil(len(memories) / 3)
    pc = arviz_plots.plot_prior_posterior(
        tree,
        var_names=[var],
        backend="matplotlib",
        col_wrap=3,
        figure_kwargs={"figsize": (11, 2.9 * rows), "layout": "constrained"},
    )
    return to_data_uri(pc)


def identification_scatter(ident: xr.Dataset) -> str:
    """Retrieved vs exposed count per memory, coloured by identification status.

    Axes are symlog so zero counts (the whole point) stay visible; points get a
    small vertical jitter so the many memories at the same count stay countable.
    """
    plt = _mpl()
    rng = np.random.default_rng(0)
    retrieved = ident["retrieved"].to_numpy().astype(float)
    exposed = ident["exposed"].to_numpy().astype(float)
    status = ident["status"].to_numpy().astype(str)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s, color in _STATUS_COLORS.items():
        mask = status == s
        if not mask.any():
            continue
        jitter = rng.uniform(-0.15, 0.15, mask.sum())
        ax.scatter(
            retrieved[mask] * np.exp(jitter),
            exposed[mask] + jitter,
            s=14,
            alpha=0.6,
            color=color,
            label=f"{s} ({int(mask.sum())})",
            edgecolors="none",
        )
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("symlog", linthresh=1)
    ax.set_yscale("symlog", linthresh=1)
    # plain 0, 1, 10 ticks: counts, not powers
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("times retrieved by the retriever")
    ax.set_ylabel("times exposed (randomized)")
    ax.set_title("Where each memory's evidence comes from")
    ax.legend(frameon=False, loc="best")
    ax.grid(alpha=0.3)
    return to_data_uri(fig)


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
    """PAVA calibration of the exposed-arm outcomes (arviz_plots.plot_ppc_pava)."""
    import arviz_plots

    _mpl()
    pc = arviz_plots.plot_ppc_pava(
        tree,
        var_names=["outcome"],
        data_type="binary",
        ci_prob=CI_PROB,
        backend="matplotlib",
        figure_kwargs={"figsize": (5.5, 4.5)},
    )
    return to_data_uri(pc)


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
    plt = _mpl()
    rep = pp[name].stack(sample=("chain", "draw")).transpose("memory", "sample")
    share = rep.to_numpy()[keep] / n[keep, None]
    lo, hi = np.quantile(share, [(1 - CI_PROB) / 2, (1 + CI_PROB) / 2], axis=1)
    mean = share.mean(axis=1)
    observed = obs[name].to_numpy()[keep] / n[keep]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.errorbar(mean, observed, xerr=[mean - lo, hi - mean], fmt="o", ms=3, alpha=0.5, lw=0.6)
    ax.plot([0, 1], [0, 1], ls="--", color="grey")
    ax.set_xlabel("predicted exposed-arm mean outcome")
    ax.set_ylabel("observed exposed-arm mean outcome")
    ax.set_title(f"Posterior predictive check ({CI_PROB:.0%} intervals)")
    return to_data_uri(fig)
