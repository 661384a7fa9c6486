"""Each hyperparameter's R-hat on every draw the fit judged, kept for a posterior stored thinner.

The gated pair model on a shared store stores fewer draws than it sampled, so that
its pair variables fit in memory (:data:`cmp_bayes.model.gated_fit.PAIR_DRAW_CELLS`):
on LoCoMo's 1.19M pairs, 20 draws per chain of the 500 the fit judged. R-hat on 20
draws per chain is mostly noise: the fit measured 1.009, the stored draws 1.139, and
``decide`` refused every forget on a fit that was healthy. So the fit records what it
measured, in the optional group ``hyper_diagnostics``:

* ``rhat`` (float64, over ``element``): the rank R-hat
  (:func:`~cmp_bayes.posterior.sampling_checks.rhat`) of each hyperparameter element
  on the draws the fit judged; the ``element`` coordinate is its label
  (``gate_coef[log_rank]``, as :func:`~cmp_bayes.posterior.sampling_checks.element_labels`
  writes it) and ``variable`` names its hyperparameter;
* ``split_mean`` (float64, over (``element``, ``split_chain``)): the mean of each
  element's **stored** draws in each half-chain (as
  :func:`cmp_bayes.posterior.memory_diagnostics.split_means` splits them);
* group attributes ``chains`` and ``draws`` (the stored posterior's sizes) and
  ``fit_draws`` (draws per chain the R-hat was computed on).

:func:`stored_hyper_rhat` gives the recorded values only while they still describe
the posterior: it has the recorded sizes, every hyperparameter element is recorded,
and the stored draws' half-chain means are the recorded ones (to 1e-10 relative).
Draws thinned again, edited or subset fail this, and R-hat is computed from the
draws as for every other posterior; ``save_posterior(thin=...)`` leaves the group out.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import xarray as xr

from cmp_bayes.posterior.contract import HYPER_DIAGNOSTICS, SAMPLE_DIMS, SPLIT_DIM
from cmp_bayes.posterior.memory_diagnostics import split_means
from cmp_bayes.posterior.sampling_checks import element_labels, flatten, rhat

GROUP: Final[str] = HYPER_DIAGNOSTICS
#: Tolerance of the half-chain means' comparison: summation order only (float64 sums).
_RTOL: Final[float] = 1e-10
_ATOL: Final[float] = 1e-12


def element_draws(ds: xr.Dataset) -> np.ndarray:
    """Every element's draws, float64 ``(chain, draw, element)``, elements in :func:`element_labels` order."""
    parts = []
    for name in ds.data_vars:
        da = ds[name]
        rest = [d for d in da.dims if d not in SAMPLE_DIMS]
        values = da.transpose(*SAMPLE_DIMS, *rest).to_numpy().astype(np.float64)
        parts.append(values.reshape(values.shape[0], values.shape[1], -1))
    return np.concatenate(parts, axis=2)


def _variables(ds: xr.Dataset) -> list[str]:
    """The hyperparameter name of each element, in :func:`element_labels` order."""
    return [str(n) for n in ds.data_vars for _ in range(int(ds[n].isel(chain=0, draw=0).size))]


def hyper_diagnostics(judged: xr.Dataset, stored: xr.Dataset) -> xr.Dataset | None:
    """The ``hyper_diagnostics`` group: R-hat on the judged draws, half-chain means of the stored ones.

    Parameters
    ----------
    judged : xarray.Dataset
        The hyperparameters over (chain, draw, ...) as the fit judged them.
    stored : xarray.Dataset
        The same variables as the posterior stores them (a subset of the draws).

    Returns
    -------
    xarray.Dataset or None
        The group of the module docstring; None with fewer than 2 chains, fewer than
        4 stored draws, or no variables (nothing for R-hat to say).
    """
    chains, n_stored = int(stored.sizes.get("chain", 0)), int(stored.sizes.get("draw", 0))
    if chains < 2 or n_stored < 4 or not stored.data_vars:
        return None
    labels = element_labels(stored)
    values = flatten(rhat(judged[list(stored.data_vars)]))
    means = split_means(element_draws(stored))
    ds = xr.Dataset(
        {
            "rhat": xr.DataArray(values, dims="element", attrs={
                "description": "rank-normalized split R-hat on the draws the fit judged (max of bulk and folded)",
            }),
            "split_mean": xr.DataArray(means, dims=("element", SPLIT_DIM), attrs={
                "description": "mean of the stored draws in each half-chain (checks that they are the fit's)",
            }),
        },
        coords={"element": labels, "variable": ("element", _variables(stored))},
    )
    ds.attrs.update(chains=chains, draws=n_stored, fit_draws=int(judged.sizes["draw"]), method="rank")
    return ds


def stored_hyper_rhat(tree: xr.DataTree, ds: xr.Dataset) -> np.ndarray | None:
    """The recorded R-hat of every element of ``ds`` (the posterior's hyperparameters), or None.

    Parameters
    ----------
    tree : xarray.DataTree
        The posterior (its ``hyper_diagnostics`` group, when it has one).
    ds : xarray.Dataset
        The hyperparameters to judge, over (chain, draw, ...), as stored.

    Returns
    -------
    numpy.ndarray or None
        float64 ``(element,)`` in :func:`element_labels` order; None when the tree has
        no group, or the group does not describe these draws (see the module docstring).
    """
    if GROUP not in tree.children or not ds.data_vars:
        return None
    group = tree[GROUP].to_dataset()
    chains, n_draw = int(ds.sizes.get("chain", 0)), int(ds.sizes.get("draw", 0))
    if (group.attrs.get("chains"), group.attrs.get("draws")) != (chains, n_draw):
        return None
    if "rhat" not in group or "split_mean" not in group or group.sizes.get(SPLIT_DIM) != 2 * chains:
        return None
    index = group.indexes["element"].get_indexer(element_labels(ds))
    if (index < 0).any():
        return None
    recorded = group["split_mean"].transpose("element", SPLIT_DIM).to_numpy()[index]
    if not np.allclose(split_means(element_draws(ds)), recorded, rtol=_RTOL, atol=_ATOL, equal_nan=True):
        return None
    return group["rhat"].to_numpy().astype(np.float64)[index]
