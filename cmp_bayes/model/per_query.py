"""The per-query variant (``fit(log, by="query")``): tau per memory-query pair.

Model: the memory-level model of :mod:`cmp_bayes.model.build` for tau_m
(mixture prior, rank and group covariates, rho hierarchy), plus

    tau_mq ~ Normal(tau_m, s_q)   on the grid, s_q = ``ModelConfig.query_sd``,

with each pair's exposed arm compared with the pair's own control arm (the
baseline is shared per query, not per memory). Integrating tau_mq out gives a
likelihood for tau_m that is a product over the memory's queries of the pair
likelihoods convolved with the G x G Normal kernel, ``K @ exp(L_mq)``. That
product is computed once, as data, so the sampler sees exactly the memory-level
graph with a different likelihood matrix (no extra cost per gradient). s_q is
a fixed config value, not learned: with a handful of exposures per pair the
data cannot estimate a between-query spread (the same argument as the null sd
in docs/model.md).

Recovery per kept hyperparameter draw: tau_m from its exact grid posterior,
then tau_mq from ``K[tau_m, :] * exp(L_mq)`` (exact given tau_m), rho_mq from
``Beta(a_m + r_mq, b_m + s_mq - r_mq)`` with the memory's Beta prior. Pairs whose
memory is never in the store for the query have no tau_mq (NaN).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.model.build import ModelData
from cmp_bayes.model.grid import TauGrid, arm_arrays, log_likelihood

#: Names of the per-pair variables and their memory-level companions in the contract.
PAIR_VARS: tuple[str, ...] = ("rho", "tau", "utility")


def query_kernel(grid: TauGrid, sd: float) -> np.ndarray:
    """Row-stochastic kernel K[g, h] = P(tau_mq in cell h | tau_m = point g).

    A Normal(points[g], sd) density times the cell widths, normalised over h
    (restricted to [-1, 1]). Shape (G, G).
    """
    pts = grid.points
    logk = -0.5 * ((pts[None, :] - pts[:, None]) / sd) ** 2 + np.log(grid.widths)[None, :]
    k = np.exp(logk - logk.max(axis=1, keepdims=True))
    return k / k.sum(axis=1, keepdims=True)


def pair_loglik(pair_stats: xr.Dataset, grid: TauGrid, outcome_kind: str, baseline_nodes: int) -> np.ndarray:
    """Pair log-likelihoods on the grid, shape (M, Q, G); rows without exposures are 0."""
    st = pair_stats.transpose("memory", "query")
    arms = {k: v.reshape(-1) for k, v in arm_arrays(st).items()}
    m, q = st.sizes["memory"], st.sizes["query"]
    return log_likelihood(arms, grid, outcome_kind, baseline_nodes).reshape(m, q, -1)


def memory_loglik(pair_ll: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Each memory's likelihood of tau_m: sum over queries of log (K @ exp(L_mq)).

    Pairs without exposures have L = 0 and contribute log(K @ 1) = 0 exactly.
    Returns shape (M, G), each informative row shifted to maximum 0.
    """
    m, q, g = pair_ll.shape
    out = np.zeros((m, g))
    informative = np.flatnonzero(np.any(pair_ll != 0, axis=2).any(axis=1))
    for i in informative:
        rows = np.flatnonzero(np.any(pair_ll[i] != 0, axis=1))
        conv = np.exp(pair_ll[i, rows]) @ kernel.T  # (rows, G): sum_h K[g, h] lik(h)
        out[i] = np.log(np.maximum(conv, 1e-300)).sum(axis=0)
        out[i] -= out[i].max()
    return out


def with_pair_likelihood(data: ModelData, mem_ll: np.ndarray) -> ModelData:
    """The memory-level ModelData with tau_m's likelihood replaced (one pattern per memory)."""
    m = mem_ll.shape[0]
    informative = np.flatnonzero(np.any(mem_ll != 0, axis=1) | (data.arms["exposed"] > 0))
    data.loglik = mem_ll
    data.pattern_loglik = mem_ll
    data.pattern_offset = None  # the memory-level offsets belong to the replaced rows
    data.pattern = np.arange(m)
    data.informative = informative
    return data


def recover_pairs(
    data: ModelData,
    hyper: dict[str, np.ndarray],
    tau_memory: np.ndarray,
    pair_ll: np.ndarray | None,
    pair_stats: xr.Dataset,
    kernel: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair tau and rho draws given memory-level tau draws.

    Parameters
    ----------
    data : ModelData
    hyper : dict name -> ndarray (S, ...)
        The hyperparameter draws the memory-level recovery used.
    tau_memory : ndarray, shape (S, M)
        Memory-level tau draws (grid cells recovered by searching the cell edges).
    pair_ll : ndarray (M, Q, G) or None
        Pair log-likelihoods; None draws from the prior (no data).
    pair_stats : xarray.Dataset over (memory, query)
    kernel : ndarray (G, G)
    rng : numpy Generator

    Returns
    -------
    (tau, rho), each ndarray of shape (S, M, Q), float32; NaN where the memory is
    never in the store for the query.
    """
    from cmp_bayes.model.recover import compile_prior_terms, sample_rows

    st = pair_stats.transpose("memory", "query")
    in_store = np.asarray(st["in_store"].values, dtype=np.float64)
    retrieved = np.asarray(st["retrieved"].values, dtype=np.float64)
    mi, qi = np.nonzero(in_store > 0)
    s, m = tau_memory.shape
    q = in_store.shape[1]
    grid = data.grid
    g = grid.points.size
    # Only pairs with exposures have a likelihood (the other rows of pair_ll are 0);
    # the rest draw tau_mq from the kernel row of tau_m's cell alone, by a search
    # confined to that row instead of a G-wide cumulative sum per pair: in a shared
    # store (LoCoMo conv-42: 163,540 pairs, about 3,800 exposed) that is most pairs.
    if pair_ll is None:
        lik_pairs = np.zeros(0, dtype=np.int64)
        lik = np.zeros((0, g))
    else:
        lik_pairs = np.flatnonzero(np.any(pair_ll != 0, axis=2)[mi, qi])
        lik = np.exp(pair_ll[mi[lik_pairs], qi[lik_pairs]]) if lik_pairs.size else np.zeros((0, g))
    lik_rows = np.arange(lik_pairs.size)
    kernel_scratch = np.empty(kernel.size)
    fn = compile_prior_terms(data)
    tau = np.full((s, m, q), np.nan, dtype=np.float32)
    rho = np.full((s, m, q), np.nan, dtype=np.float32)
    y, n = retrieved[mi, qi], in_store[mi, qi]
    for i in range(s):
        _, _, ra, rb = fn({k: v[i] for k, v in hyper.items()})
        cell = np.clip(np.searchsorted(grid.edges, tau_memory[i], side="right") - 1, 0, g - 1)
        row = cell[mi]
        u = rng.random(mi.size)
        idx = sample_rows(kernel, row, u, scratch=kernel_scratch)
        if lik_pairs.size:
            idx[lik_pairs] = sample_rows(kernel[row[lik_pairs]] * lik, lik_rows, u[lik_pairs])
        tau[i, mi, qi] = grid.edges[idx] + rng.random(mi.size) * grid.widths[idx]
        if pair_ll is not None:
            rho[i, mi, qi] = rng.beta(ra[mi] + y, rb[mi] + np.maximum(n - y, 0.0))
        else:
            rho[i, mi, qi] = rng.beta(ra[mi], rb[mi])
    return tau, rho
