"""Hajek (self-normalized IPW) estimator of each memory's conditional utility.

Estimand: ``tau_m``, the change in the expected outcome caused by putting m in
an exposure slot (context size fixed), over the steps where m is in the store
and not retrieved.

Estimator. With design propensity ``pi_m`` the Hajek estimator is
``sum_E Y/pi / sum_E 1/pi - sum_C Y/(1-pi) / sum_C 1/(1-pi)`` over m's exposed
steps E and control steps C (in the store, not in the context). Under
balanced assignment ``pi_m`` is one number per memory and the arm sizes
``n1 = |E|`` (fixed by the design: floor or ceil of T k / |pool|) and
``n0 = |C|`` (the store's steps minus the retriever's deterministic picks
minus n1) are constants, so the weight sums are constants and the estimator is
the difference of arm means ``ybar1 - ybar0``.

Variance, balanced assignment. With both arm sizes fixed the two arm means
are means of n1 and n0 outcomes, and (steps exchangeable within an arm)

    Var(ybar1 - ybar0) = sigma1^2 / n1 + sigma0^2 / n0,

estimated without bias by the arm sample variances (n - 1 denominators;
for binary outcomes ``s^2 = n/(n-1) p(1-p)``, the arm's Bernoulli variance).
This is exact in the superpopulation view (steps drawn i.i.d.). In the
design-based view (a fixed set of steps, E a simple random sample of size n1
of the eligible steps) Neyman's exact variance subtracts ``S_tau^2 / N`` (the
step-level effect heterogeneity over the N eligible steps), which the data
cannot identify; the formula is then conservative by that term, which is
O(1/N) relative to the rest.

Variance, any other design (bernoulli assignment, unknown design): the arm
sizes are random, and we report a conservative variance conditional on them:
each arm's variance is replaced by its upper bound for outcomes in [0, 1],
``ybar (1 - ybar) n / (n - 1)`` (never below the sample variance; equal to it
for binary outcomes).

Designs in rounds (the spec's open-ended form): the arm means pool the
rounds. When a memory's propensity is the same in every round this is the
Hajek estimator exactly; when it changes (the pool grew or shrank) the exposed
mean weights each round by its exposures and the control mean by its control
steps, so the estimate also assumes the outcome's baseline does not drift
between rounds (the per-step 1/pi weights would weight every round by its
steps). Memories whose propensity changes are flagged by a NaN ``propensity``
in the statistics.

Undefined cells (no exposure, no control step, or fewer than two of either
for the variance) are NaN, never 0.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.estimators._arms import arm, bernoulli_bound


def hajek(stats: xr.Dataset, balanced: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Hajek estimate and its standard error per memory [x query | group].

    Parameters
    ----------
    stats : xarray.Dataset
        ``cmp_bayes.statistics.exposure_stats`` output.
    balanced : bool
        True when the design is balanced assignment (exact variance);
        False gives the conservative variance.

    Returns
    -------
    (estimate, std_error) : tuple of numpy.ndarray
        In outcome units, shape of ``stats.exposed``; NaN where undefined.
    """
    n1, m1, v1 = arm(stats, "exposed")
    n0, m0, v0 = arm(stats, "control")
    est = m1 - m0
    if not balanced:
        v1 = np.fmax(v1, bernoulli_bound(n1, m1))
        v0 = np.fmax(v0, bernoulli_bound(n0, m0))
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(v1 / n1 + v0 / n0)
    return est, np.where(np.isfinite(est), se, np.nan)
