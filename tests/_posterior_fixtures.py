"""Synthetic posteriors that follow the posterior contract (common.md section 4) exactly.

For tests of everything that reads a posterior (decide, recommend, report)
without fitting a model. The draws are independent across chains and draws,
so R-hat is near 1 unless a test breaks it on purpose (``stuck_chain``).

Contract reproduced here: groups ``posterior`` (``rho``, ``tau``, ``utility``
over (chain, draw, memory) plus hyperparameters), ``prior``,
``posterior_predictive``, ``prior_predictive``, ``observed_data``,
``sample_stats`` (``diverging``), ``identification`` (over memory: ``status``,
``exposed``, ``retrieved``, ``in_store``, ``contraction``, ``mean_shift``,
``propensity``); the per-query form has ``tau``/``rho``/``utility`` over
(chain, draw, memory, query) and ``tau_memory``/``rho_memory``/``utility_memory``
over (chain, draw, memory). Root attrs: ``cmp_bayes_version``,
``model_config``, ``sampler_config``, ``log_checksum``, ``log_path``,
``outcome_kind``, ``created_at``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED

#: The prior every synthetic memory's tau draws come from when it has no data:
#: a null component (weight 1 - W_USEFUL, Normal(0, NULL_SD)) and a useful one
#: (Normal(USEFUL_MEAN, USEFUL_SD)). P(tau > 0.05) under it is about 0.03 (< 1/21: the prior alone would forget).
W_USEFUL = 0.03
NULL_SD = 0.01
USEFUL_MEAN = 0.25
USEFUL_SD = 0.1


def memory_table(n: int = 30, seed: int = 0) -> pd.DataFrame:
    """A varied table of memories to feed :func:`synthetic_posterior`.

    Returns
    -------
    pandas.DataFrame
        Columns memory_id, status, exposed, retrieved, in_store, p_useful
        (target P(tau > 0.05)), rho_mean. Statuses cycle over identified (60%),
        retrieved-only (20%) and unidentified (20%); identified memories get
        0-8 exposures beyond 1 and a target p drawn from {0.01, 0.03, 0.2, 0.6, 0.95};
        non-identified memories keep the prior (p_useful NaN).
    """
    rng = np.random.default_rng(seed)
    status = rng.choice(
        [IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED], size=n, p=[0.6, 0.2, 0.2]
    ).astype(object)
    exposed = np.where(status == IDENTIFIED, rng.integers(1, 9, size=n), 0)
    retrieved = np.where(status == UNIDENTIFIED, 0, rng.integers(0, 30, size=n))
    retrieved = np.where(status == RETRIEVED_ONLY, np.maximum(retrieved, 1), retrieved)
    p = np.where(status == IDENTIFIED, rng.choice([0.01, 0.03, 0.2, 0.6, 0.95], size=n), np.nan)
    return pd.DataFrame(
        {
            "memory_id": [f"m{i:03d}" for i in range(n)],
            "status": status,
            "exposed": exposed.astype("int64"),
            "retrieved": retrieved.astype("int64"),
            "in_store": rng.integers(200, 500, size=n).astype("int64"),
            "p_useful": p,
            "rho_mean": np.where(retrieved > 0, rng.uniform(0.01, 0.2, size=n), 0.001),
        }
    )


def tau_draws(
    p_useful: float, size: tuple[int, ...], rng: np.random.Generator, threshold: float = 0.05
) -> np.ndarray:
    """Draws of tau with P(tau > threshold) close to ``p_useful``; NaN = the prior.

    A two-component mixture: with probability ``p_useful`` a useful draw
    (``threshold`` + |Normal(0.2, 0.08)|: always above the threshold), else a
    null draw Normal(0, NULL_SD) clipped below the threshold. For NaN, draws
    from the prior mixture above.
    """
    if np.isnan(p_useful):
        useful = rng.random(size) < W_USEFUL
        return np.where(
            useful,
            rng.normal(USEFUL_MEAN, USEFUL_SD, size),
            rng.normal(0.0, NULL_SD, size),
        )
    useful = rng.random(size) < p_useful
    up = threshold + np.abs(rng.normal(0.2, 0.08, size))
    down = np.minimum(rng.normal(0.0, NULL_SD, size), threshold - 1e-6)
    return np.where(useful, up, down)


def synthetic_posterior(
    memories: pd.DataFrame | None = None,
    *,
    chains: int = 2,
    draws: int = 200,
    seed: int = 0,
    divergences: int = 0,
    stuck_chain: bool = False,
    per_query: bool = False,
    n_queries: int = 3,
    threshold: float = 0.05,
) -> xr.DataTree:
    """Build a DataTree that follows the posterior contract.

    Parameters
    ----------
    memories : pandas.DataFrame, optional
        As :func:`memory_table` returns (columns memory_id, status, exposed,
        retrieved, in_store, p_useful, rho_mean; ``mean_shift`` optional).
        Default ``memory_table()``.
    chains, draws : int
        Posterior shape (``draws`` even).
    seed : int
        Seed of every random draw.
    divergences : int
        Number of ``sample_stats.diverging`` entries set True.
    stuck_chain : bool
        Shift chain 0 of the hyperparameter ``w_useful`` far away (R-hat >> 1.01).
    per_query : bool
        Per-query form: tau/rho/utility over (chain, draw, memory, query)
        plus the ``_memory`` variables.
    n_queries : int
        Queries in the per-query form.
    threshold : float
        The threshold the ``p_useful`` targets refer to.

    Returns
    -------
    xarray.DataTree
    """
    mem = memory_table() if memories is None else memories.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    m = len(mem)
    ids = np.asarray(mem["memory_id"], dtype=str).astype(object)
    if draws % 2:
        raise ValueError("draws must be even (the draws are balanced over half-chains)")
    shape = (chains, draws, m)
    half = draws // 2
    base = np.empty((half, m))
    for j, p in enumerate(mem["p_useful"].to_numpy(dtype="float64")):
        base[:, j] = tau_draws(p, (half,), rng, threshold)
    tau = _balanced(base, chains, rng)
    rho_mean = np.clip(mem["rho_mean"].to_numpy(dtype="float64"), 1e-4, 0.99)
    conc = 200.0
    rho = _balanced(rng.beta(rho_mean * conc, (1 - rho_mean) * conc, size=(half, m)), chains, rng)
    coords = {"chain": np.arange(chains), "draw": np.arange(draws), "memory": ids}
    dims = ("chain", "draw", "memory")

    hyper = {
        "w_useful": _balanced(rng.beta(3, 97, size=half), chains, rng),
        "null_sd": _balanced(np.abs(rng.normal(NULL_SD, 0.001, size=half)), chains, rng),
        "mu_useful": _balanced(rng.normal(USEFUL_MEAN, 0.02, size=half), chains, rng),
    }
    if stuck_chain:
        hyper["w_useful"][0] += 0.5
    post_vars: dict[str, tuple] = {k: (("chain", "draw"), v) for k, v in hyper.items()}
    if per_query:
        qs = np.array([f"q{i}" for i in range(n_queries)], dtype=object)
        noise = rng.normal(0.0, 0.005, size=(*shape, n_queries))
        qdims = (*dims, "query")
        post_vars.update(
            tau=(qdims, tau[..., None] + noise),
            rho=(qdims, np.repeat(rho[..., None], n_queries, axis=-1)),
            utility=(qdims, rho[..., None] * (tau[..., None] + noise)),
            tau_memory=(dims, tau),
            rho_memory=(dims, rho),
            utility_memory=(dims, rho * tau),
        )
        coords = {**coords, "query": qs}
    else:
        post_vars.update(tau=(dims, tau), rho=(dims, rho), utility=(dims, rho * tau))
    posterior = xr.Dataset(post_vars, coords=coords)

    prior_tau = tau_draws(np.nan, (1, draws, m), rng)
    prior_rho = rng.beta(1, 20, size=(1, draws, m))
    pcoords = {"chain": [0], "draw": np.arange(draws), "memory": ids}
    prior = xr.Dataset(
        {
            "tau": (dims, prior_tau),
            "rho": (dims, prior_rho),
            "utility": (dims, prior_tau * prior_rho),
        },
        coords=pcoords,
    )
    exposed = mem["exposed"].to_numpy(dtype="int64")
    pp = xr.Dataset(
        {"exposed_successes": (dims, rng.binomial(np.broadcast_to(exposed, shape), 0.5))},
        coords={k: coords[k] for k in dims},
    )
    prior_pp = xr.Dataset(
        {"exposed_successes": (dims, rng.binomial(np.broadcast_to(exposed, (1, draws, m)), 0.5))},
        coords=pcoords,
    )
    observed = xr.Dataset(
        {
            "exposed_successes": ("memory", rng.binomial(exposed, 0.5)),
            "exposed": ("memory", exposed),
        },
        coords={"memory": ids},
    )
    diverging = np.zeros((chains, draws), dtype=bool)
    diverging.reshape(-1)[:divergences] = True
    sample_stats = xr.Dataset(
        {
            "diverging": (("chain", "draw"), diverging),
            "lp": (("chain", "draw"), rng.normal(size=(chains, draws))),
        },
        coords={"chain": coords["chain"], "draw": coords["draw"]},
    )
    post_sd = tau.reshape(-1, m).std(axis=0)
    prior_sd = prior_tau.reshape(-1, m).std(axis=0)
    shift = (
        np.abs(tau.reshape(-1, m).mean(axis=0) - prior_tau.reshape(-1, m).mean(axis=0)) / prior_sd
    )
    if "mean_shift" in mem:
        shift = mem["mean_shift"].to_numpy(dtype="float64")
    status = np.asarray(mem["status"], dtype=str).astype(object)
    identification = xr.Dataset(
        {
            "status": ("memory", status),
            "exposed": ("memory", exposed),
            "retrieved": ("memory", mem["retrieved"].to_numpy(dtype="int64")),
            "in_store": ("memory", mem["in_store"].to_numpy(dtype="int64")),
            "contraction": ("memory", post_sd / prior_sd),
            "mean_shift": ("memory", shift),
            "propensity": ("memory", np.where(status == IDENTIFIED, 0.0125, np.nan)),
        },
        coords={"memory": ids},
    )
    dt = xr.DataTree.from_dict(
        {
            "posterior": posterior,
            "prior": prior,
            "posterior_predictive": pp,
            "prior_predictive": prior_pp,
            "observed_data": observed,
            "sample_stats": sample_stats,
            "identification": identification,
        }
    )
    dt.attrs.update(
        cmp_bayes_version="0.1.0",
        model_config=json.dumps({"kind": "synthetic"}),
        sampler_config=json.dumps({"sampler": "synthetic", "chains": chains, "draws": draws}),
        log_checksum="0" * 64,
        log_path="synthetic",
        outcome_kind="binary",
        created_at="2026-11-30T00:00:00+00:00",
    )
    return dt


def _balanced(values: np.ndarray, chains: int, rng: np.random.Generator) -> np.ndarray:
    """Stack ``2 * chains`` random permutations (along axis 0) of ``values`` into
    (chain, draw, ...) with ``draw = 2 * len(values)``."""
    halves = [values[rng.permutation(len(values))] for _ in range(2 * chains)]
    out = np.stack(halves).reshape(chains, 2 * len(values), *values.shape[1:])
    return out
