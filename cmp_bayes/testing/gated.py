"""A synthetic posterior of the relevance-gated pair model (issue 16, item 4).

The shape the gated fit (``fit(log, by="query", model=ModelConfig(pair_model="gated"))``)
writes, built without fitting so that decide and the workload value can be
tested before (and independently of) the model:

* ``posterior``: ``tau`` over (chain, draw, pair) with coordinates ``memory_id``
  and ``query_id`` along ``pair`` (``tau(m, q) = z(m, q) * delta_m``);
  ``p_relevant`` over (chain, draw, pair); ``tau_relevant`` (= ``delta_m``) and
  ``p_relevant_any`` over (chain, draw, memory); the memory-level
  ``tau_memory`` (the log's query mix of ``tau(m, q)``, pairs outside the pair
  set counting 0), ``rho_memory`` and ``utility_memory``; ``rho`` and
  ``utility`` over pair only when the pair table gives a ``rho_mean``; the
  hyperparameters of the memory-level model plus the gate's
  (:data:`GATE_HYPERPARAMETERS`).
* ``observed_data``: the memory-level arms and ``query_steps`` over ``query``
  (steps each query of the log was asked).
* ``identification``: per memory, as today, with ``p_relevant_max``.
* root attributes ``pair_model = "gated"``, ``by = "query"``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

#: The gate's hyperparameters (logit of P(relevant) = intercept + slope * log rank).
GATE_HYPERPARAMETERS: tuple[str, ...] = ("gate_intercept", "gate_rank_slope")
#: Beta concentration of each pair's p_relevant draws around its ``relevance``.
RELEVANCE_CONCENTRATION = 50.0
#: Root attribute value of a gated posterior.
GATED = "gated"


def default_pairs(memory_ids: np.ndarray, n_queries: int, seed: int) -> pd.DataFrame:
    """A sparse pair set: each memory paired with 1 or 2 of ``n_queries`` queries.

    Returns
    -------
    pandas.DataFrame
        Columns memory_id, query_id (``q0``...), relevance (prior-free target
        P(z = 1), drawn from {0.1, 0.5, 0.9}).
    """
    rng = np.random.default_rng([seed, 7])
    rows = []
    for i, m in enumerate(memory_ids):
        chosen = rng.choice(n_queries, size=min(n_queries, 1 + i % 2), replace=False)
        rows += [(m, f"q{q}", float(rng.choice([0.1, 0.5, 0.9]))) for q in sorted(chosen)]
    return pd.DataFrame(rows, columns=["memory_id", "query_id", "relevance"])


def gated_tree(
    base: xr.DataTree,
    pairs: pd.DataFrame,
    query_steps: pd.Series,
    seed: int,
) -> xr.DataTree:
    """Turn a memory-level synthetic posterior into the gated form.

    Parameters
    ----------
    base : xarray.DataTree
        A memory-level synthetic posterior; its ``tau`` draws become
        ``tau_relevant`` (``delta_m``), its ``rho`` draws ``rho_memory``.
    pairs : pandas.DataFrame
        memory_id, query_id, relevance in [0, 1]; optional rho_mean in (0, 1)
        (then ``rho`` over pair is drawn around it).
    query_steps : pandas.Series
        Steps per query id of the log (int), the log's query mix.
    seed : int

    Returns
    -------
    xarray.DataTree
    """
    rng = np.random.default_rng([seed, 8])
    post = base["posterior"].to_dataset()
    delta = post["tau"].transpose("chain", "draw", "memory")
    chains, draws, _ = delta.shape
    ids = np.asarray(delta["memory"].to_numpy()).astype(str)
    col = {m: i for i, m in enumerate(ids)}
    unknown = sorted(set(pairs["memory_id"].astype(str)) - set(col))
    if unknown:
        raise ValueError(f"pairs name memories the posterior lacks, e.g. {unknown[0]!r}")
    p_mem = pairs["memory_id"].astype(str).map(col).to_numpy(np.int64)
    p_q = pairs["query_id"].astype(str).to_numpy(dtype=object)
    rel = np.clip(pairs["relevance"].to_numpy(np.float64), 1e-4, 1 - 1e-4)
    c = RELEVANCE_CONCENTRATION
    n_pair = len(pairs)
    p_rel = rng.beta(rel * c, (1 - rel) * c, size=(chains, draws, n_pair))
    z = rng.random((chains, draws, n_pair)) < p_rel
    tau = np.where(z, delta.to_numpy()[..., p_mem], 0.0)
    # P(useful to at least one query) per draw: 1 - prod over the memory's pairs (1 - p)
    none = np.ones((chains, draws, len(ids)))
    # numpy's stub types ufunc.at's index as integer arrays only; a tuple index works at run time
    np.multiply.at(none, (slice(None), slice(None), p_mem), 1.0 - p_rel)  # type: ignore[arg-type]
    weights = query_steps.astype(np.float64) / float(query_steps.sum())
    w_pair = weights.reindex(p_q).fillna(0.0).to_numpy(np.float64)
    tau_memory = np.zeros((chains, draws, len(ids)))
    np.add.at(tau_memory, (slice(None), slice(None), p_mem), tau * w_pair)  # type: ignore[arg-type]
    rho_memory = post["rho"].transpose("chain", "draw", "memory").to_numpy()

    dims_m, dims_p = ("chain", "draw", "memory"), ("chain", "draw", "pair")
    hyper = {str(k): v for k, v in post.data_vars.items() if k not in ("rho", "tau", "utility")}
    data: dict[str, object] = dict(hyper)
    data.update(
        tau=(dims_p, tau),
        p_relevant=(dims_p, p_rel),
        tau_relevant=(dims_m, delta.to_numpy()),
        p_relevant_any=(dims_m, 1.0 - none),
        tau_memory=(dims_m, tau_memory),
        rho_memory=(dims_m, rho_memory),
        utility_memory=(dims_m, rho_memory * tau_memory),
        gate_intercept=(("chain", "draw"), rng.normal(-1.0, 0.1, size=(chains, draws))),
        gate_rank_slope=(("chain", "draw"), rng.normal(-0.5, 0.05, size=(chains, draws))),
    )
    if "rho_mean" in pairs:
        mean = np.clip(pairs["rho_mean"].to_numpy(np.float64), 1e-4, 0.99)
        rho = rng.beta(mean * 200.0, (1 - mean) * 200.0, size=(chains, draws, n_pair))
        data.update(rho=(dims_p, rho), utility=(dims_p, rho * tau))
    coords = {
        "chain": post["chain"].to_numpy(),
        "draw": post["draw"].to_numpy(),
        "memory": delta["memory"].to_numpy(),
        "pair": np.arange(n_pair),
        "memory_id": ("pair", pairs["memory_id"].astype(str).to_numpy(dtype=object)),
        "query_id": ("pair", p_q),
    }
    if "effect_kind" in post.coords:
        coords["effect_kind"] = post["effect_kind"].to_numpy()
    posterior = xr.Dataset(data, coords=coords)
    observed = base["observed_data"].to_dataset()
    observed["query_steps"] = xr.DataArray(
        query_steps.to_numpy(np.int64), dims=("query",),
        coords={"query": query_steps.index.to_numpy(dtype=object)},
    )
    identification = base["identification"].to_dataset()
    # the best pair's P(z = 1) per memory (a memory without pairs: 0 here, no never-ranked prior)
    best = np.zeros(len(ids))
    np.maximum.at(best, p_mem, p_rel.mean(axis=(0, 1)))
    identification["p_relevant_max"] = ("memory", best)
    groups = {
        "posterior": posterior,
        "observed_data": observed,
        "sample_stats": base["sample_stats"].to_dataset(),
        "identification": identification,
    }
    dt = xr.DataTree.from_dict(groups)
    dt.attrs.update(base.attrs)
    dt.attrs.update(by="query", pair_model=GATED)
    return dt


def gated_posterior(
    base: xr.DataTree,
    memories: pd.DataFrame,
    pair_model: str,
    n_queries: int,
    pairs: pd.DataFrame | None,
    query_steps: dict[str, int] | pd.Series | None,
    seed: int,
) -> xr.DataTree:
    """``synthetic_posterior(pair_model="gated", ...)`` from its memory-level tree ``base`` of
    ``memories`` (arguments as :func:`~cmp_bayes.testing.posterior.synthetic_posterior`'s)."""
    if pair_model != GATED:
        raise ValueError(f"pair_model must be None or {GATED!r}, got {pair_model!r}")
    ids = np.asarray(memories["memory_id"], dtype=str)
    pairs = default_pairs(ids, n_queries, seed) if pairs is None else pairs.reset_index(drop=True)
    if query_steps is None:
        names = dict.fromkeys([f"q{i}" for i in range(n_queries)] + list(pairs["query_id"].astype(str)))
        query_steps = pd.Series(10, index=list(names), dtype="int64")
    steps = pd.Series(query_steps, dtype="int64")
    steps.index = steps.index.astype(str)
    return gated_tree(base, pairs, steps, seed)
