"""Exceptions cmp_bayes raises for problems a user can fix.

The CLI turns any :class:`CmpBayesError` into one line on stderr and exit
status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class CmpBayesError(Exception):
    """Base class of every error caused by the user's input or settings."""


class LogError(CmpBayesError, ValueError):
    """An exposure log that does not follow ``shared/spec/exposure-log.md``.

    Parameters
    ----------
    file : str or Path
        The file that holds the problem.
    message : str
        What is wrong, in words.
    line : int, optional
        1-based line number (JSONL files).
    row : int, optional
        0-based row number (Parquet files, counted over all part files in order).
    field : str, optional
        The field (JSON key or column) at fault, dotted for nested fields
        (``context[2].propensity``).
    """

    def __init__(
        self,
        file: str | Path,
        message: str,
        *,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file)
        self.line = line
        self.row = row
        self.field = field
        self.message = message
        where = self.file
        if line is not None:
            where += f", line {line}"
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


class PosteriorError(CmpBayesError, ValueError):
    """A posterior file or object that cmp_bayes cannot interpret."""


class ConfigError(CmpBayesError, ValueError):
    """Invalid configuration (model config, costs, CLI options)."""


class TornLineWarning(UserWarning):
    """The last line of a JSONL file was incomplete (a crash while writing) and was set aside.

    Raised by the reader (:func:`cmp_bayes.read_log`, which skips the line) and by
    :class:`cmp_bayes.LogWriter` when it resumes a log (it moves the line to
    ``steps.jsonl.torn``); the message names the file and line.
    """
