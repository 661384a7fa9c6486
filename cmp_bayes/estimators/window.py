"""The window arm's estimator: a self-normalized IPW (Hajek) contrast per (memory, query) pair.

Estimand. In a window design (the spec's "Targeted exposure") memory ``m`` is
eligible for a window slot at the steps ``t`` of query ``q`` where it is in
the window ``W_t``, each with its own propensity ``pi_t = (k - j) / |W_t|``.
Over the eligible steps with ``0 < pi_t < 1`` (the set ``N``, size ``n``),

    tau_W(m, q) = (1/n) sum_{t in N} (E[Y_t | m exposed] - E[Y_t | m not exposed]),

the effect of putting ``m`` in a window slot with the context size fixed (so
it includes what ``m`` displaces). Steps with ``pi_t = 1`` (``|W_t| <= k -
j``: every member exposed) have no control step to compare with; they are
counted apart (``window_certain``) and left out.

Estimator. Exposed steps ``E`` weighted ``w_t = 1/pi_t``, eligible-but-not-
exposed steps ``C`` weighted ``w_t = 1/(1 - pi_t)``:

    mu1 = sum_E w Y / sum_E w,    mu0 = sum_C w Y / sum_C w,    tau_hat = mu1 - mu0.

Each ratio estimates the mean over ``N`` of the arm's potential outcome (its
numerator and denominator are Horvitz-Thompson estimates of ``sum_N Y_t(a)``
and of ``n``), so ``tau_hat`` is consistent for ``tau_W``, with the ratio's
O(1/n) bias. NaN when ``E`` or ``C`` is empty.

Variance (derivation). Linearise each ratio around its limit: with ``B_a =
sum_a w`` (estimating ``n``), ``mu_a - mu_a* ~= (1/n) sum_a w_t (Y_t -
mu_a*)``. Treat the steps as draws from a superpopulation and the window draw
at each step as independent of the other steps (it is: a fresh draw per step).
The two arms' influence terms ``E_t w_t (Y_t - mu1)`` and ``(1 - E_t) w_t (Y_t
- mu0)`` are never both nonzero at one step, so they are uncorrelated, and the
sandwich variance of the contrast is the sum of the two arms',

    Var(tau_hat) ~= sum_a  sum_{t in a} w_t^2 (Y_t - mu_a)^2 / B_a^2,

each arm's sum estimated from its observed steps.

Small-sample correction. The plug-in ``R_a = sum_a w^2 (Y - mu_a)^2`` uses the
fitted mean and runs low. For outcomes with a common variance ``sigma^2``
within the arm (given the weights), expanding ``Y_t - mu_a = e_t - sum_s w_s
e_s / B_a`` gives

    E[R_a] = sigma^2 (S2 - 2 S3 / S1 + S2^2 / S1^2),    S_r = sum_a w^r,

while the quantity wanted is ``sigma^2 S2 / S1^2``; so each arm's term is

    V_a = R_a / S1^2 * S2 / (S2 - 2 S3 / S1 + S2^2 / S1^2).

With one propensity for every step (``w`` constant, ``n_a`` steps) the factor
is ``n_a / (n_a - 1)``: the estimator is then the difference of the arm means
and ``V_1 + V_0 = s1^2 / n1 + s0^2 / n0`` with ``n - 1`` sample variances,
the pool arm's Hajek variance (:mod:`cmp_bayes.estimators.hajek`). With
varying weights the factor is larger (the heavy weights leave fewer effective
steps), which is what keeps the reported standard errors at the replication
spread in the tests. Under a fixed set of steps (the design-based view) the
cross term ``2 (Y_t(1) - mu1)(Y_t(0) - mu0)`` the data never identifies is
bounded by the two squares, and the formula is the conservative Neyman-type
variance. ``R_a = wwyy - 2 mu wwy + mu^2 ww`` and the ``S_r`` come from the
statistics' sums (:data:`cmp_bayes.statistics.dataset.WINDOW_SUM_VARS`).
NaN where either arm has fewer than two steps.
"""

from __future__ import annotations

import numpy as np
import xarray as xr


def _arm(stats: xr.Dataset, name: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The arm's weighted mean and its variance term (NaN where undefined), shape (pair,)."""
    w = stats[f"window_{name}_w"].to_numpy()
    wy = stats[f"window_{name}_wy"].to_numpy()
    ww = stats[f"window_{name}_ww"].to_numpy()
    www = stats[f"window_{name}_www"].to_numpy()
    wwy = stats[f"window_{name}_wwy"].to_numpy()
    wwyy = stats[f"window_{name}_wwyy"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, wy / w, np.nan)
        # sum w^2 (Y - mean)^2, a hair below 0 possible in floating point when every Y is equal
        resid = np.maximum(wwyy - 2.0 * mean * wwy + mean * mean * ww, 0.0)
        # E[resid] / sigma^2 = ww - 2 www / w + ww^2 / w^2; wanted: sigma^2 ww / w^2
        expect = ww - 2.0 * www / w + ww * ww / (w * w)
        var = np.where((n > 1) & (expect > 0), resid / (w * w) * ww / expect, np.nan)
    return mean, var


def window_snipw(stats: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The window arm's self-normalized IPW contrast and its standard error per pair.

    Parameters
    ----------
    stats : xarray.Dataset
        ``exposure_stats(log, by="pair")``.

    Returns
    -------
    (estimate, std_error) : tuple of numpy.ndarray
        In outcome units, shape (pair,); the estimate is NaN without an exposed
        (``pi_t < 1``) or a control step, the standard error also with fewer
        than two of either.
    """
    n1 = (stats["window_exposed"] - stats["window_certain"]).to_numpy().astype(np.float64)
    n0 = stats["window_control"].to_numpy().astype(np.float64)
    m1, v1 = _arm(stats, "exposed", n1)
    m0, v0 = _arm(stats, "control", n0)
    est = m1 - m0
    se = np.sqrt(v1 + v0)
    return est, np.where(np.isfinite(est), se, np.nan)


def window_exposed(stats: xr.Dataset) -> np.ndarray:
    """Randomized window exposures per pair (exposed steps with ``pi_t < 1``), int64, shape (pair,)."""
    return (stats["window_exposed"] - stats["window_certain"]).to_numpy().astype(np.int64)
