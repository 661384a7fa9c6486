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
