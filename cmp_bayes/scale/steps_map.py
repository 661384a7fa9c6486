"""The map over ``steps/`` part files: validate each part and sum its steps per cell.

One task per part (:func:`steps_partial`): the part's column rules and step
order, then per cell (query / group / everything) the count, outcome sum and
sum of squares of its steps (with a memories file: per memory and cell, over
each memory's lifetime), each query's first step and group, and the rankings
as counts per (memory, cell, rank). :func:`combine_steps` adds partials in
any number and order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode
from cmp_bayes.log.columns import (
    STEP_SPEC,
    arrow_list_to_long,
    check_columns,
    read_parquet_table,
    steps_frame,
)
from cmp_bayes.log.design import is_window
from cmp_bayes.log.window import Store, check_window_rankings, window_needs
from cmp_bayes.scale.parts import EMPTY, Lifetimes, PartError, cell_codes, first_error, remap
from cmp_bayes.statistics.kernels import By, arrow_strings, in_store_sums, is_binary, positions


@dataclass
class StepsPartial:
    """What the steps parts contribute; added by :func:`combine_steps`.

    Cells are named by ``cell_names``; the per-cell arrays are over it.
    """

    meta: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # (part, file, n, first, last)
    binary: bool = True
    cell_names: pa.Array = field(default_factory=lambda: EMPTY)
    cell_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cell_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cell_sumsq: np.ndarray = field(default_factory=lambda: np.zeros(0))
    store: np.ndarray | None = None  # (3, M, cells): with a memories file
    # by="query": each query's first step and its group there
    query_names: pa.Array | None = None
    query_first: np.ndarray | None = None
    query_group: pa.Array | None = None
    ranks: RankCounts | None = None
    error: PartError | None = None  # the first part (in file order) that broke a rule
    # window designs: the first part whose rankings break the design's rules (raised after the
    # contexts' errors, as the reader checks them last), and without a memories file the
    # rankings shorter than the window needs, as candidates (see first_short_ranking)
    window_error: PartError | None = None
    short: list[ShortRanking] = field(default_factory=list)


@dataclass(frozen=True)
class ShortRanking:
    """A step whose ranking is shorter than a window design needs: an error when the store
    (every memory the log names, counted only after the reduce) holds more memories."""

    part: int
    file: str
    row: int
    step: int
    length: int
    need: int


@dataclass
class RankCounts:
    """Rankings as counts per (memory, cell, rank): positions into ``memory`` and ``cells``."""

    memory: pa.Array
    cells: pa.Array
    mem_idx: np.ndarray
    cell_idx: np.ndarray
    rank: np.ndarray
    count: np.ndarray


def steps_partial(
    index: int,
    file: str,
    by: By,
    life: Lifetimes | None,
    design: dict[str, Any] | None = None,
    design_file: str = "design.json",
) -> StepsPartial:
    """Validate one steps part and return its contribution (see module docstring); a part
    that breaks a rule contributes its error instead."""
    try:
        out = _steps_partial(index, file, by, life, design, design_file)
    except LogError as err:
        return StepsPartial(meta=[(index, file, 0, 0, 0)], error=PartError.of(index, err))
    return out


def _steps_partial(
    index: int, file: str, by: By, life: Lifetimes | None, design: dict[str, Any] | None, design_file: str
) -> StepsPartial:
    table, rows = read_parquet_table([Path(file)])
    n = table.num_rows
    check_columns(table, rows, STEP_SPEC)
    steps = steps_frame(table)
    validate.check_steps(steps, rows)
    validate.check_step_rounds(steps, design, design_file, rows)
    sv = steps["step"].to_numpy(np.int64)
    y = steps["outcome"].to_numpy(np.float64)
    names, cell = cell_codes(table, by)
    nc = len(names)
    out = StepsPartial(
        meta=[(index, file, n, int(sv[0]) if n else 0, int(sv[-1]) if n else 0)],
        binary=is_binary(y),
        cell_names=names,
        cell_count=np.bincount(cell, minlength=nc).astype(np.int64),
        cell_sum=np.bincount(cell, weights=y, minlength=nc),
        cell_sumsq=np.bincount(cell, weights=y * y, minlength=nc),
    )
    if life is not None and nc:
        out.store = np.stack(in_store_sums(sv, y, cell, nc, life.created, life.deleted)).astype(np.float64)
    if by == "query" and n:
        q = encode(table["query_id"])
        _, first = np.unique(q.indices, return_index=True)  # first row of each query in this part
        out.query_names = q.dictionary.take(pa.array(q.indices[first]))
        out.query_first = sv[first]
        out.query_group = arrow_strings(steps["group"]).take(pa.array(first)).fill_null("")
    out.ranks = _rank_counts(table, names, cell, rows)
    if is_window(design):
        try:
            out.short = _window_rankings(index, file, table, steps, design, life, rows)
        except LogError as err:
            out.window_error = PartError.of(index, err)
    return out


def _window_rankings(
    index: int,
    file: str,
    table: pa.Table,
    steps: Any,
    design: dict[str, Any],
    life: Lifetimes | None,
    rows: validate.Rows,
) -> list[ShortRanking]:
    """A window design's ranking rules on one part: with a memories file checked here; without
    one, the steps whose ranking is shorter than the window needs, each shorter than every
    one before it in the part (the first of them the store outgrows is the first error)."""
    n = table.num_rows
    has = np.zeros(n, dtype=bool)
    length = np.zeros(n, dtype=np.int64)
    if "ranking" in table.column_names and pat.is_list(table["ranking"].type) | pat.is_large_list(table["ranking"].type):
        rk = table["ranking"].combine_chunks()
        has = ~rk.is_null().to_numpy(zero_copy_only=False)
        length = pc.list_value_length(rk).fill_null(0).to_numpy().astype(np.int64)
    sv = steps["step"].to_numpy(np.int64)
    store = Store(life.memory, life.created, life.deleted) if life is not None else None
    if store is not None:
        check_window_rankings(steps, has, np.repeat(sv, length), design, store, rows)
        return []
    check_window_rankings(steps, has, np.zeros(0, np.int64), design, Store(None, None, None, 0), rows)
    _, need = window_needs(design)
    short = np.flatnonzero(length < need)
    if len(short) == 0:
        return []
    lens = length[short]
    prev = np.minimum.accumulate(np.r_[need, lens[:-1]])
    keep = short[lens < prev]
    return [ShortRanking(index, file, int(r), int(sv[r]), int(length[r]), need) for r in keep]


def first_short_ranking(short: list[ShortRanking], store_size: int) -> LogError | None:
    """The error of the first step (by part, then row) whose ranking is shorter than its window
    design needs while the store (``store_size`` memories, no memories file) holds more."""
    bad = sorted((s for s in short if store_size > s.length), key=lambda s: (s.part, s.row))
    if not bad:
        return None
    s = bad[0]
    return LogError(
        s.file,
        f"the ranking lists {s.length} memories; a window design needs ranks 0..{s.need - 1} "
        f"(slots - exposure_slots + window) or every memory in the store ({store_size} at step {s.step})",
        row=s.row, field="ranking",
    )


def _rank_counts(table: pa.Table, cells: pa.Array, cell: np.ndarray, rows: validate.Rows) -> RankCounts | None:
    """Counts per (memory, cell, rank) of the part's rankings (first listing per step only)."""
    if "ranking" not in table.column_names or table["ranking"].null_count == table.num_rows:
        return None
    rk = table["ranking"]
    if not (pat.is_list(rk.type) or pat.is_large_list(rk.type)):
        raise LogError(rows.files[0], f"expected a list<string> column, got {rk.type}", field="ranking")
    long = arrow_list_to_long(rk, np.arange(table.num_rows))  # "step" = row in this part
    if long.empty:
        return None
    row = long["step"].to_numpy(np.int64)
    codes = encode(long["memory_id"])
    if validate.StepRuns.of(row).any_repeat(codes.indices):
        dup = long.duplicated(["step", "memory_id"]).to_numpy()
        file, r = rows.where(int(row[np.argmax(dup)]))
        raise LogError(file, "a memory appears twice in the ranking", row=r, field="ranking")
    rank = long["rank"].to_numpy(np.int64)
    listed = codes.indices >= 0  # a null in a ranking names no memory (as in the pandas engine)
    if not listed.all():
        row, rank, codes = row[listed], rank[listed], Codes(codes.indices[listed], codes.dictionary)
        if len(row) == 0:
            return None
    nc, width = max(len(cells), 1), int(rank.max()) + 1
    key = (codes.indices.astype(np.int64) * nc + cell[row]) * width + rank
    uniq, count = np.unique(key, return_counts=True)
    return RankCounts(
        codes.dictionary, cells, uniq // width // nc, uniq // width % nc, uniq % width, count.astype(np.int64)
    )


def combine_ranks(*partials: RankCounts | None) -> RankCounts | None:
    """Add rank counts (any number, any order)."""
    ps = [p for p in partials if p is not None]
    if len(ps) <= 1:
        return ps[0] if ps else None
    memory = pc.unique(pa.concat_arrays([p.memory for p in ps]))
    cells = pc.unique(pa.concat_arrays([p.cells for p in ps]))
    mi = np.concatenate([remap(p.memory, memory, p.mem_idx) for p in ps])
    ci = np.concatenate([remap(p.cells, cells, p.cell_idx) for p in ps])
    rank = np.concatenate([p.rank for p in ps])
    width, nc = int(rank.max()) + 1, len(cells)
    key = (mi * nc + ci) * width + rank
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv, weights=np.concatenate([p.count for p in ps])).astype(np.int64)
    return RankCounts(memory, cells, uniq // width // nc, uniq // width % nc, uniq % width, count)


def combine_steps(*partials: StepsPartial) -> StepsPartial:
    """Add steps partials (any number, any order)."""
    out = StepsPartial()
    for p in partials:
        out.meta += p.meta
        out.binary &= p.binary
    out.error = first_error([p.error for p in partials])
    if out.error is not None:  # the result will not be used: only the first error travels on
        return out
    names = pc.unique(pa.concat_arrays([p.cell_names for p in partials]))
    nc = len(names)
    out.cell_names = names
    idx = [positions(p.cell_names, names) for p in partials]
    out.cell_count = np.zeros(nc, np.int64)
    out.cell_sum = np.zeros(nc)
    out.cell_sumsq = np.zeros(nc)
    for p, i in zip(partials, idx, strict=True):  # a loop over partial results, not rows
        out.cell_count[i] += p.cell_count
        out.cell_sum[i] += p.cell_sum
        out.cell_sumsq[i] += p.cell_sumsq
        if p.store is not None:
            if out.store is None:
                out.store = np.zeros((3, p.store.shape[1], nc))
            out.store[:, :, i] += p.store
    qs = [p for p in partials if p.query_names is not None]
    if qs:
        qn = pa.concat_arrays([p.query_names for p in qs])
        first = np.concatenate([p.query_first for p in qs])
        group = pa.concat_arrays([p.query_group for p in qs])
        # a query's group is the one at its first step
        u = pc.unique(qn)
        code = positions(qn, u)
        order = np.lexsort((first, code))
        keep = order[np.r_[True, code[order][1:] != code[order][:-1]]]
        out.query_names = qn.take(pa.array(keep))
        out.query_first = first[keep]
        out.query_group = group.take(pa.array(keep))
    out.ranks = combine_ranks(*(p.ranks for p in partials))
    out.window_error = first_error([p.window_error for p in partials])
    out.short = [s for p in partials for s in p.short]
    return out
