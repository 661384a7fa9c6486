"""Plain inverse-propensity (Horvitz-Thompson) estimator with the design propensity.

Over the N eligible steps of memory m (in the store and not retrieved), with
the design's propensity pi (``design.json`` pool):

    tau_HT = (sum_E Y) / (pi N) - (sum_C Y) / ((1 - pi) N)

Unlike Hajek the weights are not normalised, so the estimate moves with the
realised number of exposures; it is unbiased when each eligible step is
exposed with probability pi. Under balanced assignment the design's
``pi = n_m / T`` counts all T steps while m can only be exposed at the N
eligible ones, so for a memory the retriever also picks the estimate is biased
by the factor N / T on the exposed arm; Hajek has no such bias.

Variance: per step the HT term ``X = E Y1/pi - (1 - E) Y0/(1 - pi)`` has
``Var X = Y1^2/pi + Y0^2/(1 - pi) - (Y1 - Y0)^2 <= Y1^2/pi + Y0^2/(1 - pi)``
(independent per-step inclusion), and the bound is estimated without bias by
``(sum_E Y^2 / pi^2 + sum_C Y^2 / (1 - pi)^2) / N^2``: conservative.
NaN where m was never exposed or has no propensity (none in the design, or one
that changes between the rounds of an open-ended design: no single pi then).
"""

from __future__ import annotations

import numpy as np
import xarray as xr


def ipw(stats: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Horvitz-Thompson estimate and conservative standard error, shape of ``stats.exposed``."""
    pi = stats["propensity"].broadcast_like(stats["exposed"]).to_numpy()
    n_elig = (stats["in_store"] - stats["retrieved"]).to_numpy().astype(np.float64)
    s1 = stats["exposed_outcome_sum"].to_numpy()
    s0 = stats["control_outcome_sum"].to_numpy()
    ss1 = stats["exposed_outcome_sumsq"].to_numpy()
    ss0 = stats["control_outcome_sumsq"].to_numpy()
    ok = (stats["exposed"].to_numpy() > 0) & np.isfinite(pi) & (pi < 1) & (n_elig > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = s1 / (pi * n_elig) - s0 / ((1 - pi) * n_elig)
        var = (ss1 / pi**2 + ss0 / (1 - pi) ** 2) / n_elig**2
    return np.where(ok, est, np.nan), np.where(ok, np.sqrt(var), np.nan)
