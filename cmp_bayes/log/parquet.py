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
import pyarrow.types as pat

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode, from_dictionary, remember
from cmp_bayes.log.read import (
    _parquet_source,
    _read_design,
    arrow_list_to_long,
    read_parquet_table,
)
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    ExposureLog,
    coerce,
    empty_frame,
)

_KIND_CHECKS = {
    "int": (pat.is_integer, "an integer"),
    "num": (lambda t: pat.is_integer(t) or pat.is_floating(t), "a number"),
    "str": (lambda t: pat.is_string(t) or pat.is_large_string(t) or pat.is_dictionary(t), "a string"),
    "bool": (pat.is_boolean, "a boolean"),
}
#: column rules of the steps and contexts tables: name -> (kind, required)
STEP_SPEC: dict[str, tuple[str, bool]] = {
    "step": ("int", True),
    "query_id": ("str", True),
    "outcome": ("num", True),
    "group": ("str", False),
}
CONTEXT_SPEC: dict[str, tuple[str, bool]] = {
    "step": ("int", True),
    "memory_id": ("str", True),
    "source": ("str", True),
    "rank": ("int", False),
    "propensity": ("num", False),
}


def _check_columns(table: pa.Table, rows: validate.Rows, spec: dict[str, tuple[str, bool]]) -> None:
    """Presence, type and non-null of each column: spec maps name -> (kind, required)."""
    where = rows.files[0] if rows.files else "?"
    for name, (kind, required) in spec.items():
        if name not in table.column_names:
            if required:
                raise LogError(where, "missing required column", field=name)
            continue
        col = table[name]
        check, label = _KIND_CHECKS[kind]
        if not (check(col.type) or pat.is_null(col.type)):
            raise LogError(where, f"expected {label} column, got {col.type}", field=name)
        if required and col.null_count:
            i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            file, row = rows.where(i)
            raise LogError(file, "missing required value (null)", row=row, field=name)


# --------------------------------------------------------------------------- Arrow -> pandas columns


def _numbers(col: pa.ChunkedArray, dtype: type) -> tuple[np.ndarray, np.ndarray | None]:
    """A numeric column's values as one writeable numpy array (one copy, whatever the number
    of chunks) and its null mask (None without nulls); values under the mask are undefined."""
    target = pa.from_numpy_dtype(dtype)
    if col.type != target:
        col = col.cast(target)
    n = len(col)
    values = np.empty(n, dtype=dtype)
    mask = np.zeros(n, dtype=bool) if col.null_count else None
    size = np.dtype(dtype).itemsize
    pos = 0
    for chunk in col.chunks:  # a loop over record batches, not rows
        k = len(chunk)
        data = chunk.buffers()[1]
        if data is None:
            values[pos : pos + k] = 0
        else:
            values[pos : pos + k] = np.frombuffer(data, dtype=dtype, count=k, offset=chunk.offset * size)
        if mask is not None and chunk.null_count:
            mask[pos : pos + k] = chunk.is_null().to_numpy(zero_copy_only=False)
        pos += k
    return values, mask


def int64_values(col: pa.ChunkedArray) -> np.ndarray:
    """A non-null integer column as a writeable int64 numpy array."""
    return _numbers(col, np.int64)[0]


def float64_values(col: pa.ChunkedArray) -> np.ndarray:
    """A non-null numeric column as a writeable float64 numpy array."""
    return _numbers(col, np.float64)[0]


def string_values(col: pa.ChunkedArray | None, n: int) -> tuple[pd.api.extensions.ExtensionArray, Codes | None]:
    """A string column as the schema's ``"string"`` dtype (pyarrow-backed, no copy of the
    characters where the column already holds strings) and, for a dictionary column, its codes."""
    codes = None
    if col is None or pat.is_null(col.type):
        col = pa.chunked_array([pa.nulls(n, pa.large_string())])
    elif pat.is_dictionary(col.type) and _is_text(col.type.value_type):
        col, codes = from_dictionary(col)
    elif not pat.is_large_string(col.type):
        col = col.cast(pa.large_string())
    if col.num_chunks == 0:
        col = pa.chunked_array([pa.array([], pa.large_string())])
    return pd.arrays.ArrowStringArray(col), codes


def masked_int64(col: pa.ChunkedArray | None, n: int) -> pd.api.extensions.ExtensionArray:
    """An optional integer column as ``Int64`` (<NA> for nulls)."""
    if col is None or pat.is_null(col.type):
        return pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, dtype=bool))
    values, mask = _numbers(col, np.int64)
    if mask is None:
        mask = np.zeros(n, dtype=bool)
    else:
        values[mask] = 0
    return pd.arrays.IntegerArray(values, mask)


def masked_float64(col: pa.ChunkedArray | None, n: int) -> pd.api.extensions.ExtensionArray:
    """An optional numeric column as ``Float64``: nulls and NaN become <NA> (as ``astype("Float64")`` does)."""
    if col is None or pat.is_null(col.type):
        return pd.arrays.FloatingArray(np.zeros(n, np.float64), np.ones(n, dtype=bool))
    values, nulls = _numbers(col, np.float64)
    mask = np.isnan(values)
    if nulls is not None:
        mask |= nulls
    values[mask] = 0.0
    return pd.arrays.FloatingArray(values, mask)


def _is_text(t: pa.DataType) -> bool:
    return pat.is_string(t) or pat.is_large_string(t)


def _col(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    return table[name] if name in table.column_names else None


def steps_frame(table: pa.Table) -> pd.DataFrame:
    """The steps DataFrame (``STEP_COLUMNS``) of a checked steps table."""
    n = table.num_rows
    return pd.DataFrame(
        {
            "step": int64_values(table["step"]),
            "query_id": string_values(table["query_id"], n)[0],
            "outcome": float64_values(table["outcome"]),
            "group": string_values(_col(table, "group"), n)[0],
        },
        copy=False,
    )


def contexts_frame(
    cols: dict[str, pa.ChunkedArray], step: np.ndarray, runs: validate.StepRuns, strings: bool = True
) -> tuple[pd.DataFrame, Codes | None, Codes | None]:
    """The contexts DataFrame (``CONTEXT_COLUMNS``) of a checked contexts table.

    Parameters
    ----------
    cols : dict of pyarrow.ChunkedArray
        The table's columns ``memory_id``, ``source`` and the optional
        ``rank``, ``propensity``; each is removed from the dict once converted,
        so that (the caller holding no other reference) its memory is freed
        before the next one is built.
    step : numpy.ndarray, int64, shape (n,)
        The ``step`` column.
    runs : StepRuns
        ``StepRuns.of(step)``; ``slot`` is each row's position among the rows
        of its step, in table order.
    strings : bool
        True: ``memory_id`` and ``source`` as the schema's ``"string"`` dtype.
        False: the frame leaves them out and only their codes are returned
        (no string is built), for callers that check the table
        (:func:`cmp_bayes.log.validate.check_contexts` takes the codes) and
        aggregate it.

    Returns
    -------
    tuple
        The frame and the codes of ``memory_id`` and ``source`` (with
        ``strings``: None where the column was not read as a dictionary; the
        codes are remembered for the frame's columns).
    """
    n = len(step)
    columns: dict[str, object] = {"step": step, "slot": runs.slot()}
    if strings:
        columns["memory_id"], mcodes = string_values(cols.pop("memory_id"), n)
        columns["source"], scodes = string_values(cols.pop("source"), n)
    else:
        mcodes = column_codes(cols.pop("memory_id"), n)
        scodes = column_codes(cols.pop("source"), n)
    columns["rank"] = masked_int64(cols.pop("rank", None), n)
    columns["propensity"] = masked_float64(cols.pop("propensity", None), n)
    frame = pd.DataFrame(columns, copy=False)
    if strings:
        for name, codes in (("memory_id", mcodes), ("source", scodes)):
            if codes is not None:
                remember(frame[name], codes)
    return frame, mcodes, scodes


def column_codes(col: pa.ChunkedArray, n: int) -> Codes:
    """The dictionary codes of a string column (from its Parquet dictionary when read as one)."""
    if pat.is_dictionary(col.type) and _is_text(col.type.value_type):
        return from_dictionary(col, values=False)[1]
    return encode(col if not pat.is_null(col.type) else pa.nulls(n, pa.large_string()))


def table_columns(table: pa.Table, names: tuple[str, ...]) -> dict[str, pa.ChunkedArray]:
    """The named columns present in ``table``, as a dict (for :func:`contexts_frame`)."""
    return {c: table[c] for c in names if c in table.column_names}


# --------------------------------------------------------------------------- the reader


def read_parquet_log(root: Path) -> ExposureLog:
    """Read a Parquet-form log directory (see module docstring)."""
    design = _read_design(root / "design.json")
    design_file = str(root / "design.json")

    files = _parquet_source(root, "steps") or []
    if not files:
        raise LogError(root / "steps", "no Parquet part files")
    table, rows = read_parquet_table(files)
    _check_columns(table, rows, STEP_SPEC)
    steps = steps_frame(table)
    validate.check_steps(steps, rows)
    steps_np = steps["step"].to_numpy()
    rankings = None
    if "ranking" in table.column_names and table["ranking"].null_count < table.num_rows:
        rk = table["ranking"]
        if not (pat.is_list(rk.type) or pat.is_large_list(rk.type)):
            raise LogError(files[0], f"expected a list<string> column, got {rk.type}", field="ranking")
        rankings = arrow_list_to_long(rk, steps_np)
        _check_ranking_repeats(rankings, steps_np, rows)

    cfiles = _parquet_source(root, "contexts") or []
    if cfiles:
        built = _contexts_by_part(cfiles)
        if built is None:
            built = _contexts_whole(cfiles)
        contexts, mcodes, scodes, runs, crows = built
        validate.check_contexts(contexts, steps_np, design, design_file, crows, mcodes, scodes, runs)
    else:
        contexts = empty_frame(CONTEXT_COLUMNS)

    memories = _read_simple(
        root, "memories", MEMORY_COLUMNS,
        {"memory_id": ("str", True), "created_step": ("int", True), "deleted_step": ("int", False), "text": ("str", False)},
    )
    if memories is not None:
        memories["meta"] = memories["meta"].map(_parse_meta).astype(object)
        dup = memories.duplicated("memory_id").to_numpy()
        if dup.any():
            raise LogError(root / "memories.parquet", "duplicate memory_id", row=int(np.flatnonzero(dup)[0]), field="memory_id")
    labels = _read_simple(
        root, "labels", LABEL_COLUMNS,
        {"query_id": ("str", True), "memory_id": ("str", True), "required": ("bool", True), "utility": ("num", False)},
    )
    return ExposureLog(steps, contexts, rankings, memories, design, labels, source=root)


_Built = tuple[pd.DataFrame, Codes | None, Codes | None, validate.StepRuns, validate.Rows]


def _contexts_whole(files: list[Path]) -> _Built:
    """The contexts frame from all part files at once (any schema mix, any row order)."""
    ctable, rows = read_parquet_table(files, dictionary=("memory_id", "source"))
    _check_columns(ctable, rows, CONTEXT_SPEC)
    step = int64_values(ctable["step"])
    runs = validate.StepRuns.of(step)
    if runs.order is not None:
        # slot order is row order within a step: a stable sort keeps it across part files
        ctable = ctable.take(pa.array(runs.order))
        rows = rows.reordered(runs.order)
        step = step[runs.order]
        runs = validate.StepRuns(None, runs.starts, runs.lengths)
    cols = table_columns(ctable, ("memory_id", "source", "rank", "propensity"))
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
    import pyarrow.parquet as pq

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
        step[part], _ = _numbers(t["step"], np.int64)
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
            values[part], mask = _numbers(t[name], dtype)
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
    if any(c not in names for c in ("step", "memory_id", "source")):
        return False
    ok = pat.is_integer(schema.field("step").type) and all(
        pat.is_dictionary(schema.field(c).type) and _is_text(schema.field(c).type.value_type)
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


def _read_simple(
    root: Path, name: str, columns: dict[str, str], spec: dict[str, tuple[str, bool]]
) -> pd.DataFrame | None:
    files = _parquet_source(root, name)
    if not files:
        return None
    table, rows = read_parquet_table(files)
    _check_columns(table, rows, spec)
    frame = pd.DataFrame({c: table[c].to_pandas() for c in table.column_names})
    return coerce(frame, columns)


__all__ = ["CONTEXT_SPEC", "STEP_SPEC", "contexts_frame", "read_parquet_log", "steps_frame"]

