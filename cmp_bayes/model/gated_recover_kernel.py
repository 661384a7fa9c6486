"""Numba kernels of the gated model's per-draw recovery (:mod:`cmp_bayes.model.gated_recover`).

For one draw of the hyperparameters the recovery needs, for every memory with
randomized pair data, the product over its pairs i of

    A_ig = p_i L_ig + (1 - p_i) n_i,      n_i = sum_h L_ih q_h / sum_h F_ih q_h

(delta's likelihood, the terms of :mod:`cmp_bayes.model.gated_kernel`), and for
each such pair sums over the grid weighted by its memory's posterior of delta
and by ``r_ig = p_i L_ig / A_ig`` (P(z = 1 | delta = tau_g)). In numpy each was a
(pairs x G) temporary and a log per term: on all ten LoCoMo conversations
(31,434 randomized pairs x 121 grid points) about 0.1 s a draw, the larger part
of a fit. These kernels make one pass each over the pairs, reading the distinct
likelihood rows (``unit``) and taking products in probability space, rescaled
before they can underflow.

Pairs without data (about 97% of a shared store's pairs: eligible for the pool,
never exposed) have a closed form: ``P(z = 1) = p``, ``E[tau] = p E[delta_m] +
(1 - p) E[null]``. Their gate probability depends only on their covariate row
(the retriever's rank), which takes few values, so the recovery keeps, per draw,
one probability per covariate class and two moments per memory, and
:func:`class_memory_means` averages the products over draws per pair at the end:
O(pairs x draws) multiply-adds once instead of a dozen pair-length passes per draw.
"""

from __future__ import annotations

import numba
import numpy as np

from cmp_bayes.model.gated_kernel import FLOOR, memory_product


@numba.njit(cache=False, nogil=True)
def memory_products(
    lik: np.ndarray, null: np.ndarray, unit: np.ndarray, starts: np.ndarray, p: np.ndarray,
) -> np.ndarray:
    """Each memory's likelihood of delta on the grid, ``prod_i max(A_ig, FLOOR)``, scaled to row maximum 1.

    Parameters
    ----------
    lik : ndarray, shape (U, G)
        Distinct pair likelihood rows (each row's maximum 1).
    null : ndarray, shape (U,)
        Each row's likelihood under the null pmf restricted to its feasible effects,
        ``(lik @ q) / (feas @ q)``.
    unit : ndarray of int64, shape (N,)
        Each pair's row of ``lik``; pairs grouped by memory.
    starts : ndarray of int64, shape (K + 1,)
        Start of each memory's pairs, and N at the end.
    p : ndarray, shape (N,)
        Each pair's gate probability.

    Returns
    -------
    ndarray, shape (K, G)
    """
    n_grid = lik.shape[1]
    k_mem = starts.size - 1
    out = np.ones((k_mem, n_grid))
    for k in range(k_mem):
        prod = out[k]
        memory_product(prod, lik, null, unit, p, starts[k], starts[k + 1])
        top = 0.0
        for g in range(n_grid):
            top = max(top, prod[g])
        for g in range(n_grid):
            prod[g] /= top
    return out


@numba.njit(cache=False, nogil=True)
def pair_moments(
    lik: np.ndarray, null: np.ndarray, null_mean: np.ndarray, unit: np.ndarray, starts: np.ndarray,
    p: np.ndarray, post: np.ndarray, pts: np.ndarray, first_positive: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair with data: P(z = 1), E[tau] and P(z = 1 and delta > 0), given the draw's hyperparameters.

    ``post`` (K, G) is each memory's posterior of delta (rows sum to 1),
    ``null_mean`` (U,) each likelihood row's posterior mean under the null pmf,
    ``pts`` (G,) the grid and ``first_positive`` the first cell with tau > 0;
    the rest as in :func:`memory_products`.

    Returns
    -------
    (p_relevant (N,), tau_mean (N,), p_relevant_positive (N,))
    """
    n_grid = lik.shape[1]
    n = unit.size
    p_rel = np.empty(n)
    e_tau = np.empty(n)
    p_pos = np.empty(n)
    for k in range(starts.size - 1):
        for i in range(starts[k], starts[k + 1]):
            u, pi = unit[i], p[i]
            base = (1.0 - pi) * null[u]
            s1, s2, s3 = 0.0, 0.0, 0.0
            for g in range(n_grid):
                top = pi * lik[u, g]
                w = post[k, g] * top / max(top + base, FLOOR)
                s1 += w
                s2 += w * pts[g]
                if g >= first_positive:
                    s3 += w
            p_rel[i] = s1
            e_tau[i] = s2 + (1.0 - s1) * null_mean[u]
            p_pos[i] = s3
    return p_rel, e_tau, p_pos


@numba.njit(cache=False, nogil=True)
def stored_pair_terms(
    lik: np.ndarray, null: np.ndarray, unit: np.ndarray, starts: np.ndarray, p: np.ndarray, cell: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For a stored draw: each pair's P(z = 1 | delta's drawn cell), and per memory
    ``sum_i log(1 - r_ig)`` (the log-probability that none of its pairs is relevant).

    ``cell`` (K,) is each memory's drawn cell of delta; ``r_ig`` is capped at
    1 - 1e-15 inside the log. The rest as in :func:`memory_products`.

    Returns
    -------
    (p_z (N,), log_none (K, G))
    """
    n_grid = lik.shape[1]
    k_mem = starts.size - 1
    pz = np.empty(unit.size)
    log_none = np.zeros((k_mem, n_grid))
    for k in range(k_mem):
        c = cell[k]
        for i in range(starts[k], starts[k + 1]):
            u, pi = unit[i], p[i]
            base = (1.0 - pi) * null[u]
            for g in range(n_grid):
                top = pi * lik[u, g]
                r = top / max(top + base, FLOOR)
                if g == c:
                    pz[i] = r
                log_none[k, g] += np.log1p(-min(r, 1.0 - 1e-15))
    return pz, log_none


@numba.njit(cache=False, nogil=True)
def class_memory_means(
    p_class: np.ndarray, delta_mean: np.ndarray, delta_positive: np.ndarray, null_mean: np.ndarray,
    cls: np.ndarray, mem: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums over draws for pairs without data (a block of S draws).

    Parameters
    ----------
    p_class : ndarray, shape (C, S)
        Each covariate class's gate probability per draw.
    delta_mean, delta_positive : ndarray, shape (M, S)
        Each memory's E[delta] and P(delta > 0) per draw.
    null_mean : ndarray, shape (S,)
        The null pmf's mean per draw.
    cls, mem : ndarray of int64, shape (N,)
        Each pair's covariate class and memory.

    Returns
    -------
    (sum_s p, sum_s E[tau], sum_s p P(delta > 0)), each shape (N,)
    """
    n, s = cls.size, null_mean.size
    sum_p = np.empty(n)
    sum_tau = np.empty(n)
    sum_pos = np.empty(n)
    for i in range(n):
        c, m = cls[i], mem[i]
        a, b, d = 0.0, 0.0, 0.0
        for j in range(s):
            pj = p_class[c, j]
            a += pj
            b += pj * delta_mean[m, j] + (1.0 - pj) * null_mean[j]
            d += pj * delta_positive[m, j]
        sum_p[i] = a
        sum_tau[i] = b
        sum_pos[i] = d
    return sum_p, sum_tau, sum_pos
