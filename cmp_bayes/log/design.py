"""The log's ``design.json``: its checks (fixed, rounds and window forms), its rounds, and the pool's propensities as a lookup table."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

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


#: the assignments of the spec's ``design.json``
ASSIGNMENTS: tuple[str, ...] = ("balanced", "bernoulli", "window")


@dataclass(frozen=True)
class Round:
    """One round of a design: steps ``start .. start + steps - 1`` share one pool.

    A design without ``rounds`` (the spec's first form) is one round from step 0
    with the top-level ``steps``, ``seed`` and ``pool``.

    Attributes
    ----------
    start : int
        The round's first step.
    steps : int
        Its length in steps (the last round may still be running).
    seed : int or None
        The round's assignment seed.
    pool : dict of str to float
        Each pool memory's per-step exposure propensity within the round.
    """

    start: int
    steps: int
    seed: int | None
    pool: dict[str, float]

    @property
    def stop(self) -> int:
        """One past the round's last step."""
        return self.start + self.steps


def is_window(design: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether a (checked) design is a window design (``assignment: "window"``)."""
    return design is not None and design.get("assignment") == "window"


def has_rounds(design: dict[str, Any] | None) -> bool:
    """Whether a (checked) design is laid out in rounds (the spec's open-ended form)."""
    return design is not None and "rounds" in design


def design_rounds(design: dict[str, Any]) -> list[Round]:
    """The rounds of a checked design, in step order (one round for the fixed form)."""
    if "rounds" in design:
        return [Round(int(r["start"]), int(r["steps"]), r.get("seed"), r["pool"]) for r in design["rounds"]]
    # .get: designs built in memory (tests, adapters) may leave out the fixed form's steps
    return [Round(0, int(design.get("steps") or 0), design.get("seed"), design.get("pool") or {})]


def round_index(design: dict[str, Any], steps: np.ndarray) -> np.ndarray:
    """The round each step falls in, shape (len(steps),) int64; -1 where it falls in none.

    A fixed-form design is one round that every step falls in (a log may run
    past the ``steps`` it was laid out for; its propensities stay the design's).
    """
    steps = np.asarray(steps, dtype=np.int64)
    if "rounds" not in design:
        return np.zeros(len(steps), dtype=np.int64)
    rounds = design_rounds(design)
    if not rounds:  # laid out in rounds, none yet: every step falls in none
        return np.full(len(steps), -1, dtype=np.int64)
    starts = np.array([r.start for r in rounds], dtype=np.int64)
    stops = np.array([r.stop for r in rounds], dtype=np.int64)
    i = np.searchsorted(starts, steps, side="right") - 1
    ok = (i >= 0) & (steps < stops[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def pool_at(design: dict[str, Any], step: int) -> dict[str, float]:
    """The pool (memory id -> propensity) of the round ``step`` falls in; empty when none."""
    i = int(round_index(design, np.array([step]))[0])
    return design_rounds(design)[i].pool if i >= 0 else {}


def union_pool(design: dict[str, Any] | None) -> dict[str, float]:
    """Every memory in any round's pool, with its propensity in the last round that has it.

    For summaries over the whole log (which memories were ever in the pool);
    propensities that vary by round must be looked up per step (:func:`pool_at`).
    """
    if design is None:
        return {}
    out: dict[str, float] = {}
    for r in design_rounds(design):
        out.update(r.pool)
    return out


def varying_propensity(design: dict[str, Any] | None) -> frozenset[str]:
    """Memories whose pool propensity differs between the rounds that hold them.

    Their propensity is a per-step quantity, so no single number describes
    them (the statistics then report it as NaN and IPW is undefined).
    """
    if design is None:
        return frozenset()
    seen: dict[str, float] = {}
    out: set[str] = set()
    for r in design_rounds(design):
        for m, p in r.pool.items():
            if m in seen and not math.isclose(seen[m], p, rel_tol=1e-12, abs_tol=0.0):
                out.add(m)
            seen.setdefault(m, p)
    return frozenset(out)


def check_design(design: Any, file: str) -> dict[str, Any]:
    """Validate ``design.json`` content and return it with normalised types.

    Accepts the spec's three shapes: a fixed design (``steps``, ``seed``,
    ``pool``), a design in ``rounds`` (the open-ended form), and a window
    design (``assignment: "window"`` with ``window`` and ``pool_slots``) in
    either form. Errors name the file and the field.
    """
    if not isinstance(design, dict):
        raise LogError(file, "design must be a JSON object")
    out = dict(design)
    rounds = "rounds" in design
    for key in ("slots", "exposure_slots") + (() if rounds else ("steps",)):
        if key not in design:
            raise LogError(file, f"missing required field '{key}'", field=key)
        v = design[key]
        if not _is_int(v) or v < 0:
            raise LogError(file, f"'{key}' must be an integer >= 0, got {v!r}", field=key)
    if design["slots"] < 1:
        raise LogError(file, "'slots' must be >= 1", field="slots")
    if design["exposure_slots"] > design["slots"]:
        raise LogError(file, "'exposure_slots' cannot exceed 'slots'", field="exposure_slots")
    if design.get("assignment") not in ASSIGNMENTS:
        raise LogError(
            file,
            f"'assignment' must be one of {', '.join(map(repr, ASSIGNMENTS))}, got {design.get('assignment')!r}",
            field="assignment",
        )
    window = design.get("assignment") == "window"
    pool_needed = True
    if window:
        w = design.get("window")
        if w is None:
            raise LogError(file, "a window design needs 'window' (ranks below the cut, >= 1)", field="window")
        if not _is_int(w) or w < 1:
            raise LogError(file, f"'window' must be an integer >= 1, got {w!r}", field="window")
        j = design.get("pool_slots", 0)
        if not _is_int(j) or not (0 <= j <= design["exposure_slots"]):
            raise LogError(
                file,
                f"'pool_slots' must be an integer in [0, exposure_slots = {design['exposure_slots']}], got {j!r}",
                field="pool_slots",
            )
        out["pool_slots"] = int(j)
        pool_needed = j > 0
    if rounds:
        for key in ("pool", "steps", "seed"):
            if key in design:
                raise LogError(
                    file, f"'rounds' replaces the top-level '{key}': give it per round, not both", field=key
                )
        out["rounds"] = _check_rounds(design["rounds"], file, pool_needed)
        return out
    if "seed" in design and design["seed"] is not None and not _is_int(design["seed"]):
        raise LogError(file, f"'seed' must be an integer, got {design['seed']!r}", field="seed")
    if not pool_needed and design.get("pool") is None:
        out["pool"] = {}
        return out
    out["pool"] = _check_pool(design.get("pool"), file, "pool")
    return out


def _check_rounds(rounds: Any, file: str, pool_needed: bool) -> list[dict[str, Any]]:
    if not isinstance(rounds, list):
        raise LogError(file, "'rounds' must be an array of round objects", field="rounds")
    out: list[dict[str, Any]] = []
    expected = 0
    for i, r in enumerate(rounds):
        where = f"rounds[{i}]"
        if not isinstance(r, dict):
            raise LogError(file, "a round must be an object", field=where)
        for key in ("start", "steps"):
            if key not in r:
                raise LogError(file, f"missing required field '{key}'", field=f"{where}.{key}")
            if not _is_int(r[key]) or r[key] < (0 if key == "start" else 1):
                raise LogError(
                    file,
                    f"'{key}' must be an integer >= {0 if key == 'start' else 1}, got {r[key]!r}",
                    field=f"{where}.{key}",
                )
        if r["start"] != expected:
            what = "overlaps the previous round" if r["start"] < expected else "leaves a gap after the previous round"
            first = "the first round must start at step 0" if i == 0 else f"it must start at {expected}"
            raise LogError(
                file,
                f"round {i} starts at step {r['start']} and {what}; rounds are contiguous: {first}"
                if i else f"round 0 starts at step {r['start']}; {first}",
                field=f"{where}.start",
            )
        if "seed" in r and r["seed"] is not None and not _is_int(r["seed"]):
            raise LogError(file, f"'seed' must be an integer, got {r['seed']!r}", field=f"{where}.seed")
        rr = dict(r)
        if not pool_needed and r.get("pool") is None:
            rr["pool"] = {}
        else:
            rr["pool"] = _check_pool(r.get("pool"), file, f"{where}.pool")
        out.append(rr)
        expected = r["start"] + r["steps"]
    return out


def _check_pool(pool: Any, file: str, field: str) -> dict[str, float]:
    if not isinstance(pool, dict):
        raise LogError(file, f"missing required field '{field}' (an object of memory id -> propensity)", field=field)
    # the common case in one pass over the types and one numpy expression over the values;
    # the per-entry loop below only runs to name the offending entry
    ok = set(map(type, pool.values())) <= {int, float}
    if ok:
        p = np.fromiter(pool.values(), dtype=np.float64, count=len(pool))
        ok = bool(np.all(np.isfinite(p) & (p > 0) & (p <= 1)))
    if not ok:
        for mid, v in pool.items():
            if not _is_number(v) or not (0 < float(v) <= 1):
                raise LogError(file, f"pool propensity must be a number in (0, 1], got {v!r}", field=f"{field}.{mid}")
        p = np.asarray([float(v) for v in pool.values()], dtype=np.float64)  # e.g. numpy floats
    keys = pool.keys() if set(map(type, pool)) <= {str} else [str(k) for k in pool]
    return dict(zip(keys, p.tolist(), strict=True))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
