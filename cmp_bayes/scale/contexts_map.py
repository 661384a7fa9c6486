"""The map over ``contexts/`` part files: validate each part and sum its arms per (memory, cell).

One task per part (:func:`contexts_partial`): the reader's slot rules and the
memories' lifetimes, then each row joined to its step's outcome and cell (from
the steps parts whose step range overlaps the part's own, see
:mod:`cmp_bayes.scale.dask_stats`) and summed per (memory, cell) in the
retriever, exposure and in-context arms. :func:`combine_contexts` adds
partials in any number and order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode
from cmp_bayes.log.columns import (
    CONTEXT_SPEC,
    arrow_list_to_long,
    check_columns,
    contexts_frame,
    int64_values,
    read_parquet_table,
    table_columns,
)
from cmp_bayes.log.design import is_window
from cmp_bayes.log.pools import RoundPools
from cmp_bayes.log.window import Store, check_window_slots, filled_before_window, window_table
from cmp_bayes.scale.parts import (
    EMPTY,
    Lifetimes,
    Part,
    PartError,
    cell_codes,
    first_error,
    read_part,
    remap,
)
from cmp_bayes.statistics.kernels import (
    ARM_COLS,
    By,
    arm_sums,
    arrow_strings,
    is_binary,
    positions,
    row_outcomes,
    slot_arm,
)


@dataclass
class ContextsPartial:
    """Arm sums of contexts parts per (memory, cell): positions into ``memory`` and ``cells``.

    ``values`` has one column per :data:`cmp_bayes.statistics.ARM_COLS` plus a
    last one, ``rows`` (every context row, for the unknown-memory count); counts
    are exact in float64 below 2**53.
    """

    memory: pa.Array
    cells: pa.Array
    mem_idx: np.ndarray
    cell_idx: np.ndarray
    values: np.ndarray  # (K, len(ARM_COLS) + 1) float64
    error: PartError | None = None  # the first part (in file order) that broke a rule
    # a window slot outside its W_t or with the wrong propensity: reported after the window
    # design's ranking rules (the reader's order), so carried apart from ``error``
    window_error: PartError | None = None


def empty_contexts(error: PartError | None = None) -> ContextsPartial:
    """A partial with no rows (a part without contexts, or one that carries ``error``)."""
    return ContextsPartial(
        EMPTY, EMPTY, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, len(ARM_COLS) + 1)), error
    )


@overload
def steps_in_range(
    steps: list[Part], lo: int, hi: int, by: By, ranking: Literal[False] = False
) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray]: ...
@overload
def steps_in_range(
    steps: list[Part], lo: int, hi: int, by: By, ranking: Literal[True]
) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray, pd.DataFrame]: ...
def steps_in_range(
    steps: list[Part], lo: int, hi: int, by: By, ranking: bool = False
) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray] | tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray, pd.DataFrame]:
    """Step, outcome, cell names and cell code of every step in [lo, hi], sorted by step; with
    ``ranking``, also the rankings of those steps in long form (a DataFrame, ``RANKING_COLUMNS``)."""
    cols = ["step", "outcome"] + (["query_id"] if by == "query" else ["group"] if by == "group" else [])
    cols += ["ranking"] if ranking else []
    tables = []
    for p in steps:
        if p.lo is not None and p.hi is not None and (p.hi < lo or p.lo > hi):  # set together
            continue
        names = pq.ParquetFile(p.file).schema_arrow.names
        tables.append(read_part(p.file, [c for c in cols if c in names], filters=[("step", ">=", lo), ("step", "<=", hi)]))
    if not tables:
        empty = (np.zeros(0, np.int64), np.zeros(0), EMPTY, np.zeros(0, np.int64))
        return (*empty, _no_rankings()) if ranking else empty
    t = pa.concat_tables(tables, promote_options="permissive")
    s = int64_values(t["step"])
    order = np.argsort(s, kind="stable")
    t = t.take(pa.array(order))
    names, cell = cell_codes(t, by)
    out = (s[order], t["outcome"].to_numpy().astype(np.float64), names, cell)
    if not ranking:
        return out
    rk = t["ranking"] if "ranking" in t.column_names else None
    if rk is None or not (pa.types.is_list(rk.type) or pa.types.is_large_list(rk.type)):
        return (*out, _no_rankings())  # the steps part reports a missing or mistyped ranking
    return (*out, arrow_list_to_long(rk, s[order]))


def _no_rankings() -> pd.DataFrame:
    return pd.DataFrame({"step": np.zeros(0, np.int64), "rank": np.zeros(0, np.int64),
                         "memory_id": pd.arrays.ArrowStringArray(pa.chunked_array([EMPTY]))})


def contexts_partial(
    index: int,
    file: str,
    steps: list[Part],
    by: By,
    design: dict[str, Any] | None,
    design_file: str,
    life: Lifetimes | None,
    pool: RoundPools | None = None,
) -> ContextsPartial:
    """Validate one contexts part (the ``index``-th) and sum its arms per (memory, cell); a part
    that breaks a rule contributes its error instead.

    ``pool``: every round's pool as one table (built once for all parts).
    """
    try:
        return _contexts_partial(index, file, steps, by, design, design_file, life, pool)
    except LogError as err:
        return empty_contexts(PartError.of(index, err))


def _contexts_partial(
    index: int,
    file: str,
    steps: list[Part],
    by: By,
    design: dict[str, Any] | None,
    design_file: str,
    life: Lifetimes | None,
    pool: RoundPools | None,
) -> ContextsPartial:
    table, rows = read_parquet_table([Path(file)], dictionary=("memory_id", "source"))
    n = table.num_rows
    if n == 0:
        return empty_contexts()
    check_columns(table, rows, CONTEXT_SPEC)
    step = int64_values(table["step"])
    lo, hi = int(step.min()), int(step.max())
    window = design if is_window(design) else None
    if window is not None:
        sv, y_of, cell_names, cell_of, rankings = steps_in_range(steps, lo, hi, by, ranking=True)
    else:
        sv, y_of, cell_names, cell_of = steps_in_range(steps, lo, hi, by)

    # the slot's position within its step, in row order, names the field in errors
    runs = validate.StepRuns.of(step)
    cols = table_columns(table, ("memory_id", "source", "rank", "propensity", "arm"))
    del table
    frame, mem, src = contexts_frame(cols, step, runs, strings=False)
    validate.check_contexts(frame, sv, design, design_file, rows, mem, src, runs, pool)

    stored = None if life is None else _check_lifetimes(frame, rows, life, mem, src, step)
    arm = encode(frame["arm"])
    window_error = None
    if window is not None:
        # W_t from this part's slots and its steps' rankings (a step whose slots straddle two
        # part files is checked per part, as the other per-step rules are)
        store = Store(life.memory, life.created, life.deleted) if life is not None else Store(None, None, None)
        table = window_table(
            window, step, mem.dictionary.take(pa.array(mem.indices)), filled_before_window(frame, src, arm),
            rankings["step"].to_numpy(np.int64), rankings["rank"].to_numpy(np.int64),
            arrow_strings(rankings["memory_id"]), store,
        )
        try:
            check_window_slots(frame, table, rows, mem, arm)
        except LogError as err:
            window_error = PartError.of(index, err)
    nc = max(len(cell_names), 1)
    if nc == 1:
        (y,) = row_outcomes(step, sv, y_of, runs=runs)
        key = mem.indices
    else:
        y, cell_row = row_outcomes(step, sv, y_of, cell_of, runs=runs)
        key = mem.indices.astype(np.int64) * nc + cell_row
    size = len(mem.dictionary) * nc
    arms = arm_sums(key, size, y, slot_arm(src, arm), stored, is_binary(y_of))
    rows_n = arms["in_context_n"] if stored is None else np.bincount(key, minlength=size)
    hit = np.flatnonzero(rows_n)
    values = np.stack([arms[c][hit].astype(np.float64) for c in ARM_COLS] + [rows_n[hit].astype(np.float64)], axis=1)
    return ContextsPartial(mem.dictionary, cell_names, hit // nc, hit % nc, values, window_error=window_error)


def _check_lifetimes(
    frame: pd.DataFrame,
    rows: validate.Rows,
    life: Lifetimes,
    mem: Codes,
    src: Codes,
    step: np.ndarray,
) -> np.ndarray:
    """Reject memories absent from the memories file or outside their lifetime; return ``stored``."""
    ids = {"memory_id": mem, "source": src}
    where = mem.lookup(positions(mem.dictionary, life.memory), -1)
    validate.fail_at(frame, where < 0, rows, "context[{slot}].memory_id",
                     "memory '{memory_id}' at step {step} is not in memories", ids)
    stored = (life.created[where] <= step) & (step < life.deleted[where])
    validate.fail_at(frame, ~stored, rows, "context[{slot}].memory_id",
                     "memory '{memory_id}' is in the context at step {step} but not in the store then "
                     "(see memories created_step / deleted_step)", ids)
    return stored


def combine_contexts(*partials: ContextsPartial) -> ContextsPartial:
    """Add contexts partials (any number, any order)."""
    error = first_error([p.error for p in partials])
    if error is not None:
        return empty_contexts(error)
    window_error = first_error([p.window_error for p in partials])
    ps = [p for p in partials if len(p.mem_idx)]
    if len(ps) <= 1:
        out = ps[0] if ps else partials[0]
        return out if out.window_error is window_error else replace(out, window_error=window_error)
    memory = pc.unique(pa.concat_arrays([p.memory for p in ps]))
    cells = pc.unique(pa.concat_arrays([p.cells for p in ps]))
    mi = np.concatenate([remap(p.memory, memory, p.mem_idx) for p in ps])
    ci = np.concatenate([remap(p.cells, cells, p.cell_idx) for p in ps])
    uniq, inv = np.unique(mi * max(len(cells), 1) + ci, return_inverse=True)
    vals = np.concatenate([p.values for p in ps])
    summed = np.stack([np.bincount(inv, weights=vals[:, j], minlength=len(uniq)) for j in range(vals.shape[1])], axis=1)
    nc = max(len(cells), 1)
    return ContextsPartial(memory, cells, uniq // nc, uniq % nc, summed, window_error=window_error)
