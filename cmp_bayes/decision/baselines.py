"""Realized decision loss on simulator truth, and the baseline policies decide is measured against.

Realized loss of a set of actions (``forget`` removes a memory; ``retain`` and
``defer`` keep it), with truth from :func:`cmp_bayes.simulation.truth.memory_truth`:

    loss = forget_cost * #(forgotten and truly useful)
         + retain_cost * #(kept and truly useless),

"truly useful" meaning the true estimand (``tau_true`` or ``utility_true``)
exceeds ``costs.threshold``; a memory whose truth is undefined (NaN) counts as
useless.

Baselines (each returns a Series of actions indexed by memory id):

* :func:`hajek_threshold`: forget when the Hajek estimate (exposed-arm mean
  minus control-arm mean) is at most the threshold; memories without
  exposures (estimate undefined) are kept. The paper's CMP point-estimate rule.
* :func:`logged_success_eviction`: forget memories whose logged success count
  (successful steps with the memory retrieved) is zero, or, with ``n_forget``,
  the ``n_forget`` memories with the fewest (ties by id). What memory systems
  do today.
* ``keep all``: every memory kept.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.decision.costs import Costs


def realized_loss(actions: pd.Series, truth: pd.DataFrame, costs: Costs) -> dict[str, float]:
    """Realized loss of ``actions`` (index memory id, values retain|forget|defer).

    Returns
    -------
    dict
        ``loss`` (cost units), ``forgotten``, ``forgotten_useful``, ``kept_useless``,
        ``useful`` (memories truly useful), ``memories``.
    """
    col = "tau_true" if costs.estimand == "tau" else "utility_true"
    true = truth.set_index(truth["memory_id"].astype(str))[col].astype("float64")
    acts = actions.copy()
    acts.index = acts.index.astype(str)
    true = true.reindex(acts.index)
    useful = (true > costs.threshold).fillna(False).to_numpy(dtype=bool)
    forget = (acts == "forget").to_numpy(dtype=bool)
    fu = int((forget & useful).sum())
    ku = int((~forget & ~useful).sum())
    return {
        "loss": costs.forget_cost * fu + costs.retain_cost * ku,
        "forgotten": int(forget.sum()),
        "forgotten_useful": fu,
        "kept_useless": ku,
        "useful": int(useful.sum()),
        "memories": len(acts),
    }


def hajek_threshold(stats: xr.Dataset, costs: Costs) -> pd.Series:
    """Forget when the Hajek estimate of tau is at most ``costs.threshold`` (NaN: keep).

    Parameters
    ----------
    stats : xarray.Dataset
        ``exposure_stats(log)`` (memory dim only).
    """
    n1 = stats["exposed"].to_numpy().astype("float64")
    n0 = stats["control"].to_numpy().astype("float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        est = (
            stats["exposed_outcome_sum"].to_numpy() / n1
            - stats["control_outcome_sum"].to_numpy() / n0
        )
    if costs.estimand == "utility":
        # utility = rho * tau with rho the share of in-store steps retrieved
        with np.errstate(invalid="ignore", divide="ignore"):
            est = est * stats["retrieved"].to_numpy() / stats["in_store"].to_numpy()
    act = np.where(np.isfinite(est) & (est <= costs.threshold), "forget", "retain")
    return pd.Series(act, index=stats["memory"].to_numpy().astype(str), name="action")


def logged_success_eviction(stats: xr.Dataset, n_forget: int | None = None) -> pd.Series:
    """Evict by logged success counts: zero successes while retrieved, or the ``n_forget`` fewest."""
    ids = stats["memory"].to_numpy().astype(str)
    success = stats["retrieved_outcome_sum"].to_numpy().astype("float64")
    if n_forget is None:
        forget = success <= 0
    else:
        order = np.lexsort((ids, success))
        forget = np.zeros(len(ids), dtype=bool)
        forget[order[: max(0, int(n_forget))]] = True
    return pd.Series(np.where(forget, "forget", "retain"), index=ids, name="action")
