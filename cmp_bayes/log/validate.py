"""Semantic checks shared by the JSONL and Parquet readers and the Dask engine.

Every check is a whole-column numpy / pyarrow expression: no Python loop runs
over rows or steps. Only when a check fails is the offending row located (the
first one, in table order) and the message built, naming the file, the JSONL
line or the Parquet part file and row, and the field. Where locating the exact
first row takes more work than detecting that one exists (a memory twice in a
context, too many exposure slots in a step), detection is vectorised and the
exact row is found on the failure path only.

String columns (memory ids, sources) are handled as dictionary codes
(:mod:`cmp_bayes.log.codes`): hashing each string once, and comparing integers
after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cmp_bayes.constants import EXPOSURE, RETRIEVER, SOURCES
from cmp_bayes.log.codes import Codes, encode
from cmp_bayes.log.design import has_rounds, is_window
from cmp_bayes.log.pools import RoundPools
from cmp_bayes.log.rows import Rows, fail_at, fail_row

# Rows, fail_at and fail_row are used by every reader through this module
__all__ = ["Rows", "StepRuns", "check_contexts", "check_step_rounds", "check_steps", "fail_at", "fail_row"]

#: relative tolerance when comparing a slot's propensity with the design's pool
PROPENSITY_RTOL = 1e-9

#: the ``arm`` of an exposure slot: dealt over the pool, or a window design's near-miss slot
POOL_ARM, WINDOW_ARM = "pool", "window"
SLOT_ARMS: tuple[str, ...] = (POOL_ARM, WINDOW_ARM)

#: longest context (slots in one step) checked for repeats by the dense
#: pairwise comparison; longer ones fall back to a sort
_DENSE_MAX_SLOTS = 64


# --------------------------------------------------------------------------- steps


def check_steps(steps: pd.DataFrame, rows: Rows) -> None:
    """Outcome range and strictly increasing, unique steps."""
    out = steps["outcome"].to_numpy(dtype=float)
    fail_at(steps, ~np.isfinite(out), rows, "outcome", "outcome must be a finite number, got {outcome}")
    fail_at(steps, (out < 0) | (out > 1), rows, "outcome", "outcome must be in [0, 1], got {outcome}")
    st = steps["step"].to_numpy(dtype=np.int64)
    fail_at(steps, st < 0, rows, "step", "step must be an integer >= 0, got {step}")
    if len(st) > 1:
        bad = st[1:] <= st[:-1]
        if bad.any():
            i = int(np.argmax(bad)) + 1
            prev = int(st[i - 1])
            what = "repeats" if st[i] == prev else "goes backwards from"
            fail_row(
                steps,
                i,
                rows,
                "step",
                f"step {{step}} {what} the previous step {prev}; steps must be unique and strictly increasing",
            )


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class StepRuns:
    """The rows of each step of a contexts table, as runs of a stable sort by step.

    ``order`` (None when the table is already sorted by step) sorts the rows;
    in that order run ``r`` is rows ``starts[r] : starts[r] + lengths[r]``.
    """

    order: np.ndarray | None
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, step: np.ndarray) -> StepRuns:
        n = len(step)
        order = None
        if n > 1 and not bool(np.all(step[1:] >= step[:-1])):
            order = np.argsort(step, kind="stable")
            step = step[order]
        if n == 0:
            return cls(order, np.zeros(0, np.int64), np.zeros(0, np.int64))
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(step[1:], step[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        lengths = np.diff(np.append(starts, n))
        return cls(order, starts, lengths)

    def sorted(self, a: np.ndarray) -> np.ndarray:
        return a if self.order is None else a[self.order]

    def slot(self) -> np.ndarray:
        """Each row's 0-based position within its step, in table order (the spec's slot)."""
        n = int(self.lengths.sum())
        width = int(self.lengths.max()) if n else 0
        if n and n == width * len(self.starts):  # every step has the same number of slots
            pos = np.tile(np.arange(width, dtype=np.int64), len(self.starts))
        else:
            pos = np.arange(n, dtype=np.int64) - np.repeat(self.starts, self.lengths)
        if self.order is None:
            return pos
        out = np.empty(n, dtype=np.int64)
        out[self.order] = pos
        return out

    def per_run_count(self, mask: np.ndarray) -> np.ndarray:
        """Number of true rows of ``mask`` (table order) in each run, shape (runs,)."""
        m = self.sorted(mask)
        width = int(self.lengths.max()) if len(self.lengths) else 0
        if width and len(m) == width * len(self.starts):  # every step has the same number of slots
            return m.reshape(-1, width).sum(axis=1)
        run = np.searchsorted(self.starts, np.flatnonzero(m), side="right") - 1
        return np.bincount(run, minlength=len(self.starts))

    def first_rows(self) -> np.ndarray:
        """Table row of the first row of each run."""
        return self.starts if self.order is None else self.order[self.starts]

    def any_repeat(self, codes: np.ndarray) -> bool:
        """Whether some run holds one code twice."""
        if len(self.starts) == 0:
            return False
        width = int(self.lengths.max())
        if width <= 1:
            return False
        c = self.sorted(codes)
        n_runs = len(self.starts)
        if width <= _DENSE_MAX_SLOTS and n_runs * width <= 4 * len(c) + 1024:
            if bool(np.all(self.lengths == width)):
                mat = c.reshape(n_runs, width)
            else:
                # pad short runs with distinct negative values (codes are >= -1)
                mat = -2 - np.arange(n_runs * width, dtype=np.int64).reshape(n_runs, width)
                run = np.repeat(np.arange(n_runs), self.lengths)
                pos = np.arange(len(c)) - np.repeat(self.starts, self.lengths)
                mat[run, pos] = c
            # every pair of positions (j - d, j) within a run, one offset d at a time
            return any(bool((mat[:, d:] == mat[:, :-d]).any()) for d in range(1, width))
        run = np.repeat(np.arange(n_runs, dtype=np.int64), self.lengths)
        o = np.lexsort((c, run))
        rr, cc = run[o], c[o]
        return bool(np.any((rr[1:] == rr[:-1]) & (cc[1:] == cc[:-1])))


def check_contexts(
    contexts: pd.DataFrame,
    step_values: np.ndarray,
    design: dict[str, Any] | None,
    design_file: str,
    rows: Rows,
    memory: Codes | None = None,
    source: Codes | None = None,
    runs: StepRuns | None = None,
    pools: RoundPools | None = None,
) -> None:
    """Slot-level rules of the spec, on the long contexts table.

    Parameters
    ----------
    contexts : pandas.DataFrame
        ``step``, ``slot`` (names the field in errors), ``rank``, ``propensity``,
        optionally ``arm`` and, unless their codes are given, ``memory_id`` and ``source``.
    step_values : numpy.ndarray
        The steps of the log (sorted); a slot naming another step is rejected.
    design, design_file
        ``design.json`` content (or None) and its path, for messages.
    rows : Rows
        Where each row of ``contexts`` came from.
    memory, source : Codes, optional
        Codes of ``memory_id`` and ``source`` when the caller has them.
    runs : StepRuns, optional
        ``StepRuns.of(contexts["step"])`` when the caller has it.
    pools : RoundPools, optional
        ``RoundPools.of(design)`` when the caller has it.

    Notes
    -----
    Pool slots (exposure slots without ``arm`` or with ``arm: "pool"``) must
    agree with the pool of the round their step falls in. In a window design
    every exposure slot carries ``arm``, a step holds at most ``pool_slots``
    pool slots and ``exposure_slots - pool_slots`` window slots; whether a
    window slot is in its step's window ``W_t`` with the right propensity
    needs the rankings and the store (:func:`cmp_bayes.log.window.check_window_slots`).
    """
    if contexts.empty:
        return
    src = source if source is not None else encode(contexts["source"])
    mem = memory if memory is not None else encode(contexts["memory_id"])
    ids = {"memory_id": mem, "source": src}

    def fail(mask: np.ndarray, field: str, message: str) -> None:
        fail_at(contexts, mask, rows, field, message, ids)

    def fail_first(i: int, field: str, message: str) -> NoReturn:
        fail_row(contexts, i, rows, field, message, ids)

    # each check: a cheap whole-column test first; the row mask only when it fails
    ok = pc.is_in(src.dictionary, value_set=pa.array(SOURCES, src.dictionary.type)).to_numpy(zero_copy_only=False)
    if not ok.all() or src.has_null():
        fail(~src.lookup(ok, False), "context[{slot}].source",
             "unknown source '{source}' (expected 'retriever' or 'exposure')")
    rank = contexts["rank"]
    if _bounds(rank)[0] < 0:
        fail(rank.to_numpy(dtype=np.int64, na_value=0) < 0, "context[{slot}].rank",
             "rank must be an integer >= 0, got {rank}")
    step = contexts["step"].to_numpy(np.int64)
    runs = runs if runs is not None else StepRuns.of(step)
    if runs.any_repeat(mem.indices):
        dup = pd.DataFrame({"s": step, "m": mem.indices}).duplicated(keep="first").to_numpy()
        fail(dup, "context[{slot}].memory_id", "memory '{memory_id}' appears twice in the context of step {step}")
    # one lookup per distinct step; the row mask only when one is unknown
    if not _known_steps(step[runs.first_rows()], np.asarray(step_values, np.int64)).all():
        fail(~_known_steps(step, np.asarray(step_values, np.int64)), "step",
             "slot refers to step {step}, which is not in steps")

    is_exp = src.indices == src.code_of(EXPOSURE)
    exp_rows = np.flatnonzero(is_exp)
    prop = contexts["propensity"]
    exp_p = prop.array[exp_rows]
    no_p = np.asarray(exp_p.isna(), dtype=bool)
    if no_p.any():
        fail_first(int(exp_rows[np.argmax(no_p)]), "context[{slot}].propensity",
                   "exposure slot for memory '{memory_id}' has no propensity")
    lo, hi = _bounds(prop)
    if not (lo > 0 and hi <= 1):  # NaN fails both
        has_p = prop.notna().to_numpy()
        pv = prop.to_numpy(dtype=float, na_value=np.nan)
        fail(has_p & ~((pv > 0) & (pv <= 1)), "context[{slot}].propensity",
             "propensity must be in (0, 1], got {propensity}")
    arm = _arm_codes(contexts, src, fail)
    if arm is not None:
        ids["arm"] = arm
    if len(exp_rows) == 0:
        return
    if design is None:
        fail_first(int(exp_rows[0]), "context[{slot}].source", "exposure slot but the log has no design.json")
    window = is_window(design)
    win_code = arm.code_of(WINDOW_ARM) if arm is not None else -2
    exp_arm = arm.indices[exp_rows] if arm is not None else np.full(len(exp_rows), -1, np.int8)
    if window and bool((exp_arm < 0).any()):
        fail_first(int(exp_rows[np.argmax(exp_arm < 0)]), "context[{slot}].arm",
                   f"exposure slot for memory '{{memory_id}}' has no 'arm'; {design_file} is a window "
                   "design, where every exposure slot carries \"arm\": \"pool\" or \"window\"")
    is_win = exp_arm == win_code
    if not window and is_win.any():
        fail_first(int(exp_rows[np.argmax(is_win)]), "context[{slot}].arm",
                   f"a window slot, but {design_file} is not a window design (assignment 'window')")
    # look up only the pool slots: retriever slots are most rows and need no pool value, and
    # window slots are checked against their step's window (log/window.py)
    pool_rows = exp_rows[~is_win]
    table = pools if pools is not None else RoundPools.of(design)
    pool_p = table.lookup(step[pool_rows], mem, pool_rows)
    missing = np.isnan(pool_p)
    if missing.any():
        i = int(pool_rows[np.argmax(missing)])
        r = int(table.round_of(step[i : i + 1])[0])
        where = f"the pool of round {r} (steps {table.starts[r]}..{table.stops[r] - 1}) of {design_file}" if (
            has_rounds(design) and r >= 0) else f"the pool of {design_file}"
        fail_first(i, "context[{slot}].memory_id", f"exposed memory '{{memory_id}}' is not in {where}")
    pv = np.asarray(prop.array[pool_rows].to_numpy(dtype=float, na_value=np.nan))
    disagree = ~np.isclose(pv, pool_p, rtol=PROPENSITY_RTOL, atol=0.0)
    if disagree.any():
        i = int(pool_rows[np.argmax(disagree)])
        r = int(table.round_of(step[i : i + 1])[0])
        which = f"round {r}'s pool value" if has_rounds(design) else "pool value"
        fail_first(i, "context[{slot}].propensity",
                   f"propensity {{propensity}} disagrees with {design_file} {which} for '{{memory_id}}'")
    k = int(design["exposure_slots"])
    if bool((runs.per_run_count(is_exp) > k).any()):
        # failure path: report at the first exposure slot beyond the k-th, so the field points at the offender
        per_step = pd.Series(is_exp).groupby(step).transform("sum").to_numpy()
        nth = pd.Series(is_exp.astype(int)).groupby(step).cumsum().to_numpy()
        fail(is_exp & (per_step > k) & (nth > k), "context",
             f"step {{step}} has more exposure slots than design.exposure_slots = {k}")
    if window:
        j = int(design.get("pool_slots", 0))
        win = np.zeros(len(step), dtype=bool)
        win[exp_rows[is_win]] = True
        for mask, cap, what in ((is_exp & ~win, j, "pool slots than design.pool_slots"),
                                (win, k - j, "window slots than exposure_slots - pool_slots")):
            if bool((runs.per_run_count(mask) > cap).any()):
                nth = pd.Series(mask.astype(int)).groupby(step).cumsum().to_numpy()
                fail(mask & (nth > cap), "context[{slot}].arm", f"step {{step}} has more {what} = {cap}")


def _arm_codes(contexts: pd.DataFrame, src: Codes, fail: Any) -> Codes | None:
    """Codes of the ``arm`` column (None when the table has none); rejects an unknown arm, and
    an arm on a retriever slot (the spec gives ``arm`` to exposure slots only)."""
    if "arm" not in contexts.columns:
        return None
    arm = encode(contexts["arm"])
    if len(arm.dictionary) == 0:
        return arm
    ok = pc.is_in(arm.dictionary, value_set=pa.array(SLOT_ARMS, arm.dictionary.type)).to_numpy(zero_copy_only=False)
    if not ok.all():
        fail(~arm.lookup(ok, True), "context[{slot}].arm", "unknown arm '{arm}' (expected 'pool' or 'window')")
    has = arm.indices >= 0
    retr = src.indices == src.code_of(RETRIEVER)
    if bool((has & retr).any()):
        fail(has & retr, "context[{slot}].arm",
             "a retriever slot carries arm '{arm}'; 'arm' belongs to exposure slots only")
    return arm


def check_step_rounds(steps: pd.DataFrame, design: dict[str, Any] | None, design_file: str, rows: Rows) -> None:
    """In a design laid out in rounds, every step falls in some round (field ``step``)."""
    if not has_rounds(design) or steps.empty:
        return
    table = RoundPools.of(design)
    st = steps["step"].to_numpy(np.int64)
    if len(table.starts) == 0:
        fail_at(steps, np.ones(len(st), dtype=bool), rows, "step",
                f"step {{step}} falls in no round of {design_file} (its 'rounds' is empty)")
    lo, hi = int(table.starts[0]), int(table.stops[-1])
    fail_at(steps, table.round_of(st) < 0, rows, "step",
            f"step {{step}} falls in no round of {design_file} (its rounds cover steps {lo}..{hi - 1}); "
            "a writer appends a round before the round's first step")


def _bounds(values: pd.Series) -> tuple[float, float]:
    """(min, max) over the non-null values; (inf, -inf) when there are none, NaN when a value is NaN."""
    arr = pa.array(values.array) if not isinstance(values.array, pd.arrays.ArrowExtensionArray) else (
        values.array.__arrow_array__()
    )
    if arr.null_count == len(arr):
        return np.inf, -np.inf
    if pa.types.is_floating(arr.type) and pc.any(pc.is_nan(arr)).as_py():
        return np.nan, np.nan
    mm = pc.min_max(arr)
    return float(mm["min"].as_py()), float(mm["max"].as_py())


def _known_steps(step: np.ndarray, step_values: np.ndarray) -> np.ndarray:
    """Whether each ``step`` is one of ``step_values``."""
    s = len(step_values)
    if s == 0:
        return np.zeros(len(step), dtype=bool)
    d = np.diff(step_values)
    if bool(np.all(d == 1)):  # 0..T-1 and any other run of consecutive steps
        return (step >= step_values[0]) & (step <= step_values[-1])
    if bool(np.all(d >= 0)):
        pos = np.searchsorted(step_values, step)
        return step_values[np.minimum(pos, s - 1)] == step
    return np.isin(step, step_values)


# --------------------------------------------------------------------------- design.json


