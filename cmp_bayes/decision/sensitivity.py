"""Does a forget survive the alternative priors? (the posterior's ``prior_sensitivity`` group)

Fit stores, for every exposed memory, its tau posterior on the grid under a
stated set of alternative priors (:mod:`cmp_bayes.model.sensitivity`). Here each
memory the Bayes rule would forget gets P(tau > threshold) under each of them;
the forget is **prior-driven** when some alternative puts that probability at
or above the rule's ``forget_below``: under a prior the data cannot rule out,
the same data would keep it. An alternative the data do rule out (its stored
``log_likelihood_ratio`` against the fitted prior below
:data:`~cmp_bayes.constants.PRIOR_LOG_RATIO_FLOOR`, a likelihood ratio under
1/20) does not count. :attr:`Costs.prior_driven` says what then happens
(``defer`` by default: every prior-driven forget waits; ``defer_few``: one on
at most :data:`FEW_EXPOSURES` exposures waits, one on more is made and flagged).
A waiting forget's ``exposures_needed`` is computed under the alternative that
keeps it (:func:`alternative_draws`): the exposures after which that prior too
would tell a useless memory from a useful one.

Only for ``estimand="tau"`` on a memory-level posterior that carries the
group; elsewhere the columns stay empty (<NA>) and nothing is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import (
    PRIOR_LOG_RATIO_FLOOR,
    PRIOR_LOG_RATIO_VAR,
    PRIOR_SENSITIVITY_GROUP,
    PRIOR_SENSITIVITY_VAR,
)

#: Exposures at or below which a prior-driven forget always waits (the issue's
#: Mem0 store: memories forgotten on the outcomes of one or two steps).
FEW_EXPOSURES: Final[int] = 2
GROUP, VARIABLE = PRIOR_SENSITIVITY_GROUP, PRIOR_SENSITIVITY_VAR


@dataclass(frozen=True)
class PriorCheck:
    """P(useful) under the alternatives, for the memories checked.

    Attributes
    ----------
    p_max : ndarray, shape (n,)
        Largest P(tau > threshold) over the alternatives (NaN: not checked).
    worst : ndarray of object, shape (n,)
        The alternative that gives it (None: not checked).
    descriptions : dict
        Alternative name -> what it changes, in words.
    """

    p_max: np.ndarray
    worst: np.ndarray
    descriptions: dict[str, str]


def available(dt: xr.DataTree, estimand: str) -> bool:
    """Whether the check applies: a tau decision and a posterior with the group."""
    return estimand == "tau" and GROUP in dt.children and VARIABLE in dt[GROUP]


def check(dt: xr.DataTree, memory_ids: np.ndarray, rows: np.ndarray, threshold: float) -> PriorCheck:
    """P(tau > threshold) under every alternative for the memories ``rows`` of ``memory_ids``.

    Parameters
    ----------
    dt : DataTree with a ``prior_sensitivity`` group
    memory_ids : ndarray of str, shape (n,)
        The decision table's memory order.
    rows : ndarray of int
        Indices into ``memory_ids`` to check (memories without exposures are not
        in the group and stay unchecked).
    threshold : float
        Outcome units.
    """
    ds = dt[GROUP].to_dataset()
    n = memory_ids.size
    p_max = np.full(n, np.nan)
    worst = np.full(n, None, dtype=object)
    descriptions = json.loads(ds.attrs.get("alternatives", "{}"))
    names = np.asarray(ds["prior_alternative"].values).astype(str)
    keep = names != "fitted"  # the fitted prior is what decide's P(useful) already is
    if PRIOR_LOG_RATIO_VAR in ds:
        # an alternative the data rule out (likelihood ratio under 1/20) may not flip a forget
        keep &= ds[PRIOR_LOG_RATIO_VAR].to_numpy() >= PRIOR_LOG_RATIO_FLOOR
    stored = pd.Index(np.asarray(ds["memory"].values).astype(str))
    pos = stored.get_indexer(memory_ids[rows])  # -1: not exposed, so not in the group
    have = pos >= 0
    if not have.any() or not keep.any():
        return PriorCheck(p_max, worst, descriptions)
    lo = ds["tau_cell_lower"].to_numpy()
    hi = ds["tau_cell_upper"].to_numpy()
    # tau is uniform within a cell, so the share of a cell above t is linear in t
    above = np.clip((hi - threshold) / (hi - lo), 0.0, 1.0)
    # only the checked memories' rows: the whole array is alternatives x memories x cells
    pmf = ds[VARIABLE].values[np.ix_(np.flatnonzero(keep), pos[have])]
    p = np.einsum("amg,g->am", pmf.astype(np.float64), above)  # (A, checked)
    best = np.argmax(p, axis=0)
    idx = rows[have]
    p_max[idx] = p[best, np.arange(best.size)]
    worst[idx] = names[keep][best]
    return PriorCheck(p_max, worst, descriptions)


def alternative_draws(
    dt: xr.DataTree, memory_ids: np.ndarray, rows: np.ndarray, alternatives: np.ndarray, draws: int
) -> np.ndarray:
    """Tau draws of memories ``rows`` from their posterior under one alternative prior each.

    Parameters
    ----------
    dt : DataTree with a ``prior_sensitivity`` group
    memory_ids : ndarray of str, shape (n,)
    rows : ndarray of int, shape (R,)
        Indices into ``memory_ids``; every one must be in the group (exposed).
    alternatives : ndarray of str, shape (R,)
        The alternative of each row (``PriorCheck.worst``).
    draws : int
        Draws per row, D.

    Returns
    -------
    ndarray, shape (R, D), float64
        Stratified inverse-CDF draws (quantiles (i + 1/2) / D of each row's pmf,
        uniform within a cell as the model's recovery draws them): deterministic,
        so decide gives the same table every time.
    """
    ds = dt[GROUP].to_dataset()
    names = pd.Index(np.asarray(ds["prior_alternative"].values).astype(str))
    stored = pd.Index(np.asarray(ds["memory"].values).astype(str))
    a = names.get_indexer(np.asarray(alternatives).astype(str))
    m = stored.get_indexer(memory_ids[rows])
    if (a < 0).any() or (m < 0).any():
        raise ValueError("alternative_draws: a row's memory or alternative is not in the group")
    pmf = ds[VARIABLE].values[a, m].astype(np.float64)  # (R, G)
    lo = ds["tau_cell_lower"].to_numpy()
    hi = ds["tau_cell_upper"].to_numpy()
    cdf = np.cumsum(pmf, axis=1)
    cdf /= cdf[:, -1:]
    u = (np.arange(draws) + 0.5) / draws
    out = np.empty((rows.size, draws))
    for i in range(rows.size):
        cell = np.minimum(np.searchsorted(cdf[i], u, side="right"), cdf.shape[1] - 1)
        below = np.where(cell > 0, cdf[i, cell - 1], 0.0)
        width = np.maximum(cdf[i, cell] - below, 1e-300)
        out[i] = lo[cell] + (u - below) / width * (hi[cell] - lo[cell])
    return out
