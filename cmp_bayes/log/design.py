"""The log's ``design.json``: its checks, and the exposure pool's propensities as a lookup table."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cmp_bayes.errors import LogError


@dataclass(frozen=True)
class PoolTable:
    """A design pool as arrays: ``keys[i]`` (memory id) has propensity ``values[i]``."""

    keys: pa.Array  # (P,) large_string
    values: np.ndarray  # (P,) float64

    @classmethod
    def of(cls, pool: dict[str, float]) -> PoolTable:
        return cls(pa.array(list(pool), pa.large_string()), np.fromiter(pool.values(), dtype=np.float64, count=len(pool)))


def pool_lookup(pool: dict[str, float] | PoolTable, ids: pa.Array) -> np.ndarray:
    """Each id's design-pool propensity (NaN outside the pool), shape (len(ids),)."""
    table = pool if isinstance(pool, PoolTable) else PoolTable.of(pool)
    if len(table.keys) == 0:
        return np.full(len(ids), np.nan)
    if not pa.types.is_large_string(ids.type):
        ids = ids.cast(pa.large_string())
    pos = pc.index_in(ids, value_set=table.keys).fill_null(-1).to_numpy(zero_copy_only=False)
    return np.where(pos >= 0, table.values[np.maximum(pos, 0)], np.nan)


def check_design(design: Any, file: str) -> dict[str, Any]:
    """Validate ``design.json`` content and return it with normalised types."""
    if not isinstance(design, dict):
        raise LogError(file, "design must be a JSON object")
    out = dict(design)
    for key in ("slots", "exposure_slots", "steps"):
        if key not in design:
            raise LogError(file, f"missing required field '{key}'", field=key)
        v = design[key]
        if not _is_int(v) or v < 0:
            raise LogError(file, f"'{key}' must be an integer >= 0, got {v!r}", field=key)
    if design["slots"] < 1:
        raise LogError(file, "'slots' must be >= 1", field="slots")
    if design["exposure_slots"] > design["slots"]:
        raise LogError(file, "'exposure_slots' cannot exceed 'slots'", field="exposure_slots")
    if design.get("assignment") not in ("balanced", "bernoulli"):
        raise LogError(
            file,
            f"'assignment' must be 'balanced' or 'bernoulli', got {design.get('assignment')!r}",
            field="assignment",
        )
    if "seed" in design and design["seed"] is not None and not _is_int(design["seed"]):
        raise LogError(file, f"'seed' must be an integer, got {design['seed']!r}", field="seed")
    pool = design.get("pool")
    if not isinstance(pool, dict):
        raise LogError(file, "missing required field 'pool' (an object of memory id -> propensity)", field="pool")
    # the common case in one pass over the types and one numpy expression over the values;
    # the per-entry loop below only runs to name the offending entry
    ok = set(map(type, pool.values())) <= {int, float}
    if ok:
        p = np.fromiter(pool.values(), dtype=np.float64, count=len(pool))
        ok = bool(np.all(np.isfinite(p) & (p > 0) & (p <= 1)))
    if not ok:
        for mid, v in pool.items():
            if not _is_number(v) or not (0 < float(v) <= 1):
                raise LogError(file, f"pool propensity must be a number in (0, 1], got {v!r}", field=f"pool.{mid}")
        p = np.asarray([float(v) for v in pool.values()], dtype=np.float64)  # e.g. numpy floats
    keys = pool.keys() if set(map(type, pool)) <= {str} else [str(k) for k in pool]
    out["pool"] = dict(zip(keys, p.tolist(), strict=True))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
