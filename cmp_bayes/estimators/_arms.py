"""Arm means and variances from the sufficient statistics (shared by every estimator)."""

from __future__ import annotations

import numpy as np
import xarray as xr


def arm(stats: xr.Dataset, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count n, mean and unbiased variance (n - 1 denominator) of the outcomes of one arm.

    ``name`` is ``"retrieved"``, ``"exposed"`` or ``"control"``. Arrays have
    the shape of ``stats[name]``; the mean is NaN where n = 0 and the variance
    where n < 2. Variances are in squared outcome units.
    """
    n = stats[name].to_numpy().astype(np.float64)
    s = stats[f"{name}_outcome_sum"].to_numpy()
    ss = stats[f"{name}_outcome_sumsq"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, s / n, np.nan)
        var = np.where(n > 1, (ss - s * s / n) / (n - 1), np.nan)
    # sums of squares minus squared sums can go a hair below 0 in floating point
    return n, mean, np.maximum(var, 0.0, where=np.isfinite(var), out=var)


def bernoulli_bound(n: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Largest variance an outcome in [0, 1] with this mean can have, on the n - 1 scale.

    For Y in [0, 1], Y^2 <= Y so Var(Y) <= mu (1 - mu); the sample variance
    with an n - 1 denominator of a Bernoulli sample is n/(n - 1) p(1 - p),
    so the bound on that scale is ``mean (1 - mean) n / (n - 1)`` (NaN where
    n < 2). For binary outcomes it equals the sample variance exactly.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, mean * (1.0 - mean) * n / (n - 1), np.nan)
