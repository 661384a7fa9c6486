"""Memory text where people read: the start of each memory's text beside its id.

Every table a person reads (``diagnose``, ``estimate``, ``decide``, the
report) names memories by id, and ids are opaque (Mem0's are 36-character
UUIDs). When the log's ``memories.jsonl`` (or the posterior's ``memory_text``
coordinate) holds the memories' text, those tables gain a ``text`` column
beside the id: the first :data:`TEXT_WIDTH` characters, with an ellipsis
when cut, on one line. CSVs get the full text. The id stays the key column:
``text`` is for reading, never for joining.

This module sits in the foundation layer so that every layer that prints a
table (diagnostics, estimators, decision, reporting, the CLI) uses one rule.
"""

from __future__ import annotations

import re
from typing import Final

import pandas as pd

#: Characters of a memory's text shown in tables (CSVs carry all of it).
TEXT_WIDTH: Final[int] = 60
#: Appended to a text that was cut.
ELLIPSIS: Final[str] = "…"
#: The column name, in every table.
TEXT_COLUMN: Final[str] = "text"
#: Key columns a ``text`` column goes after, in the order tables hold them.
KEY_COLUMNS: Final[tuple[str, ...]] = ("memory_id", "query_id", "group")

_SPACE = re.compile(r"\s+")


def shorten(text: object, width: int = TEXT_WIDTH) -> str | None:
    """The start of ``text`` on one line: its first ``width`` characters, ``…`` when cut.

    Runs of whitespace (newlines, tabs) become one space first, so a table row
    stays one line. Returns None for a missing or empty text (None, NaN, <NA>, "").
    """
    if text is None or text is pd.NA or (isinstance(text, float) and text != text):
        return None
    flat = _SPACE.sub(" ", str(text)).strip()
    if not flat:
        return None
    if len(flat) <= width:
        return flat
    return flat[:width].rstrip() + ELLIPSIS


def texts_from_memories(memories: pd.DataFrame | None) -> pd.Series | None:
    """Each memory's full text from a memories table (``ExposureLog.memories``).

    Parameters
    ----------
    memories : pandas.DataFrame or None
        A table with ``memory_id`` and, optionally, ``text`` (the log's
        ``memories.jsonl``).

    Returns
    -------
    pandas.Series or None
        ``memory_id`` (str) -> text (``string`` dtype, <NA> where a memory has
        none); None when there is no table, no ``text`` column, or no memory
        with a non-empty text (the tables then get no ``text`` column at all).
    """
    if memories is None or TEXT_COLUMN not in memories or "memory_id" not in memories:
        return None
    text = memories[TEXT_COLUMN].astype("string")
    text = text.where(text.str.len() > 0)
    if not text.notna().any():
        return None
    out = pd.Series(text.to_numpy(), index=memories["memory_id"].astype(str).to_numpy(), dtype="string")
    # a memory listed twice keeps its last row, as memories.jsonl's readers do
    return out[~out.index.duplicated(keep="last")]


def add_text(frame: pd.DataFrame, texts: pd.Series | None, *, full: bool = False) -> pd.DataFrame:
    """``frame`` with a ``text`` column looked up by ``memory_id``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A table with a ``memory_id`` column.
    texts : pandas.Series or None
        ``memory_id`` -> full text (:func:`texts_from_memories`); None leaves
        ``frame`` as it is (no ``text`` column is added).
    full : bool
        Whole texts (for CSVs) instead of :func:`shorten`'s one-line start.

    Returns
    -------
    pandas.DataFrame
        A copy with ``text`` (``string`` dtype, <NA> where the memory has no
        text) right after the key columns (``memory_id`` and, when present,
        ``query_id`` / ``group``), replacing a ``text`` column already there.
    """
    if texts is None or "memory_id" not in frame:
        return frame
    looked_up = texts.reindex(frame["memory_id"].astype(str).to_numpy())
    values = looked_up.to_numpy(dtype=object, na_value=None)
    if not full:
        values = [shorten(v) for v in values]
    column = pd.Series(values, index=frame.index, dtype="string")
    out = frame.drop(columns=[TEXT_COLUMN]) if TEXT_COLUMN in frame else frame.copy()
    keys = [c for c in KEY_COLUMNS if c in out.columns]
    at = max(out.columns.get_loc(c) for c in keys) + 1
    out.insert(at, TEXT_COLUMN, column)
    return out
