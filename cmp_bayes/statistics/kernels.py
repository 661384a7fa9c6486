"""The aggregation kernels of the statistics: numpy / pyarrow work on whole columns.

Both engines compute :func:`cmp_bayes.statistics.exposure_stats` with these
(:mod:`cmp_bayes.statistics.pandas_engine` on the whole log,
:mod:`cmp_bayes.scale` per Parquet part file): ids as sorted pyarrow arrays
and positions into them, the in-store sums over each memory's lifetime, the
per-arm sums of the context rows, and grouped medians. Nothing here reads a
log or builds a Dataset; the layer above this one does both.

Cost: no Python loop runs over rows, steps, queries or groups (``in_store_sums``
loops over cells, each on its own contiguous slice).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.log.codes import Codes, arrow_column
from cmp_bayes.log.validate import WINDOW_ARM, StepRuns

#: the second dimension of the statistics: none, queries or query groups
By = Literal["query", "group"] | None

#: per-arm context aggregates: {retrieved, exposed, in_context} x {n, sum, sumsq}
ARMS: tuple[str, ...] = ("retrieved", "exposed", "in_context")
ARM_COLS: tuple[str, ...] = tuple(f"{a}_{s}" for a in ARMS for s in ("n", "sum", "sumsq"))

#: deleted_step of a memory never deleted (lifetimes are half-open: [created, deleted))
NEVER: int = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------- ids


def arrow_strings(values: pd.Series | pd.Index | np.ndarray | list) -> pa.Array:
    """A column of string ids as one pyarrow large_string array (no copy for pyarrow-backed columns)."""
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
    if created is not None:
        assert deleted is not None  # lifetimes come in pairs (see Parameters)
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
    n = len(ctx_step)
    if n == 0:
        return [a[:0] for a in per_step]
    runs = runs if isinstance(runs, StepRuns) else StepRuns.of(ctx_step)
    if runs.order is None and len(runs.starts) < n // 2:
        pos = np.searchsorted(step_vals, ctx_step[runs.starts])
        return [np.repeat(a[pos], runs.lengths) for a in per_step]
    pos = np.searchsorted(step_vals, ctx_step)
    return [a[pos] for a in per_step]


def source_arm(source: Codes) -> np.ndarray:
    """Each row's arm from its source codes (:class:`cmp_bayes.log.codes.Codes`):
    0 retriever, 1 exposure, 2 anything else (counted in no arm), int8."""
    table = np.full(len(source.dictionary), 2, dtype=np.int8)
    for arm, name in enumerate((RETRIEVER, EXPOSURE)):
        code = source.code_of(name)
        if code >= 0:
            table[code] = arm
    return source.lookup(table, 2)


def slot_arm(source: Codes, arm: Codes | None = None) -> np.ndarray:
    """:func:`source_arm`, with window slots (``arm: "window"``, codes ``arm``) counted in no
    arm: they are in the context (so not control) but not in the memory's ``exposed`` arm,
    whose contrast is the pool arm's (a window slot's propensity is its step's, not the pool's)."""
    out = source_arm(source)
    if arm is not None and len(arm.dictionary):
        out[arm.indices == arm.code_of(WINDOW_ARM)] = 2
    return out


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
        out = np.bincount(k, weights=w, minlength=m)
        # numpy gives int64 for empty weights: sums stay float64 when no row contributes
        return out if w is None else out.astype(np.float64, copy=False)

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


def sorted_pairs(major: np.ndarray, minor: np.ndarray, n_major: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(major, minor)`` sorted by major, then minor, for integer keys with ``0 <= major < n_major``.

    Both packed into one int64 (``major * span + minor - min(minor)``) and sorted once:
    a 10M-entry ranking sorts in a fraction of the time ``np.lexsort`` takes on the two
    keys. None where the packed key would not fit in an int64 (the caller lexsorts).
    """
    if not (np.issubdtype(minor.dtype, np.integer) and np.issubdtype(major.dtype, np.integer)):
        return None
    if len(minor) == 0:
        return major.astype(np.int64), minor.astype(np.int64)
    low, high = int(minor.min()), int(minor.max())
    span = high - low + 1
    if n_major * span >= np.iinfo(np.int64).max // 2:
        return None
    packed = major.astype(np.int64) * span + (minor.astype(np.int64) - low)
    packed.sort()
    return packed // span, packed % span + low


def grouped_median_min(key: np.ndarray, value: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Median and minimum of ``value`` within each ``key`` in [0, size); NaN for empty keys."""
    med, low = np.full(size, np.nan), np.full(size, np.nan)
    if len(key) == 0:
        return med, low
    packed = sorted_pairs(key, value, size)
    if packed is not None:
        k, v = packed[0], packed[1].astype(np.float64)
    else:
        order = np.lexsort((value, key))
        k, v = key[order], value[order].astype(np.float64)
    counts = np.bincount(k, minlength=size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    s, n = starts[has], counts[has]
    med[has] = 0.5 * (v[s + (n - 1) // 2] + v[s + n // 2])
    low[has] = v[s]  # sorted by value within each key
    return med, low


def counted_median_min(
    key: np.ndarray, value: np.ndarray, count: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`grouped_median_min` of values given as counts: ``value[i]`` ``count[i]`` times in ``key[i]``.

    Parameters
    ----------
    key : numpy.ndarray of int, shape (n,)
        Each entry's key in [0, size).
    value : numpy.ndarray of int, shape (n,)
        The value it counts (a rank).
    count : numpy.ndarray of int, shape (n,)
        How many times (counts of the same (key, value) may come in several entries).

    Returns
    -------
    tuple of numpy.ndarray, shape (size,)
        The number of values per key (int64), their median and minimum (float64;
        NaN for empty keys): the numbers :func:`grouped_median_min` gives on the
        values written out, bit for bit (the same two middle values, the same
        ``0.5 * (lo + hi)``), so rank counts added across part files give the
        medians of the whole log.
    """
    total_out = np.zeros(size, dtype=np.int64)
    med, low = np.full(size, np.nan), np.full(size, np.nan)
    if len(key) == 0:
        return total_out, med, low
    order = np.lexsort((value, key))
    key, value, count = key[order], value[order], count[order]
    total = np.bincount(key, weights=count, minlength=size).astype(np.int64)
    cum = np.cumsum(count)  # position (exclusive end) of each (key, value) run in the expanded order
    has = np.flatnonzero(total)
    start = np.concatenate(([0], np.cumsum(total)[:-1]))[has]
    n = total[has]
    v = value.astype(np.float64)
    lo = v[np.searchsorted(cum, start + (n - 1) // 2, side="right")]
    hi = v[np.searchsorted(cum, start + n // 2, side="right")]
    med[has] = 0.5 * (lo + hi)
    # sorted by (key, value): a key's first run holds its smallest value
    low[has] = v[np.searchsorted(cum, start, side="right")]
    total_out[:] = total
    return total_out, med, low
