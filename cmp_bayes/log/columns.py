"""Parquet tables of a log as checked columns: reading part files, column rules, Arrow -> pandas.

Shared by the Parquet reader (:mod:`cmp_bayes.log.parquet`, the whole log in
memory) and the Dask engine (:mod:`cmp_bayes.scale`, one part file per task),
so both apply the same column rules and build the same frames.

Cost: the columns go from Arrow to pandas without a pass in Python and with
one copy at most; string columns read as dictionaries keep their Parquet
dictionary codes (:func:`cmp_bayes.log.codes.from_dictionary`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.codes import Codes, encode, from_dictionary, remember
from cmp_bayes.log.layout import is_text, parquet_files
from cmp_bayes.log.schema import coerce

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
    "arm": ("str", False),
}

#: column rules of the memories and labels tables
MEMORY_SPEC: dict[str, tuple[str, bool]] = {
    "memory_id": ("str", True),
    "created_step": ("int", True),
    "deleted_step": ("int", False),
    "text": ("str", False),
}
LABEL_SPEC: dict[str, tuple[str, bool]] = {
    "query_id": ("str", True),
    "memory_id": ("str", True),
    "required": ("bool", True),
    "utility": ("num", False),
}


def check_columns(table: pa.Table, rows: validate.Rows, spec: dict[str, tuple[str, bool]]) -> None:
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


# --------------------------------------------------------------------------- reading part files


def arrow_list_to_long(col: pa.ChunkedArray | pa.Array, steps: np.ndarray) -> pd.DataFrame:
    """Explode a list<string> ranking column into the long rankings table (``RANKING_COLUMNS``).

    ``steps[i]`` is the step of list ``i``; ``rank`` is the 0-based position in the list.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    flat = pc.list_flatten(arr)
    parents = pc.list_parent_indices(arr).to_numpy()
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    rank = np.arange(len(flat), dtype=np.int64) - np.repeat(starts, lengths)
    if not pa.types.is_large_string(flat.type):
        flat = flat.cast(pa.large_string())
    return pd.DataFrame(
        {
            "step": np.asarray(steps, dtype=np.int64)[parents],
            "rank": rank,
            "memory_id": pd.arrays.ArrowStringArray(pa.chunked_array([flat])),
        },
        copy=False,
    )


def read_parquet_table(
    files: list[Path], dictionary: tuple[str, ...] = ()
) -> tuple[pa.Table, validate.Rows]:
    """Concatenate part files; return the table and where each row came from.

    Columns named in ``dictionary`` that are strings in a file are read as
    dictionary<string> straight from the Parquet dictionary pages (no string
    is decoded twice; see :func:`cmp_bayes.log.codes.from_dictionary`).
    """
    tables = []
    for f in files:
        try:
            as_dict = None
            if dictionary:
                schema = pq.read_schema(f)
                as_dict = [c for c in dictionary if c in schema.names and is_text(schema.field(c).type)] or None
            t = pq.read_table(f, read_dictionary=as_dict)
        except (pa.ArrowInvalid, OSError) as exc:
            raise LogError(f, f"not a readable Parquet file ({exc})") from None
        tables.append(t)
    rows = validate.Rows.parts(files, [t.num_rows for t in tables])
    if not tables:
        return pa.table({}), rows
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        if dictionary:  # a mix of string and dictionary columns: read them as strings throughout
            return read_parquet_table(files)
        raise LogError(files[0].parent, f"part files have incompatible schemas ({exc})") from None
    return table, rows


def read_simple_table(
    root: Path, name: str, columns: dict[str, str], spec: dict[str, tuple[str, bool]]
) -> pd.DataFrame | None:
    """A small table (``memories``, ``labels``) of the log directory ``root`` as a DataFrame with
    the dtypes ``columns``, its columns checked against ``spec``; None when the log has none."""
    files = parquet_files(root, name)
    if not files:
        return None
    table, rows = read_parquet_table(files)
    check_columns(table, rows, spec)
    frame = pd.DataFrame({c: table[c].to_pandas() for c in table.column_names})
    return coerce(frame, columns)


# --------------------------------------------------------------------------- Arrow -> pandas columns


def numeric_values(col: pa.ChunkedArray, dtype: type) -> tuple[np.ndarray, np.ndarray | None]:
    """A numeric column's values as one writeable numpy array (one copy, whatever the number
    of chunks) and its null mask (None without nulls); values under the mask are undefined."""
    target = pa.from_numpy_dtype(dtype)
    if col.type != target:
        col = col.cast(target)
    n = len(col)
    values: np.ndarray = np.empty(n, dtype=dtype)
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
    return numeric_values(col, np.int64)[0]


def float64_values(col: pa.ChunkedArray) -> np.ndarray:
    """A non-null numeric column as a writeable float64 numpy array."""
    return numeric_values(col, np.float64)[0]


def string_values(col: pa.ChunkedArray | None, n: int) -> tuple[pd.api.extensions.ExtensionArray, Codes | None]:
    """A string column as the schema's ``"string"`` dtype (pyarrow-backed, no copy of the
    characters where the column already holds strings) and, for a dictionary column, its codes."""
    codes = None
    if col is None or pat.is_null(col.type):
        col = pa.chunked_array([pa.nulls(n, pa.large_string())])
    elif pat.is_dictionary(col.type) and is_text(col.type.value_type):
        decoded, codes = from_dictionary(col)
        assert decoded is not None  # from_dictionary returns the values unless told not to
        col = decoded
    elif not pat.is_large_string(col.type):
        col = col.cast(pa.large_string())
    if col.num_chunks == 0:
        col = pa.chunked_array([pa.array([], pa.large_string())])
    return pd.arrays.ArrowStringArray(col), codes


def masked_int64(col: pa.ChunkedArray | None, n: int) -> pd.api.extensions.ExtensionArray:
    """An optional integer column as ``Int64`` (<NA> for nulls)."""
    if col is None or pat.is_null(col.type):
        return pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, dtype=bool))
    values, mask = numeric_values(col, np.int64)
    if mask is None:
        mask = np.zeros(n, dtype=bool)
    else:
        values[mask] = 0
    return pd.arrays.IntegerArray(values, mask)


def masked_float64(col: pa.ChunkedArray | None, n: int) -> pd.api.extensions.ExtensionArray:
    """An optional numeric column as ``Float64``: nulls and NaN become <NA> (as ``astype("Float64")`` does)."""
    if col is None or pat.is_null(col.type):
        return pd.arrays.FloatingArray(np.zeros(n, np.float64), np.ones(n, dtype=bool))
    values, nulls = numeric_values(col, np.float64)
    mask = np.isnan(values)
    if nulls is not None:
        mask |= nulls
    values[mask] = 0.0
    return pd.arrays.FloatingArray(values, mask)


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


@overload
def contexts_frame(
    cols: dict[str, pa.ChunkedArray], step: np.ndarray, runs: validate.StepRuns, strings: Literal[True] = True
) -> tuple[pd.DataFrame, Codes | None, Codes | None]: ...
@overload
def contexts_frame(
    cols: dict[str, pa.ChunkedArray], step: np.ndarray, runs: validate.StepRuns, strings: Literal[False]
) -> tuple[pd.DataFrame, Codes, Codes]: ...
def contexts_frame(
    cols: dict[str, pa.ChunkedArray], step: np.ndarray, runs: validate.StepRuns, strings: bool = True
) -> tuple[pd.DataFrame, Codes | None, Codes | None]:
    """The contexts DataFrame (``CONTEXT_COLUMNS``) of a checked contexts table.

    Parameters
    ----------
    cols : dict of pyarrow.ChunkedArray
        The table's columns ``memory_id``, ``source`` and the optional
        ``rank``, ``propensity``, ``arm``; each is removed from the dict once converted,
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
    # few slots carry an arm: kept as strings (all <NA> when the column is absent)
    columns["arm"] = string_values(cols.pop("arm", None), n)[0]
    frame = pd.DataFrame(columns, copy=False)
    if strings:
        for name, codes in (("memory_id", mcodes), ("source", scodes)):
            if codes is not None:
                remember(frame[name], codes)
    return frame, mcodes, scodes


def column_codes(col: pa.ChunkedArray, n: int) -> Codes:
    """The dictionary codes of a string column (from its Parquet dictionary when read as one)."""
    if pat.is_dictionary(col.type) and is_text(col.type.value_type):
        return from_dictionary(col, values=False)[1]
    return encode(col if not pat.is_null(col.type) else pa.nulls(n, pa.large_string()))


def table_columns(table: pa.Table, names: tuple[str, ...]) -> dict[str, pa.ChunkedArray]:
    """The named columns present in ``table``, as a dict (for :func:`contexts_frame`)."""
    return {c: table[c] for c in names if c in table.column_names}
