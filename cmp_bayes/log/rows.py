"""Where each row of a checked table came from, and the error raised at a row.

The checks of :mod:`cmp_bayes.log.validate` and :mod:`cmp_bayes.log.window`
detect a violation on whole columns; these locate the first offending row and
word the :class:`~cmp_bayes.errors.LogError` naming its file, JSONL line or
Parquet part file and row, and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from cmp_bayes.errors import LogError
from cmp_bayes.log.codes import Codes


@dataclass(frozen=True)
class Rows:
    """Where each row of a checked table came from; consulted only to report an error.

    Attributes
    ----------
    files : tuple of str
        The file (JSONL) or the part files (Parquet, in reading order).
    kind : {"line", "row"}
        JSONL line numbers or Parquet rows.
    loc : numpy.ndarray, shape (n,), optional
        JSONL: the 1-based line of each row.
    starts : numpy.ndarray, shape (len(files) + 1,), optional
        Parquet: the first row of each part file in the concatenated table.
    order : numpy.ndarray, shape (n,), optional
        Parquet: row ``i`` of the checked table is row ``order[i]`` of the
        concatenated table (None: the same order).
    """

    files: tuple[str, ...]
    kind: str
    loc: np.ndarray | None = None
    starts: np.ndarray | None = None
    order: np.ndarray | None = None

    @classmethod
    def lines(cls, file: str, lines: np.ndarray | list[int]) -> Rows:
        """Rows of one JSONL file, at the given 1-based line numbers."""
        return cls((str(file),), "line", loc=np.asarray(lines, dtype=np.int64))

    @classmethod
    def parts(cls, files: list[Any] | tuple[Any, ...], counts: list[int] | np.ndarray) -> Rows:
        """Rows of Parquet part files with ``counts`` rows each, concatenated in order."""
        starts = np.concatenate(([0], np.cumsum(np.asarray(counts, dtype=np.int64))))
        return cls(tuple(str(f) for f in files), "row", starts=starts)

    def reordered(self, order: np.ndarray) -> Rows:
        """The same rows after ``table.take(order)``."""
        if self.kind == "line":
            assert self.loc is not None  # a "line" Rows always has loc (see lines())
            return Rows(self.files, "line", loc=self.loc[order])
        base = order if self.order is None else self.order[order]
        return Rows(self.files, "row", starts=self.starts, order=base)

    def where(self, i: int) -> tuple[str, int]:
        """(file, line) or (part file, 0-based row in it) of row ``i``."""
        if self.kind == "line":
            assert self.loc is not None  # a "line" Rows always has loc (see lines())
            return self.files[0], int(self.loc[i])
        assert self.starts is not None  # a "row" Rows always has starts (see parts())
        g = int(self.order[i]) if self.order is not None else int(i)
        f = int(np.searchsorted(self.starts, g, side="right")) - 1
        return self.files[f], g - int(self.starts[f])


def fail_row(
    frame: pd.DataFrame, i: int, rows: Rows, field: str, message: str, codes: dict[str, Codes] | None = None
) -> NoReturn:
    """Raise the LogError for row ``i`` of ``frame``.

    ``{column}`` in ``field`` / ``message`` is that row's value; the columns in
    ``codes`` are taken from their codes (the frame need not hold them as strings).
    """
    # column by column: a row of mixed dtypes would turn 3 into 3.0
    values = {k: frame[k].iloc[int(i)] for k in frame.columns if isinstance(k, str) and not k.startswith("_")}
    for name, c in (codes or {}).items():
        code = int(c.indices[int(i)])
        values[name] = c.dictionary[code].as_py() if code >= 0 else pd.NA
    fld = field.format(**values)
    msg = message.format(**values)
    file, loc = rows.where(int(i))
    if rows.kind == "line":
        raise LogError(file, msg, line=loc, field=fld)
    raise LogError(file, msg, row=loc, field=fld)


def fail_at(
    frame: pd.DataFrame,
    mask: np.ndarray | pd.Series,
    rows: Rows,
    field: str,
    message: str,
    codes: dict[str, Codes] | None = None,
) -> None:
    """Raise a LogError at the first row of ``frame`` where ``mask`` is true (if any); see :func:`fail_row`."""
    mask = np.asarray(mask, dtype=bool)
    if mask.any():
        fail_row(frame, int(np.argmax(mask)), rows, field, message, codes)
