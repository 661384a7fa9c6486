"""The Parquet form of the log: reading with the same checks as the JSONL form.

Tables: ``steps`` (step, query_id, outcome, group, and our optional
``ranking`` list column), ``contexts`` (one row per slot, in slot order:
step, memory_id, source, rank, propensity), ``memories``, ``labels``. Each is a
single ``NAME.parquet`` or a folder ``NAME/`` of part files read in name
order. Errors name the part file and the row within it (0-based).

Cost: the columns go from Arrow to pandas without a pass in Python and with
one copy at most; ``memory_id`` and ``source`` are read as dictionary codes
straight from the Parquet dictionary pages, which the checks use (and
:func:`cmp_bayes.statistics.exposure_stats` after them, see
:func:`cmp_bayes.log.codes.encode`) instead of hashing the strings. The
contexts are converted one part file at a time into preallocated columns, so
the peak memory is the DataFrame plus one part; part files with mixed schemas
or rows out of step order take the whole-table path (same frame, same errors).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode, remember
from cmp_bayes.log.columns import (
    CONTEXT_SPEC,
    LABEL_SPEC,
    MEMORY_SPEC,
    STEP_SPEC,
    arrow_list_to_long,
    check_columns,
    contexts_frame,
    int64_values,
    numeric_values,
    read_parquet_table,
    read_simple_table,
    steps_frame,
    string_values,
    table_columns,
)
from cmp_bayes.log.layout import is_text, parquet_files, read_design
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    ExposureLog,
    empty_frame,
)
from cmp_bayes.log.window import ReadRows


def read_parquet_log(root: Path) -> tuple[ExposureLog, ReadRows]:
    """Read a Parquet-form log directory (see module docstring).

    Returns the log and where its steps and slots came from (the window
    design's checks run once the memories are checked, see :func:`cmp_bayes.read_log`).
    """
    design = read_design(root / "design.json")
    design_file = str(root / "design.json")

    files = parquet_files(root, "steps") or []
    if not files:
        raise LogError(root / "steps", "no Parquet part files")
    table, rows = read_parquet_table(files)
    check_columns(table, rows, STEP_SPEC)
    steps = steps_frame(table)
    validate.check_steps(steps, rows)
    validate.check_step_rounds(steps, design, design_file, rows)
    steps_np = steps["step"].to_numpy()
    rankings = None
    has_ranking = np.zeros(len(steps_np), dtype=bool)
    if "ranking" in table.column_names:
        has_ranking = ~table["ranking"].is_null().to_numpy(zero_copy_only=False)
    if "ranking" in table.column_names and table["ranking"].null_count < table.num_rows:
        rk = table["ranking"]
        if not (pat.is_list(rk.type) or pat.is_large_list(rk.type)):
            raise LogError(files[0], f"expected a list<string> column, got {rk.type}", field="ranking")
        rankings = arrow_list_to_long(rk, steps_np)
        _check_ranking_repeats(rankings, steps_np, rows)

    cfiles = parquet_files(root, "contexts") or []
    if cfiles:
        built = _contexts_by_part(cfiles)
        if built is None:
            built = _contexts_whole(cfiles)
        contexts, mcodes, scodes, runs, crows = built
        validate.check_contexts(contexts, steps_np, design, design_file, crows, mcodes, scodes, runs)
    else:
        contexts, crows = empty_frame(CONTEXT_COLUMNS), None

    memories = read_simple_table(root, "memories", MEMORY_COLUMNS, MEMORY_SPEC)
    if memories is not None:
        memories["meta"] = memories["meta"].map(_parse_meta).astype(object)
        dup = memories.duplicated("memory_id").to_numpy()
        if dup.any():
            raise LogError(root / "memories.parquet", "duplicate memory_id", row=int(np.flatnonzero(dup)[0]), field="memory_id")
    labels = read_simple_table(root, "labels", LABEL_COLUMNS, LABEL_SPEC)
    log = ExposureLog(steps, contexts, rankings, memories, design, labels, source=root)
    return log, ReadRows(rows, crows, has_ranking)


_Built = tuple[pd.DataFrame, Codes | None, Codes | None, validate.StepRuns, validate.Rows]


def _contexts_whole(files: list[Path]) -> _Built:
    """The contexts frame from all part files at once (any schema mix, any row order)."""
    ctable, rows = read_parquet_table(files, dictionary=("memory_id", "source"))
    check_columns(ctable, rows, CONTEXT_SPEC)
    step = int64_values(ctable["step"])
    runs = validate.StepRuns.of(step)
    if runs.order is not None:
        # slot order is row order within a step: a stable sort keeps it across part files
        ctable = ctable.take(pa.array(runs.order))
        rows = rows.reordered(runs.order)
        step = step[runs.order]
        runs = validate.StepRuns(None, runs.starts, runs.lengths)
    cols = table_columns(ctable, ("memory_id", "source", "rank", "propensity", "arm"))
    del ctable  # each column is freed as soon as it is converted
    contexts, mcodes, scodes = contexts_frame(cols, step, runs)
    return contexts, mcodes, scodes, runs, rows


class _Dictionary:
    """A dictionary of distinct strings grown one part file at a time."""

    def __init__(self) -> None:
        self.values = pa.array([], pa.large_string())

    def positions(self, d: pa.Array) -> np.ndarray:
        """Where each entry of ``d`` sits in the dictionary (adding the new ones), int32."""
        d = d if pat.is_large_string(d.type) else d.cast(pa.large_string())
        pos = pc.index_in(d, value_set=self.values).fill_null(-1).to_numpy(zero_copy_only=False)
        if (pos < 0).any():
            self.values = pa.concat_arrays([self.values, pc.unique(d.filter(pa.array(pos < 0)))])
            pos = pc.index_in(d, value_set=self.values).to_numpy(zero_copy_only=False)
        return pos.astype(np.int32)


def _contexts_by_part(files: list[Path]) -> _Built | None:
    """The contexts frame built one part file at a time into preallocated columns, so that
    the peak memory is the frame plus one part (not plus the whole Arrow table).

    Only the plain case: parts readable, one schema, ``memory_id`` and ``source``
    read as dictionaries, no null in a required column, rows in step order
    across the parts. Anything else returns None, and :func:`_contexts_whole`
    (which also words every error) decides.
    """
    try:
        counts = [pq.ParquetFile(f).metadata.num_rows for f in files]
    except Exception:  # noqa: BLE001 - the whole-table path reports it
        return None
    n = int(sum(counts))
    step = np.empty(n, np.int64)
    rank, rank_null = np.zeros(n, np.int64), np.zeros(n, dtype=bool)
    prop, prop_null = np.zeros(n, np.float64), np.zeros(n, dtype=bool)
    codes = {"memory_id": np.empty(n, np.int32), "source": np.empty(n, np.int32)}
    dicts = {"memory_id": _Dictionary(), "source": _Dictionary()}
    chunks: dict[str, list[pa.Array]] = {"memory_id": [], "source": []}
    schema, at, last = None, 0, None
    for f, k in zip(files, counts, strict=True):
        try:
            t = pq.read_table(f, read_dictionary=["memory_id", "source"])
        except Exception:  # noqa: BLE001 - the whole-table path reports it
            return None
        if schema is None:
            schema = t.schema
            if not _plain_contexts_schema(schema):
                return None
        if t.num_rows != k or not t.schema.equals(schema) or any(
            t[c].null_count for c in ("step", "memory_id", "source")
        ):
            return None
        part = slice(at, at + k)
        step[part], _ = numeric_values(t["step"], np.int64)
        s = step[part]
        if k and (bool(np.any(s[1:] < s[:-1])) or (last is not None and s[0] < last)):
            return None  # not in step order: the whole-table path sorts
        last = int(s[-1]) if k else last
        for name in ("memory_id", "source"):
            row = at
            # record batches repeat their row group's dictionary (same buffers): merge each once;
            # the addresses only identify a dictionary while this part's table is alive
            seen: dict[tuple[int, ...], np.ndarray] = {}
            for chunk in t[name].chunks:
                key = _buffers_key(chunk.dictionary)
                if key not in seen:
                    seen[key] = dicts[name].positions(chunk.dictionary)
                where = seen[key]
                idx = chunk.indices.to_numpy(zero_copy_only=False)
                codes[name][row : row + len(chunk)] = where[idx]
                d = chunk.dictionary if pat.is_large_string(chunk.dictionary.type) else chunk.dictionary.cast(pa.large_string())
                chunks[name].append(d.take(chunk.indices))
                row += len(chunk)
        for name, values, null, dtype in (("rank", rank, rank_null, np.int64), ("propensity", prop, prop_null, np.float64)):
            if name not in t.column_names:
                null[part] = True  # optional column absent from this part: all null
                continue
            values[part], mask = numeric_values(t[name], dtype)
            if mask is not None:
                null[part] = mask
        at += k
        del t
    rank[rank_null] = 0
    prop_null |= np.isnan(prop)
    prop[prop_null] = 0.0
    runs = validate.StepRuns.of(step)
    out = {}
    for name in ("memory_id", "source"):
        d = dicts[name].values
        c = codes[name] if len(d) >= 127 else codes[name].astype(np.int8)
        out[name] = Codes(c, d)
    frame = pd.DataFrame(
        {
            "step": step,
            "slot": runs.slot(),
            "memory_id": pd.arrays.ArrowStringArray(pa.chunked_array(chunks["memory_id"], pa.large_string())),
            "source": pd.arrays.ArrowStringArray(pa.chunked_array(chunks["source"], pa.large_string())),
            "rank": pd.arrays.IntegerArray(rank, rank_null),
            "propensity": pd.arrays.FloatingArray(prop, prop_null),
            "arm": string_values(None, n)[0],  # parts with an arm column take the whole-table path
        },
        copy=False,
    )
    for name in ("memory_id", "source"):
        remember(frame[name], out[name])
    return frame, out["memory_id"], out["source"], runs, validate.Rows.parts(files, counts)


def _buffers_key(a: pa.Array) -> tuple[int, ...]:
    return (*(b.address if b is not None else 0 for b in a.buffers()), a.offset, len(a))


def _plain_contexts_schema(schema: pa.Schema) -> bool:
    """Required columns present with the types :func:`_contexts_by_part` converts directly."""
    names = schema.names
    if any(c not in names for c in ("step", "memory_id", "source")) or "arm" in names:
        return False  # an arm column (window designs) takes the whole-table path
    ok = pat.is_integer(schema.field("step").type) and all(
        pat.is_dictionary(schema.field(c).type) and is_text(schema.field(c).type.value_type)
        for c in ("memory_id", "source")
    )
    if "rank" in names:
        ok &= pat.is_integer(schema.field("rank").type)
    if "propensity" in names:
        ok &= pat.is_integer(schema.field("propensity").type) or pat.is_floating(schema.field("propensity").type)
    return bool(ok)


def _check_ranking_repeats(rankings: pd.DataFrame, steps_np: np.ndarray, rows: validate.Rows) -> None:
    """A memory listed twice in one step's ranking names that step's row."""
    rstep = rankings["step"].to_numpy()
    if not validate.StepRuns.of(rstep).any_repeat(encode(rankings["memory_id"]).indices):
        return
    dup = rankings.duplicated(["step", "memory_id"])
    st = rankings.loc[dup, "step"].iloc[0]
    i = int(np.flatnonzero(steps_np == st)[0])
    file, row = rows.where(i)
    raise LogError(file, "a memory appears twice in the ranking", row=row, field="ranking")


def _parse_meta(v: object) -> object:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, str):
        return json.loads(v)
    return v


__all__ = ["read_parquet_log"]
