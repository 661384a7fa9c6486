"""The report's figures, each returned as a PNG data URI (self-contained HTML).

arviz_plots draws what it has a plot for (trace, rank, forest, prior vs
posterior); matplotlib draws the rest (the forest with its decision lines, the
retrieved vs exposed scatter). The posterior predictive checks are in
:mod:`cmp_bayes.reporting.ppc_plots`. Everything uses the Agg
backend and is closed after encoding, so a report never leaks figures.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import xarray as xr

from cmp_bayes.constants import CI_KIND, CI_PROB, IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED

#: Most variables a trace / rank figure shows (one row each).
MAX_TRACE_VARS: int = 8
#: Most memories in the prior-vs-posterior figure.
MAX_PRIOR_POSTERIOR: int = 6

_STATUS_COLORS: dict[str, str] = {
    IDENTIFIED: "#1b7837",
    RETRIEVED_ONLY: "#e08214",
    UNIDENTIFIED: "#b2182b",
}


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_data_uri(figure: Any, dpi: int = 90) -> str:
    """Encode a matplotlib Figure or an arviz_plots PlotCollection as a PNG data URI.

    The figure is closed afterwards.
    """
    plt = pyplot()
    fig = figure.get_viz("figure") if hasattr(figure, "get_viz") else figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def trace_plot(posterior: xr.DataTree, var_names: list[str]) -> str:
    """:func:`trace_figure` as a PNG data URI."""
    return to_data_uri(trace_figure(posterior, var_names))


def trace_figure(posterior: xr.DataTree, var_names: list[str]) -> Any:
    """Trace and marginal density of each hyperparameter (arviz_plots.plot_trace_dist).

    Every panel names its variable and unit (:func:`hyper_unit`): the density
    panels' x axis and the trace panels' y axis; the trace's x axis is the draw
    index. The divergence rug is drawn from :func:`divergences_on_draws`, so a
    posterior thinned after sampling (``sample_stats`` keeps every draw) still
    shows where its divergences were; without a usable record the rug is left out.

    Returns
    -------
    matplotlib.figure.Figure
        One row per variable: density (left), trace (right).
    """
    import arviz_plots

    pyplot()
    names = var_names[:MAX_TRACE_VARS]
    groups = {"posterior": posterior["posterior"].to_dataset()[names]}
    diverging = divergences_on_draws(posterior)
    if diverging is not None:
        groups["sample_stats"] = xr.Dataset({"diverging": diverging})
    pc = arviz_plots.plot_trace_dist(
        xr.DataTree.from_dict(groups),
        var_names=names,
        backend="matplotlib",
        compact=True,
        # room for an x label under every density panel
        figure_kwargs={"figsize": (11, 2.0 * len(names) + 0.6), "layout": "constrained"},
    )
    fig = pc.get_viz("figure")
    for name in names:
        unit = hyper_unit(name)
        axes = pc.viz["plot"][name]
        dist, trace = axes.sel(column="dist").item(), axes.sel(column="trace").item()
        dist.set_xlabel(f"{name} ({unit})", visible=True)
        dist.xaxis.label.set_visible(True)
        dist.set_ylabel("density")
        trace.set_ylabel(f"{name}\n({hyper_unit(name, short=True)})", fontsize=8)
        trace.set_xlabel("draw (per chain)")
        trace.xaxis.label.set_visible(True)
    return fig


#: Unit of a hyperparameter, by name prefix (the model's parametrization, cmp_bayes.model.build),
#: in full and short (for the narrow trace axes).
_HYPER_UNITS: tuple[tuple[str, str, str], ...] = (
    ("tau_", "success-probability change", "prob. change"),
    ("weight_", "log-odds", "log-odds"),
    ("rho_kappa", "concentration, unitless", "unitless"),
    ("rho_", "log-odds", "log-odds"),
)


def hyper_unit(name: str, *, short: bool = False) -> str:
    """The unit a hyperparameter is measured in, for axis labels ("value" when unknown)."""
    for prefix, unit, brief in _HYPER_UNITS:
        if name.startswith(prefix):
            return brief if short else unit
    return "value"


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
    """:func:`rank_figure` as a PNG data URI."""
    return to_data_uri(rank_figure(posterior, var_names))


def rank_figure(posterior: xr.DataTree, var_names: list[str]) -> Any:
    """Fractional rank Delta-ECDF per chain (arviz_plots.plot_rank, multi-chain test).

    Each chain's line is its ECDF of fractional ranks minus the uniform ECDF:
    near 0 when chains agree. arviz_plots' default method draws no envelope;
    it prints the p-value of the multi-chain uniformity test in each panel and
    marks the points that drive a small one. Both axes are labelled.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import arviz_plots

    pyplot()
    names = var_names[:MAX_TRACE_VARS]
    panels = sum(_panels(posterior, n) for n in names)
    rows = math.ceil(panels / 3)
    pc = arviz_plots.plot_rank(
        posterior,
        var_names=names,
        backend="matplotlib",
        col_wrap=3,
        visuals={"remove_axis": False},  # keep the y axis: it is labelled below
        # room for two-line titles (variable and coordinate)
        figure_kwargs={"figsize": (11, 3.1 * rows), "layout": "constrained"},
    )
    fig = pc.get_viz("figure")
    for ax in fig.axes:
        if ax.get_visible() and ax.has_data():
            ax.set_xlabel("fractional rank (0 to 1, all chains pooled)")
            ax.set_ylabel("ECDF − uniform")
            ax.axhline(0.0, color="grey", lw=0.6, ls=":")
    return fig


def _panels(posterior: xr.DataTree, name: str) -> int:
    da = posterior["posterior"][name]
    return int(np.prod([da.sizes[d] for d in da.dims if d not in ("chain", "draw")], dtype=int))


def forest_plot(
    posterior: xr.DataTree,
    var: str,
    memories: list[str],
    *,
    status: Mapping[str, str] | None = None,
    threshold: float | None = None,
) -> str:
    """:func:`forest_figure` as a PNG data URI."""
    return to_data_uri(forest_figure(posterior, var, memories, status=status, threshold=threshold))


#: How each identification status is drawn in the forest plot: marker face, line style and the
#: legend's words (what the estimate rests on).
_FOREST_STYLE: dict[str, tuple[Literal["full", "none"], str, str]] = {
    IDENTIFIED: ("full", "-", "identified: exposed at random"),
    RETRIEVED_ONLY: ("none", "--", "retrieved-only: valid only if retrieval is ignorable"),
    UNIDENTIFIED: ("none", ":", "unidentified: posterior = prior"),
}

#: x-axis label of a memory-level estimand, by variable (``_memory`` suffix dropped).
ESTIMAND_AXIS: dict[str, str] = {
    "tau": "tau: change in success probability when the memory is in the context",
    "utility": "utility = rho x tau: expected change in success probability",
}


def forest_figure(
    posterior: xr.DataTree,
    var: str,
    memories: list[str],
    *,
    status: Mapping[str, str] | None = None,
    threshold: float | None = None,
) -> Any:
    """Forest plot of ``var`` for the listed memories, first at the top.

    Point: posterior mean; thick bar: central 50% interval; thin bar: CI_PROB
    (CI_KIND) interval, in outcome units (a change in the success probability).
    A solid vertical line marks 0 (no effect) and a dashed one ``threshold``
    (a memory is useful above it, ``Costs.threshold``). ``status`` (memory id
    -> identification status) draws identified memories filled and solid,
    retrieved-only and unidentified ones hollow with dashed / dotted bars, in
    their status colour, with a legend saying what each rests on.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = pyplot()
    from matplotlib.lines import Line2D

    da = posterior["posterior"][var].sel(memory=memories)
    qs = [(1 - CI_PROB) / 2, 0.25, 0.75, (1 + CI_PROB) / 2]
    q = da.quantile(qs, dim=("chain", "draw")).transpose("quantile", "memory").to_numpy()
    mean = da.mean(("chain", "draw")).to_numpy()
    status = status or {}
    n = len(memories)
    fig, ax = plt.subplots(figsize=(9, 0.3 * n + 1.6))
    y = np.arange(n)[::-1]  # first memory at the top
    seen: list[str] = []
    for i, mem in enumerate(memories):
        st = status.get(mem, IDENTIFIED)
        face, ls, _ = _FOREST_STYLE.get(st, _FOREST_STYLE[IDENTIFIED])
        color = _STATUS_COLORS.get(st, _STATUS_COLORS[IDENTIFIED])
        ax.plot([q[0, i], q[3, i]], [y[i], y[i]], color=color, lw=1.0, ls=ls)
        ax.plot([q[1, i], q[2, i]], [y[i], y[i]], color=color, lw=3.2, ls=ls, solid_capstyle="butt")
        ax.plot(mean[i], y[i], "o", ms=5.5, color=color, fillstyle=face)
        if st not in seen:
            seen.append(st)
    ax.axvline(0.0, color="#444444", lw=1.0, label="0: no effect")
    if threshold is not None:
        ax.axvline(threshold, color="#8250df", lw=1.2, ls="--", label=f"decision threshold {threshold:g}")
    ax.set_yticks(y, memories)
    ax.set_ylim(-0.8, n - 0.2)
    base = var.removesuffix("_memory")
    ax.set_xlabel(ESTIMAND_AXIS.get(base, base) + " (outcome units)")
    ax.set_ylabel("memory id")
    ax.grid(axis="x", alpha=0.3)
    handles = [
        Line2D(
            [], [], color=_STATUS_COLORS[st], ls=_FOREST_STYLE[st][1], marker="o",
            fillstyle=_FOREST_STYLE[st][0], label=_FOREST_STYLE[st][2],
        )
        for st in (IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED)
        if st in seen
    ]
    lines, _ = ax.get_legend_handles_labels()
    ax.legend(
        handles=handles + lines, loc="upper center", bbox_to_anchor=(0.5, -0.8 / (0.3 * n + 1.6)),
        ncol=2, frameon=False, fontsize=8,
    )
    ax.set_title(f"point: mean · thick: 50% · thin: {CI_PROB:.0%} {CI_KIND.upper()}", fontsize=9)
    return fig


def prior_posterior_plot(posterior: xr.DataTree, var: str, memories: list[str]) -> str:
    """Prior and posterior density of ``var`` for each listed memory, overlaid.

    Identical curves (up to Monte Carlo noise) mean the data taught nothing.
    """
    import arviz_plots

    pyplot()
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
    fig = pc.get_viz("figure")
    base = var.removesuffix("_memory")
    for ax in fig.axes:
        if ax.get_visible() and ax.has_data():
            ax.set_xlabel(f"{base} (success-probability change)")
            ax.set_ylabel("density")
    return to_data_uri(fig)


def identification_scatter(ident: xr.Dataset) -> str:
    """Retrieved vs exposed count per memory, coloured by identification status.

    Axes are symlog so zero counts (the whole point) stay visible; points get a
    small vertical jitter so the many memories at the same count stay countable.
    """
    plt = pyplot()
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
    ax.set_xlabel("times retrieved by the retriever (steps, symlog)")
    ax.set_ylabel("times exposed at random (steps, symlog)")
    ax.set_title("Where each memory's evidence comes from")
    ax.legend(frameon=False, loc="best")
    ax.grid(alpha=0.3)
    return to_data_uri(fig)
