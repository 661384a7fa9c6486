"""Per-draw recovery of each memory's tau and rho from hyperparameter draws.

For one draw of theta, memory m's posterior on the grid is exactly
w_mg ∝ prior_mg(theta) exp(L_mg) with prior_mg = sum_k w_mk pmf_kg, and its
prior (its own data excluded) is prior_mg(theta). Because the likelihood row
depends only on the memory's pattern p (see ``grid.likelihood_patterns``), the
posterior is a mixture over components k of the per-(p, k) densities
pmf_kg lik_pg / c_pk with responsibilities r_mk ∝ w_mk c_pk, where
c_pk = sum_g pmf_kg lik_pg. Every per-draw table is therefore (P x 3 x G), not
(M x G): a memory's draw is a component (from r_m) then a grid cell (from its
(p, k) table), and its moments are r-weighted sums of the table moments. The
cost per draw stops growing with M once the number of patterns does.

We draw one tau per draw (uniform within the grid cell when ``jitter``), and
one rho from its conjugate Beta posterior, and accumulate the Rao-Blackwellised
moments of both prior and posterior (law of total variance over draws) for
contraction and mean shift.

With ``pointwise=True`` each exposed memory's marginal log-likelihood per draw
comes out too (the ``log_likelihood`` group, docs/model.md): the unnormalised
responsibilities' row sum sum_k w_mk c_pk is already the memory's marginal
likelihood under the draw's prior, so the extra work per draw is a log per
memory and, for the truncated likelihood, the feasible mass
sum_k w_mk (pmf_k . exp(F_p)) over the few distinct feasibility rows.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt

from cmp_bayes.model.build import ModelData, hyper_shapes, prior_key, prior_terms
from cmp_bayes.progress import Progress


@dataclass
class Recovered:
    """Per-memory draws and Rao-Blackwellised moments.

    Attributes
    ----------
    tau, rho : ndarray, shape (S, M), float32
        One draw per hyperparameter draw.
    post_mean, post_sd, prior_mean, prior_sd : ndarray, shape (M,)
        Exact (on the grid) moments of tau, averaged over the S draws.
    p_positive : ndarray, shape (M,)
        Rao-Blackwellised P(tau > 0 | data).
    p_helps : ndarray, shape (M,)
        Rao-Blackwellised posterior probability that the memory belongs to the
        "helps" component of the mixture (its prior weight when it has no data).
    log_lik : ndarray, shape (S, Mi), float64, or None
        With ``pointwise=True``: per draw, the marginal log-likelihood of each of
        the Mi memories ``ModelData.informative`` (those with exposures), the
        term the model's ``tau_marginal`` potential sums plus its offset
        (:func:`pointwise_offset`).
    """

    tau: np.ndarray
    rho: np.ndarray
    post_mean: np.ndarray
    post_sd: np.ndarray
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    p_positive: np.ndarray
    p_helps: np.ndarray
    log_lik: np.ndarray | None = None


def compile_prior_terms(
    data: ModelData, rows: np.ndarray | None = None
) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """A compiled function theta (keyword arrays) -> (pmf (3, G), weight (R, 3), rho_a, rho_b).

    R = M, or the memories ``rows`` only.
    """
    # one PyTensor compile per (data, rows): it costs seconds, and fit asks twice
    cache = data.prior_fn_cache
    key = None if rows is None else np.asarray(rows, dtype=np.int64).tobytes()
    if key in cache:
        return cache[key]
    shapes = hyper_shapes(data)
    inputs = {n: pt.tensor(name=n, shape=s, dtype="float64") for n, s in shapes.items()}
    terms = prior_terms(inputs, data, rows)
    fn = pytensor.function(
        list(inputs.values()),
        [pt.exp(terms["log_pmf"]), pt.exp(terms["log_weight"]), terms["rho_a"], terms["rho_b"]],
        on_unused_input="ignore",
    )
    names = list(inputs)
    cache[key] = lambda values: fn(*[np.asarray(values[n], dtype=np.float64) for n in names])
    return cache[key]


def sample_rows(
    dens: np.ndarray, row: np.ndarray, u: np.ndarray, scratch: np.ndarray | None = None
) -> np.ndarray:
    """Inverse-CDF draws: for each i, a cell g drawn with probability ∝ ``dens[row[i], g]``.

    ``dens`` (R, G) is non-negative; ``u`` (n,) in [0, 1). Rows are normalised
    and laid end to end in one cumulative sum (row r spans [r, r + 1] of it; cells
    with mass below ~1e-13 of their row share their neighbours' draws), and each
    draw is a binary search confined to its own row: log2(G) vectorised steps
    whose reads stay within one row, instead of an (n x G) comparison or a
    search over all R x G cells. Rows without mass (never drawn from by the
    caller) give the last cell. ``scratch`` (R * G floats, overwritten) saves an
    allocation per call.
    """
    r, g = dens.shape
    tot = dens.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = np.where(tot > 0, 1.0 / tot, 0.0)
        rows = np.multiply(dens, inv, out=None if scratch is None else scratch.reshape(r, g))
    # A row whose mass is subnormal (a likelihood that underflowed to ~1e-310) has no
    # finite reciprocal: 1 / tot is inf, and inf * 0 is NaN, which the one cumulative
    # sum below would carry into every later row. Such rows divide exactly instead.
    tiny = np.flatnonzero(np.isinf(inv[:, 0]))
    if tiny.size:
        rows[tiny] = dens[tiny] / tot[tiny]
    flat = rows.ravel()
    np.cumsum(flat, out=flat)
    start = np.concatenate([[0.0], flat[g - 1 :: g]])  # running sum before each row
    target = start[row] + u * (start[row + 1] - start[row])
    # the first cell of the row whose running sum exceeds the target
    lo = row * g
    hi = lo + (g - 1)
    for _ in range(int(np.ceil(np.log2(g)))):
        mid = (lo + hi) >> 1
        right = flat[mid] <= target
        np.copyto(lo, mid + 1, where=right)
        np.copyto(hi, mid, where=~right)
    return lo - row * g


#: Draws are recovered in this many interleaved chunks, each with its own random
#: stream spawned from the caller's generator, so results do not depend on the
#: number of threads that run them.
CHUNKS: int = 4

#: Seconds a recovery runs before its bar draws: small fits recover in well under
#: a second and draw nothing; 10k memories x 1000 draws take tens of seconds.
RECOVERY_BAR_DELAY: float = 3.0


def recover(
    data: ModelData,
    hyper: dict[str, np.ndarray],
    rng: np.random.Generator,
    *,
    use_data: bool = True,
    jitter: bool = True,
    threads: int | None = None,
    pointwise: bool = False,
    progress: bool = False,
) -> Recovered:
    """Draw tau and rho per memory for each of the S hyperparameter draws.

    Parameters
    ----------
    data : ModelData
    hyper : dict name -> ndarray of shape (S, *shape)
        Hyperparameter draws, flattened over chains.
    rng : numpy Generator
    use_data : bool
        False draws from the prior (the prior group): no likelihood, rho from its Beta prior.
    jitter : bool
        Spread tau uniformly within its grid cell.
    threads : int, optional
        Worker threads (default: the CPU count, at most ``CHUNKS``). numpy releases
        the GIL in the array work, so draws recover in parallel; the result is the
        same for any number of threads.
    pointwise : bool
        Also compute each exposed memory's marginal log-likelihood per draw
        (``Recovered.log_lik``); needs ``use_data``.
    progress : bool
        A bar over the S draws (completed / S, draws per second, time left) on
        stderr, once the recovery has run :data:`RECOVERY_BAR_DELAY` seconds;
        only on a terminal and unless quiet (:mod:`cmp_bayes.progress`).
    """
    if pointwise and not use_data:
        raise ValueError("the pointwise log-likelihood needs use_data=True")
    m = data.memory.size
    # compute each distinct prior once and gather
    key = prior_key(data, np.arange(m))
    _, first, prior_of = np.unique(key, axis=0, return_index=True, return_inverse=True)
    ctx = _Context(
        data=data, fn=compile_prior_terms(data, first), prior_of=prior_of.reshape(-1),
        hyper=hyper, use_data=use_data, jitter=jitter, lock=threading.Lock(),
    )
    s = next(iter(hyper.values())).shape[0]
    tau = np.empty((s, m), dtype=np.float32)
    rho = np.empty((s, m), dtype=np.float32)
    if pointwise:
        ctx.pointwise = pointwise_context(data)
        ctx.log_lik = np.empty((s, data.informative.size))
    chunks = [np.arange(c, s, CHUNKS) for c in range(min(CHUNKS, s))]
    streams = rng.spawn(len(chunks))
    workers = max(1, min(threads or os.cpu_count() or 1, len(chunks)))
    what = "recovering tau, rho" if use_data else "recovering the prior"
    bar = Progress(None if progress else True, delay=RECOVERY_BAR_DELAY).bar(what, total=s, unit="draws")
    with bar, ThreadPoolExecutor(max_workers=workers) as pool:
        ctx.advance = bar.advance if bar.drawing else None
        parts = list(pool.map(lambda a: _recover_draws(ctx, a[0], a[1], tau, rho), zip(chunks, streams, strict=True)))
    acc = {k: sum(p[k] for p in parts) for k in parts[0]}
    # law of total variance over the hyperparameter draws
    post_mean = acc["pm"] / s
    post_sd = np.sqrt(np.maximum(acc["pv"] / s + acc["pm2"] / s - post_mean**2, 0.0))
    prior_mean = acc["qm"] / s
    prior_sd = np.sqrt(np.maximum(acc["qv"] / s + acc["qm2"] / s - prior_mean**2, 0.0))
    return Recovered(
        tau=tau, rho=rho, post_mean=post_mean, post_sd=post_sd,
        prior_mean=prior_mean, prior_sd=prior_sd, p_positive=acc["ppos"] / s,
        p_helps=acc["phelp"] / s, log_lik=ctx.log_lik,
    )


def pointwise_offset(data: ModelData) -> np.ndarray:
    """Per exposed memory (``data.informative``), what the grid rows' shift removed.

    The model's potential uses likelihood rows shifted to maximum 0 (constants do
    not move the hyperparameters); the pointwise log-likelihood adds this back so
    that its values are the full log-likelihood of each memory's exposed arm,
    comparable between model variants (``effect_bound``, grid, priors) on the
    same log. Zero when the rows carry no offset (per-query likelihoods).
    """
    if data.pattern_offset is None:
        return np.zeros(data.informative.size)
    return data.pattern_offset[data.pattern[data.informative]]


@dataclass
class _Pointwise:
    """What the pointwise log-likelihood reads per draw (exposed memories only)."""

    rows: np.ndarray  # (Mi,) the exposed memories
    offset: np.ndarray  # (Mi,) see pointwise_offset
    feas: np.ndarray | None  # (Fu, G) distinct exp(F) rows, or None (no truncation)
    feas_of: np.ndarray | None  # (Mi,) each exposed memory's row of ``feas``


def pointwise_context(data: ModelData) -> _Pointwise:
    """The exposed memories, their offsets and their distinct feasibility rows (exp F).

    Shared by the pointwise log-likelihood here and the prior-sensitivity ratios
    (:mod:`cmp_bayes.model.sensitivity`), which need the same truncation normaliser.
    """
    rows = data.informative
    logfeas = data.log_feasibility()
    feas = feas_of = None
    if logfeas is not None and rows.size:
        # F depends on the control arm only: few distinct rows (as in build_model)
        frows, floc = np.unique(logfeas[data.pattern[rows]], axis=0, return_inverse=True)
        feas, feas_of = np.exp(frows), floc.reshape(-1)
    return _Pointwise(rows=rows, offset=pointwise_offset(data), feas=feas, feas_of=feas_of)


@dataclass
class _Context:
    """What every chunk of draws shares (read-only, except ``fn`` under ``lock``)."""

    data: ModelData
    fn: Any
    prior_of: np.ndarray
    hyper: dict[str, np.ndarray]
    use_data: bool
    jitter: bool
    lock: threading.Lock
    pointwise: _Pointwise | None = None
    log_lik: np.ndarray | None = None  # (S, Mi), filled in place when ``pointwise``
    advance: Callable[[float], None] | None = None  # the progress bar's, one call per draw done


def _recover_draws(
    ctx: _Context, draws: np.ndarray, rng: np.random.Generator, tau: np.ndarray, rho: np.ndarray
) -> dict[str, np.ndarray]:
    """Fill rows ``draws`` of ``tau`` and ``rho``; return this chunk's moment sums."""
    data = ctx.data
    m = data.memory.size
    pts, edges, widths = data.grid.points, data.grid.edges, data.grid.widths
    if ctx.use_data:
        lik = np.exp(data.pattern_loglik)  # (P, G)
        pattern = data.pattern
    else:
        lik = np.ones((1, pts.size))
        pattern = np.zeros(m, dtype=np.int64)
    n_pat = lik.shape[0]
    # columns: 1, tau, tau^2, 1[tau > 0]
    basis = np.column_stack([np.ones_like(pts), pts, pts**2, (pts > 0).astype(np.float64)])
    acc = {k: np.zeros(m) for k in ("pm", "pm2", "pv", "qm", "qm2", "qv", "ppos", "phelp")}
    y, n = data.retrieved, data.in_store
    dens = np.empty((n_pat, 3, pts.size))  # reused: fresh large temporaries cost page faults
    scratch = np.empty(dens.size)
    for i in draws:
        with ctx.lock:  # a compiled PyTensor function is not thread-safe
            pmf, weight, ra, rb = ctx.fn({k: v[i] for k, v in ctx.hyper.items()})
        weight, ra, rb = weight[ctx.prior_of], ra[ctx.prior_of], rb[ctx.prior_of]
        # prior moments: mixtures of the component moments
        cm = pmf @ basis  # (3, 4)
        qm = weight @ cm[:, 1]
        qv = np.maximum(weight @ cm[:, 2] - qm**2, 0.0)
        acc["qm"] += qm
        acc["qm2"] += qm**2
        acc["qv"] += qv
        # per (pattern, component) posterior tables
        np.multiply(pmf[None, :, :], lik[:, None, :], out=dens)  # (P, 3, G)
        mom = dens @ basis  # (P, 3, 4): mass c_pk, then unnormalised moments
        c = mom[..., 0]
        resp = weight * c[pattern]  # (M, 3)
        marginal = resp.sum(axis=1, keepdims=True)  # each memory's likelihood under the draw's prior
        if ctx.pointwise is not None:
            _pointwise_draw(ctx, i, marginal[:, 0], pmf, weight)
        resp /= marginal
        with np.errstate(invalid="ignore", divide="ignore"):
            tm = np.where(c[..., None] > 0, mom[..., 1:] / c[..., None], 0.0)  # (P, 3, 3)
        mt = np.einsum("mk,mkj->mj", resp, tm[pattern])  # (M, 3): E tau, E tau^2, P(tau > 0)
        acc["pm"] += mt[:, 0]
        acc["pm2"] += mt[:, 0] ** 2
        acc["pv"] += np.maximum(mt[:, 1] - mt[:, 0] ** 2, 0.0)
        acc["ppos"] += mt[:, 2]
        acc["phelp"] += resp[:, 1]
        # draw: a component from resp, then a cell from that (pattern, component) table
        k = (rng.random(m)[:, None] > np.cumsum(resp, axis=1)[:, :2]).sum(axis=1)
        idx = sample_rows(dens.reshape(n_pat * 3, -1), pattern * 3 + k, rng.random(m), scratch=scratch)
        t = pts[idx]
        if ctx.jitter:
            t = edges[idx] + rng.random(m) * widths[idx]
        tau[i] = t
        if ctx.use_data:
            rho[i] = rng.beta(ra + y, rb + np.maximum(n - y, 0.0))
        else:
            rho[i] = rng.beta(ra, rb)
        if ctx.advance is not None:
            ctx.advance(1)
    return acc


def _pointwise_draw(ctx: _Context, i: int, marginal: np.ndarray, pmf: np.ndarray, weight: np.ndarray) -> None:
    """Row ``i`` of ``ctx.log_lik``: the model's per-memory tau term at draw ``i``, plus offsets."""
    pw = ctx.pointwise
    # only called when the context was built with pointwise=True, which fills both
    assert pw is not None and ctx.log_lik is not None
    r = pw.rows
    # the same floor as the model's potential (build_model): only rows negligible under every component
    ll = np.log(np.maximum(marginal[r], 1e-300))
    if pw.feas is not None:
        # the truncated prior's feasible mass under the draw's (normalised) weights
        mass = pw.feas @ pmf.T  # (Fu, 3)
        ll -= np.log(np.einsum("mk,mk->m", weight[r], mass[pw.feas_of]))
    ctx.log_lik[i] = ll + pw.offset
