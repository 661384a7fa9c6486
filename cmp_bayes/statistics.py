"""Sufficient statistics of an exposure log, per memory (and per memory x query / group).

Everything downstream (diagnostics, estimators, the PyMC model) reads these
aggregates instead of the log, so the cost of a fit grows with the log once
(here) and afterwards only with the number of memories.

Cost: one pass of integer code lookups and ``numpy.bincount`` over the context
rows; in-store counts come from ``numpy.searchsorted`` of each memory's
lifetime into the (sorted) step indices plus prefix sums of the outcomes, so
no Python loop ever runs over steps (only over the queries or groups when
``by`` is given).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import xarray as xr

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import ExposureLog

By = Literal["query", "group"] | None
Engine = Literal["pandas", "dask"]

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

_NEVER = np.iinfo(np.int64).max  # deleted_step of a memory never deleted


def _codes(values: pd.Series, categories: pd.Index) -> np.ndarray:
    """Integer position of each value in ``categories`` (-1 when absent), vectorised.

    Uses pyarrow's hash-based ``index_in`` which is much faster than pandas'
    object-index lookup on pyarrow-backed string columns.
    """
    arr = pa.array(values.astype("string[pyarrow]"), type=pa.large_string())
    cats = pa.array(np.asarray(categories, dtype=object), type=pa.large_string())
    idx = pc.index_in(arr, value_set=cats)
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _lifetimes(log: ExposureLog, memory: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """created_step and deleted_step (exclusive; int64 max = never) per memory, shape (M,)."""
    m = len(memory)
    if log.memories is None:
        return np.full(m, np.iinfo(np.int64).min, dtype=np.int64), np.full(m, _NEVER, np.int64)
    mem = log.memories.drop_duplicates("memory_id", keep="first")
    pos = _codes(mem["memory_id"], memory)
    created = np.empty(m, dtype=np.int64)
    deleted = np.empty(m, dtype=np.int64)
    created[pos] = mem["created_step"].to_numpy(np.int64)
    deleted[pos] = mem["deleted_step"].astype("Int64").fillna(_NEVER).to_numpy(np.int64)
    return created, deleted


def _cells(log: ExposureLog, by: By) -> tuple[pd.Index | None, np.ndarray]:
    """The cell index (queries or groups; None without ``by``) and each step's cell code."""
    steps = log.steps
    if by is None:
        return None, np.zeros(len(steps), dtype=np.int64)
    if by == "query":
        cells = log.query_ids()
        return cells, _codes(steps["query_id"], cells)
    groups = steps["group"].astype("string").fillna("")
    # a step without a group belongs to the group "" so that summing over groups
    # gives the memory-level statistics back
    cells = pd.Index(np.sort(groups.astype(str).unique()), name="group", dtype="object")
    return cells, _codes(groups, cells)


def _in_store(
    step_vals: np.ndarray,
    outcome: np.ndarray,
    cell_of_step: np.ndarray,
    n_cells: int,
    created: np.ndarray,
    deleted: np.ndarray,
    lifetimes: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps in store and the outcome sum / sum of squares over them, each (M, C)."""
    m = len(created)
    count = np.zeros((m, n_cells), dtype=np.int64)
    total = np.zeros((m, n_cells), dtype=np.float64)
    total_sq = np.zeros((m, n_cells), dtype=np.float64)
    for c in range(n_cells):  # loop over queries / groups, never over steps
        sel = cell_of_step == c
        sv, y = step_vals[sel], outcome[sel]
        if not lifetimes:
            count[:, c] = len(sv)
            total[:, c] = y.sum()
            total_sq[:, c] = np.square(y).sum()
            continue
        cs = np.concatenate(([0.0], np.cumsum(y)))
        cs2 = np.concatenate(([0.0], np.cumsum(np.square(y))))
        lo = np.searchsorted(sv, created, side="left")
        hi = np.searchsorted(sv, deleted, side="left")
        hi = np.maximum(hi, lo)  # deleted <= created: never in the store
        count[:, c] = hi - lo
        total[:, c] = cs[hi] - cs[lo]
        total_sq[:, c] = cs2[hi] - cs2[lo]
    return count, total, total_sq


def _bincount(key: np.ndarray, size: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(key, weights=weights, minlength=size)


def _grouped_median(key: np.ndarray, value: np.ndarray, size: int) -> np.ndarray:
    """Median of ``value`` within each ``key`` in [0, size); NaN for empty keys."""
    out = np.full(size, np.nan)
    if len(key) == 0:
        return out
    order = np.lexsort((value, key))
    k, v = key[order], value[order].astype(np.float64)
    counts = np.bincount(k, minlength=size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    s, n = starts[has], counts[has]
    out[has] = 0.5 * (v[s + (n - 1) // 2] + v[s + n // 2])
    return out


def exposure_stats(
    log: ExposureLog | str | Path,
    by: By = None,
    engine: Engine = "pandas",
    scheduler: object | None = None,
) -> xr.Dataset:
    """Sufficient statistics of ``log`` per memory, optionally split by query or group.

    Parameters
    ----------
    log : ExposureLog, str or Path
        The log (``cmp_bayes.read_log``), or the path of one. With
        ``engine="dask"`` it must be the path of a Parquet-form log.
    by : {None, "query", "group"}
        Add a second dimension ``query`` (coordinate = ``log.query_ids()``) or
        ``group`` (the sorted group names; steps without a group form the group
        ``""``, so sums over groups equal the memory-level statistics).
    engine : {"pandas", "dask"}
        ``"pandas"``: the whole log in memory (this module). ``"dask"``: a
        map-reduce over the Parquet part files
        (:func:`cmp_bayes.scale.dask_stats.dask_exposure_stats`), memory bounded
        by the part size; same Dataset (see that function for the exactness of
        floating-point sums).
    scheduler : str or distributed.Client, optional
        Dask engine only: ``None`` / ``"threads"`` (local threads),
        ``"synchronous"``, ``"processes"``, a ``dask.distributed`` scheduler
        address (``"tcp://host:8786"``) or a ``Client``.

    Returns
    -------
    xarray.Dataset
        Dims ``memory`` (coordinate ``log.memory_ids()``) [x ``query`` | ``group``].
        Counts are numbers of steps (int64); outcome sums are in outcome units
        (float64). Over memory [x cell]:

        ``in_store``: steps at which the memory is in the store;
        ``retrieved`` / ``exposed``: steps it was in the context via a
        retriever / exposure slot, with ``*_outcome_sum`` and ``*_outcome_sumsq``
        over those steps; ``control``: steps in the store and not in the
        context (a context row at a step where the memory is not in the store
        counts as retrieved/exposed but is never subtracted from control);
        ``ranked``: steps whose ``ranking`` lists the memory; ``rank_median``:
        median 0-based rank over those steps (NaN if never ranked).

        Over memory only: ``propensity`` (the design pool's per-step
        propensity; NaN outside the pool) and ``in_pool`` (bool).

        With ``by="query"``: coordinates ``query_group`` (the query's group at
        its first step, ``""`` if none) and ``query_steps`` on dim ``query``.

        Attributes: ``n_steps``, ``outcome_kind`` (``"binary"`` when every
        outcome is 0 or 1, else ``"fractional"``), ``log_checksum`` (``""``
        when the log has none), ``n_unknown_context_rows`` (context rows naming
        a memory absent from the memories file; left out of every count).
    """
    if by not in (None, "query", "group"):
        raise ConfigError(f"exposure_stats: by must be None, 'query' or 'group', not {by!r}")
    if engine == "dask":
        if not isinstance(log, str | Path):
            raise ConfigError(
                "exposure_stats: engine='dask' reads the log from disk; pass the path of a "
                "Parquet-form log (write one with write_log(log, path, format='parquet'))"
            )
        from cmp_bayes.scale.dask_stats import dask_exposure_stats

        return dask_exposure_stats(log, by=by, scheduler=scheduler)
    if engine != "pandas":
        raise ConfigError(f"exposure_stats: engine must be 'pandas' or 'dask', not {engine!r}")
    if scheduler is not None:
        raise ConfigError("exposure_stats: scheduler applies to engine='dask' only")
    if isinstance(log, str | Path):
        from cmp_bayes.log.read import read_log

        log = read_log(log)
    memory = log.memory_ids()
    m = len(memory)
    steps = log.steps
    step_vals = steps["step"].to_numpy(np.int64)
    outcome = steps["outcome"].to_numpy(np.float64)
    cells, cell_of_step = _cells(log, by)
    n_cells = 1 if cells is None else len(cells)
    size = m * n_cells
    created, deleted = _lifetimes(log, memory)

    in_store, store_sum, store_sumsq = _in_store(
        step_vals, outcome, cell_of_step, n_cells, created, deleted, log.memories is not None
    )

    # context rows -> (memory, cell) keys
    ctx = log.contexts
    mcode = _codes(ctx["memory_id"], memory)
    known = mcode >= 0
    n_unknown = int((~known).sum())
    ctx_step = ctx["step"].to_numpy(np.int64)
    pos = np.searchsorted(step_vals, ctx_step)
    source = pa.array(ctx["source"].astype("string[pyarrow]"))
    is_exp = pc.equal(source, EXPOSURE).fill_null(False).to_numpy(zero_copy_only=False)
    is_ret = pc.equal(source, RETRIEVER).fill_null(False).to_numpy(zero_copy_only=False)
    if n_unknown:
        mcode, pos, ctx_step = mcode[known], pos[known], ctx_step[known]
        is_exp, is_ret = is_exp[known], is_ret[known]
    y = outcome[pos]
    y2 = y * y
    key = mcode * n_cells + cell_of_step[pos]
    stored = (created[mcode] <= ctx_step) & (ctx_step < deleted[mcode])

    def arm(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = key[mask]
        return (
            _bincount(k, size).astype(np.int64),
            _bincount(k, size, y[mask]),
            _bincount(k, size, y2[mask]),
        )

    ret_n, ret_s, ret_s2 = arm(is_ret)
    exp_n, exp_s, exp_s2 = arm(is_exp)
    in_ctx_n, in_ctx_s, in_ctx_s2 = arm(stored)

    shape = (m, n_cells)
    control = in_store - in_ctx_n.reshape(shape)
    control_s = store_sum - in_ctx_s.reshape(shape)
    control_s2 = store_sumsq - in_ctx_s2.reshape(shape)
    # sums of floats subtracted from sums: clip the rounding residue of empty arms
    control_s = np.where(control == 0, 0.0, control_s)
    control_s2 = np.where(control == 0, 0.0, control_s2)

    ranked, rank_median = _ranking_stats(log, memory, step_vals, cell_of_step, n_cells)

    data = {
        "in_store": in_store,
        "retrieved": ret_n.reshape(shape),
        "retrieved_outcome_sum": ret_s.reshape(shape),
        "retrieved_outcome_sumsq": ret_s2.reshape(shape),
        "exposed": exp_n.reshape(shape),
        "exposed_outcome_sum": exp_s.reshape(shape),
        "exposed_outcome_sumsq": exp_s2.reshape(shape),
        "control": control,
        "control_outcome_sum": control_s,
        "control_outcome_sumsq": control_s2,
        "ranked": ranked.reshape(shape),
        "rank_median": rank_median.reshape(shape),
    }
    query_group = query_steps = None
    if by == "query":
        first = steps.drop_duplicates("query_id", keep="first")
        query_group = pd.Series(
            first["group"].astype("string").fillna("").astype(str).to_numpy(),
            index=first["query_id"].astype(str).to_numpy(),
        ).reindex(cells).to_numpy(dtype=object)
        query_steps = np.bincount(cell_of_step, minlength=n_cells).astype(np.int64)
    binary = bool(np.all((outcome == 0.0) | (outcome == 1.0)))
    return assemble_dataset(
        data,
        memory,
        cells,
        by,
        pool=(log.design or {}).get("pool", {}) or {},
        query_group=query_group,
        query_steps=query_steps,
        attrs={
            "n_steps": int(len(steps)),
            "outcome_kind": "binary" if binary else "fractional",
            "log_checksum": log.checksum or "",
            "n_unknown_context_rows": n_unknown,
        },
    )


def assemble_dataset(
    data: dict[str, np.ndarray],
    memory: pd.Index,
    cells: pd.Index | None,
    by: By,
    pool: dict[str, float],
    query_group: np.ndarray | None,
    query_steps: np.ndarray | None,
    attrs: dict[str, object],
) -> xr.Dataset:
    """The statistics Dataset from its arrays; shared by the pandas and Dask engines.

    Parameters
    ----------
    data : dict of numpy.ndarray
        Each of ``COUNT_VARS``, ``SUM_VARS`` and ``rank_median``, shape
        (memory, cell) (cell = 1 without ``by``).
    memory, cells : pandas.Index
        Sorted memory ids; sorted query ids or group names (None without ``by``).
    pool : dict
        The design pool (memory id -> propensity).
    query_group, query_steps : numpy.ndarray, shape (query,)
        With ``by="query"`` only: each query's group (object) and step count (int64).
    attrs : dict
        Dataset attributes.
    """
    if cells is None:
        dims: tuple[str, ...] = ("memory",)
        data = {k: v[:, 0] for k, v in data.items()}
        coords: dict[str, object] = {"memory": np.asarray(memory, dtype=object)}
    else:
        dims = ("memory", by)
        coords = {"memory": np.asarray(memory, dtype=object), by: np.asarray(cells, dtype=object)}
    ds = xr.Dataset({k: (dims, v) for k, v in data.items()}, coords=coords)

    prop = pd.Series(pool, dtype="float64").reindex(pd.Index(memory, dtype=object))
    ds["propensity"] = ("memory", prop.to_numpy(np.float64))
    ds["in_pool"] = ("memory", prop.notna().to_numpy())

    if by == "query":
        ds = ds.assign_coords(query_group=("query", query_group), query_steps=("query", query_steps))
    ds.attrs = dict(attrs)
    return ds


def _ranking_stats(
    log: ExposureLog,
    memory: pd.Index,
    step_vals: np.ndarray,
    cell_of_step: np.ndarray,
    n_cells: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``ranked`` (int64) and ``rank_median`` (float64), flat over (memory, cell)."""
    size = len(memory) * n_cells
    if log.rankings is None or len(log.rankings) == 0:
        return np.zeros(size, dtype=np.int64), np.full(size, np.nan)
    r = log.rankings
    rcode = _codes(r["memory_id"], memory)
    rstep = r["step"].to_numpy(np.int64)
    rank = r["rank"].to_numpy(np.int64)
    keep = rcode >= 0
    rcode, rstep, rank = rcode[keep], rstep[keep], rank[keep]
    # a ranking that lists a memory twice counts once, at its best (first) rank
    order = np.lexsort((rank, rcode, rstep))
    rcode, rstep, rank = rcode[order], rstep[order], rank[order]
    first = np.ones(len(rcode), dtype=bool)
    first[1:] = (rcode[1:] != rcode[:-1]) | (rstep[1:] != rstep[:-1])
    rcode, rstep, rank = rcode[first], rstep[first], rank[first]
    pos = np.searchsorted(step_vals, rstep)
    key = rcode * n_cells + cell_of_step[pos]
    return _bincount(key, size).astype(np.int64), _grouped_median(key, rank, size)
