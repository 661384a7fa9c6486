"""The posterior's ``identification`` group: design status beside what the data said.

``status`` comes from the exposure design (never from the posterior), through
:func:`cmp_bayes.diagnostics.positivity.identification_status`. Beside it:

* ``contraction`` = posterior sd / prior sd of tau, where the prior is the
  memory's own prior given the fitted hyperparameters (its data excluded),
  both exact on the grid and averaged over hyperparameter draws (law of total
  variance). 1 exactly for a memory without exposures.
* ``mean_shift`` = |posterior mean - prior mean| / prior sd of tau. Under a
  sparse prior six binary outcomes barely shrink the sd (contraction ~0.9-1)
  but move the mean clearly; an unidentified memory's shift is exactly 0.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.diagnostics.positivity import identification_status


def design_status(stats: xr.Dataset) -> xr.DataArray:
    """Identification status per memory (object-dtype strings, same dims as ``stats.exposed``)."""
    status = identification_status(stats)
    return xr.DataArray(
        np.asarray(status.values).astype(str).astype(object), dims=status.dims, coords=status.coords
    )


def identification_group(
    stats: xr.Dataset,
    *,
    post_mean: np.ndarray,
    post_sd: np.ndarray,
    prior_mean: np.ndarray,
    prior_sd: np.ndarray,
    p_positive: np.ndarray,
    p_helps: np.ndarray | None = None,
) -> xr.Dataset:
    """The ``identification`` Dataset over ``memory`` (arrays of shape (M,), stats order)."""
    safe_sd = np.where(prior_sd > 0, prior_sd, np.nan)
    memory = stats["memory"].values
    propensity = (
        np.asarray(stats["propensity"].values, dtype=np.float64)
        if "propensity" in stats
        else np.full(memory.size, np.nan)
    )
    ds = xr.Dataset(
        {
            "status": ("memory", design_status(stats).values),
            "exposed": ("memory", np.asarray(stats["exposed"].values, dtype=np.int64)),
            "retrieved": ("memory", np.asarray(stats["retrieved"].values, dtype=np.int64)),
            "in_store": ("memory", np.asarray(stats["in_store"].values, dtype=np.int64)),
            "contraction": ("memory", post_sd / safe_sd),
            "mean_shift": ("memory", np.abs(post_mean - prior_mean) / safe_sd),
            "propensity": ("memory", propensity),
            "tau_mean": ("memory", post_mean),
            "tau_sd": ("memory", post_sd),
            "prior_tau_mean": ("memory", prior_mean),
            "prior_tau_sd": ("memory", prior_sd),
            "p_tau_positive": ("memory", p_positive),
        },
        coords={"memory": np.asarray(memory).astype(str).astype(object)},
    )
    ds["contraction"].attrs["description"] = "posterior sd / prior sd of tau (prior: own data excluded)"
    ds["mean_shift"].attrs["description"] = "|posterior mean - prior mean| / prior sd of tau"
    ds["tau_mean"].attrs["description"] = "Rao-Blackwellised posterior mean of tau (exact on the grid)"
    ds["p_tau_positive"].attrs["description"] = "Rao-Blackwellised P(tau > 0 | data)"
    if p_helps is not None:
        ds["p_helps"] = ("memory", p_helps)
        ds["p_helps"].attrs["description"] = (
            "Rao-Blackwellised P(memory is in the mixture's 'helps' component | data)"
        )
    return ds
