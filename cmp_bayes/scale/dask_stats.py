"""Sufficient statistics of a partitioned Parquet log as a Dask map-reduce.

The same Dataset as :func:`cmp_bayes.statistics.exposure_stats` (pandas
engine), computed without ever holding the log in memory:

* **map, steps parts** (one task per ``steps/`` part file): validate the part
  (column types, outcome range, strictly increasing steps, rankings without
  repeats), then per cell (query / group / everything) the steps' count, outcome
  sum and sum of squares (with a memories file: per memory and cell, over each
  memory's lifetime), the per-query first step and group, and the ranking as
  counts per (memory, cell, rank);
* **map, contexts parts** (one task per ``contexts/`` part file): validate the
  part (the reader's slot rules, memories lifetimes), join each row to its
  step's outcome and cell, and sum per (memory, cell) the retriever, exposure
  and in-context arms;
* **reduce**: partial results are keyed by memory id and cell name (pyarrow
  string arrays, with integer positions into them), so a part knows nothing
  about the others; they are added in a tree (``SPLIT_EVERY`` at a time) and
  turned into dense (memory, cell) arrays once, at the end, by the same
  assembly code as the pandas engine.

Every map task is whole-column numpy / pyarrow work, the same code as the
pandas engine (:mod:`cmp_bayes.log.validate`, :mod:`cmp_bayes.log.parquet`,
:mod:`cmp_bayes.statistics`): ids are read as Parquet dictionary codes and
summed per distinct id with ``numpy.bincount``; no Python loop runs over rows,
steps, memories or cells (only over part files and partial results).

The join and its memory bound. A contexts part needs the outcome and cell of
the steps it names. It reads only the rows of the ``steps/`` parts whose
step-range (from the Parquet footer statistics, read once when the graph is
built) overlaps its own, filtered to its own range. A log written by step range
(as :func:`cmp_bayes.scale.generate.generate` and any writer that appends
steps and contexts together writes it) therefore joins part i with about one
steps part: peak memory per task is O(rows of one contexts part + steps in its
range), independent of the log size. Parts written in an order unrelated to the
steps still give the right answer but each task then scans every steps part
(one at a time, keeping only the rows in range). The partial sums are at most
one row per (memory, cell) seen in a part; the reduce holds ``SPLIT_EVERY`` of
them, and the final arrays are the output's own size (memory x cell).

Exactness. Counts, ranks and medians are exact. Outcome sums are added in a
different order than the pandas engine's (per part, then across parts), so for
outcomes whose sums are exactly representable (binary, or multiples of a power
of two such as 1/64) the Datasets are identical; for arbitrary fractional
outcomes they agree to float rounding (relative ~1e-16 per addition).

Validation (what the pandas reader checks, per part): column presence and
types, nulls, outcome range, steps strictly increasing within and across parts
(in part-file name order), unknown sources, ranks, propensities (range,
exposure without propensity, against ``design.json``), exposure slots beyond
``design.exposure_slots`` and a memory twice in one step's context (both within
a part: a step whose slots straddle two part files is checked per part), slots
naming a step that does not exist, memories outside the memories file or their
lifetime. Errors name the part file and the 0-based row within it. Map tasks
return their first violation as data rather than raising it, so the error
reported does not depend on which task ran first: as in the pandas reader, a
steps rule before a contexts rule, and within each the first part file in name
order (each part's own rules in the reader's order).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat
import xarray as xr

from cmp_bayes.errors import ConfigError, LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode
from cmp_bayes.log.columns import (
    CONTEXT_SPEC,
    MEMORY_SPEC,
    STEP_SPEC,
    arrow_list_to_long,
    check_columns,
    contexts_frame,
    int64_values,
    read_parquet_table,
    read_simple_table,
    steps_frame,
    table_columns,
)
from cmp_bayes.log.layout import log_checksum, parquet_files, read_design
from cmp_bayes.log.schema import MEMORY_COLUMNS
from cmp_bayes.statistics.dataset import assemble_dataset, stats_arrays
from cmp_bayes.statistics.groups import main_group
from cmp_bayes.statistics.kernels import (
    ARM_COLS,
    NEVER,
    By,
    arm_sums,
    arrow_strings,
    in_store_sums,
    is_binary,
    positions,
    row_outcomes,
    sorted_unique,
    source_arm,
    to_index,
)

#: partial results added together per reduce task
SPLIT_EVERY: int = 8

_EMPTY = pa.array([], pa.large_string())
_BLANK = pa.array([""], pa.large_string())


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Part:
    """One Parquet part file and the range of steps it holds (None: unknown)."""

    file: str
    lo: int | None
    hi: int | None


@dataclass(frozen=True)
class Lifetimes:
    """The memories file, over the sorted memory index: created / deleted (exclusive) steps."""

    memory: pa.Array  # (M,) large_string, sorted, distinct
    created: np.ndarray  # (M,) int64
    deleted: np.ndarray  # (M,) int64, int64 max = never


@dataclass(frozen=True)
class PartError:
    """A part's first violation, carried through the reduce as data (a plain record: it pickles
    for any scheduler), so that the error reported is the first part's, whatever ran first."""

    part: int
    file: str
    message: str
    line: int | None
    row: int | None
    field: str | None

    @classmethod
    def of(cls, part: int, err: LogError) -> PartError:
        return cls(part, err.file, err.message, err.line, err.row, err.field)

    def error(self) -> LogError:
        return LogError(self.file, self.message, line=self.line, row=self.row, field=self.field)


def _first_error(errors: list[PartError | None]) -> PartError | None:
    found = [e for e in errors if e is not None]
    return min(found, key=lambda e: e.part) if found else None


def parts(root: Path, name: str) -> list[Path]:
    """Part files of table ``name``: ``name.parquet`` or ``name/**/*.parquet`` in name order."""
    return parquet_files(root, name) or []


def step_range(file: Path) -> Part:
    """The part's step range from its footer statistics (no data pages read)."""
    try:
        meta = pq.ParquetFile(file).metadata
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(file, f"not a readable Parquet file ({exc})") from None
    names = meta.schema.names
    if "step" not in names:
        raise LogError(file, "missing required column", field="step")
    col = names.index("step")
    lo = hi = None
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(col).statistics
        if st is None or not st.has_min_max:
            return Part(str(file), None, None)
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return Part(str(file), None if lo is None else int(lo), None if hi is None else int(hi))


def _lifetimes(root: Path) -> Lifetimes | None:
    mem = read_simple_table(root, "memories", MEMORY_COLUMNS, MEMORY_SPEC)
    if mem is None:
        return None
    dup = mem.duplicated("memory_id").to_numpy()
    if dup.any():
        raise LogError(root / "memories.parquet", "duplicate memory_id", row=int(np.flatnonzero(dup)[0]), field="memory_id")
    ids = pa.array(mem["memory_id"].astype(str).to_numpy(dtype=object), pa.large_string())
    order = pc.sort_indices(ids).to_numpy()
    return Lifetimes(
        memory=ids.take(pa.array(order)),
        created=mem["created_step"].to_numpy(np.int64)[order],
        deleted=mem["deleted_step"].astype("Int64").fillna(NEVER).to_numpy(np.int64)[order],
    )


def _cell_codes(table: pa.Table, by: By) -> tuple[pa.Array, np.ndarray]:
    """Each step row's cell, as (distinct cell names, code per row): query id, group ("" for none) or ""."""
    n = table.num_rows
    if by is None or (by == "group" and "group" not in table.column_names):
        return (_BLANK if n else _EMPTY), np.zeros(n, dtype=np.int64)
    codes = encode(table["query_id" if by == "query" else "group"])
    # a null query id is an error the steps part reports; meanwhile it is the cell ""
    if codes.has_null():
        names = sorted_unique(codes.dictionary, _BLANK)
        blank = int(positions(_BLANK, names)[0])
        return names, codes.lookup(positions(codes.dictionary, names), blank)
    return codes.dictionary, codes.indices.astype(np.int64)


def _read(file: str, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
    try:
        return pq.read_table(file, columns=columns, filters=filters)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(file, f"not a readable Parquet file ({exc})") from None


def _remap(names: pa.Array, union: pa.Array, idx: np.ndarray) -> np.ndarray:
    """Positions ``idx`` into ``names`` as positions into ``union`` (which holds every name)."""
    return positions(names, union)[idx] if len(idx) else np.zeros(0, np.int64)


# --------------------------------------------------------------------------- steps map


@dataclass
class StepsPartial:
    """What the steps parts contribute; added by :func:`combine_steps`.

    Cells are named by ``cell_names``; the per-cell arrays are over it.
    """

    meta: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # (part, file, n, first, last)
    binary: bool = True
    cell_names: pa.Array = field(default_factory=lambda: _EMPTY)
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


@dataclass
class RankCounts:
    """Rankings as counts per (memory, cell, rank): positions into ``memory`` and ``cells``."""

    memory: pa.Array
    cells: pa.Array
    mem_idx: np.ndarray
    cell_idx: np.ndarray
    rank: np.ndarray
    count: np.ndarray


def steps_partial(index: int, file: str, by: By, life: Lifetimes | None) -> StepsPartial:
    """Validate one steps part and return its contribution (see module docstring); a part
    that breaks a rule contributes its error instead."""
    try:
        return _steps_partial(index, file, by, life)
    except LogError as err:
        return StepsPartial(meta=[(index, file, 0, 0, 0)], error=PartError.of(index, err))


def _steps_partial(index: int, file: str, by: By, life: Lifetimes | None) -> StepsPartial:
    table, rows = read_parquet_table([Path(file)])
    n = table.num_rows
    check_columns(table, rows, STEP_SPEC)
    steps = steps_frame(table)
    validate.check_steps(steps, rows)
    sv = steps["step"].to_numpy(np.int64)
    y = steps["outcome"].to_numpy(np.float64)
    names, cell = _cell_codes(table, by)
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
    return out


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
    mi = np.concatenate([_remap(p.memory, memory, p.mem_idx) for p in ps])
    ci = np.concatenate([_remap(p.cells, cells, p.cell_idx) for p in ps])
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
    out.error = _first_error([p.error for p in partials])
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
    return out


# --------------------------------------------------------------------------- contexts map


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


def _empty_contexts(error: PartError | None = None) -> ContextsPartial:
    return ContextsPartial(
        _EMPTY, _EMPTY, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, len(ARM_COLS) + 1)), error
    )


def _steps_in_range(steps: list[Part], lo: int, hi: int, by: By) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray]:
    """Step, outcome, cell names and cell code of every step in [lo, hi], sorted by step."""
    cols = ["step", "outcome"] + (["query_id"] if by == "query" else ["group"] if by == "group" else [])
    tables = []
    for p in steps:
        if p.lo is not None and (p.hi < lo or p.lo > hi):
            continue
        names = pq.ParquetFile(p.file).schema_arrow.names
        tables.append(_read(p.file, [c for c in cols if c in names], filters=[("step", ">=", lo), ("step", "<=", hi)]))
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0), _EMPTY, np.zeros(0, np.int64)
    t = pa.concat_tables(tables, promote_options="permissive")
    s = int64_values(t["step"])
    order = np.argsort(s, kind="stable")
    t = t.take(pa.array(order))
    names, cell = _cell_codes(t, by)
    return s[order], t["outcome"].to_numpy().astype(np.float64), names, cell


def contexts_partial(
    index: int,
    file: str,
    steps: list[Part],
    by: By,
    design: dict[str, Any] | None,
    design_file: str,
    life: Lifetimes | None,
    pool: validate.PoolTable | None = None,
) -> ContextsPartial:
    """Validate one contexts part (the ``index``-th) and sum its arms per (memory, cell); a part
    that breaks a rule contributes its error instead.

    ``pool``: the design pool as arrays (built once for all parts).
    """
    try:
        return _contexts_partial(file, steps, by, design, design_file, life, pool)
    except LogError as err:
        return _empty_contexts(PartError.of(index, err))


def _contexts_partial(
    file: str,
    steps: list[Part],
    by: By,
    design: dict[str, Any] | None,
    design_file: str,
    life: Lifetimes | None,
    pool: validate.PoolTable | None,
) -> ContextsPartial:
    table, rows = read_parquet_table([Path(file)], dictionary=("memory_id", "source"))
    n = table.num_rows
    if n == 0:
        return _empty_contexts()
    check_columns(table, rows, CONTEXT_SPEC)
    step = int64_values(table["step"])
    lo, hi = int(step.min()), int(step.max())
    sv, y_of, cell_names, cell_of = _steps_in_range(steps, lo, hi, by)

    # the slot's position within its step, in row order, names the field in errors
    runs = validate.StepRuns.of(step)
    cols = table_columns(table, ("memory_id", "source", "rank", "propensity"))
    del table
    frame, mem, src = contexts_frame(cols, step, runs, strings=False)
    validate.check_contexts(frame, sv, design, design_file, rows, mem, src, runs, pool)

    stored = None if life is None else _check_lifetimes(frame, rows, life, mem, src, step)
    nc = max(len(cell_names), 1)
    if nc == 1:
        (y,) = row_outcomes(step, sv, y_of, runs=runs)
        key = mem.indices
    else:
        y, cell_row = row_outcomes(step, sv, y_of, cell_of, runs=runs)
        key = mem.indices.astype(np.int64) * nc + cell_row
    size = len(mem.dictionary) * nc
    arms = arm_sums(key, size, y, source_arm(src), stored, is_binary(y_of))
    rows_n = arms["in_context_n"] if stored is None else np.bincount(key, minlength=size)
    hit = np.flatnonzero(rows_n)
    values = np.stack([arms[c][hit].astype(np.float64) for c in ARM_COLS] + [rows_n[hit].astype(np.float64)], axis=1)
    return ContextsPartial(mem.dictionary, cell_names, hit // nc, hit % nc, values)


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
    error = _first_error([p.error for p in partials])
    if error is not None:
        return _empty_contexts(error)
    ps = [p for p in partials if len(p.mem_idx)]
    if len(ps) <= 1:
        return ps[0] if ps else partials[0]
    memory = pc.unique(pa.concat_arrays([p.memory for p in ps]))
    cells = pc.unique(pa.concat_arrays([p.cells for p in ps]))
    mi = np.concatenate([_remap(p.memory, memory, p.mem_idx) for p in ps])
    ci = np.concatenate([_remap(p.cells, cells, p.cell_idx) for p in ps])
    uniq, inv = np.unique(mi * max(len(cells), 1) + ci, return_inverse=True)
    vals = np.concatenate([p.values for p in ps])
    summed = np.stack([np.bincount(inv, weights=vals[:, j], minlength=len(uniq)) for j in range(vals.shape[1])], axis=1)
    nc = max(len(cells), 1)
    return ContextsPartial(memory, cells, uniq // nc, uniq % nc, summed)


# --------------------------------------------------------------------------- reduce + assemble


def tree_reduce(items: list[Any], combine: Any, split_every: int = SPLIT_EVERY) -> Any:
    """Combine delayed partials ``split_every`` at a time until one is left."""
    import dask

    comb = dask.delayed(combine, pure=True)
    while len(items) > 1:
        items = [comb(*items[i : i + split_every]) for i in range(0, len(items), split_every)]
    return items[0]


def dask_exposure_stats(path: str | Path, by: By = None, scheduler: object | None = None) -> xr.Dataset:
    """:func:`cmp_bayes.statistics.exposure_stats` of a Parquet-form log, as a Dask map-reduce.

    Parameters
    ----------
    path : str or Path
        A Parquet-form log directory: ``steps/`` and ``contexts/`` folders of
        part files (or single ``steps.parquet`` / ``contexts.parquet``),
        ``design.json``, optional ``memories.parquet`` (or ``memories/``).
    by : {None, "query", "group"}
    scheduler : None, str or distributed.Client
        See :func:`cmp_bayes.scale.cluster.dask_scheduler`.

    Returns
    -------
    xarray.Dataset
        Exactly the pandas engine's Dataset (floating-point sums: see the module
        docstring), ``log_checksum`` included.

    Raises
    ------
    LogError
        The first violation found, naming the part file and row.
    ConfigError
        A log that is not in Parquet form, or an unusable scheduler.
    """
    import dask

    from cmp_bayes.scale.cluster import dask_scheduler

    if by not in (None, "query", "group"):
        raise ConfigError(f"exposure_stats: by must be None, 'query' or 'group', not {by!r}")
    root = Path(path)
    if not root.is_dir():
        raise LogError(root, "the dask engine reads a Parquet-form log directory; no such directory")
    step_files = parts(root, "steps")
    if not step_files:
        hint = " (this is the JSONL form: convert it with write_log(read_log(p), out, format='parquet'))" if (
            root / "steps.jsonl"
        ).is_file() else ""
        raise ConfigError(f"{root}: no steps.parquet or steps/ part files{hint}")
    design = read_design(root / "design.json")
    design_file = str(root / "design.json")
    life = _lifetimes(root)
    step_parts = [step_range(f) for f in step_files]
    ctx_files = parts(root, "contexts")

    # shared inputs by explicit key: dask neither walks nor hashes them (the design's pool
    # alone holds one entry per pool memory)
    run = uuid.uuid4().hex
    d_life = dask.delayed(life, name=f"lifetimes-{run}", traverse=False) if life is not None else None
    d_steps = dask.delayed(step_parts, name=f"steps-parts-{run}", traverse=False)
    d_design = dask.delayed(design, name=f"design-{run}", traverse=False)
    d_pool = dask.delayed(validate.PoolTable.of((design or {}).get("pool", {}) or {}), name=f"pool-{run}", traverse=False)
    s_map = [
        dask.delayed(steps_partial, pure=True)(i, str(f), by, d_life) for i, f in enumerate(step_files)
    ]
    c_map = [
        dask.delayed(contexts_partial, pure=True)(i, str(f), d_steps, by, d_design, design_file, d_life, d_pool)
        for i, f in enumerate(ctx_files)
    ]
    s_red = tree_reduce(s_map, combine_steps)
    c_red = tree_reduce(c_map, combine_contexts) if c_map else None
    with dask_scheduler(scheduler) as sched:
        if c_red is None:
            (sp,) = dask.compute(s_red, scheduler=sched)
            cp = _empty_contexts()
        else:
            sp, cp = dask.compute(s_red, c_red, scheduler=sched)
    # the reader's order: the steps (each part's own rules, then their order across parts),
    # then the contexts; within each, the first part file that breaks a rule
    if sp.error is not None:
        raise sp.error.error()
    _check_step_order(sp)
    if cp.error is not None:
        raise cp.error.error()
    return _assemble(sp, cp, by, design, life, log_checksum(root))


def _check_step_order(sp: StepsPartial) -> None:
    """Steps strictly increasing across part files (within each part is checked by its task)."""
    meta = sorted(sp.meta)
    prev = None
    for _, file, n, first, last in meta:
        if n == 0:
            continue
        if prev is not None and first <= prev:
            what = "repeats" if first == prev else "goes backwards from"
            raise LogError(
                file,
                f"step {first} {what} the previous step {prev} (end of the previous part file); "
                "steps must be unique and strictly increasing",
                row=0,
                field="step",
            )
        prev = last


def _assemble(
    sp: StepsPartial,
    cp: ContextsPartial,
    by: By,
    design: dict[str, Any] | None,
    life: Lifetimes | None,
    checksum: str,
) -> xr.Dataset:
    pool = (design or {}).get("pool", {}) or {}
    # memory index: the memories file, else every memory named anywhere (as ExposureLog.memory_ids)
    if life is not None:
        memory_arr = life.memory
    else:
        named = [_named(cp.memory, cp.mem_idx)]
        if pool:
            named.append(pa.array(list(pool), pa.large_string()))
        if sp.ranks is not None:
            named.append(_named(sp.ranks.memory, sp.ranks.mem_idx))
        memory_arr = sorted_unique(*named)
    memory = to_index(memory_arr, "memory")
    m = len(memory)
    if by is None:
        cells = None
        cell_arr = _BLANK
    else:
        cell_arr = sorted_unique(sp.cell_names)
        cells = to_index(cell_arr, by)
    nc = len(cell_arr)
    shape = (m, nc)
    order = positions(cell_arr, sp.cell_names)  # index in sp.cell_names of each final cell (-1: none)

    def per_cell(a: np.ndarray) -> np.ndarray:
        return np.where(order >= 0, a[np.maximum(order, 0)] if len(a) else 0, 0).astype(a.dtype)

    if life is None:
        in_store = np.broadcast_to(per_cell(sp.cell_count), shape).copy()
        store_sum = np.broadcast_to(per_cell(sp.cell_sum), shape).copy()
        store_sumsq = np.broadcast_to(per_cell(sp.cell_sumsq), shape).copy()
    else:
        # life.memory is the sorted memory index itself
        st = sp.store[:, :, order] if sp.store is not None else np.zeros((3, m, nc))
        in_store = st[0].astype(np.int64)
        store_sum, store_sumsq = st[1], st[2]

    mi = _remap(cp.memory, memory_arr, cp.mem_idx)
    ci = _remap(cp.cells, cell_arr, cp.cell_idx)
    known = mi >= 0
    n_unknown = int(cp.values[~known, -1].sum())
    arms = {}
    for j, col in enumerate(ARM_COLS):
        out = np.zeros(shape, dtype=np.int64 if col.endswith("_n") else np.float64)
        out[mi[known], ci[known]] = cp.values[known, j]
        arms[col] = out
    data = stats_arrays(in_store, store_sum, store_sumsq, arms, *_rank_stats(sp.ranks, memory_arr, cell_arr))
    query_group = query_steps = None
    if by == "query":
        qpos = positions(cell_arr, sp.query_names)
        query_group = sp.query_group.take(pa.array(qpos)).to_numpy(zero_copy_only=False).astype(object)
        query_steps = per_cell(sp.cell_count).astype(np.int64)
    n_steps = int(sum(x[2] for x in sp.meta))
    return assemble_dataset(
        data,
        memory,
        cells,
        by,
        pool=pool,
        query_group=query_group,
        query_steps=query_steps,
        attrs={
            "n_steps": n_steps,
            "outcome_kind": "binary" if sp.binary else "fractional",
            "log_checksum": checksum,
            "n_unknown_context_rows": n_unknown,
        },
    )


def _named(names: pa.Array, idx: np.ndarray) -> pa.Array:
    """The entries of ``names`` that ``idx`` points at."""
    used = np.zeros(len(names), dtype=bool)
    used[idx] = True
    return names.filter(pa.array(used))


def _rank_stats(
    ranks: RankCounts | None, memory: pa.Array, cells: pa.Array
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ranked``, ``rank_median`` and ``rank_best`` (memory, cell) from counts per (memory, cell, rank)."""
    m, nc = len(memory), len(cells)
    ranked = np.zeros((m, nc), dtype=np.int64)
    median = np.full((m, nc), np.nan)
    best = np.full((m, nc), np.nan)
    if ranks is None or len(ranks.mem_idx) == 0:
        return ranked, median, best
    mi = _remap(ranks.memory, memory, ranks.mem_idx)
    ci = _remap(ranks.cells, cells, ranks.cell_idx)
    keep = mi >= 0
    key = (mi * nc + ci)[keep]
    rank = ranks.rank[keep]
    cnt = ranks.count[keep]
    order = np.lexsort((rank, key))
    key, rank, cnt = key[order], rank[order], cnt[order]
    total = np.bincount(key, weights=cnt, minlength=m * nc).astype(np.int64)
    cum = np.cumsum(cnt)  # position (exclusive end) of each (key, rank) run in the expanded order
    has = np.flatnonzero(total)
    start = np.concatenate(([0], np.cumsum(total)[:-1]))[has]
    n = total[has]
    v = rank.astype(np.float64)
    lo = v[np.searchsorted(cum, start + (n - 1) // 2, side="right")]
    hi = v[np.searchsorted(cum, start + n // 2, side="right")]
    flat = median.reshape(-1)
    flat[has] = 0.5 * (lo + hi)
    # sorted by (key, rank): a key's first run holds its smallest rank
    best.reshape(-1)[has] = v[np.searchsorted(cum, start, side="right")]
    ranked.reshape(-1)[:] = total
    return ranked, median, best


def fit_statistics(path: str | Path, scheduler: object | None = None) -> xr.Dataset:
    """The memory-level statistics ``cmp_bayes.model.fit.fit`` takes, computed with Dask.

    The same inputs ``fit(read_log(path))`` derives in memory
    (:func:`cmp_bayes.model.fit.memory_inputs`): ``exposure_stats(path)`` plus,
    when the log has two or more named query groups, a ``memory_group`` variable
    (:func:`cmp_bayes.statistics.groups.main_group`), and the
    attribute ``log_path``. Two passes over the log (memory level, then by group).

    Returns
    -------
    xarray.Dataset
        Pass it to ``fit(stats, ...)``.
    """
    stats = dask_exposure_stats(path, scheduler=scheduler)
    by_group = dask_exposure_stats(path, by="group", scheduler=scheduler)
    group = main_group(by_group)
    if group is not None:
        stats["memory_group"] = ("memory", group)
    stats.attrs["log_path"] = str(path)
    return stats
