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

from typing import Final

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
    # log weights (M, S, D), shifted by their row maximum so exp never underflows to all-zero
    logw = -(n[:, :, None] / (2.0 * OUTCOME_VAR)) * (tau[:, None, :] - tau_hat[:, :, None]) ** 2
    logw -= logw.max(axis=2, keepdims=True)
    w = np.exp(logw)
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
    tau_hat = np.stack([hat_useless, hat_useful], axis=1)  # (M, 2)
    todo = np.ones(m, dtype=bool)
    start = np.asarray(start, dtype="float64")
    for i, n in enumerate(_N_GRID):
        # every memory is tried first at its own start, then at grid points above it
        idx = np.flatnonzero(todo & ((n >= start) | (i == 0)))
        if idx.size == 0:
            continue
        n_eff = np.maximum(float(n), start[idx])
        p = reweighted_p(estimand[idx], tau[idx], tau_hat[idx], n_eff, threshold)
        forget_if_useless = p[:, 0] < forget_below
        keep_if_useful = (p[:, 1] >= forget_below) | (n_useful[idx] == 0)
        done = forget_if_useless & keep_if_useful
        out[idx[done]] = n_eff[done]
        todo[idx[done]] = False
        if not todo.any():
            break
    return out


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
