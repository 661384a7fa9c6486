"""Semantic checks shared by the JSONL and Parquet readers.

The readers parse each file into DataFrames that carry a location column
(``_loc``: the JSONL line number, or the Parquet row within its part file, and
``_file``); the checks here are vectorised and report the first offending
row as a :class:`LogError` naming file, line or row, and field.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.constants import EXPOSURE, SOURCES
from cmp_bayes.errors import LogError

#: relative tolerance when comparing a slot's propensity with the design's pool
PROPENSITY_RTOL = 1e-9


def fail_at(frame: pd.DataFrame, mask: np.ndarray | pd.Series, field: str, message: str) -> None:
    """Raise a LogError at the first row of ``frame`` where ``mask`` is true (if any)."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return
    i = int(np.flatnonzero(mask)[0])
    row = frame.iloc[i]
    kind = row["_kind"]
    loc = int(row["_loc"])
    values = {k: row[k] for k in row.index if isinstance(k, str) and not k.startswith("_")}
    fld = field.format(**values)
    msg = message.format(**values)
    if kind == "line":
        raise LogError(row["_file"], msg, line=loc, field=fld)
    raise LogError(row["_file"], msg, row=loc, field=fld)


def check_steps(steps: pd.DataFrame) -> None:
    """Outcome range and strictly increasing, unique steps."""
    out = steps["outcome"].to_numpy(dtype=float)
    fail_at(steps, ~np.isfinite(out), "outcome", "outcome must be a finite number, got {outcome}")
    fail_at(steps, (out < 0) | (out > 1), "outcome", "outcome must be in [0, 1], got {outcome}")
    st = steps["step"].to_numpy(dtype=np.int64)
    fail_at(steps, st < 0, "step", "step must be an integer >= 0, got {step}")
    if len(st) > 1:
        bad = np.concatenate([[False], st[1:] <= st[:-1]])
        prev = np.concatenate([[0], st[:-1]])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "repeats" if st[i] == prev[i] else "goes backwards from"
            fail_at(
                steps,
                np.arange(len(st)) == i,
                "step",
                f"step {{step}} {what} the previous step {int(prev[i])}; steps must be unique and strictly increasing",
            )


def check_contexts(
    contexts: pd.DataFrame, steps: pd.DataFrame, design: dict[str, Any] | None, design_file: str
) -> None:
    """Slot-level rules of the spec, on the long contexts table."""
    if contexts.empty:
        return
    src = contexts["source"].astype(str)
    fail_at(contexts, ~src.isin(SOURCES).to_numpy(), "context[{slot}].source",
            "unknown source '{source}' (expected 'retriever' or 'exposure')")
    rank = contexts["rank"]
    fail_at(contexts, (rank.notna() & (rank < 0)).to_numpy(dtype=bool), "context[{slot}].rank",
            "rank must be an integer >= 0, got {rank}")
    dup = contexts.duplicated(["step", "memory_id"], keep="first").to_numpy()
    fail_at(contexts, dup, "context[{slot}].memory_id",
            "memory '{memory_id}' appears twice in the context of step {step}")
    known = np.isin(contexts["step"].to_numpy(), steps["step"].to_numpy())
    fail_at(contexts, ~known, "step", "slot refers to step {step}, which is not in steps")

    is_exp = (src == EXPOSURE).to_numpy()
    prop = contexts["propensity"]
    has_p = prop.notna().to_numpy()
    fail_at(contexts, is_exp & ~has_p, "context[{slot}].propensity",
            "exposure slot for memory '{memory_id}' has no propensity")
    pv = prop.to_numpy(dtype=float, na_value=np.nan)
    bad_range = has_p & ~((pv > 0) & (pv <= 1))
    fail_at(contexts, bad_range, "context[{slot}].propensity",
            "propensity must be in (0, 1], got {propensity}")
    if not is_exp.any():
        return
    if design is None:
        fail_at(contexts, is_exp, "context[{slot}].source",
                "exposure slot but the log has no design.json")
    pool = design.get("pool", {})
    # look up only the exposure slots: retriever slots are most rows and need no pool value
    pool_p = np.full(len(contexts), np.nan)
    exp_ids = contexts["memory_id"].to_numpy()[is_exp]
    pool_p[is_exp] = pd.Series(exp_ids).map(pool).to_numpy(dtype=float, na_value=np.nan)
    fail_at(contexts, is_exp & np.isnan(pool_p), "context[{slot}].memory_id",
            f"exposed memory '{{memory_id}}' is not in the pool of {design_file}")
    disagree = is_exp & ~np.isclose(pv, pool_p, rtol=PROPENSITY_RTOL, atol=0.0)
    fail_at(contexts, disagree, "context[{slot}].propensity",
            f"propensity {{propensity}} disagrees with {design_file} pool value for '{{memory_id}}'")
    k = int(design["exposure_slots"])
    per_step = pd.Series(is_exp).groupby(contexts["step"].to_numpy()).transform("sum").to_numpy()
    # report at the first exposure slot beyond the k-th, so the field points at the offender
    nth = pd.Series(is_exp.astype(int)).groupby(contexts["step"].to_numpy()).cumsum().to_numpy()
    fail_at(contexts, is_exp & (per_step > k) & (nth > k), "context",
            f"step {{step}} has more exposure slots than design.exposure_slots = {k}")


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
    for mid, p in pool.items():
        if not _is_number(p) or not (0 < float(p) <= 1):
            raise LogError(file, f"pool propensity must be a number in (0, 1], got {p!r}", field=f"pool.{mid}")
    out["pool"] = {str(k): float(v) for k, v in pool.items()}
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
