"""Which memories to expose next: value of information of n more exposures.

For each memory still in the store after :func:`cmp_bayes.decision.rule.decide`
the value of information (VOI) of ``exposures`` more randomized exposures is

    VOI = L_now - E[L_after],

in cost units, where

* ``L_now`` is the expected loss of the best action available now: for a
  memory the guards allow to be forgotten, ``min(f p, r (1 - p))``; for one
  they do not (unidentified, retrieved-only, too few exposures), ``r (1 - p)``,
  because retaining is the only action it has;
* ``E[L_after]`` is the preposterior expected loss after the exposures (see
  :mod:`cmp_bayes.decision.preposterior` for the data model), with forgetting
  allowed once the memory has ``min_exposures`` exposures in all.

A deferred memory gains twice: the exposures identify it (making forget
available) and sharpen ``p``. Memories are ranked deferred first (the issue's
order: they are the ones the rule is waiting on), then retained, each by VOI;
memories the rule forgets are listed last and never selected. The first
``budget`` selected memories form the pool for the next round of the
:class:`cmp_bayes.design.scheduler.ExposureScheduler` (its ``pool`` argument
takes the list of ids).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.preposterior import expected_loss_after
from cmp_bayes.decision.rule import (
    DEFER,
    FORGET,
    RETAIN,
    DecisionWarning,
    MemoryDraws,
    decide,
)
from cmp_bayes.errors import ConfigError
from cmp_bayes.posterior.io import as_posterior
from cmp_bayes.text import add_text

_GROUP_ORDER: dict[str, int] = {DEFER: 0, RETAIN: 1, FORGET: 2}


def recommend_exposures(
    posterior: xr.DataTree | str | Path,
    budget: int,
    costs: Costs | None = None,
    *,
    exposures: int = 6,
    draws: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """Rank memories by the value of exposing them next and select ``budget`` of them.

    Parameters
    ----------
    posterior : xarray.DataTree or path
        A posterior following the contract (as for :func:`decide`).
    budget : int
        Number of memories to put in the next exposure pool (>= 1).
    costs : Costs, optional
        Costs and guards (``Costs()`` by default).
    exposures : int
        Planned extra exposures per pool memory (>= 1); under balanced
        assignment a pool of ``budget`` memories over ``T`` steps with ``k``
        exposure slots gives each about ``T * k / budget``. Default 6, the
        design the paper used.
    draws : int
        Posterior draws per memory used for the preposterior average (evenly
        thinned; cost grows as ``draws**2`` per memory). The VOI is a Monte
        Carlo mean over ``draws`` hypothetical data sets, so its error shrinks
        as ``1 / sqrt(draws)``.
    seed : int
        Seed of the hypothetical data.

    Returns
    -------
    pandas.DataFrame
        One row per memory, best first: rank (0-based), memory_id, [text:
        the first 60 characters, when the posterior has memory texts,]
        action, status, p_useful, exposed, exposures, loss_now, loss_after,
        voi (cost units, clipped at 0: the exact VOI is never negative, a
        negative Monte Carlo value is noise), selected (bool). ``attrs``: ``budget``,
        ``exposures``, ``costs``, ``health``, ``log_checksum``, ``log_id``.
    """
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
        raise ConfigError(f"budget must be an integer >= 1, got {budget!r}")
    if isinstance(exposures, bool) or not isinstance(exposures, int | np.integer) or exposures < 1:
        raise ConfigError(f"exposures must be an integer >= 1, got {exposures!r}")
    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 2:
        raise ConfigError(f"draws must be an integer >= 2, got {draws!r}")
    costs = Costs() if costs is None else costs
    dt = as_posterior(posterior)
    with warnings.catch_warnings():
        # the decisions' own warnings belong to `decide`; here they are in the table
        warnings.simplefilter("ignore", DecisionWarning)
        result = decide(dt, costs)
    decisions = result.table
    mem = MemoryDraws.from_posterior(dt, costs.estimand)
    health_ok = result.health.ok

    n = len(decisions)
    action = decisions["action"].to_numpy(dtype=object)
    exposed = decisions["exposed"].to_numpy()
    loss_now = np.zeros(n)
    loss_after = np.zeros(n)
    p_thin = np.zeros(n)
    todo = np.flatnonzero(action != FORGET)
    if todo.size:
        est, tau = mem.numpy(todo, draws)
        p = (est > costs.threshold).mean(axis=1)
        p_thin[todo] = p
        keep_loss = costs.retain_cost * (1.0 - p)
        may_forget = decisions["forgettable"].to_numpy()[todo]
        loss_now[todo] = np.where(
            may_forget, np.minimum(costs.forget_cost * p, keep_loss), keep_loss
        )
        # after the exposures a forget needs a healthy posterior and min_exposures in all
        after_ok = health_ok & (exposed[todo] + exposures >= costs.min_exposures)
        loss_after[todo] = keep_loss  # no forget available: exposures cannot lower the loss
        if after_ok.any():
            idx = np.flatnonzero(after_ok)
            rng = np.random.default_rng(seed)
            loss_after[todo[idx]] = expected_loss_after(
                est[idx],
                tau[idx],
                np.full(idx.size, float(exposures)),
                costs.threshold,
                costs.forget_cost,
                costs.retain_cost,
                rng,
            )
    voi = np.where(action == FORGET, 0.0, np.maximum(loss_now - loss_after, 0.0))
    table = pd.DataFrame(
        {
            "memory_id": decisions["memory_id"],
            "action": decisions["action"],
            "status": decisions["status"],
            "p_useful": decisions["p_useful"],
            "exposed": decisions["exposed"],
            "exposures": np.where(action == FORGET, 0, exposures).astype("int64"),
            "loss_now": loss_now,
            "loss_after": loss_after,
            "voi": voi,
        }
    )
    group = np.array([_GROUP_ORDER[a] for a in action])
    ids = decisions["memory_id"].to_numpy(dtype=object)
    id_rank = np.empty(n, dtype="int64")
    id_rank[np.argsort(ids, kind="stable")] = np.arange(n)
    order = np.lexsort((id_rank, -voi, group))
    table = table.iloc[order].reset_index(drop=True)
    table.insert(0, "rank", np.arange(n, dtype="int64"))
    eligible = table["action"].to_numpy(dtype=object) != FORGET
    table["selected"] = eligible & (np.cumsum(eligible) <= budget)
    table = add_text(table, result.texts)  # the start of each memory's text, when the posterior has it
    table.attrs.update(
        budget=int(budget),
        exposures=int(exposures),
        costs=costs.to_dict(),
        health=result.health.to_dict(),
        log_checksum=result.log_checksum,
        log_id=result.log_id,
    )
    return table


def pool_document(table: pd.DataFrame, source: str | None = None) -> dict[str, Any]:
    """The JSON document a pool file holds.

    ``pool`` is the list of selected memory ids, best first (what
    ``ExposureScheduler(pool=...)`` takes); the other keys record how it was
    chosen: ``value_of_information`` (id -> VOI, cost units), ``budget``,
    ``exposures_per_memory``, ``costs``, ``posterior`` (the source path),
    ``log_checksum`` and ``log_id`` (the log the posterior was fitted to, so
    the next design can be checked to run on the same store).
    """
    chosen = table[table["selected"]]
    return {
        "pool": [str(m) for m in chosen["memory_id"]],
        "value_of_information": {
            str(m): float(v) for m, v in zip(chosen["memory_id"], chosen["voi"], strict=True)
        },
        "budget": int(table.attrs.get("budget", len(chosen))),
        "exposures_per_memory": int(table.attrs.get("exposures", 0)),
        "costs": table.attrs.get("costs"),
        "posterior": source,
        "log_checksum": table.attrs.get("log_checksum"),
        "log_id": table.attrs.get("log_id"),
    }


def write_pool(table: pd.DataFrame, path: str | Path, source: str | None = None) -> Path:
    """Write :func:`pool_document` of ``table`` as JSON to ``path``, atomically."""
    return write_text_atomic(path, json.dumps(pool_document(table, source), indent=2) + "\n")
