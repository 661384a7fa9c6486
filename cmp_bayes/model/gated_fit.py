"""Fit the gated pair model and assemble its posterior DataTree (the gated form of the contract).

Groups: ``posterior`` and ``prior`` (hyperparameters; per pair ``tau``, ``rho``,
``utility``, ``p_relevant`` over (chain, draw, pair) with ``memory_id`` and
``query_id`` coordinates along ``pair``; per memory ``tau_relevant``,
``p_relevant_any``, ``tau_memory``, ``rho_memory``, ``utility_memory``),
``observed_data`` per pair, ``sample_stats``, ``identification`` per memory
(the design's status as for every fit; moments of ``tau_relevant``; ``p_relevant_max``, the
best pair's P(z = 1 | data)),
``pair_identification`` per pair, ``memory_diagnostics`` (each memory's R-hat), and
``hyper_diagnostics`` when the stored draws are thinned below the fit's (the
hyperparameters' R-hat on every draw the fit judged; then the memories' R-hats are
those of their conditional means over every judged draw,
:func:`cmp_bayes.posterior.memory_diagnostics.judged_memory_diagnostics`). Root attribute ``pair_model = "gated"``,
``by = "query"``. No pointwise log-likelihood and no predictive groups.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.model.gated_recover import GatedRecovered
from cmp_bayes.posterior.contract import TAU_RELEVANT_GRID

if TYPE_CHECKING:
    from cmp_bayes.model.gated import GatedData

#: Most (draw x pair) values one stored pair variable may hold (float32: 200 MB). A shared store
#: has about a million pairs (LoCoMo's ten conversations: 1,193,302), so above about 50,000 pairs
#: the stored draws are thinned further; the exact per-pair means in ``pair_identification``
#: (``tau_mean``, ``p_relevant_mean``) and the memory-level moments still use every draw.
PAIR_DRAW_CELLS: int = 50_000_000
#: Per-pair variables of the gated posterior.
PAIR_VARS: tuple[str, ...] = ("tau", "rho", "utility", "p_relevant")
#: Per-memory variables of the gated posterior.
MEMORY_VARS: tuple[str, ...] = ("tau_relevant", "p_relevant_any", "tau_memory", "rho_memory", "utility_memory")

_DESCRIPTIONS: dict[str, str] = {
    "tau": "pair effect z(m, q) * delta_m: change in expected outcome of query q when m is in context",
    "rho": "retrievability for the query: P(retrieved | in store, query)",
    "utility": "rho * tau per pair",
    "p_relevant": "P(z(m, q) = 1 | hyperparameters of the draw, data), delta integrated out",
    "tau_relevant": "delta_m: the memory's effect on a query it is relevant to",
    "p_relevant_any": (
        "P(delta_m > 0 and z(m, q) = 1 for some pair q of m | hyperparameters of the draw, data)"
    ),
    "tau_memory": "mean of tau(m, q) over the memory's pairs (a memory without pairs: one never-ranked pair)",
    "rho_memory": "retrievability: P(retrieved | in store)",
    "utility_memory": "rho_memory * tau_memory",
}


#: What ``identification.p_relevant_max`` of a gated posterior holds.
P_RELEVANT_MAX_DESCRIPTION: str = (
    "max over the memory's pairs of P(z = 1 | data) (pair_identification.p_relevant_mean): "
    "the probability that the memory is relevant to the query it most likely serves"
)


def fit_gated(
    stats: xr.Dataset, pairs: xr.Dataset, config: ModelConfig, scfg: SamplerConfig, meta: dict,
) -> xr.DataTree:
    """Fit on memory-level and sparse pair statistics; return the gated posterior.

    The tree carries the root attributes ``outcome_kind``, ``pair_model``,
    ``thin_step`` and the fit attempts; :func:`cmp_bayes.model.fit.fit` adds the
    rest (``root_attrs``).

    Parameters
    ----------
    stats : xarray.Dataset
        ``exposure_stats(log)`` (over ``memory``).
    pairs : xarray.Dataset
        ``exposure_stats(log, by="pair")`` (over ``pair``).
    config, scfg : ModelConfig, SamplerConfig
    meta : dict
        Log metadata (:func:`cmp_bayes.model.fit.memory_inputs`).
    """
    import pymc as pm

    from cmp_bayes.model.gated import build_gated_model, gated_data, gated_hyper_shapes
    from cmp_bayes.model.gated_recover import recover_gated
    from cmp_bayes.model.sampling import attempts_json, sample_until_healthy, thin_step
    from cmp_bayes.posterior.hyper_diagnostics import GROUP as HYPER_DIAGNOSTICS
    from cmp_bayes.posterior.hyper_diagnostics import hyper_diagnostics
    from cmp_bayes.posterior.identification import identification_group
    from cmp_bayes.posterior.memory_diagnostics import GROUP as MEMORY_DIAGNOSTICS
    from cmp_bayes.posterior.memory_diagnostics import judged_memory_diagnostics, memory_diagnostics
    from cmp_bayes.posterior.provenance import with_memory_text

    gd = gated_data(stats, pairs, config)
    del pairs  # gd keeps the variables it reads; the rest is freed with the caller's copy
    model = build_gated_model(gd, config)
    names = list(gated_hyper_shapes(gd, config))
    post, sample_stats, step, attempts = sample_until_healthy(model, scfg, names)
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    n_pairs = max(gd.pair_memory.size, 1)
    rng = np.random.default_rng(scfg.seed)
    flat = {n: post[n].values.reshape(n_chain * n_draw, *post[n].shape[2:]) for n in names}
    # the stored draws: at most PAIR_DRAW_CELLS values per pair variable (the moments use all)
    extra = thin_step(n_chain, n_draw, max(n_chain, PAIR_DRAW_CELLS // n_pairs))
    kept = np.arange(0, n_draw, extra)
    store = (np.arange(n_chain)[:, None] * n_draw + kept[None, :]).reshape(-1)
    # thinned: each memory's R-hat from its conditional means over every draw (memory_diagnostics)
    rec = recover_gated(gd, flat, rng, use_data=True, jitter=config.jitter, store=store, conditional=extra > 1)
    judged, post = post, post.isel(draw=kept)
    prior_draws = max(1, min(config.prior_draws, PAIR_DRAW_CELLS // n_pairs))
    with model, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The effect of Potentials")
        prior_tree = pm.sample_prior_predictive(draws=prior_draws, var_names=names, random_seed=scfg.seed + 1)
    prior = prior_tree["prior"].to_dataset()[names]
    pflat = {n: prior[n].values.reshape(-1, *prior[n].shape[2:]) for n in names}
    prec = recover_gated(gd, pflat, rng, use_data=False, jitter=config.jitter)

    groups = {
        "posterior": gated_draws(post, rec, gd),
        "prior": gated_draws(prior, prec, gd),
        "observed_data": _observed(gd),
        "sample_stats": sample_stats,
        "identification": identification_group(
            stats, post_mean=rec.post_mean, post_sd=rec.post_sd, prior_mean=rec.prior_mean,
            prior_sd=rec.prior_sd, p_positive=rec.p_positive, p_helps=rec.p_helps,
        ),
        "pair_identification": pair_identification(gd, rec),
        TAU_RELEVANT_GRID: tau_relevant_grid(gd, rec, config.jitter),
    }
    groups["identification"]["p_relevant_max"] = ("memory", rec.p_relevant_max)
    groups["identification"]["p_relevant_max"].attrs["description"] = P_RELEVANT_MAX_DESCRIPTION
    if extra > 1:
        # R-hat on 20 stored draws per chain is noise: the checks read the fit's own (every draw)
        recorded = hyper_diagnostics(judged[names], post[names])
        if recorded is not None:
            groups[HYPER_DIAGNOSTICS] = recorded
        assert rec.conditional is not None
        m = gd.base.memory.size
        mem_group = judged_memory_diagnostics(
            groups["posterior"], {k: v.reshape(n_chain, n_draw, m) for k, v in rec.conditional.items()}
        )
        rec.conditional = None
    else:
        mem_group = memory_diagnostics(groups["posterior"])
    if mem_group is not None:
        groups[MEMORY_DIAGNOSTICS] = mem_group
    if meta.get("memory_text") is not None:
        groups["posterior"] = with_memory_text(groups["posterior"], meta["memory_text"])
    tree = xr.DataTree.from_dict(groups)
    # the caller (cmp_bayes.model.fit.fit) adds the other root attributes of the contract
    tree.attrs["outcome_kind"] = gd.base.outcome_kind
    tree.attrs["pair_model"] = "gated"
    tree.attrs["thin_step"] = int(step * extra)
    tree.attrs["fit_attempts"] = attempts_json(attempts)
    tree.attrs["fit_attempt_kept"] = int(next(a["attempt"] for a in attempts if a["kept"]))
    return tree


def tau_relevant_grid(gd: GatedData, rec: GatedRecovered, jitter: bool) -> xr.Dataset:
    """The ``tau_relevant_grid`` group: delta's posterior pmf over the grid cells per memory.

    ``pmf`` (float64, (memory, tau_cell), rows sum to 1) is ``rec.delta_pmf``: exact given
    the fit's draws of the hyperparameters, averaged over every one of them (the stored
    ``tau_relevant`` draws are a thinned Monte Carlo sample of it). ``within_cell`` says how
    the draws place delta in its cell: ``"uniform"`` (``ModelConfig.jitter``) or ``"point"``.
    """
    grid = gd.base.grid
    ds = xr.Dataset(
        {"pmf": (("memory", "tau_cell"), rec.delta_pmf)},
        coords={
            "memory": gd.base.memory.astype(object),
            "tau_cell_lower": ("tau_cell", grid.edges[:-1]),
            "tau_cell_upper": ("tau_cell", grid.edges[1:]),
            "tau_cell_point": ("tau_cell", grid.points),
        },
    )
    ds["pmf"].attrs["description"] = (
        "P(delta_m in the cell | data), averaged over every draw of the hyperparameters the fit judged"
    )
    ds.attrs["within_cell"] = "uniform" if jitter else "point"
    return ds


def gated_draws(ds: xr.Dataset, rec: GatedRecovered, gd: GatedData) -> xr.Dataset:
    """``ds`` (hyperparameters over chain, draw) with the gated model's pair and memory variables."""
    c, d = ds.sizes["chain"], ds.sizes["draw"]
    n, m = gd.pair_memory.size, gd.base.memory.size
    out = ds.assign_coords({"memory": gd.base.memory.astype(object), **gd.pair_coords})
    pair_dims, mem_dims = ("chain", "draw", "pair"), ("chain", "draw", "memory")
    values = {
        "tau": rec.tau, "rho": rec.rho, "utility": (rec.rho * rec.tau).astype(np.float32),
        "p_relevant": rec.p_relevant,
    }
    for k, v in values.items():
        out[k] = (pair_dims, v.reshape(c, d, n))
    mvalues = {
        "tau_relevant": rec.tau_relevant, "p_relevant_any": rec.p_relevant_any,
        "tau_memory": rec.tau_memory, "rho_memory": rec.rho_memory,
        "utility_memory": (rec.rho_memory * rec.tau_memory).astype(np.float32),
    }
    for k, v in mvalues.items():
        out[k] = (mem_dims, v.reshape(c, d, m))
    for k in (*values, *mvalues):
        out[k].attrs["description"] = _DESCRIPTIONS[k]
    return out


def _observed(gd: GatedData) -> xr.Dataset:
    """Per pair: the pool arm's counts, the window arm's, and the combined arms the likelihood used."""
    p = gd.pairs
    names = (
        "exposed", "exposed_outcome_sum", "control", "control_outcome_sum", "retrieved", "in_store",
        "window_eligible", "window_exposed", "window_certain",
    )
    ds = xr.Dataset({k: ("pair", np.asarray(p[k].values)) for k in names}, coords=gd.pair_coords)
    ds["gated_exposed"] = ("pair", gd.arms["exposed"])
    ds["gated_exposed_outcome_sum"] = ("pair", gd.arms["exposed_outcome_sum"])
    ds["gated_exposed"].attrs["description"] = "pool exposures + window exposures with pi_t < 1"
    ds["gated_exposed_outcome_sum"].attrs["description"] = (
        "pool outcome sum + window exposures x their self-normalized IPW mean"
    )
    if "query_steps" in p.coords:
        # the log's query mix (steps per query): decide's default workload weights
        qs = pd.DataFrame(
            {"query": np.asarray(p["query_id"].values).astype(str), "steps": np.asarray(p["query_steps"].values)}
        ).drop_duplicates("query").sort_values("query")
        ds["query_steps"] = xr.DataArray(
            qs["steps"].to_numpy(np.int64), dims="query", coords={"query": qs["query"].to_numpy(dtype=object)}
        )
    return ds


def pair_identification(gd: GatedData, rec: GatedRecovered | None = None) -> xr.Dataset:
    """Identification status per pair, from the design: a randomized exposure (pool, or window
    with pi_t < 1) of the pair makes it identified; else retrieved only, else unidentified.

    With ``rec``, also each pair's exact posterior means over every sampled draw:
    ``tau_mean`` (E[tau | data]), ``p_relevant_mean`` (P(z = 1 | data)) and
    ``p_relevant_positive_mean`` (P(z = 1 and delta_m > 0 | data)), which rank
    pairs without the Monte Carlo noise of the stored draws.
    """
    from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED

    p = gd.pairs
    pool = np.asarray(p["exposed"].values) >= 1
    window = (np.asarray(p["window_exposed"].values) - np.asarray(p["window_certain"].values)) >= 1
    retrieved = np.asarray(p["retrieved"].values) >= 1
    # one string object per status, not one per pair
    names = np.array([IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED], dtype=object)
    status = names[np.where(pool | window, 0, np.where(retrieved, 1, 2))]
    ds = xr.Dataset(
        {
            "status": ("pair", status),
            "eligible_pool": ("pair", np.asarray(p["in_pool"].values, dtype=bool)),
            "eligible_window": ("pair", np.asarray(p["window_eligible"].values) > 0),
            "exposed": ("pair", np.asarray(gd.arms["exposed"], dtype=np.int64)),
            "retrieved": ("pair", np.asarray(p["retrieved"].values, dtype=np.int64)),
        },
        coords=gd.pair_coords,
    )
    ds["status"].attrs["description"] = "design status of the pair (randomized exposure under either arm)"
    if rec is not None:
        ds["tau_mean"] = ("pair", rec.pair_tau_mean)
        ds["tau_mean"].attrs["description"] = "E[tau | data], exact on the grid per draw, averaged over every sampled draw"
        ds["p_relevant_mean"] = ("pair", rec.pair_p_relevant_mean)
        ds["p_relevant_mean"].attrs["description"] = "P(z = 1 | data), averaged over every sampled draw"
        ds["p_relevant_positive_mean"] = ("pair", rec.pair_p_relevant_positive_mean)
        ds["p_relevant_positive_mean"].attrs["description"] = (
            "P(z = 1 and delta_m > 0 | data): relevant and helping, averaged over every sampled draw"
        )
    return ds
