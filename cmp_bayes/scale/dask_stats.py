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
* **reduce**: partial results are keyed by memory id and cell name (strings),
  so a part knows nothing about the others; they are added in a tree
  (``SPLIT_EVERY`` at a time) and turned into dense (memory, cell) arrays once,
  at the end, by the same assembly code as the pandas engine.

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
lifetime. Errors name the part file and the 0-based row within it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xarray as xr

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.errors import ConfigError, LogError
from cmp_bayes.log import validate
from cmp_bayes.log.parquet import _check_columns, _read_simple
from cmp_bayes.log.read import _read_design, arrow_list_to_long, log_checksum
from cmp_bayes.log.schema import CONTEXT_COLUMNS, MEMORY_COLUMNS, STEP_COLUMNS, coerce
from cmp_bayes.statistics import By, assemble_dataset

#: partial results added together per reduce task
SPLIT_EVERY: int = 8

_NEVER = np.iinfo(np.int64).max
_STEP_SPEC = {"step": ("int", True), "query_id": ("str", True), "outcome": ("num", True), "group": ("str", False)}
_CTX_SPEC = {
    "step": ("int", True),
    "memory_id": ("str", True),
    "source": ("str", True),
    "rank": ("int", False),
    "propensity": ("num", False),
}
_ARMS = ("retrieved", "exposed", "in_context")
_ARM_COLS = tuple(f"{a}_{s}" for a in _ARMS for s in ("n", "sum", "sumsq"))


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

    memory: np.ndarray  # (M,) object, sorted
    created: np.ndarray  # (M,) int64
    deleted: np.ndarray  # (M,) int64, int64 max = never


def parts(root: Path, name: str) -> list[Path]:
    """Part files of table ``name``: ``name.parquet`` or ``name/**/*.parquet`` in name order."""
    single = root / f"{name}.parquet"
    if single.is_file():
        return [single]
    folder = root / name
    if folder.is_dir():
        return sorted(x for x in folder.rglob("*.parquet") if x.is_file())
    return []


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
    mem = _read_simple(
        root, "memories", MEMORY_COLUMNS,
        {"memory_id": ("str", True), "created_step": ("int", True), "deleted_step": ("int", False), "text": ("str", False)},
    )
    if mem is None:
        return None
    dup = mem.duplicated("memory_id").to_numpy()
    if dup.any():
        raise LogError(root / "memories.parquet", "duplicate memory_id", row=int(np.flatnonzero(dup)[0]), field="memory_id")
    ids = mem["memory_id"].astype(str).to_numpy(dtype=object)
    order = np.argsort(ids, kind="stable")
    return Lifetimes(
        memory=ids[order],
        created=mem["created_step"].to_numpy(np.int64)[order],
        deleted=mem["deleted_step"].astype("Int64").fillna(_NEVER).to_numpy(np.int64)[order],
    )


def _cell_of(table: pa.Table, by: By) -> np.ndarray:
    """Each step row's cell name (object array): query id, group ("" for none) or ""."""
    n = table.num_rows
    if by is None:
        return np.full(n, "", dtype=object)
    if by == "query":
        return np.asarray(table["query_id"].cast(pa.string()).to_pylist(), dtype=object)
    if "group" not in table.column_names:
        return np.full(n, "", dtype=object)
    g = table["group"].cast(pa.string()).fill_null("")
    return np.asarray(g.to_pylist(), dtype=object)


def _locate(frame: pd.DataFrame, file: str) -> pd.DataFrame:
    return frame.assign(_file=file, _kind="row", _loc=np.arange(len(frame)))


def _read(file: str, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
    try:
        return pq.read_table(file, columns=columns, filters=filters)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(file, f"not a readable Parquet file ({exc})") from None


# --------------------------------------------------------------------------- steps map


@dataclass
class StepsPartial:
    """What the steps parts contribute; added by :func:`combine_steps`."""

    meta: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # (part, file, n, first, last)
    binary: bool = True
    cells: pd.DataFrame | None = None  # cell, count, sum, sumsq over the steps of each cell
    store: dict[str, np.ndarray] = field(default_factory=dict)  # cell -> (3, M): with a memories file
    queries: pd.DataFrame | None = None  # query, first_step, group
    ranks: pd.DataFrame | None = None  # memory, cell, rank, count


def steps_partial(index: int, file: str, by: By, life: Lifetimes | None) -> StepsPartial:
    """Validate one steps part and return its contribution (see module docstring)."""
    table = _read(file)
    n = table.num_rows
    zeros, rows = np.zeros(n, dtype=np.int64), np.arange(n)
    _check_columns(table, [Path(file)], zeros, rows, _STEP_SPEC)
    cols = {c: table[c].to_pandas() for c in ("step", "query_id", "outcome", "group") if c in table.column_names}
    steps = coerce(pd.DataFrame(cols), STEP_COLUMNS)
    validate.check_steps(_locate(steps, file))
    sv = steps["step"].to_numpy(np.int64)
    y = steps["outcome"].to_numpy(np.float64)
    cell = _cell_of(table, by)
    out = StepsPartial(
        meta=[(index, file, n, int(sv[0]) if n else 0, int(sv[-1]) if n else 0)],
        binary=bool(np.all((y == 0.0) | (y == 1.0))),
    )
    cell_names, cell_code = np.unique(cell, return_inverse=True) if n else (np.zeros(0, object), zeros)
    nc = len(cell_names)
    out.cells = pd.DataFrame(
        {
            "cell": cell_names,
            "count": np.bincount(cell_code, minlength=nc).astype(np.int64),
            "sum": np.bincount(cell_code, weights=y, minlength=nc),
            "sumsq": np.bincount(cell_code, weights=y * y, minlength=nc),
        }
    )
    if life is not None:
        for c, name in enumerate(cell_names):
            sel = cell_code == c
            s, yc = sv[sel], y[sel]
            cs = np.concatenate(([0.0], np.cumsum(yc)))
            cs2 = np.concatenate(([0.0], np.cumsum(np.square(yc))))
            lo = np.searchsorted(s, life.created, side="left")
            hi = np.maximum(np.searchsorted(s, life.deleted, side="left"), lo)
            out.store[str(name)] = np.stack(
                [(hi - lo).astype(np.float64), cs[hi] - cs[lo], cs2[hi] - cs2[lo]]
            )
    if by == "query" and n:
        first = steps.drop_duplicates("query_id", keep="first")
        out.queries = pd.DataFrame(
            {
                "query": first["query_id"].astype(str).to_numpy(dtype=object),
                "first_step": first["step"].to_numpy(np.int64),
                "group": first["group"].astype("string").fillna("").astype(str).to_numpy(dtype=object),
            }
        )
    out.ranks = _rank_counts(table, sv, cell, file)
    return out


def _rank_counts(table: pa.Table, sv: np.ndarray, cell: np.ndarray, file: str) -> pd.DataFrame | None:
    """Counts per (memory, cell, rank) of the part's rankings (first listing per step only)."""
    if "ranking" not in table.column_names or table["ranking"].null_count == table.num_rows:
        return None
    import pyarrow.types as pat

    rk = table["ranking"]
    if not (pat.is_list(rk.type) or pat.is_large_list(rk.type)):
        raise LogError(file, f"expected a list<string> column, got {rk.type}", field="ranking")
    long = arrow_list_to_long(rk, np.arange(len(sv)))  # "step" = row in this part
    if long.empty:
        return None
    row = long["step"].to_numpy(np.int64)
    mem = long["memory_id"].astype(str).to_numpy(dtype=object)
    rank = long["rank"].to_numpy(np.int64)
    dup = pd.DataFrame({"r": row, "m": mem}).duplicated().to_numpy()
    if dup.any():
        raise LogError(file, "a memory appears twice in the ranking", row=int(row[np.flatnonzero(dup)[0]]), field="ranking")
    frame = pd.DataFrame({"memory": mem, "cell": cell[row], "rank": rank, "count": np.ones(len(row), np.int64)})
    return frame.groupby(["memory", "cell", "rank"], sort=False, as_index=False)["count"].sum()


def _add_frames(a: pd.DataFrame | None, b: pd.DataFrame | None, keys: list[str]) -> pd.DataFrame | None:
    if a is None:
        return b
    if b is None:
        return a
    return pd.concat([a, b], ignore_index=True).groupby(keys, sort=False, as_index=False).sum()


def combine_steps(*partials: StepsPartial) -> StepsPartial:
    """Add steps partials (any number, any order)."""
    out = StepsPartial()
    for p in partials:
        out.meta += p.meta
        out.binary &= p.binary
        out.cells = _add_frames(out.cells, p.cells, ["cell"])
        for k, v in p.store.items():
            out.store[k] = out.store[k] + v if k in out.store else v
        if p.queries is not None:
            q = p.queries if out.queries is None else pd.concat([out.queries, p.queries], ignore_index=True)
            # a query's group is the one at its first step
            out.queries = q.sort_values("first_step", kind="stable").drop_duplicates("query", keep="first")
        out.ranks = _add_frames(out.ranks, p.ranks, ["memory", "cell", "rank"])
    return out


# --------------------------------------------------------------------------- contexts map


def _steps_in_range(steps: list[Part], lo: int, hi: int, by: By) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step, outcome and cell name of every step in [lo, hi], sorted by step."""
    cols = ["step", "outcome"] + (["query_id"] if by == "query" else ["group"] if by == "group" else [])
    sv, ys, cs = [], [], []
    for p in steps:
        if p.lo is not None and (p.hi < lo or p.lo > hi):
            continue
        names = pq.ParquetFile(p.file).schema_arrow.names
        t = _read(p.file, [c for c in cols if c in names], filters=[("step", ">=", lo), ("step", "<=", hi)])
        sv.append(t["step"].to_numpy().astype(np.int64))
        ys.append(t["outcome"].to_numpy().astype(np.float64))
        cs.append(_cell_of(t, by))
    if not sv:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object)
    s, y, c = np.concatenate(sv), np.concatenate(ys), np.concatenate(cs)
    order = np.argsort(s, kind="stable")
    return s[order], y[order], c[order]


def contexts_partial(
    file: str,
    steps: list[Part],
    by: By,
    design: dict[str, Any] | None,
    design_file: str,
    life: Lifetimes | None,
) -> pd.DataFrame:
    """Validate one contexts part and sum its arms per (memory, cell).

    Returns
    -------
    pandas.DataFrame
        Columns ``memory``, ``cell``, ``rows`` (every context row, for the
        unknown-memory count) and ``{retrieved,exposed,in_context}_{n,sum,sumsq}``
        (``in_context``: rows whose memory is in the store at that step).
    """
    table = _read(file)
    n = table.num_rows
    if n == 0:
        return pd.DataFrame(columns=["memory", "cell", "rows", *_ARM_COLS])
    _check_columns(table, [Path(file)], np.zeros(n, np.int64), np.arange(n), _CTX_SPEC)
    ctx_step = table["step"].to_numpy().astype(np.int64)
    lo, hi = int(ctx_step.min()), int(ctx_step.max())
    sv, y_of, cell_of = _steps_in_range(steps, lo, hi, by)

    frame = pd.DataFrame(
        {c: table[c].to_pandas() for c in ("step", "memory_id", "source", "rank", "propensity") if c in table.column_names}
    )
    # the slot's position within its step, in row order, names the field in errors
    frame["slot"] = frame.groupby("step", sort=False).cumcount()
    frame = _locate(coerce(frame, CONTEXT_COLUMNS), file)
    validate.check_contexts(frame, pd.DataFrame({"step": sv}), design, design_file)

    pos = np.searchsorted(sv, ctx_step)
    enc = pc.dictionary_encode(table["memory_id"].cast(pa.string())).combine_chunks()
    mem_names = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    mem_code = enc.indices.to_numpy().astype(np.int64)
    if life is None:
        stored = np.ones(n, dtype=bool)
    else:
        stored = _check_lifetimes(frame, life, mem_names, mem_code, ctx_step, file)
    src = table["source"].cast(pa.string())
    is_exp = pc.equal(src, EXPOSURE).fill_null(False).to_numpy(zero_copy_only=False)
    is_ret = pc.equal(src, RETRIEVER).fill_null(False).to_numpy(zero_copy_only=False)
    y = y_of[pos]
    y2 = y * y
    cell_names, cell_code = np.unique(cell_of[pos], return_inverse=True)
    key = mem_code * len(cell_names) + cell_code
    uniq, inv = np.unique(key, return_inverse=True)
    size = len(uniq)

    def count(mask: np.ndarray | None, w: np.ndarray | None = None) -> np.ndarray:
        k = inv if mask is None else inv[mask]
        ww = None if w is None else (w if mask is None else w[mask])
        return np.bincount(k, weights=ww, minlength=size)

    cols: dict[str, np.ndarray] = {
        "memory": mem_names[uniq // len(cell_names)],
        "cell": cell_names[uniq % len(cell_names)],
        "rows": count(None).astype(np.int64),
    }
    for arm, mask in (("retrieved", is_ret), ("exposed", is_exp), ("in_context", stored)):
        cols[f"{arm}_n"] = count(mask).astype(np.int64)
        cols[f"{arm}_sum"] = count(mask, y)
        cols[f"{arm}_sumsq"] = count(mask, y2)
    return pd.DataFrame(cols)


def _check_lifetimes(
    frame: pd.DataFrame,
    life: Lifetimes,
    mem_names: np.ndarray,
    mem_code: np.ndarray,
    ctx_step: np.ndarray,
    file: str,
) -> np.ndarray:
    """Reject memories absent from the memories file or outside their lifetime; return ``stored``."""
    idx = pd.Index(life.memory).get_indexer(mem_names)[mem_code]
    unknown = idx < 0
    validate.fail_at(frame, unknown, "context[{slot}].memory_id",
                     "memory '{memory_id}' at step {step} is not in memories")
    created, deleted = life.created[idx], life.deleted[idx]
    stored = (created <= ctx_step) & (ctx_step < deleted)
    validate.fail_at(frame, ~stored, "context[{slot}].memory_id",
                     "memory '{memory_id}' is in the context at step {step} but not in the store then "
                     "(see memories created_step / deleted_step)")
    return stored


def combine_contexts(*partials: pd.DataFrame) -> pd.DataFrame:
    """Add contexts partials (any number, any order)."""
    frames = [p for p in partials if len(p)]
    if not frames:
        return partials[0]
    return pd.concat(frames, ignore_index=True).groupby(["memory", "cell"], sort=False, as_index=False).sum()


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
    design = _read_design(root / "design.json")
    design_file = str(root / "design.json")
    life = _lifetimes(root)
    step_parts = [step_range(f) for f in step_files]
    ctx_files = parts(root, "contexts")

    d_life = dask.delayed(life, pure=True) if life is not None else None
    d_steps = dask.delayed(step_parts, pure=True)
    d_design = dask.delayed(design, pure=True)
    s_map = [
        dask.delayed(steps_partial, pure=True)(i, str(f), by, d_life) for i, f in enumerate(step_files)
    ]
    c_map = [
        dask.delayed(contexts_partial, pure=True)(str(f), d_steps, by, d_design, design_file, d_life)
        for f in ctx_files
    ]
    s_red = tree_reduce(s_map, combine_steps)
    c_red = tree_reduce(c_map, combine_contexts) if c_map else None
    with dask_scheduler(scheduler) as sched:
        if c_red is None:
            (sp,) = dask.compute(s_red, scheduler=sched)
            cp = pd.DataFrame(columns=["memory", "cell", "rows", *_ARM_COLS])
        else:
            sp, cp = dask.compute(s_red, c_red, scheduler=sched)
    _check_step_order(sp)
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
    cp: pd.DataFrame,
    by: By,
    design: dict[str, Any] | None,
    life: Lifetimes | None,
    checksum: str,
) -> xr.Dataset:
    pool = (design or {}).get("pool", {}) or {}
    # memory index: the memories file, else every memory named anywhere (as ExposureLog.memory_ids)
    if life is not None:
        memory = pd.Index(np.sort(pd.unique(life.memory)), name="memory", dtype="object")
    else:
        named = [cp["memory"].to_numpy(dtype=object), np.asarray(list(pool), dtype=object)]
        if sp.ranks is not None:
            named.append(sp.ranks["memory"].to_numpy(dtype=object))
        ids = pd.unique(np.concatenate(named).astype(str))
        memory = pd.Index(np.sort(ids), name="memory", dtype="object")
    m = len(memory)
    if by is None:
        cells = None
        cell_names = np.array([""], dtype=object)
    else:
        cells = pd.Index(np.sort(sp.cells["cell"].astype(str).unique()), name=by, dtype="object")
        cell_names = np.asarray(cells, dtype=object)
    nc = len(cell_names)
    cell_index = pd.Index(cell_names)

    if life is None:
        c = sp.cells.set_index("cell").reindex(cell_index)
        in_store = np.broadcast_to(c["count"].to_numpy(np.int64), (m, nc)).copy()
        store_sum = np.broadcast_to(c["sum"].to_numpy(np.float64), (m, nc)).copy()
        store_sumsq = np.broadcast_to(c["sumsq"].to_numpy(np.float64), (m, nc)).copy()
    else:
        # life.memory is the sorted memory index itself
        st = np.stack([sp.store[str(name)] for name in cell_names], axis=-1)  # (3, M, C)
        in_store = st[0].astype(np.int64)
        store_sum, store_sumsq = st[1], st[2]

    mi = memory.get_indexer(cp["memory"].to_numpy(dtype=object))
    ci = cell_index.get_indexer(cp["cell"].to_numpy(dtype=object))
    known = mi >= 0
    n_unknown = int(cp["rows"].to_numpy(np.int64)[~known].sum())
    mi, ci = mi[known], ci[known]

    def dense(col: str, dtype: type) -> np.ndarray:
        out = np.zeros((m, nc), dtype=dtype)
        out[mi, ci] = cp[col].to_numpy(dtype)[known]
        return out

    arms = {col: dense(col, np.int64 if col.endswith("_n") else np.float64) for col in _ARM_COLS}
    control = in_store - arms["in_context_n"]
    control_s = store_sum - arms["in_context_sum"]
    control_s2 = store_sumsq - arms["in_context_sumsq"]
    control_s = np.where(control == 0, 0.0, control_s)
    control_s2 = np.where(control == 0, 0.0, control_s2)
    ranked, rank_median = _rank_stats(sp.ranks, memory, cell_index)

    data = {
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
    }
    query_group = query_steps = None
    if by == "query":
        q = sp.queries.set_index("query").reindex(cell_index)
        query_group = q["group"].to_numpy(dtype=object)
        query_steps = sp.cells.set_index("cell").reindex(cell_index)["count"].to_numpy(np.int64)
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


def _rank_stats(ranks: pd.DataFrame | None, memory: pd.Index, cell_index: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """``ranked`` and ``rank_median`` (memory, cell) from counts per (memory, cell, rank)."""
    m, nc = len(memory), len(cell_index)
    ranked = np.zeros((m, nc), dtype=np.int64)
    median = np.full((m, nc), np.nan)
    if ranks is None or ranks.empty:
        return ranked, median
    mi = memory.get_indexer(ranks["memory"].to_numpy(dtype=object))
    ci = cell_index.get_indexer(ranks["cell"].to_numpy(dtype=object))
    keep = mi >= 0
    key = (mi * nc + ci)[keep]
    rank = ranks["rank"].to_numpy(np.int64)[keep]
    cnt = ranks["count"].to_numpy(np.int64)[keep]
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
    ranked.reshape(-1)[:] = total
    return ranked, median


def fit_statistics(path: str | Path, scheduler: object | None = None) -> xr.Dataset:
    """The memory-level statistics ``cmp_bayes.model.fit.fit`` takes, computed with Dask.

    The same inputs ``fit(read_log(path))`` derives in memory
    (:func:`cmp_bayes.model.fit.memory_inputs`): ``exposure_stats(path)`` plus,
    when the log has two or more query groups, a ``memory_group`` variable (the
    group of the steps at which the memory is in the store most often), and the
    attribute ``log_path``. Two passes over the log (memory level, then by group).

    Returns
    -------
    xarray.Dataset
        Pass it to ``fit(stats, ...)``.
    """
    stats = dask_exposure_stats(path, scheduler=scheduler)
    by_group = dask_exposure_stats(path, by="group", scheduler=scheduler)
    if by_group.sizes["group"] >= 2:
        steps = by_group["in_store"].transpose("memory", "group")
        group = np.asarray(by_group["group"].values)[steps.argmax("group").values].astype(str)
        stats["memory_group"] = ("memory", group)
    stats.attrs["log_path"] = str(path)
    return stats
