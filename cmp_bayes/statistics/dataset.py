"""The statistics Dataset: its variable names and its assembly from dense (memory, cell) arrays.

One assembly for both engines (:mod:`cmp_bayes.statistics.pandas_engine`,
:mod:`cmp_bayes.scale.dask_stats`), so their Datasets agree in every name,
dtype, coordinate and attribute.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.log.design import pool_lookup
from cmp_bayes.statistics.kernels import By, arrow_strings

#: integer count variables over memory [x query|group]
COUNT_VARS: tuple[str, ...] = ("in_store", "retrieved", "exposed", "control", "ranked")
#: float outcome aggregates over memory [x query|group]
SUM_VARS: tuple[str, ...] = (
    "retrieved_outcome_sum",
    "retrieved_outcome_sumsq",
    "exposed_outcome_sum",
    "exposed_outcome_sumsq",
    "control_outcome_sum",
    "control_outcome_sumsq",
)


def stats_arrays(
    in_store: np.ndarray,
    store_sum: np.ndarray,
    store_sumsq: np.ndarray,
    arms: dict[str, np.ndarray],
    ranked: np.ndarray,
    rank_median: np.ndarray,
    rank_best: np.ndarray,
) -> dict[str, np.ndarray]:
    """The Dataset's arrays, each (memory, cell), from the in-store totals and the context arms.

    Control = in store and not in the context: the in-store totals less the
    ``in_context`` arm (rows whose memory is in the store at that step).
    """
    control = in_store - arms["in_context_n"]
    # sums of floats subtracted from sums: clip the rounding residue of empty arms
    control_s = np.where(control == 0, 0.0, store_sum - arms["in_context_sum"])
    control_s2 = np.where(control == 0, 0.0, store_sumsq - arms["in_context_sumsq"])
    return {
        "in_store": in_store,
        "retrieved": arms["retrieved_n"],
        "retrieved_outcome_sum": arms["retrieved_sum"],
        "retrieved_outcome_sumsq": arms["retrieved_sumsq"],
        "exposed": arms["exposed_n"],
        "exposed_outcome_sum": arms["exposed_sum"],
        "exposed_outcome_sumsq": arms["exposed_sumsq"],
        "control": control,
        "control_outcome_sum": control_s,
        "control_outcome_sumsq": control_s2,
        "ranked": ranked,
        "rank_median": rank_median,
        "rank_best": rank_best,
    }


def assemble_dataset(
    data: dict[str, np.ndarray],
    memory: pd.Index,
    cells: pd.Index | None,
    by: By,
    pool: dict[str, float],
    query_group: np.ndarray | None,
    query_steps: np.ndarray | None,
    attrs: dict[str, object],
    varying: frozenset[str] = frozenset(),
) -> xr.Dataset:
    """The statistics Dataset from its arrays; shared by the pandas and Dask engines.

    Parameters
    ----------
    data : dict of numpy.ndarray
        Each of ``COUNT_VARS``, ``SUM_VARS``, ``rank_median`` and ``rank_best``, shape
        (memory, cell) (cell = 1 without ``by``).
    memory, cells : pandas.Index
        Sorted memory ids; sorted query ids or group names (None without ``by``).
    pool : dict
        The design pool (memory id -> propensity; every round's, for a design in rounds).
    varying : frozenset of str
        Memories whose propensity differs between rounds: ``propensity`` NaN
        (they stay ``in_pool``).
    query_group, query_steps : numpy.ndarray, shape (query,)
        With ``by="query"`` only: each query's group (object) and step count (int64).
    attrs : dict
        Dataset attributes.
    """
    def var(dims: tuple[str, ...], values: np.ndarray) -> xr.Variable:
        # numpy arrays of their final dtype, and indexes built from pandas Indexes: this
        # skips xarray's duck-array checks, whose first use imports dask (and dask.array:
        # a second of start-up per process where dask is installed)
        return xr.Variable(dims, np.asarray(values), fastpath=True)

    dim_coords = {"memory": memory} if cells is None else {"memory": memory, by: cells}
    indexes = {d: xr.indexes.PandasIndex(pd.Index(np.asarray(v, dtype=object), dtype=object, name=d), d)
               for d, v in dim_coords.items()}
    coords: dict[str, xr.Variable] = {}
    for index in indexes.values():
        coords.update(index.create_variables())
    if cells is None:
        dims: tuple[str, ...] = ("memory",)
        data = {k: v[:, 0] for k, v in data.items()}
    else:
        assert by is not None  # cells come with the name of their dimension
        dims = ("memory", by)
    prop = pool_lookup(pool, arrow_strings(memory)) if len(memory) else np.zeros(0)
    in_pool = ~np.isnan(prop)
    if varying:
        # a propensity that changes between rounds is per step: no one number describes it
        prop = np.where(np.isin(np.asarray(memory, dtype=object), sorted(varying)), np.nan, prop)
    variables = {k: var(dims, v) for k, v in data.items()}
    variables["propensity"] = var(("memory",), prop)
    variables["in_pool"] = var(("memory",), in_pool)
    if by == "query":
        coords["query_group"] = var(("query",), np.asarray(query_group, dtype=object))
        coords["query_steps"] = var(("query",), np.asarray(query_steps, dtype=np.int64))
    ds = xr.Dataset(variables, coords=xr.Coordinates(coords, indexes=indexes))
    ds.attrs = dict(attrs)
    return ds


# --------------------------------------------------------------------------- pairs (by="pair")

#: the window arm per (memory, query) pair: integer counts of steps of the query
#: ``window_eligible``: steps with the memory in the step's window ``W_t``;
#: ``window_exposed``: of those, steps it filled a window slot (``pi_t = 1`` steps included);
#: ``window_control``: eligible and not exposed (``window_eligible - window_exposed``; always
#: ``pi_t < 1``); ``window_certain``: eligible steps with ``pi_t = 1`` (``|W_t| <= k - j``:
#: exposed for sure, no control to compare with), counted apart and left out of every weighted sum.
WINDOW_COUNT_VARS: tuple[str, ...] = ("window_eligible", "window_exposed", "window_control", "window_certain")
#: the window arm's weighted sums per pair, for the self-normalized IPW and its sandwich variance
#: (:mod:`cmp_bayes.estimators.window`). Over the exposed steps with ``pi_t < 1`` the weight is
#: ``w = 1 / pi_t``, over the control steps ``w = 1 / (1 - pi_t)``; ``Y`` is the step's outcome.
#: ``*_w``: sum of w (unitless, an estimate of the arm's number of eligible steps);
#: ``*_wy``: sum of w Y (outcome units); ``*_ww``: sum of w^2 (unitless); ``*_www``: sum of w^3
#: (unitless; the variance's small-sample correction);
#: ``*_wwy``: sum of w^2 Y (outcome units); ``*_wwyy``: sum of w^2 Y^2 (squared outcome units).
WINDOW_SUM_VARS: tuple[str, ...] = tuple(
    f"window_{arm}_{s}" for arm in ("exposed", "control") for s in ("w", "wy", "ww", "www", "wwy", "wwyy")
)


def assemble_pairs(
    data: dict[str, np.ndarray],
    memory_id: np.ndarray,
    query_id: np.ndarray,
    query_group: np.ndarray,
    query_steps: np.ndarray,
    propensity: np.ndarray,
    in_pool: np.ndarray,
    attrs: dict[str, object],
) -> xr.Dataset:
    """The sparse pair statistics Dataset (``exposure_stats(log, by="pair")``).

    Parameters
    ----------
    data : dict of numpy.ndarray
        Each of ``COUNT_VARS``, ``SUM_VARS``, ``rank_median``, ``rank_best``,
        ``WINDOW_COUNT_VARS`` and ``WINDOW_SUM_VARS``, shape (pair,).
    memory_id, query_id : numpy.ndarray of str, shape (pair,)
        Each pair's memory and query, sorted by (memory_id, query_id).
    query_group, query_steps : numpy.ndarray, shape (pair,)
        The pair's query's group (``""`` if none) and number of steps.
    propensity : numpy.ndarray, shape (pair,)
    in_pool : numpy.ndarray of bool, shape (pair,)
        The pair's memory's design-pool propensity (NaN outside the pool, or
        when it changes between rounds) and whether it is in some round's pool.
    attrs : dict
        Dataset attributes (those of the dense statistics).
    """
    def var(values: np.ndarray) -> xr.Variable:
        return xr.Variable(("pair",), np.asarray(values), fastpath=True)

    variables = {k: var(v) for k, v in data.items()}
    variables["propensity"] = var(np.asarray(propensity, dtype=np.float64))
    variables["in_pool"] = var(np.asarray(in_pool, dtype=bool))
    coords = {
        "memory_id": var(np.asarray(memory_id, dtype=object)),
        "query_id": var(np.asarray(query_id, dtype=object)),
        "query_group": var(np.asarray(query_group, dtype=object)),
        "query_steps": var(np.asarray(query_steps, dtype=np.int64)),
    }
    ds = xr.Dataset(variables, coords=coords)
    ds.attrs = dict(attrs)
    return ds
