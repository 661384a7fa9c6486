"""Each exposure slot's design propensity, from the pool of the round its step falls in.

A fixed-form design is one round (:func:`cmp_bayes.log.design.design_rounds`),
so this is the plain pool lookup there; a design in rounds (the spec's
open-ended form) looks each slot up in its own round's pool. Whole columns at
a time: one sorted table of ``(round, memory)`` keys over every round's pool,
searched once per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cmp_bayes.log.codes import Codes
from cmp_bayes.log.design import PoolTable, design_rounds, has_rounds, pool_lookup


@dataclass(frozen=True)
class RoundPools:
    """Every round's pool as one lookup table.

    Attributes
    ----------
    starts, stops : numpy.ndarray, shape (R,), int64
        Each round's first step and one past its last.
    ids : pyarrow.Array, shape (P,), large_string
        Every memory in some round's pool, distinct.
    keys : numpy.ndarray, shape (E,), int64, sorted
        ``round * P + position in ids`` of every (round, pool memory) entry.
    values : numpy.ndarray, shape (E,), float64
        The entry's propensity within its round.
    single : PoolTable or None
        The one pool of a fixed-form design (the plain lookup); None with rounds.
    """

    starts: np.ndarray
    stops: np.ndarray
    ids: pa.Array
    keys: np.ndarray
    values: np.ndarray
    single: PoolTable | None

    @classmethod
    def of(cls, design: dict[str, Any] | None) -> RoundPools:
        """The lookup table of a checked design (None: no pool at all)."""
        if design is None or not has_rounds(design):
            pool = (design_rounds(design)[0].pool if design is not None else {}) or {}
            table = PoolTable.of(pool)
            return cls(np.zeros(1, np.int64), np.full(1, np.iinfo(np.int64).max), table.keys,
                       np.arange(len(table.keys), dtype=np.int64), table.values, table)
        rounds = design_rounds(design)
        tables = [PoolTable.of(r.pool) for r in rounds]
        parts = [t.keys for t in tables if len(t.keys)]
        ids = pc.unique(pa.concat_arrays(parts)) if parts else pa.array([], pa.large_string())
        n = max(len(ids), 1)
        keys = np.concatenate(
            [r * n + pc.index_in(t.keys, value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
             for r, t in enumerate(tables)] or [np.zeros(0, np.int64)]
        )
        values = np.concatenate([t.values for t in tables] or [np.zeros(0)])
        order = np.argsort(keys, kind="stable")
        return cls(
            np.array([r.start for r in rounds], dtype=np.int64),
            np.array([r.stop for r in rounds], dtype=np.int64),
            ids, keys[order], values[order], None,
        )

    def round_of(self, step: np.ndarray) -> np.ndarray:
        """The round of each step, shape (len(step),) int64; -1 where it falls in none."""
        step = np.asarray(step, dtype=np.int64)
        i = np.searchsorted(self.starts, step, side="right") - 1
        ok = (i >= 0) & (step < self.stops[np.maximum(i, 0)])
        return np.where(ok, i, -1)

    def lookup(self, step: np.ndarray, memory: Codes, rows: np.ndarray) -> np.ndarray:
        """The design propensity of rows ``rows`` (memory codes ``memory``, steps ``step`` of
        those rows), NaN where the memory is not in its round's pool (or the step in no round);
        shape (len(rows),)."""
        if self.single is not None:
            return memory.lookup(pool_lookup(self.single, memory.dictionary), np.nan, rows)
        if len(self.keys) == 0 or len(rows) == 0:
            return np.full(len(rows), np.nan)
        d = memory.dictionary
        d = d if pa.types.is_large_string(d.type) else d.cast(pa.large_string())
        pos = memory.lookup(
            pc.index_in(d, value_set=self.ids).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64),
            -1, rows,
        )
        r = self.round_of(step)
        key = r * max(len(self.ids), 1) + pos
        at = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        hit = (pos >= 0) & (r >= 0) & (self.keys[at] == key)
        return np.where(hit, self.values[at], np.nan)
