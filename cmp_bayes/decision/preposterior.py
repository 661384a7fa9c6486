"""Preposterior analysis on posterior draws: what would n more exposures tell us?

Model of the future data (a normal approximation stated once here and used by
both ``exposures_needed`` in :func:`cmp_bayes.decision.rule.decide` and the value
of information in :func:`cmp_bayes.decision.recommend.recommend_exposures`):
n more randomized exposures of memory m give an exposed-arm mean whose
difference from the memory's control-arm mean is

    tau_hat ~ Normal(tau_m, s2 / n),   s2 = 0.25.

``s2 = 0.25`` bounds the variance of any outcome in [0, 1] (Popoviciu's
inequality; it is the variance of a fair coin), so the approximation errs
towards needing more exposures. The control arm is large (every step the
memory is in the store but not in the context) and its variance is ignored.
Since the new data are independent of the old given tau_m, the updated
posterior is the current one reweighted by the new likelihood: for draws
tau_d, weight w_d proportional to exp(-n (tau_d - tau_hat)^2 / (2 s2)). The
estimand's draws (tau or rho * tau) are read with those weights.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np

#: Variance bound of one outcome in [0, 1] (outcome units squared).
OUTCOME_VAR: Final[float] = 0.25
#: Largest number of extra exposures ``exposures_to_resolve`` looks at.
MAX_EXPOSURES: Final[int] = 10_000
#: Candidate exposure counts: every count up to 30, then about 8% steps.
_N_GRID: Final[np.ndarray] = np.unique(
    np.concatenate([np.arange(1, 31), np.round(np.geomspace(31, MAX_EXPOSURES, 80)).astype(int)])
)


def reweighted_p(
    estimand: np.ndarray, tau: np.ndarray, tau_hat: np.ndarray, n: np.ndarray, threshold: float
) -> np.ndarray:
    """P(estimand > threshold) after n exposures that returned ``tau_hat``.

    Parameters
    ----------
    estimand, tau : numpy.ndarray
        Draws, shape ``(M, D)``: M memories, D draws (matching draws).
    tau_hat : numpy.ndarray
        Hypothetical arm differences, shape ``(M, S)`` (outcome units).
    n : numpy.ndarray
        Exposures, shape ``(M,)`` or ``(M, S)``, > 0.
    threshold : float
        Usefulness threshold on the estimand's scale.

    Returns
    -------
    numpy.ndarray
        Shape ``(M, S)``, probabilities in [0, 1].
    """
    n = np.asarray(n, dtype="float64")
    n = n[:, None] if n.ndim == 1 else n
    # log weights (M, S, D), shifted by their row maximum so exp never underflows to all-zero;
    # -(n / 2 s2) * (tau - tau_hat)^2 computed in one (M, S, D) buffer, the same operations
    logw = np.subtract(tau[:, None, :], tau_hat[:, :, None])
    np.square(logw, out=logw)
    if logw.dtype != np.float64:  # float32 draws: the product below is float64, as before
        logw = logw.astype(np.float64)
    np.multiply(-(n[:, :, None] / (2.0 * OUTCOME_VAR)), logw, out=logw)
    logw -= logw.max(axis=2, keepdims=True)
    w = np.exp(logw, out=logw)
    useful = (estimand > threshold).astype("float64")
    return np.einsum("msd,md->ms", w, useful) / w.sum(axis=2)


def exposures_to_resolve(
    estimand: np.ndarray,
    tau: np.ndarray,
    threshold: float,
    forget_below: float,
    start: np.ndarray,
) -> np.ndarray:
    """Least extra exposures after which the forget rule can tell useful from useless.

    A memory is "resolved" after n extra exposures when both hold:

    * if it behaves like the posterior's useless draws (``tau_hat`` = mean of
      tau over draws with estimand <= threshold), the updated P(useful) is
      below ``forget_below`` (the rule would forget it), and
    * if it behaves like the posterior's useful draws (``tau_hat`` = mean of
      tau over draws with estimand > threshold), the updated P(useful) is at
      or above ``forget_below`` (the rule would keep it).

    So n is the experiment size at which a forget is no longer a bet on the
    prior: a useful memory would have shown itself. When the posterior has no
    useful draws the second condition is void (and the first alone decides).

    Parameters
    ----------
    estimand, tau : numpy.ndarray
        Draws, shape ``(M, D)``.
    threshold : float
        Usefulness threshold (estimand scale).
    forget_below : float
        ``retain_cost / (forget_cost + retain_cost)``.
    start : numpy.ndarray
        Least admissible n per memory, shape ``(M,)``, ints >= 1.

    Returns
    -------
    numpy.ndarray
        float64 shape ``(M,)``: the smallest admissible n on a grid (every
        integer up to 30, then steps of about 8%), or NaN when even
        ``MAX_EXPOSURES`` does not resolve the memory.

    Notes
    -----
    Every memory is tried at its own start, then at each grid point above it
    (the plain scan over the grid). A try's verdict is :func:`reweighted_p`
    unless a certain bound settles it first: most tries fail because the
    useful-like P(useful) is still below ``forget_below``, and almost every
    useless-like one is far below it; :func:`_surely_below` proves both from a
    few numbers per useful draw, so the reweighting of all D draws runs about
    once per memory (the try that succeeds) instead of twice per try.
    """
    m = estimand.shape[0]
    out = np.full(m, np.nan)
    if m == 0:
        return out
    start = np.asarray(start, dtype="float64")
    tau_hat, bounds = _screening(estimand, tau, threshold)
    useless_like, useful_like = bounds
    no_useful = useful_like.no_useful
    todo = np.arange(m)  # memories not yet resolved
    for i, n in enumerate(_N_GRID):
        # every memory is tried first at its own start, then at grid points above it
        idx = todo if i == 0 else todo[n >= start[todo]]
        if idx.size == 0:
            if todo.size == 0:
                break
            continue
        n_eff = np.maximum(float(n), start[idx])
        # keep_if_useful: void without useful draws; surely false where the bound says so
        open_ = no_useful[idx] | ~_surely_below(useful_like, idx, n_eff, forget_below)
        idx, n_eff = idx[open_], n_eff[open_]
        if idx.size == 0:
            continue
        keep = no_useful[idx].copy()
        ask = np.flatnonzero(~keep)
        if ask.size:
            p1 = _p_after(estimand, tau, tau_hat[:, 1], idx[ask], n_eff[ask], threshold)
            keep[ask] = p1 >= forget_below
        idx, n_eff = idx[keep], n_eff[keep]
        # forget_if_useless: surely true where the bound says so, else computed
        forget = _surely_below(useless_like, idx, n_eff, forget_below)
        ask = np.flatnonzero(~forget)
        if ask.size:
            p0 = _p_after(estimand, tau, tau_hat[:, 0], idx[ask], n_eff[ask], threshold)
            forget[ask] = p0 < forget_below
        out[idx[forget]] = n_eff[forget]
        todo = np.setdiff1d(todo, idx[forget], assume_unique=True)
    return out


def plain_scan(
    estimand: np.ndarray, tau: np.ndarray, threshold: float, forget_below: float, start: np.ndarray
) -> np.ndarray:
    """:func:`exposures_to_resolve` without its screening bound, the reference it is held to.

    Every try reweights all draws for both ``tau_hat`` (twice the work), so it
    is kept out of ``decide``; ``tests/test_fast_decide.py`` checks that the
    screened scan returns the same numbers, and ``benchmarks/bench_decide.py``
    times it as the "before" kernel. Arguments and result as
    :func:`exposures_to_resolve`.
    """
    m = estimand.shape[0]
    out = np.full(m, np.nan)
    if m == 0:
        return out
    useful = estimand > threshold
    n_useful = useful.sum(axis=1)
    n_useless = (~useful).sum(axis=1)
    hat_useless = np.where(
        n_useless > 0, (tau * ~useful).sum(axis=1) / np.maximum(n_useless, 1), 0.0
    )
    hat_useful = np.where(n_useful > 0, (tau * useful).sum(axis=1) / np.maximum(n_useful, 1), 0.0)
    tau_hat = np.stack([hat_useless, hat_useful], axis=1)
    todo = np.ones(m, dtype=bool)
    start = np.asarray(start, dtype="float64")
    for i, n in enumerate(_N_GRID):
        idx = np.flatnonzero(todo & ((n >= start) | (i == 0)))
        if idx.size == 0:
            continue
        n_eff = np.maximum(float(n), start[idx])
        p = reweighted_p(estimand[idx], tau[idx], tau_hat[idx], n_eff, threshold)
        done = (p[:, 0] < forget_below) & ((p[:, 1] >= forget_below) | (n_useful[idx] == 0))
        out[idx[done]] = n_eff[done]
        todo[idx[done]] = False
        if not todo.any():
            break
    return out


def _p_after(
    estimand: np.ndarray,
    tau: np.ndarray,
    hat: np.ndarray,
    idx: np.ndarray,
    n: np.ndarray,
    threshold: float,
) -> np.ndarray:
    """:func:`reweighted_p` of memories ``idx`` for one ``tau_hat`` each (``hat[idx]``),
    in blocks of :data:`_SCREEN_BLOCK` memories (each memory's row is computed alone, so
    the numbers are the same as in one call; the temporaries stay small and reused)."""
    out = np.empty(idx.size)
    for lo in range(0, idx.size, _SCREEN_BLOCK):
        rows = idx[lo : lo + _SCREEN_BLOCK]
        out[lo : lo + rows.size] = reweighted_p(
            estimand[rows], tau[rows], hat[rows, None], n[lo : lo + rows.size], threshold
        )[:, 0]
    return out


#: Memories per block of :func:`_screening` (its temporaries stay in cache;
#: whole-array temporaries of 10^7 draws cost more in page faults than in sums).
_SCREEN_BLOCK: Final[int] = 512
#: Slack (natural-log units) of :func:`_surely_below`: it answers "surely
#: below" only when the bound clears ``forget_below`` by a factor exp(1e-6), far
#: above the rounding of either side (~1e-10 even at n = MAX_EXPOSURES), so it
#: never contradicts what reweighted_p would have computed.
_BOUND_SLACK: Final[float] = 1e-6
#: Most useful draws per memory that :func:`_surely_below` sums (the (M, K)
#: table stays small when a few memories have mostly useful draws).
_BOUND_USEFUL: Final[int] = 128


class _Bound(NamedTuple):
    """Per-memory numbers of the screening bound for one ``tau_hat`` (:func:`_screening`).

    ``log_w_useful`` (M, K): log weight per exposure, ``-(tau - tau_hat)^2 / (2 s2)``,
    of each useful draw (K = most useful draws of any memory, at most
    :data:`_BOUND_USEFUL`; -inf pads); ``summed`` (M,): the memory's useful
    draws all fit in those K; (M,) the largest log weight of a useful draw
    ``max_log_w_useful`` and ``log_n_useful``, the log of the number of useful
    draws (-inf when none); ``mean_log_w_useless`` (M,): the same averaged over the useless draws;
    ``log_n_useless`` (M,): log of their count (-inf when none); ``no_useful``
    (M,): the memory has no useful draw.
    """

    log_w_useful: np.ndarray
    summed: np.ndarray
    max_log_w_useful: np.ndarray
    log_n_useful: np.ndarray
    mean_log_w_useless: np.ndarray
    log_n_useless: np.ndarray
    no_useful: np.ndarray


def _screening(
    estimand: np.ndarray, tau: np.ndarray, threshold: float
) -> tuple[np.ndarray, tuple[_Bound, _Bound]]:
    """``tau_hat`` (M, 2: the useless, the useful draws' mean tau) and the bound of each."""
    m, d = estimand.shape
    n_useful = np.empty(m, dtype="int64")
    above = np.empty((m, d), dtype=bool)  # the useful draws, compared once (1 byte a draw)
    for lo in range(0, m, _SCREEN_BLOCK):
        sl = slice(lo, lo + _SCREEN_BLOCK)
        np.greater(estimand[sl], threshold, out=above[sl])
        n_useful[sl] = above[sl].sum(axis=1)
    # memories with more useful draws than _BOUND_USEFUL keep only the cheap bound
    k = int(min(max(n_useful.max(), 1), _BOUND_USEFUL))
    summed = n_useful <= k
    tau_hat = np.empty((m, 2))
    log_w_useful = np.full((2, m, k), -np.inf)
    max_useful = np.full((2, m), -np.inf)
    mean_useless = np.zeros((2, m))
    scale = -1.0 / (2.0 * OUTCOME_VAR)
    for lo in range(0, m, _SCREEN_BLOCK):
        sl = slice(lo, lo + _SCREEN_BLOCK)
        useful, t = above[sl], tau[sl]
        n_u = n_useful[sl]
        n_l = d - n_u
        rest = np.where(useful, 0.0, t)
        s1, s2 = rest.sum(axis=1), (rest * rest).sum(axis=1)  # sum tau, tau^2 over useless
        row, col = np.nonzero(useful)  # row-major: each row's useful draws in turn
        slot = np.arange(row.size) - np.repeat(np.cumsum(n_u) - n_u, n_u)
        tau_hat[sl, 0] = np.where(n_l > 0, s1 / np.maximum(n_l, 1), 0.0)
        # the plain scan's expression, so tau_hat is the same to the bit
        tau_hat[sl, 1] = np.where(n_u > 0, (t * useful).sum(axis=1) / np.maximum(n_u, 1), 0.0)
        keep = summed[sl][row]
        for h in (0, 1):
            hat = tau_hat[sl, h]
            # mean of (tau - hat)^2 over the useless draws; its rounding (~1e-16 for
            # |tau| <= 1) is far inside _BOUND_SLACK even at MAX_EXPOSURES
            spread = (s2 - 2.0 * hat * s1) / np.maximum(n_l, 1) + hat * hat
            mean_useless[h, sl] = scale * spread
            log_w = scale * (t[row, col] - hat[row]) ** 2  # of every useful draw
            np.maximum.at(max_useful[h], lo + row, log_w)
            log_w_useful[h, lo + row[keep], slot[keep]] = log_w[keep]
    with np.errstate(divide="ignore"):
        log_n_useless = np.log((d - n_useful).astype("float64"))
        log_n_useful = np.log(n_useful.astype("float64"))
    no_useful = n_useful == 0
    bounds = tuple(
        _Bound(
            log_w_useful[h],
            summed,
            max_useful[h],
            log_n_useful,
            mean_useless[h],
            log_n_useless,
            no_useful,
        )
        for h in (0, 1)
    )
    return tau_hat, (bounds[0], bounds[1])


def _surely_below(
    bound: _Bound, idx: np.ndarray, n: np.ndarray, forget_below: float
) -> np.ndarray:
    """Memories ``idx`` whose P(useful) after ``n`` exposures at the bound's ``tau_hat``
    is surely below ``forget_below``, bool ``(len(idx),)``.

    After n exposures, P(useful) = U / (U + L) with U, L the sums of
    ``exp(n * log_w)`` over the useful and the useless draws. By Jensen's
    inequality L >= n_useless * exp(n * mean(log_w | useless)), so
    ``U (1 - c) < c * that`` proves P(useful) < c. In logs, with U from the K
    useful draws alone; :data:`_BOUND_SLACK` absorbs rounding. False where
    nothing is proved (no useless draws, ``forget_below`` at 0 or 1); P(useful)
    is 0 for a memory with no useful draw, so it is True there when c > 0.
    """
    if not 0.0 < forget_below < 1.0:
        return np.zeros(idx.size, dtype=bool)  # nothing to prove at the edges
    no_useful = bound.no_useful[idx]
    log_l = bound.log_n_useless[idx] + n * bound.mean_log_w_useless[idx]
    # U < c L (1 - c)^-1 in logs, first with U <= n_useful * exp(n * max log_w)
    # (two numbers per memory), then, for what that leaves, with U summed
    limit = np.log(forget_below) - np.log1p(-forget_below) + log_l - _BOUND_SLACK
    with np.errstate(invalid="ignore"):
        surely = bound.log_n_useful[idx] + n * bound.max_log_w_useful[idx] < limit
    rest = np.flatnonzero(~surely & ~no_useful & np.isfinite(limit) & bound.summed[idx])
    if rest.size:
        a = bound.log_w_useful[idx[rest]] * n[rest, None]
        top = a.max(axis=1)
        log_u = top + np.log(np.exp(a - top[:, None]).sum(axis=1))
        surely[rest] = log_u < limit[rest]
    return (surely & np.isfinite(limit)) | no_useful


def expected_loss_after(
    estimand: np.ndarray,
    tau: np.ndarray,
    n: np.ndarray,
    threshold: float,
    forget_cost: float,
    retain_cost: float,
    rng: np.random.Generator,
    chunk: int = 64,
) -> np.ndarray:
    """Preposterior expected decision loss after n more exposures, forget allowed.

    For each draw j taken as the truth, one hypothetical ``tau_hat_j ~
    Normal(tau_j, s2 / n)`` is drawn, the posterior is reweighted, and the
    Bayes loss ``min(forget_cost * p', retain_cost * (1 - p'))`` is taken;
    the result is the mean over j (a Monte Carlo average over the prior
    predictive of the new data).

    Parameters
    ----------
    estimand, tau : numpy.ndarray
        Draws, shape ``(M, D)``.
    n : numpy.ndarray
        Extra exposures per memory, shape ``(M,)``, >= 1.
    threshold, forget_cost, retain_cost : float
        As in :class:`cmp_bayes.decision.costs.Costs`.
    rng : numpy.random.Generator
        Source of the hypothetical data.
    chunk : int
        Memories per vectorised block (memory use ``chunk * D * D`` floats).

    Returns
    -------
    numpy.ndarray
        float64 shape ``(M,)``, cost units.
    """
    m, d = estimand.shape
    out = np.empty(m)
    n = np.asarray(n, dtype="float64")
    for lo in range(0, m, chunk):
        sl = slice(lo, min(lo + chunk, m))
        sd = np.sqrt(OUTCOME_VAR / n[sl])[:, None]
        tau_hat = tau[sl] + sd * rng.standard_normal((sl.stop - sl.start, d))
        p = reweighted_p(estimand[sl], tau[sl], tau_hat, n[sl], threshold)
        loss = np.minimum(forget_cost * p, retain_cost * (1.0 - p))
        out[sl] = loss.mean(axis=1)
    return out
