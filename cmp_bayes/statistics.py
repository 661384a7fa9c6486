"""Sufficient statistics of an exposure log, per memory (and per memory x query / group).

Everything downstream (diagnostics, estimators, the PyMC model) reads these
aggregates instead of the log, so the cost of a fit grows with the log once
(here) and afterwards only with the number of memories.

Cost: one pass of ``numpy.bincount`` per arm over the context rows, keyed by
the dictionary codes of the memory ids (:func:`cmp_bayes.log.codes.encode`:
the codes the reader produced, so no id is hashed twice) and mapped to the
sorted memory index once per distinct id; each row's outcome is one gather
(a ``repeat`` over the steps when the contexts are in step order). In-store
counts come from ``numpy.searchsorted`` of each memory's lifetime into the
(sorted) steps plus prefix sums of the outcomes, for every (memory, cell) at
once: no Python loop runs over rows, steps, queries or groups.

Exactness: every per-(memory, cell) sum adds its terms in row order, as one
``bincount`` over the whole table does; binary outcomes (0/1) reuse the sum
as the sum of squares (equal bit for bit).
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
#: per-arm context aggregates: {retrieved, exposed, in_context} x {n, sum, sumsq}
ARMS: tuple[str, ...] = ("retrieved", "exposed", "in_context")
ARM_COLS: tuple[str, ...] = tuple(f"{a}_{s}" for a in ARMS for s in ("n", "sum", "sumsq"))

_NEVER = np.iinfo(np.int64).max  # deleted_step of a memory never deleted


# --------------------------------------------------------------------------- ids


def arrow_strings(values: pd.Series | pd.Index | np.ndarray | list) -> pa.Array:
    """A column of string ids as one pyarrow large_string array (no copy for pyarrow-backed columns)."""
    from cmp_bayes.log.codes import arrow_column

    if isinstance(values, pd.Index | np.ndarray | list):
        values = pd.Series(np.asarray(values, dtype=object), dtype="string")
    arr = arrow_column(values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr if pa.types.is_large_string(arr.type) else arr.cast(pa.large_string())


def sorted_unique(*arrays: pa.Array) -> pa.Array:
    """Distinct values of string arrays, sorted as Python sorts ``str`` (UTF-8 byte order = code point order)."""
    arrs = [a if pa.types.is_large_string(a.type) else a.cast(pa.large_string()) for a in arrays if len(a)]
    if not arrs:
        return pa.array([], pa.large_string())
    u = pc.unique(pa.concat_arrays(arrs) if len(arrs) > 1 else arrs[0])
    return u.take(pc.sort_indices(u))


def to_index(ids: pa.Array, name: str) -> pd.Index:
    """A sorted pyarrow id array as the object-dtype pandas Index the Dataset coordinates use."""
    return pd.Index(ids.to_numpy(zero_copy_only=False), name=name, dtype="object")


def positions(values: pa.Array, categories: pa.Array) -> np.ndarray:
    """Position of each value in ``categories`` (-1 when absent or null), int64, shape (len(values),)."""
    idx = pc.index_in(values, value_set=categories)
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _codes(values: pd.Series, categories: pd.Index) -> np.ndarray:
    """Integer position of each value in ``categories`` (-1 when absent), vectorised (pyarrow hashing)."""
    return positions(arrow_strings(values), arrow_strings(categories))


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


def _memory_index(log: ExposureLog, context_ids: pa.Array) -> pa.Array | None:
    """``log.memory_ids()`` as a sorted pyarrow array, from the distinct context ids; None when
    an id is null (then the schema's own method decides)."""
    if log.memories is not None:
        ids = arrow_strings(log.memories["memory_id"])
        return None if ids.null_count else sorted_unique(ids)
    parts = [context_ids]
    if log.rankings is not None:
        from cmp_bayes.log.codes import encode

        r = encode(log.rankings["memory_id"])
        if r.has_null():
            return None
        parts.append(r.dictionary)
    pool = (log.design or {}).get("pool", {}) or {}
    if pool:
        parts.append(pa.array(list(pool), pa.large_string()))
    return sorted_unique(*parts)


# --------------------------------------------------------------------------- cells


def _cells(log: ExposureLog, by: By) -> tuple[pd.Index | None, np.ndarray]:
    """The cell index (queries or groups; None without ``by``) and each step's cell code."""
    from cmp_bayes.log.codes import encode

    steps = log.steps
    if by is None:
        return None, np.zeros(len(steps), dtype=np.int64)
    col = steps["query_id"] if by == "query" else steps["group"]
    codes = encode(col)
    names = codes.dictionary
    if by == "query":
        if codes.has_null():  # the schema's own rule for odd logs
            cells = log.query_ids()
            return cells, _codes(steps["query_id"], cells)
        sorted_names = sorted_unique(names)
        entry = positions(names, sorted_names)
        return to_index(sorted_names, "query"), codes.lookup(entry, -1)
    # a step without a group belongs to the group "" so that summing over groups
    # gives the memory-level statistics back
    extra = [pa.array([""], pa.large_string())] if codes.has_null() else []
    sorted_names = sorted_unique(names, *extra)
    entry = positions(names, sorted_names)
    blank = int(positions(pa.array([""], pa.large_string()), sorted_names)[0])
    return to_index(sorted_names, "group"), codes.lookup(entry, blank)


# --------------------------------------------------------------------------- in store


def in_store_sums(
    step_vals: np.ndarray,
    outcome: np.ndarray,
    cell_of_step: np.ndarray,
    n_cells: int,
    created: np.ndarray | None,
    deleted: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps in store and the outcome sum / sum of squares over them, each (M, C).

    Parameters
    ----------
    step_vals, outcome, cell_of_step : numpy.ndarray, shape (S,)
        The steps (strictly increasing), their outcomes and cell codes.
    created, deleted : numpy.ndarray, shape (M,), or None
        Lifetimes (``deleted`` exclusive); None: every memory always in the
        store (then M = 1 and the caller broadcasts).

    Notes
    -----
    Each cell's sums are numpy's over that cell's outcomes in step order (its
    pairwise ``sum``, or differences of its own prefix sums): the one loop here
    runs over the cells, each on its own contiguous slice, never over steps.
    """
    lifetimes = created is not None
    if lifetimes:
        lo = np.searchsorted(step_vals, created, side="left")
        hi = np.maximum(np.searchsorted(step_vals, deleted, side="left"), lo)  # deleted <= created: never
    if n_cells == 1:
        if not lifetimes:
            return (
                np.array([[len(step_vals)]], dtype=np.int64),
                np.array([[outcome.sum()]]),
                np.array([[np.square(outcome).sum()]]),
            )
        cs = np.concatenate(([0.0], np.cumsum(outcome)))
        cs2 = np.concatenate(([0.0], np.cumsum(np.square(outcome))))
        return (hi - lo)[:, None].astype(np.int64), (cs[hi] - cs[lo])[:, None], (cs2[hi] - cs2[lo])[:, None]
    # steps ordered by (cell, step): each cell's steps are one contiguous slice
    order = np.argsort(cell_of_step, kind="stable")
    y = outcome[order]
    bounds = np.searchsorted(cell_of_step[order], np.arange(n_cells + 1))
    cuts = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    if not lifetimes:
        return (
            np.diff(bounds).astype(np.int64)[None, :],
            np.array([y[a:b].sum() for a, b in cuts])[None, :],
            np.array([np.square(y[a:b]).sum() for a, b in cuts])[None, :],
        )
    # a lifetime's bounds in cell c are the positions of (c, lo) and (c, hi) in that order
    # (step positions, not step values, so the composite key cannot overflow); cell c's own
    # prefix sums start at position bounds[c] + c of the concatenation
    s = len(step_vals)
    key = cell_of_step[order].astype(np.int64) * (s + 1) + order
    cs = np.concatenate([np.concatenate(([0.0], np.cumsum(y[a:b]))) for a, b in cuts])
    cs2 = np.concatenate([np.concatenate(([0.0], np.cumsum(np.square(y[a:b])))) for a, b in cuts])
    cell = np.arange(n_cells, dtype=np.int64)[None, :]
    first = np.searchsorted(key, cell * (s + 1) + lo[:, None], side="left")
    last = np.searchsorted(key, cell * (s + 1) + hi[:, None], side="left")
    return (last - first).astype(np.int64), cs[last + cell] - cs[first + cell], cs2[last + cell] - cs2[first + cell]


# --------------------------------------------------------------------------- context arms


def row_outcomes(
    ctx_step: np.ndarray, step_vals: np.ndarray, *per_step: np.ndarray, runs: object | None = None
) -> list[np.ndarray]:
    """Each context row's value of every ``per_step`` array (outcome, cell code), by its step.

    Contexts in step order (as the readers leave them) take a ``repeat`` over
    the steps' runs (``runs``: their :class:`cmp_bayes.log.validate.StepRuns`,
    when the caller has it); otherwise one ``searchsorted`` per row.
    """
    from cmp_bayes.log.validate import StepRuns

    n = len(ctx_step)
    if n == 0:
        return [a[:0] for a in per_step]
    runs = runs if isinstance(runs, StepRuns) else StepRuns.of(ctx_step)
    if runs.order is None and len(runs.starts) < n // 2:
        pos = np.searchsorted(step_vals, ctx_step[runs.starts])
        return [np.repeat(a[pos], runs.lengths) for a in per_step]
    pos = np.searchsorted(step_vals, ctx_step)
    return [a[pos] for a in per_step]


def source_arm(source) -> np.ndarray:
    """Each row's arm from its source codes (:class:`cmp_bayes.log.codes.Codes`):
    0 retriever, 1 exposure, 2 anything else (counted in no arm), int8."""
    table = np.full(len(source.dictionary), 2, dtype=np.int8)
    for arm, name in enumerate((RETRIEVER, EXPOSURE)):
        code = source.code_of(name)
        if code >= 0:
            table[code] = arm
    return source.lookup(table, 2)


def arm_sums(
    key: np.ndarray,
    size: int,
    y: np.ndarray,
    arm: np.ndarray,
    stored: np.ndarray | None,
    binary: bool,
) -> dict[str, np.ndarray]:
    """Count, outcome sum and sum of squares of each arm per key, shape (size,) each.

    Parameters
    ----------
    key : numpy.ndarray, shape (n,)
        Each row's key in [0, size).
    y : numpy.ndarray, shape (n,)
        Each row's outcome.
    arm : numpy.ndarray, shape (n,)
        :func:`source_arm` of each row.
    stored : numpy.ndarray of bool, shape (n,), or None
        Rows whose memory is in the store at that step (the ``in_context``
        arm); None: every row.

    Notes
    -----
    The retriever and exposure arms come from one ``bincount`` over the key
    ``3 * key + arm``: each (key, arm) bin adds its rows in row order, exactly
    as a ``bincount`` over that arm's rows alone would.
    """
    wide = np.int64 if 3 * size >= np.iinfo(np.int32).max else np.int32
    k3 = key.astype(wide) * 3 + arm
    y2 = None if binary else y * y

    def per_bin(k: np.ndarray, m: int, w: np.ndarray | None) -> np.ndarray:
        return np.bincount(k, weights=w, minlength=m)

    n3 = per_bin(k3, 3 * size, None).reshape(size, 3)
    s3 = per_bin(k3, 3 * size, y).reshape(size, 3)
    # 0 * 0 = 0 and 1 * 1 = 1: for binary outcomes the sum of squares is the sum, bit for bit
    q3 = s3 if binary else per_bin(k3, 3 * size, y2).reshape(size, 3)
    del k3
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(("retrieved", "exposed")):
        out[f"{name}_n"] = np.ascontiguousarray(n3[:, j]).astype(np.int64)
        out[f"{name}_sum"] = np.ascontiguousarray(s3[:, j])
        out[f"{name}_sumsq"] = np.ascontiguousarray(q3[:, j])
    if stored is None:
        out["in_context_n"] = n3.sum(axis=1).astype(np.int64)
        out["in_context_sum"] = per_bin(key, size, y)
        out["in_context_sumsq"] = out["in_context_sum"] if binary else per_bin(key, size, y2)
    else:
        k, w = key[stored], y[stored]
        out["in_context_n"] = per_bin(k, size, None).astype(np.int64)
        out["in_context_sum"] = per_bin(k, size, w)
        out["in_context_sumsq"] = out["in_context_sum"] if binary else per_bin(k, size, w * w)
    return out


def is_binary(outcome: np.ndarray) -> bool:
    """Whether every outcome is exactly 0 or 1."""
    return bool(np.all((outcome == 0.0) | (outcome == 1.0)))


def _grouped_median_min(key: np.ndarray, value: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Median and minimum of ``value`` within each ``key`` in [0, size); NaN for empty keys."""
    med, low = np.full(size, np.nan), np.full(size, np.nan)
    if len(key) == 0:
        return med, low
    order = np.lexsort((value, key))
    k, v = key[order], value[order].astype(np.float64)
    counts = np.bincount(k, minlength=size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    s, n = starts[has], counts[has]
    med[has] = 0.5 * (v[s + (n - 1) // 2] + v[s + n // 2])
    low[has] = v[s]  # sorted by value within each key
    return med, low


# --------------------------------------------------------------------------- the statistics


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
        ``ranked``: steps whose ``ranking`` lists the memory; ``rank_median``
        and ``rank_best``: median and smallest 0-based rank over those steps
        (float64; NaN if never ranked).

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
    from cmp_bayes.log.codes import encode

    steps = log.steps
    step_vals = steps["step"].to_numpy(np.int64)
    outcome = steps["outcome"].to_numpy(np.float64)
    binary = is_binary(outcome)
    cells, cell_of_step = _cells(log, by)
    n_cells = 1 if cells is None else len(cells)

    # context rows -> (distinct id, cell) keys; ids become memory positions only per distinct id
    ctx = log.contexts
    mem = encode(ctx["memory_id"])
    src = encode(ctx["source"])
    entry = mem.indices
    keep = entry >= 0 if mem.has_null() else None  # a null id is in no memory's row
    ctx_step = ctx["step"].to_numpy(np.int64)
    per_step = [outcome] if cells is None else [outcome, cell_of_step]
    y, *cell_row = row_outcomes(ctx_step, step_vals, *per_step)
    arm = source_arm(src)
    n_entries = len(mem.dictionary)

    lifetimes = log.memories is not None
    memory_arr = _memory_index(log, mem.dictionary) if lifetimes else None
    stored = None
    if lifetimes:
        memory_arr = memory_arr if memory_arr is not None else arrow_strings(log.memory_ids())
        memory = to_index(memory_arr, "memory")
        created, deleted = _lifetimes(log, memory)
        pos = positions(mem.dictionary, memory_arr)
        known = pos >= 0
        # an id outside the memories file is never "in the store" (its rows are dropped below)
        c_entry = np.where(known, created[np.maximum(pos, 0)], _NEVER)
        d_entry = np.where(known, deleted[np.maximum(pos, 0)], _NEVER)
        stored = (mem.lookup(c_entry, _NEVER) <= ctx_step) & (ctx_step < mem.lookup(d_entry, _NEVER))
    if keep is not None:
        entry, y, arm = entry[keep], y[keep], arm[keep]
        cell_row = [c[keep] for c in cell_row]
        stored = None if stored is None else stored[keep]
    key = entry.astype(np.int64) * n_cells + cell_row[0] if cell_row else entry
    size = n_entries * n_cells
    arms = arm_sums(key, size, y, arm, stored, binary)
    rows = arms["in_context_n"] if stored is None else np.bincount(key, minlength=size)
    del key, y, arm, stored, cell_row

    rows_per_entry = rows.reshape(n_entries, n_cells).sum(axis=1)
    if not lifetimes:
        memory_arr = _memory_index(log, mem.dictionary.filter(pa.array(rows_per_entry > 0)))
        memory_arr = memory_arr if memory_arr is not None else arrow_strings(log.memory_ids())
        memory = to_index(memory_arr, "memory")
        pos = positions(mem.dictionary, memory_arr)
        known = pos >= 0
    m = len(memory)
    n_unknown = int(rows_per_entry[~known].sum()) + (0 if keep is None else int((~keep).sum()))
    shape = (m, n_cells)

    def dense(flat: np.ndarray) -> np.ndarray:
        out = np.zeros(shape, dtype=flat.dtype)
        out[pos[known]] = flat.reshape(n_entries, n_cells)[known]
        return out

    if lifetimes:
        in_store, store_sum, store_sumsq = in_store_sums(step_vals, outcome, cell_of_step, n_cells, created, deleted)
    else:
        in_store, store_sum, store_sumsq = (
            np.broadcast_to(a, shape).copy()
            for a in in_store_sums(step_vals, outcome, cell_of_step, n_cells, None, None)
        )
    data = stats_arrays(
        in_store, store_sum, store_sumsq, {k: dense(v) for k, v in arms.items()},
        *_ranking_stats(log, memory_arr, step_vals, cell_of_step, n_cells),
    )
    query_group = query_steps = None
    if by == "query":
        first = steps.drop_duplicates("query_id", keep="first")
        query_group = pd.Series(
            first["group"].astype("string").fillna("").astype(str).to_numpy(),
            index=first["query_id"].astype(str).to_numpy(),
        ).reindex(cells).to_numpy(dtype=object)
        query_steps = np.bincount(cell_of_step, minlength=n_cells).astype(np.int64)
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
        The design pool (memory id -> propensity).
    query_group, query_steps : numpy.ndarray, shape (query,)
        With ``by="query"`` only: each query's group (object) and step count (int64).
    attrs : dict
        Dataset attributes.
    """
    from cmp_bayes.log.validate import pool_lookup

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
    variables = {k: var(dims, v) for k, v in data.items()}
    variables["propensity"] = var(("memory",), prop)
    variables["in_pool"] = var(("memory",), ~np.isnan(prop))
    if by == "query":
        coords["query_group"] = var(("query",), np.asarray(query_group, dtype=object))
        coords["query_steps"] = var(("query",), np.asarray(query_steps, dtype=np.int64))
    ds = xr.Dataset(variables, coords=xr.Coordinates(coords, indexes=indexes))
    ds.attrs = dict(attrs)
    return ds


def _ranking_stats(
    log: ExposureLog,
    memory: pa.Array,
    step_vals: np.ndarray,
    cell_of_step: np.ndarray,
    n_cells: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ranked`` (int64), ``rank_median`` and ``rank_best`` (float64), each (memory, cell)."""
    shape = (len(memory), n_cells)
    if log.rankings is None or len(log.rankings) == 0:
        return np.zeros(shape, dtype=np.int64), np.full(shape, np.nan), np.full(shape, np.nan)
    from cmp_bayes.log.codes import encode

    r = log.rankings
    codes = encode(r["memory_id"])
    rcode = codes.lookup(positions(codes.dictionary, memory), -1)
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
    size = shape[0] * n_cells
    median, best = _grouped_median_min(key, rank, size)
    return (
        np.bincount(key, minlength=size).astype(np.int64).reshape(shape),
        median.reshape(shape),
        best.reshape(shape),
    )
