"""The logged baselines memory systems use today: only the retriever's own picks.

They read nothing but the retriever slots and the rest of the log, as a
system without CMP would; exposure slots are ignored (a step where m was
exposed is neither "retrieved" nor control).

* ``logged-success``: the success rate (mean outcome) while m was retrieved;
  standard error ``s / sqrt(n)``.
* ``logged-diff``: mean outcome while retrieved minus mean outcome while in
  the store and not in the context (the control arm); standard error
  ``sqrt(s_r^2 / n_r + s_0^2 / n_0)``. Retrieval is chosen by the retriever,
  not at random, so this difference is confounded by the query: it estimates
  ``tau`` only under ignorability of retrieval.

Both are NaN for a memory never retrieved: that is the positivity failure,
reported, never filled with 0.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.estimators._arms import arm


def logged_success(stats: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Success rate while retrieved and its standard error, shape of ``stats.retrieved``."""
    n, mean, var = arm(stats, "retrieved")
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(var / n)
    return mean, np.where(np.isfinite(mean), se, np.nan)


def logged_diff(stats: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Retrieved-minus-control mean outcome and its standard error."""
    nr, mr, vr = arm(stats, "retrieved")
    n0, m0, v0 = arm(stats, "control")
    est = mr - m0
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(vr / nr + v0 / n0)
    return est, np.where(np.isfinite(est), se, np.nan)
