"""String columns as dictionary codes: each distinct string hashed once, integers after.

The readers produce the codes while reading (Parquet dictionary pages, see
:func:`from_dictionary`) and :func:`remember` records them for the column they
belong to, so that :func:`encode` on a column just read (by the checks in
:mod:`cmp_bayes.log.validate`, or by :func:`cmp_bayes.statistics.exposure_stats`)
does not hash the ids again.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Codes:
    """A string column as dictionary codes: row ``i`` holds ``dictionary[indices[i]]``.

    Attributes
    ----------
    indices : numpy.ndarray, shape (n,), int32 or int64
        Position of each row's value in ``dictionary``; -1 for a null.
    dictionary : pyarrow.Array, shape (U,)
        Distinct non-null values (string), in no particular order.
    """

    indices: np.ndarray
    dictionary: pa.Array

    def lookup(self, table: np.ndarray, missing: Any, rows: np.ndarray | None = None) -> np.ndarray:
        """``table[indices]`` (at ``rows`` only, when given) for a per-dictionary-entry ``table``
        of shape (U,); ``missing`` for nulls."""
        table = np.asarray(table)
        ext = np.append(table, np.asarray([missing], dtype=table.dtype))
        idx = self.indices if rows is None else self.indices[rows]
        return ext[idx]  # index -1 (null) picks the appended entry

    def has_null(self) -> bool:
        return bool(len(self.indices)) and int(self.indices.min()) < 0

    def code_of(self, value: str) -> int:
        """The code of ``value`` (-2 when the column never holds it: matches no row, not even a null)."""
        hit = pc.index(self.dictionary, pa.scalar(value, self.dictionary.type)).as_py()
        return -2 if hit < 0 else int(hit)


#: Codes of columns already encoded, by id of the column's pyarrow ChunkedArray
#: (weakly referenced: the entry dies with the column). Arrow arrays are
#: immutable and pandas replaces a column's ChunkedArray on any change, so an
#: entry whose array is still alive is still exact.
_REMEMBERED: dict[int, tuple[weakref.ref, Codes]] = {}


def arrow_column(values: pd.Series | pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The pyarrow data of a column: zero-copy for pyarrow-backed pandas columns."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        return values
    arr = values.array
    if isinstance(arr, pd.arrays.ArrowExtensionArray):
        return arr.__arrow_array__()
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(values.astype("string").to_numpy(dtype=object, na_value=None), pa.large_string())


def remember(values: pd.Series | pa.ChunkedArray, codes: Codes) -> None:
    """Record ``codes`` as the encoding of ``values`` (a pyarrow-backed column)."""
    arr = arrow_column(values)
    if not isinstance(arr, pa.ChunkedArray):
        return
    key = id(arr)

    def forget(_ref: weakref.ref[Any]) -> None:
        _REMEMBERED.pop(key, None)

    _REMEMBERED[key] = (weakref.ref(arr, forget), codes)


def encode(values: pd.Series | pa.ChunkedArray | pa.Array) -> Codes:
    """Dictionary codes of a string column (remembered for pyarrow-backed columns)."""
    orig = arrow_column(values)
    hit = _REMEMBERED.get(id(orig))
    if hit is not None and hit[0]() is orig:
        return hit[1]
    arr = orig
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())
    flat = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    enc = pc.dictionary_encode(flat)
    indices = enc.indices
    if indices.null_count:
        indices = indices.fill_null(-1)
    codes = Codes(indices.to_numpy(zero_copy_only=False), enc.dictionary.cast(pa.large_string()))
    remember(orig, codes)
    return codes


def from_dictionary(col: pa.ChunkedArray, values: bool = True) -> tuple[pa.ChunkedArray | None, Codes]:
    """A dictionary<string> column: its values as large_string (None unless ``values``) and its codes.

    A Parquet reader hands out one dictionary per row group, repeated (same
    buffers) in every batch of it: only the distinct ones are merged, so the
    cost is one hash per distinct value per row group, not per row.
    """
    n = len(col)
    distinct: dict[tuple[int, ...], int] = {}
    dicts: list[pa.Array] = []
    which: list[int] = []
    for chunk in col.chunks:
        d = chunk.dictionary
        key = (*(b.address if b is not None else 0 for b in d.buffers()), d.offset, len(d))
        if key not in distinct:
            distinct[key] = len(dicts)
            dicts.append(d if pa.types.is_large_string(d.type) else d.cast(pa.large_string()))
        which.append(distinct[key])
    if not dicts:
        empty = pa.array([], pa.large_string())
        return pa.chunked_array([empty]), Codes(np.full(n, -1, np.int32), empty)
    dictionary = pc.unique(pa.concat_arrays(dicts)) if len(dicts) > 1 else dicts[0]
    # the first dictionary maps onto itself when its values are distinct (Parquet's always are)
    first_exact = pc.count_distinct(dicts[0], mode="all").as_py() == len(dicts[0])
    if len(dicts) == 1 and not first_exact:
        dictionary = pc.unique(dictionary)
    maps = [
        None if k == 0 and first_exact
        else pc.index_in(d, value_set=dictionary).to_numpy(zero_copy_only=False).astype(np.int32)
        for k, d in enumerate(dicts)
    ]
    parts = []
    for chunk, k in zip(col.chunks, which, strict=True):
        idx = chunk.indices
        idx = (idx.fill_null(-1) if idx.null_count else idx).to_numpy(zero_copy_only=False)
        remap = maps[k]
        if remap is not None:
            idx = np.where(idx >= 0, remap[np.maximum(idx, 0)], -1)
        parts.append(idx.astype(np.int32, copy=False))
    indices = np.concatenate(parts) if len(parts) != 1 else parts[0]
    if len(dictionary) < 127:  # sources, groups: one byte a row
        indices = indices.astype(np.int8)
    if not values:
        return None, Codes(indices, dictionary)
    take = pa.array(indices, mask=indices < 0) if col.null_count else pa.array(indices)
    return pa.chunked_array([dictionary.take(take)]), Codes(indices, dictionary)
