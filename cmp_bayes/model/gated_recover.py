"""Per-draw recovery of the gated pair model (:mod:`cmp_bayes.model.gated`).

For one draw of theta (mixture shape and weights, gate coefficients, rho
hyperparameters), with ``r_mqg = p e^{L_mq,g} / (p e^{L_mq,g} + (1 - p) n_mq)``
the probability that pair (m, q) is relevant given delta_m = tau_g (``n_mq`` =
``sum_h null_h e^{L_mq,h} / sum_h null_h F_mq,h``, the pair's likelihood when
irrelevant, the null renormalised over the effects its baseline allows, in place of
``e^{L_mq,0}``):

* delta_m's posterior on the grid is exactly
  ``post_mg ∝ prior_g(theta) prod_q [p e^{L_mq,g} + (1 - p) n_mq]``
  (pairs without exposures contribute 1); one delta is drawn from it;
* z_mq given delta_m is Bernoulli(r_mq at delta_m's cell), drawn; tau = delta
  where z = 1, else a null effect from the pair's null posterior
  ``null_h e^{L_mq,h}`` (the null pmf where the pair has no data);
* ``p_relevant`` = P(z_mq = 1 | theta, data) = ``sum_g post_mg r_mqg``
  (Rao-Blackwellised over delta);
* ``p_relevant_any`` = P(delta_m > 0 and z_mq = 1 for some pair q of m | theta, data)
  = ``sum_{g: tau_g > 0} post_mg (1 - prod_q (1 - r_mqg))``, exact: the z's are
  independent given delta and theta. "Some pair" means the memory's pairs of the
  pair statistics (queries under which it was eligible or in a context).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cmp_bayes.model.gated import GatedData, class_probability
from cmp_bayes.model.gated_kernel import FLOOR
from cmp_bayes.model.gated_recover_kernel import (
    class_memory_means,
    memory_products,
    pair_moments,
    stored_pair_terms,
)
from cmp_bayes.model.recover import compile_prior_terms, sample_rows


@dataclass
class GatedRecovered:
    """Draws and Rao-Blackwellised moments of the gated model.

    Attributes
    ----------
    tau, rho, p_relevant : ndarray, shape (S, N), float32
        Per pair: tau = z delta, rho, P(z = 1 | theta, data).
    tau_relevant, p_relevant_any, rho_memory, tau_memory : ndarray, shape (S, M), float32
        Per memory: delta, P(useful to some query), rho, and the memory's mean tau
        over its pairs (``z delta`` from the gate's never-ranked prior for a
        memory without pairs).
    post_mean, post_sd, prior_mean, prior_sd, p_positive, p_helps : ndarray, shape (M,)
        Moments of delta (exact on the grid, averaged over draws).
    pair_tau_mean, pair_p_relevant_mean, pair_p_relevant_positive_mean : ndarray, shape (N,)
        Per pair: E[tau | theta, data], P(z = 1 | theta, data) and
        P(z = 1 and delta_m > 0 | theta, data), exact on the grid, averaged over
        every draw (also those whose per-draw values are not stored).
    p_relevant_max : ndarray, shape (M,)
        Per memory: the largest ``pair_p_relevant_mean`` over its pairs, P(z = 1 | data)
        of the query it is most likely relevant to (a memory without pairs: the
        never-ranked gate's prior mean).
    delta_pmf : ndarray, shape (M, G)
        Per memory: delta's posterior over the grid cells, ``post_mg`` averaged over
        every draw (exact given the draws of theta; rows sum to 1).
    conditional : dict of str to ndarray, shape (S, M), float64, or None
        With ``conditional=True``, every draw's conditional means of the memory-level
        variables given that draw's hyperparameters and the data: ``tau_relevant``
        (E[delta_m]), ``tau_memory`` (the mean over the memory's pairs of E[tau(m, q)];
        a memory without pairs: the never-ranked gate's prior times E[delta_m]) and
        ``utility_memory`` (E[rho_m] E[tau_memory]: rho is drawn independently of tau
        given the hyperparameters). For all S draws, also those not stored.
    """

    tau: np.ndarray
    rho: np.ndarray
    p_relevant: np.ndarray
    tau_relevant: np.ndarray
    p_relevant_any: np.ndarray
    rho_memory: np.ndarray
    tau_memory: np.ndarray
    post_mean: np.ndarray
    post_sd: np.ndarray
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    p_positive: np.ndarray
    p_helps: np.ndarray
    pair_tau_mean: np.ndarray
    pair_p_relevant_mean: np.ndarray
    pair_p_relevant_positive_mean: np.ndarray
    p_relevant_max: np.ndarray
    delta_pmf: np.ndarray
    conditional: dict[str, np.ndarray] | None = None


def _segment_sum(values: np.ndarray, seg: np.ndarray, n: int) -> np.ndarray:
    """Row sums of ``values`` (R, ...) grouped by the sorted segment ids ``seg`` (R,) into n rows."""
    out = np.zeros((n, *values.shape[1:]))
    if seg.size:
        starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
        out[seg[starts]] = np.add.reduceat(values, starts, axis=0)
    return out


def recover_gated(
    gd: GatedData, hyper: dict[str, np.ndarray], rng: np.random.Generator, *,
    use_data: bool = True, jitter: bool = True, store: np.ndarray | None = None,
    conditional: bool = False,
) -> GatedRecovered:
    """Draw delta, z, tau and rho for each of the S hyperparameter draws (see the module docstring).

    ``use_data=False`` draws from the prior (the likelihood rows are flat).
    ``store`` (sorted indices into the S draws, default all) selects the draws whose
    per-draw arrays are returned; the moments average over all S. A shared store has
    about a million pairs: a thousand draws of four float32 pair variables would be
    16 GB, while the exact per-pair means need every draw but store one number each.
    The randomized pairs' terms are computed by the kernels of
    :mod:`cmp_bayes.model.gated_recover_kernel`; the pairs without data by covariate
    class and memory, averaged over the draws at the end.
    ``conditional=True`` also returns every draw's conditional means of the
    memory-level variables (:attr:`GatedRecovered.conditional`): given the
    hyperparameters the recovery's draws are exact and independent, so the chains
    can disagree on a memory only through them, and these means over all S draws are
    what a memory's R-hat is computed on when the stored draws are thinned.
    """
    base = gd.base
    grid = base.grid
    pts, edges, widths = grid.points, grid.edges, grid.widths
    m, n = base.memory.size, gd.pair_memory.size
    s = next(iter(hyper.values())).shape[0]
    store = np.arange(s) if store is None else np.asarray(store, dtype=np.int64)
    slot = np.full(s, -1, dtype=np.int64)
    slot[store] = np.arange(store.size)
    fn = compile_prior_terms(base, np.zeros(1, dtype=np.int64))
    inf = gd.informative if use_data else np.zeros(0, dtype=np.int64)
    lik, feas, unit = (gd.lik_rows, gd.feas_rows, gd.lik_unit) if use_data else (
        np.ones((0, pts.size)), np.ones((0, pts.size)), np.zeros(0, dtype=np.int64))
    inf_mem = gd.pair_memory[inf]
    # the memories with randomized pair data, and where each one's pairs start in ``inf``
    bounds = np.flatnonzero(np.r_[True, inf_mem[1:] != inf_mem[:-1], True]) if inf.size else np.zeros(1, np.int64)
    kmem = inf_mem[bounds[:-1]]
    unf = np.ones(n, dtype=bool)
    unf[inf] = False
    unf_idx = np.flatnonzero(unf)
    cls = gd.covariate_class
    unf_cls, unf_mem = cls[unf_idx], gd.pair_memory[unf_idx]
    has_pair = np.bincount(gd.pair_memory, minlength=m) > 0
    n_pairs = np.maximum(np.bincount(gd.pair_memory, minlength=m), 1)
    positive = pts > 0
    first_positive = int(np.argmax(positive))
    basis = np.column_stack([np.ones_like(pts), pts, pts**2, positive.astype(np.float64)])
    out = {k: np.empty((store.size, n), dtype=np.float32) for k in ("tau", "rho", "p_relevant")}
    mem = {k: np.empty((store.size, m), dtype=np.float32) for k in ("tau_relevant", "p_relevant_any", "rho", "tau")}
    acc = {k: np.zeros(m) for k in ("pm", "pm2", "pv", "qm", "qm2", "qv", "ppos", "phelp")}
    pmf_acc = np.zeros((m, pts.size))
    pair_acc = {k: np.zeros(n) for k in ("tau", "p_relevant", "p_relevant_positive")}
    # the pairs without data, in blocks of draws: per draw one gate probability per covariate
    # class and E[delta], P(delta > 0) per memory (block x classes floats at most ~5M)
    n_class = gd.class_x.shape[0]
    block = max(1, min(s, 5_000_000 // max(n_class, 1)))
    buf_p = np.empty((n_class, block))
    buf_mean, buf_pos = np.empty((m, block)), np.empty((m, block))
    buf_null = np.empty(block)
    filled = 0
    # conditional means: per draw, the sum over each memory's pairs of E[tau | theta, data]
    cond_tau = np.zeros((s, m)) if conditional else np.zeros((0, m))
    cond_delta = np.empty((s, m)) if conditional else np.zeros((0, m))
    cond_rho = np.empty((s, 2)) if conditional else np.zeros((0, 2))
    p_never_draw = np.empty(s)
    if conditional and unf_idx.size:
        from scipy import sparse

        # memory x covariate class: how many of the memory's pairs without data are in the class
        unf_counts = sparse.csr_matrix(
            (np.ones(unf_idx.size), (unf_mem, unf_cls)), shape=(m, n_class)
        )
        n_unf = np.bincount(unf_mem, minlength=m).astype(np.float64)

    def flush(end: int) -> None:
        """Add the buffered draws (those before ``end``) to the pairs without data."""
        if filled and unf_idx.size:
            sp, st, spos = class_memory_means(
                buf_p[:, :filled], buf_mean[:, :filled], buf_pos[:, :filled], buf_null[:filled], unf_cls, unf_mem,
            )
            pair_acc["p_relevant"][unf_idx] += sp
            pair_acc["tau"][unf_idx] += st
            pair_acc["p_relevant_positive"][unf_idx] += spos
            if conditional:
                # sum over the memory's pairs without data of p E[delta] + (1 - p) E[null]
                gate_sum = np.asarray(unf_counts @ buf_p[:, :filled])  # (M, filled)
                part = buf_mean[:, :filled] * gate_sum + buf_null[None, :filled] * (n_unf[:, None] - gate_sum)
                cond_tau[end - filled : end] += part.T

    y_m, n_m = base.retrieved, base.in_store
    y_q = np.asarray(gd.pairs["retrieved"].values, dtype=np.float64)
    n_q = np.asarray(gd.pairs["in_store"].values, dtype=np.float64)
    coefs = hyper.get("gate_coef")
    never_acc = 0.0
    for i in range(s):
        pmf, weight, ra, rb = fn({k: v[i] for k, v in hyper.items()})
        w = np.r_[0.0, weight[0, 1:] / weight[0, 1:].sum()]  # delta: helps / hurts only
        prior = w @ pmf  # (G,)
        null_pmf = pmf[0]
        pc = class_probability(gd, hyper["gate_intercept"][i], None if coefs is None else coefs[i])
        eta0 = float(hyper["gate_intercept"][i]) + (
            float(gd.x_never @ coefs[i]) if coefs is not None and gd.covariate_names else 0.0
        )
        p_never = 1.0 / (1.0 + np.exp(-eta0))
        never_acc += p_never
        p_never_draw[i] = p_never
        p_inf = pc[cls[inf]]
        raw_null = lik @ null_pmf
        # (U,): a likelihood row's value when irrelevant, the null renormalised over its feasible effects
        null_u = raw_null / np.maximum(feas @ null_pmf, FLOOR)
        lp = np.ones((m, pts.size))
        if inf.size:
            lp[kmem] = memory_products(lik, null_u, unit, bounds, p_inf)
        comp = lp @ pmf.T  # (M, 3): mass of each component times the likelihood
        resp_k = w[None, :] * comp
        marg = resp_k.sum(axis=1, keepdims=True)
        post = lp * prior[None, :] / marg  # (M, G), rows sum to 1
        pmf_acc += post
        # moments of delta: posterior and prior (its own data excluded)
        mt = post @ basis
        acc["pm"] += mt[:, 1]
        acc["pm2"] += mt[:, 1] ** 2
        acc["pv"] += np.maximum(mt[:, 2] - mt[:, 1] ** 2, 0.0)
        acc["ppos"] += mt[:, 3]
        acc["phelp"] += resp_k[:, 1] / marg[:, 0]
        qt = prior @ basis
        acc["qm"] += qt[1]
        acc["qm2"] += qt[1] ** 2
        acc["qv"] += max(qt[2] - qt[1] ** 2, 0.0)
        null_mean = float(null_pmf @ pts)
        # pairs with data: P(z = 1), E[tau] (z delta + (1 - z) x the pair's null posterior mean)
        # and P(z = 1 and delta > 0) given theta; "relevant" alone also counts a memory that hurts
        if inf.size:
            null_post_mean = ((lik * null_pmf[None, :]) @ pts) / np.maximum(raw_null, 1e-300)
            p_rel_inf, e_tau_inf, p_pos_inf = pair_moments(
                lik, null_u, null_post_mean, unit, bounds, p_inf, post[kmem], pts, first_positive,
            )
            pair_acc["p_relevant"][inf] += p_rel_inf
            pair_acc["tau"][inf] += e_tau_inf
            pair_acc["p_relevant_positive"][inf] += p_pos_inf
            if conditional:
                cond_tau[i, kmem] += np.add.reduceat(e_tau_inf, bounds[:-1])
        if conditional:
            cond_delta[i] = mt[:, 1]
            cond_rho[i] = ra[0], rb[0]
        # pairs without data: z independent of delta (the likelihood is flat), P(z = 1) = p
        buf_p[:, filled] = pc
        buf_mean[:, filled] = mt[:, 1]
        buf_pos[:, filled] = mt[:, 3]
        buf_null[filled] = null_mean
        filled += 1
        if filled == block:
            flush(i + 1)
            filled = 0
        j = slot[i]
        if j < 0:
            continue  # only the moments keep this draw
        p = pc[cls]
        p_rel = p.copy()
        cell = sample_rows(post, np.arange(m), rng.random(m))
        pz = p.copy()
        # P(delta > 0 and some z = 1): prod_q (1 - r_mqg) over the memory's pairs
        log_none = np.zeros((m, pts.size))
        if inf.size:
            p_rel[inf] = p_rel_inf
            pz[inf], log_none[kmem] = stored_pair_terms(lik, null_u, unit, bounds, p_inf, cell[kmem])
        log_none += _segment_sum(np.log1p(-p[unf_idx]), unf_mem, m)[:, None]
        mem["p_relevant_any"][j] = (post[:, positive] * -np.expm1(log_none[:, positive])).sum(axis=1)
        # draws: delta per memory, then z per pair given delta's cell
        delta = edges[cell] + rng.random(m) * widths[cell] if jitter else pts[cell]
        z = rng.random(n) < pz
        # an irrelevant pair's null effect: its null posterior (the null pmf where it has no data)
        rows = np.zeros(n, dtype=np.int64)
        rows[inf] = unit + 1
        ncell = sample_rows(np.vstack([null_pmf[None, :], lik * null_pmf[None, :]]), rows, rng.random(n))
        null_tau = edges[ncell] + rng.random(n) * widths[ncell] if jitter else pts[ncell]
        tau = np.where(z, delta[gd.pair_memory], null_tau)
        out["tau"][j] = tau
        out["p_relevant"][j] = p_rel
        mem["tau_relevant"][j] = delta
        # a memory without pairs: one pair of the never-ranked kind, from the gate's prior
        z0 = rng.random(m) < p_never
        mean_tau = _segment_sum(tau, gd.pair_memory, m) / n_pairs
        mem["tau"][j] = np.where(has_pair, mean_tau, np.where(z0, delta, 0.0))
        ra_m, rb_m = ra[0], rb[0]
        if use_data:
            mem["rho"][j] = rng.beta(ra_m + y_m, rb_m + np.maximum(n_m - y_m, 0.0))
            out["rho"][j] = rng.beta(ra_m + y_q, rb_m + np.maximum(n_q - y_q, 0.0))
        else:
            mem["rho"][j] = rng.beta(ra_m, rb_m, size=m)
            out["rho"][j] = rng.beta(ra_m, rb_m, size=n)
    flush(s)
    cond = None
    if conditional:
        tau_memory = np.where(has_pair[None, :], cond_tau / n_pairs[None, :], p_never_draw[:, None] * cond_delta)
        del cond_tau
        a, b = cond_rho[:, :1], cond_rho[:, 1:]
        n_obs = np.maximum(n_m - y_m, 0.0) + y_m if use_data else np.zeros_like(n_m)
        y_obs = y_m if use_data else np.zeros_like(y_m)
        rho_mean = (a + y_obs[None, :]) / (a + b + n_obs[None, :])
        cond = {"tau_relevant": cond_delta, "tau_memory": tau_memory, "utility_memory": rho_mean * tau_memory}
    p_rel_mean = pair_acc["p_relevant"] / s
    p_max = np.full(m, never_acc / s)
    if n:
        first = np.flatnonzero(np.r_[True, gd.pair_memory[1:] != gd.pair_memory[:-1]])
        p_max[gd.pair_memory[first]] = np.maximum.reduceat(p_rel_mean, first)
    post_mean = acc["pm"] / s
    prior_mean = acc["qm"] / s
    return GatedRecovered(
        tau=out["tau"], rho=out["rho"], p_relevant=out["p_relevant"],
        tau_relevant=mem["tau_relevant"], p_relevant_any=mem["p_relevant_any"],
        rho_memory=mem["rho"], tau_memory=mem["tau"],
        post_mean=post_mean,
        post_sd=np.sqrt(np.maximum(acc["pv"] / s + acc["pm2"] / s - post_mean**2, 0.0)),
        prior_mean=prior_mean,
        prior_sd=np.sqrt(np.maximum(acc["qv"] / s + acc["qm2"] / s - prior_mean**2, 0.0)),
        p_positive=acc["ppos"] / s, p_helps=acc["phelp"] / s,
        pair_tau_mean=pair_acc["tau"] / s, pair_p_relevant_mean=p_rel_mean,
        pair_p_relevant_positive_mean=pair_acc["p_relevant_positive"] / s, p_relevant_max=p_max,
        delta_pmf=pmf_acc / s, conditional=cond,
    )
