"""The pandas engine of the statistics: the whole log in memory, one pass per arm.

:func:`pandas_exposure_stats` is :func:`cmp_bayes.statistics.exposure_stats`
with ``engine="pandas"``, on a log already read.

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

from typing import Literal, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import xarray as xr

from cmp_bayes.log.codes import encode
from cmp_bayes.log.design import union_pool, varying_propensity
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.statistics.dataset import assemble_dataset, stats_arrays
from cmp_bayes.statistics.kernels import (
    NEVER,
    By,
    arm_sums,
    arrow_strings,
    grouped_median_min,
    in_store_sums,
    is_binary,
    positions,
    row_outcomes,
    slot_arm,
    sorted_pairs,
    sorted_unique,
    to_index,
)


def pandas_exposure_stats(log: ExposureLog, by: By = None) -> xr.Dataset:
    """The statistics of ``log`` (read into memory) per memory [x query | group].

    Parameters and the Dataset returned: :func:`cmp_bayes.statistics.exposure_stats`
    (``by`` is checked there).
    """
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
    arm = slot_arm(src, encode(ctx["arm"]) if "arm" in ctx.columns else None)
    n_entries = len(mem.dictionary)

    has_lifetimes = log.memories is not None
    memory_arr = _memory_index(log, mem.dictionary) if has_lifetimes else None
    stored = None
    if has_lifetimes:
        memory_arr = memory_arr if memory_arr is not None else arrow_strings(log.memory_ids())
        memory = to_index(memory_arr, "memory")
        created, deleted = lifetimes(log, memory)
        pos = positions(mem.dictionary, memory_arr)
        known = pos >= 0
        # an id outside the memories file is never "in the store" (its rows are dropped below)
        c_entry = np.where(known, created[np.maximum(pos, 0)], NEVER)
        d_entry = np.where(known, deleted[np.maximum(pos, 0)], NEVER)
        stored = (mem.lookup(c_entry, NEVER) <= ctx_step) & (ctx_step < mem.lookup(d_entry, NEVER))
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
    if not has_lifetimes:
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

    if has_lifetimes:
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
        pool=union_pool(log.design),
        varying=varying_propensity(log.design),
        query_group=query_group,
        query_steps=query_steps,
        attrs={
            "n_steps": int(len(steps)),
            "outcome_kind": "binary" if binary else "fractional",
            "log_checksum": log.checksum or "",
            "n_unknown_context_rows": n_unknown,
        },
    )


# --------------------------------------------------------------------------- memories


def _codes(values: pd.Series, categories: pd.Index) -> np.ndarray:
    """Integer position of each value in ``categories`` (-1 when absent), vectorised (pyarrow hashing)."""
    return positions(arrow_strings(values), arrow_strings(categories))


def lifetimes(log: ExposureLog, memory: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """created_step and deleted_step (exclusive; int64 max = never) per memory, shape (M,)."""
    m = len(memory)
    if log.memories is None:
        return np.full(m, np.iinfo(np.int64).min, dtype=np.int64), np.full(m, NEVER, np.int64)
    mem = log.memories.drop_duplicates("memory_id", keep="first")
    pos = _codes(mem["memory_id"], memory)
    created = np.empty(m, dtype=np.int64)
    deleted = np.empty(m, dtype=np.int64)
    created[pos] = mem["created_step"].to_numpy(np.int64)
    deleted[pos] = mem["deleted_step"].astype("Int64").fillna(NEVER).to_numpy(np.int64)
    return created, deleted


def _memory_index(log: ExposureLog, context_ids: pa.Array) -> pa.Array | None:
    """``log.memory_ids()`` as a sorted pyarrow array, from the distinct context ids; None when
    an id is null (then the schema's own method decides)."""
    if log.memories is not None:
        ids = arrow_strings(log.memories["memory_id"])
        return None if ids.null_count else sorted_unique(ids)
    parts = [context_ids]
    if log.rankings is not None:
        r = encode(log.rankings["memory_id"])
        if r.has_null():
            return None
        parts.append(r.dictionary)
    pool = union_pool(log.design)
    if pool:
        parts.append(pa.array(list(pool), pa.large_string()))
    return sorted_unique(*parts)


# --------------------------------------------------------------------------- cells and rankings


@overload
def _cells(log: ExposureLog, by: Literal["query", "group"]) -> tuple[pd.Index, np.ndarray]: ...
@overload
def _cells(log: ExposureLog, by: By) -> tuple[pd.Index | None, np.ndarray]: ...
def _cells(log: ExposureLog, by: By) -> tuple[pd.Index | None, np.ndarray]:
    """The cell index (queries or groups; None without ``by``) and each step's cell code."""
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


def ranking_entries(
    log: ExposureLog, memory: pa.Array, step_vals: np.ndarray, cell_of_step: np.ndarray, n_cells: int
) -> tuple[np.ndarray, np.ndarray]:
    """The logged rankings as (key, rank) entries, key = memory position * n_cells + cell.

    Entries of memories outside ``memory`` are dropped, and a ranking that lists a
    memory twice counts once, at its best (first) rank. Shared by the dense
    statistics and the sparse pair statistics, so both follow one rule.
    ``log.rankings`` must be non-empty.
    """
    r = log.rankings
    assert r is not None  # the precondition above: callers pass a log with rankings
    codes = encode(r["memory_id"])
    rcode = codes.lookup(positions(codes.dictionary, memory), -1)
    rstep = r["step"].to_numpy(np.int64)
    rank = r["rank"].to_numpy(np.int64)
    keep = rcode >= 0
    rcode, rstep, rank = rcode[keep], rstep[keep], rank[keep]
    # entries ordered by (step, memory, rank): the step's position times the memories
    # is one integer key, sorted with the rank in one pass where it fits an int64
    n_mem = max(len(memory), 1)
    pos = np.searchsorted(step_vals, rstep)
    packed = sorted_pairs(pos * n_mem + rcode, rank, len(step_vals) * n_mem)
    if packed is not None:
        entry, rank = packed
        pos, rcode = entry // n_mem, entry % n_mem
    else:
        order = np.lexsort((rank, rcode, pos))
        pos, rcode, rank = pos[order], rcode[order], rank[order]
    first = np.ones(len(rcode), dtype=bool)
    first[1:] = (rcode[1:] != rcode[:-1]) | (pos[1:] != pos[:-1])
    rcode, pos, rank = rcode[first], pos[first], rank[first]
    return rcode * n_cells + cell_of_step[pos], rank


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
    key, rank = ranking_entries(log, memory, step_vals, cell_of_step, n_cells)
    size = shape[0] * n_cells
    median, best = grouped_median_min(key, rank, size)
    return (
        np.bincount(key, minlength=size).astype(np.int64).reshape(shape),
        median.reshape(shape),
        best.reshape(shape),
    )
