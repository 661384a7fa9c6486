"""The Dask engine's inputs: part files, their step ranges, the memories' lifetimes, errors as data.

What every map task of :mod:`cmp_bayes.scale.dask_stats` reads or returns
besides its sums: plain records that pickle for any scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cmp_bayes.errors import LogError
from cmp_bayes.log.codes import encode
from cmp_bayes.log.columns import MEMORY_SPEC, read_simple_table
from cmp_bayes.log.layout import parquet_files
from cmp_bayes.log.schema import MEMORY_COLUMNS
from cmp_bayes.statistics.kernels import NEVER, By, positions, sorted_unique

#: no names, and the one cell name "" (no ``by``; steps without a group)
EMPTY = pa.array([], pa.large_string())
BLANK = pa.array([""], pa.large_string())


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


def first_error(errors: list[PartError | None]) -> PartError | None:
    """The error of the first part (by index) among ``errors``; None when none broke a rule."""
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


def read_lifetimes(root: Path) -> Lifetimes | None:
    """The memories file of the Parquet log ``root`` as :class:`Lifetimes`; None without one."""
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


def cell_codes(table: pa.Table, by: By) -> tuple[pa.Array, np.ndarray]:
    """Each step row's cell, as (distinct cell names, code per row): query id, group ("" for none) or ""."""
    n = table.num_rows
    if by is None or (by == "group" and "group" not in table.column_names):
        return (BLANK if n else EMPTY), np.zeros(n, dtype=np.int64)
    codes = encode(table["query_id" if by == "query" else "group"])
    # a null query id is an error the steps part reports; meanwhile it is the cell ""
    if codes.has_null():
        names = sorted_unique(codes.dictionary, BLANK)
        blank = int(positions(BLANK, names)[0])
        return names, codes.lookup(positions(codes.dictionary, names), blank)
    return codes.dictionary, codes.indices.astype(np.int64)


def read_part(file: str, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
    """``pyarrow.parquet.read_table`` of one part file, its failure as a :class:`LogError`."""
    try:
        return pq.read_table(file, columns=columns, filters=filters)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(file, f"not a readable Parquet file ({exc})") from None


def remap(names: pa.Array, union: pa.Array, idx: np.ndarray) -> np.ndarray:
    """Positions ``idx`` into ``names`` as positions into ``union`` (which holds every name)."""
    return positions(names, union)[idx] if len(idx) else np.zeros(0, np.int64)
