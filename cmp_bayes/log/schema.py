"""The in-memory form of an exposure log (``shared/spec/exposure-log.md``).

Every table is a pandas DataFrame with fixed column names and dtypes, so the
rest of the pipeline never sees raw JSON. Column names follow the spec's field
names; ``slot`` (position in the context) and the long-form ``rankings`` table
are the only additions, both needed for a lossless round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.log.design import union_pool

#: steps: one row per step, in step order.
STEP_COLUMNS: dict[str, str] = {
    "step": "int64",
    "query_id": "string",
    "outcome": "float64",
    "group": "string",  # <NA> where the step has no group
}
#: contexts: one row per filled slot, ordered by (step, slot).
CONTEXT_COLUMNS: dict[str, str] = {
    "step": "int64",
    "slot": "int64",  # 0-based position of the slot object in the step's context array
    "memory_id": "string",
    "source": "string",  # "retriever" | "exposure"
    "rank": "Int64",  # <NA> where absent
    "propensity": "Float64",  # <NA> for retriever slots
    # "pool" | "window" as logged on an exposure slot; <NA> for retriever slots and for
    # exposure slots logged without one (the spec: those are pool slots)
    "arm": "string",
}
#: rankings: the optional per-step retriever ranking in long form.
RANKING_COLUMNS: dict[str, str] = {
    "step": "int64",
    "rank": "int64",  # 0-based position in the step's ranking array
    "memory_id": "string",
}
#: memories: the optional store file.
MEMORY_COLUMNS: dict[str, str] = {
    "memory_id": "string",
    "created_step": "int64",
    "deleted_step": "Int64",  # <NA> = never deleted
    "text": "string",
    "meta": "object",  # dict or None
}
#: labels: the optional evaluation file (``utility`` only from simulators).
LABEL_COLUMNS: dict[str, str] = {
    "query_id": "string",
    "memory_id": "string",
    "required": "bool",
    "utility": "Float64",
}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with the given column dtypes."""
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in columns.items()})


def coerce(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Return ``frame`` with exactly the schema's columns (missing ones as <NA>) and dtypes.

    Columns outside the schema are kept after the schema's own.
    """
    out = {}
    n = len(frame)
    for name, dtype in columns.items():
        if name in frame.columns:
            out[name] = frame[name].astype(dtype) if dtype != "object" else frame[name]
        elif dtype == "object":
            out[name] = pd.Series([None] * n, dtype="object", index=frame.index)
        else:
            out[name] = pd.Series(pd.NA, index=frame.index, dtype=dtype)
    extra = [c for c in frame.columns if c not in columns]
    result = pd.DataFrame(out, index=frame.index)
    for c in extra:
        result[c] = frame[c]
    return result.reset_index(drop=True)


@dataclass
class ExposureLog:
    """An exposure log held in memory.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per step (columns ``STEP_COLUMNS``), sorted by ``step``.
    contexts : pandas.DataFrame
        One row per filled slot (columns ``CONTEXT_COLUMNS``), sorted by
        ``(step, slot)``.
    rankings : pandas.DataFrame or None
        The retriever's per-step ranking in long form (``RANKING_COLUMNS``);
        ``None`` when no step carries a ``ranking``.
    memories : pandas.DataFrame or None
        The store (``MEMORY_COLUMNS``); ``None`` without ``memories.jsonl``,
        in which case every memory is in the store at every step.
    design : dict or None
        ``design.json`` as checked by :func:`cmp_bayes.log.design.check_design`
        (fixed form: ``steps``, ``seed``, ``pool``; or ``rounds``; window designs
        add ``window`` and ``pool_slots``); read pools through
        :func:`~cmp_bayes.log.design.pool_at` / :func:`~cmp_bayes.log.design.union_pool`.
        ``None`` for a log without exposure slots.
    labels : pandas.DataFrame or None
        Evaluation labels (``LABEL_COLUMNS``); never read by fitting or deciding.
    source : pathlib.Path or None
        Where the log was read from.
    checksum : str or None
        SHA-256 over the log's files (see :func:`cmp_bayes.log.read.log_checksum`).
    """

    steps: pd.DataFrame
    contexts: pd.DataFrame
    rankings: pd.DataFrame | None = None
    memories: pd.DataFrame | None = None
    design: dict[str, Any] | None = None
    labels: pd.DataFrame | None = None
    source: Path | None = None
    checksum: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def memory_ids(self) -> pd.Index:
        """The memories in the store, sorted: the memories file when present,
        otherwise every memory named in a context, a ranking or the design's
        pool (every round's). Labels never add memories (they are for evaluation only)."""
        if self.memories is not None:
            ids = self.memories["memory_id"]
        else:
            parts = [self.contexts["memory_id"]]
            if self.rankings is not None:
                parts.append(self.rankings["memory_id"])
            if self.design is not None:
                parts.append(pd.Series(list(union_pool(self.design)), dtype="string"))
            ids = pd.concat(parts, ignore_index=True)
        # unique on the (Arrow-backed) column first: converting every row to a Python
        # str cost seconds at 10M rows
        return pd.Index(np.sort(pd.unique(ids).astype(str)), name="memory", dtype="object")

    def query_ids(self) -> pd.Index:
        """The queries answered in the log, sorted."""
        return pd.Index(
            np.sort(pd.unique(self.steps["query_id"]).astype(str)), name="query", dtype="object"
        )

    def group_ids(self) -> pd.Index:
        """The query groups named in the log, sorted (empty when no step has a group)."""
        g = pd.unique(self.steps["group"].dropna()).astype(str)
        return pd.Index(np.sort(g), name="group", dtype="object")

    @property
    def n_steps(self) -> int:
        """Number of steps."""
        return len(self.steps)
