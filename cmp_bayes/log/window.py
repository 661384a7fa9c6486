"""Window designs (the spec's "Targeted exposure"): each step's window ``W_t`` and its checks.

``W_t`` is the set of memories at ranks ``B - k`` .. ``B - k + W - 1`` of the
step's ranking that are in the store at step ``t`` and not already in the
context after the retriever slots and the pool slots; each of its members has
the window propensity ``min(1, (k - j) / |W_t|)`` at that step, exposed or not.

:func:`window_sets` gives it for a log in memory; :func:`window_table` is the
same computation on columns, which the readers and the Dask engine's contexts
parts use to check window slots (:func:`check_window_slots`), beside the
ranking rules of a window design (:func:`check_window_rankings`). Whole
columns throughout: the memberships are integer keys ``(step, memory)`` sorted
and searched, never a loop over steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.log.codes import Codes, arrow_column, encode
from cmp_bayes.log.design import is_window, union_pool
from cmp_bayes.log.rows import Rows, fail_at
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.log.validate import PROPENSITY_RTOL, WINDOW_ARM

#: the columns of :func:`window_sets`
WINDOW_COLUMNS: dict[str, str] = {"step": "int64", "memory_id": "string", "propensity": "float64"}


@dataclass(frozen=True)
class Store:
    """Which memories are in the store at a step.

    Attributes
    ----------
    memory : pyarrow.Array or None
        The memories file's ids (large_string, distinct); None without one:
        every memory the log names is in the store at every step.
    created, deleted : numpy.ndarray or None
        Each ``memory``'s lifetime ``[created, deleted)`` (int64; int64 max = never deleted).
    named : int
        Without a memories file: how many memories the log names (the store's size).
    """

    memory: pa.Array | None
    created: np.ndarray | None
    deleted: np.ndarray | None
    named: int = 0

    @classmethod
    def of(cls, memories: pd.DataFrame | None, named: int = 0) -> Store:
        """The store of a memories table (``MEMORY_COLUMNS``), or of ``named`` memories without one."""
        if memories is None:
            return cls(None, None, None, int(named))
        ids = _strings(memories["memory_id"])
        never = np.iinfo(np.int64).max
        return cls(ids, memories["created_step"].to_numpy(np.int64),
                   memories["deleted_step"].astype("Int64").to_numpy(np.int64, na_value=never))

    def sizes(self, steps: np.ndarray) -> np.ndarray:
        """How many memories are in the store at each step, shape (len(steps),) int64."""
        steps = np.asarray(steps, dtype=np.int64)
        # the three are None together (see of()); naming all three lets the checker see it
        if self.memory is None or self.created is None or self.deleted is None:
            return np.full(len(steps), self.named, dtype=np.int64)
        deleted = np.maximum(self.deleted, self.created)  # an empty lifetime never counts
        return (np.searchsorted(np.sort(self.created), steps, side="right")
                - np.searchsorted(np.sort(deleted), steps, side="right")).astype(np.int64)

    def holds(self, steps: np.ndarray, ids: pa.Array) -> np.ndarray:
        """Whether memory ``ids[i]`` is in the store at ``steps[i]``, shape (len(ids),) bool."""
        if self.memory is None or self.created is None or self.deleted is None:
            return np.ones(len(ids), dtype=bool)
        pos = pc.index_in(ids, value_set=self.memory).fill_null(-1).to_numpy(zero_copy_only=False)
        known = pos >= 0
        p = np.maximum(pos, 0)
        return known & (self.created[p] <= steps) & (steps < self.deleted[p])


def window_needs(design: dict[str, Any]) -> tuple[int, int]:
    """The window's rank range ``[lo, hi)`` of a window design: ``B - k`` .. ``B - k + W``."""
    lo = int(design["slots"]) - int(design["exposure_slots"])
    return lo, lo + int(design["window"])


def window_table(
    design: dict[str, Any],
    ctx_step: np.ndarray,
    ctx_ids: pa.Array,
    ctx_before: np.ndarray,
    rk_step: np.ndarray,
    rk_rank: np.ndarray,
    rk_ids: pa.Array,
    store: Store,
) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Each step's window ``W_t`` with its propensity, in long form.

    Parameters
    ----------
    design : dict
        A checked window design.
    ctx_step, ctx_ids : numpy.ndarray (int64), pyarrow.Array (large_string), shape (n,)
        The context slots' steps and memories.
    ctx_before : numpy.ndarray of bool, shape (n,)
        The slots filled before the window (retriever and pool slots).
    rk_step, rk_rank, rk_ids : shape (r,)
        The rankings in long form (step, 0-based rank, memory).
    store : Store
        Which memories are in the store when.

    Returns
    -------
    tuple
        ``(step, memory_id, propensity)``, one entry per member of each step's
        window, sorted by step then rank; empty when the design has no window
        slots (``pool_slots == exposure_slots``).
    """
    k, j = int(design["exposure_slots"]), int(design.get("pool_slots", 0))
    lo, hi = window_needs(design)
    rk_step = np.asarray(rk_step, dtype=np.int64)
    rk_rank = np.asarray(rk_rank, dtype=np.int64)
    cand = np.flatnonzero((rk_rank >= lo) & (rk_rank < hi)) if k > j else np.zeros(0, np.int64)
    c_step = rk_step[cand]
    c_ids = rk_ids.take(pa.array(cand)) if len(cand) else pa.array([], pa.large_string())
    keep = store.holds(c_step, c_ids)
    before = np.flatnonzero(ctx_before)
    if len(before) and keep.any():
        # (step, memory) keys over one dictionary of both sides: in the context already?
        b_ids = ctx_ids.take(pa.array(before))
        codes = pc.dictionary_encode(pa.concat_arrays([c_ids, b_ids])).indices.to_numpy(zero_copy_only=False)
        width = int(codes.max()) + 1 if len(codes) else 1
        steps_u = np.unique(np.concatenate([c_step, ctx_step[before]]))
        ck = np.searchsorted(steps_u, c_step) * width + codes[: len(cand)]
        bk = np.sort(np.searchsorted(steps_u, ctx_step[before]) * width + codes[len(cand):])
        at = np.minimum(np.searchsorted(bk, ck), len(bk) - 1)
        keep &= bk[at] != ck
    sel = np.flatnonzero(keep)
    # rankings are in (step, rank) order from the readers; sort anyway, stably, for any caller
    order = sel[np.lexsort((rk_rank[cand][sel], c_step[sel]))]
    step = c_step[order]
    ids = c_ids.take(pa.array(order)) if len(order) else pa.array([], pa.large_string())
    if len(step) == 0:
        return step, ids, np.zeros(0)
    new = np.r_[True, step[1:] != step[:-1]]
    starts = np.flatnonzero(new)
    size = np.diff(np.append(starts, len(step)))
    prop = np.minimum(1.0, (k - j) / np.repeat(size, size).astype(np.float64))
    return step, ids, prop


def window_sets(log: ExposureLog) -> pd.DataFrame:
    """Every step's window ``W_t`` with its window propensity ``min(1, (k - j) / |W_t|)``.

    Parameters
    ----------
    log : ExposureLog
        A log read by :func:`cmp_bayes.read_log` (its window slots already checked).

    Returns
    -------
    pandas.DataFrame
        Columns ``step`` (int64), ``memory_id`` (string), ``propensity``
        (float64): one row per member of a step's window, sorted by step then
        rank; empty (same columns) unless the log has a window design with
        window slots.
    """
    if not is_window(log.design) or log.rankings is None:
        return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in WINDOW_COLUMNS.items()})
    ctx = log.contexts
    step, ids, prop = window_table(
        log.design, ctx["step"].to_numpy(np.int64), _strings(ctx["memory_id"]), filled_before_window(ctx),
        log.rankings["step"].to_numpy(np.int64), log.rankings["rank"].to_numpy(np.int64),
        _strings(log.rankings["memory_id"]), log_store(log),
    )
    return pd.DataFrame({
        "step": step,
        "memory_id": pd.arrays.ArrowStringArray(pa.chunked_array([ids], pa.large_string())).astype("string"),
        "propensity": prop,
    })


def log_store(log: ExposureLog) -> Store:
    """The store of a log in memory: its memories file, else every memory it names."""
    if log.memories is not None:
        return Store.of(log.memories)
    return Store.of(None, named=len(log.memory_ids()))


def named_count(ctx_ids: pa.Array, rk_ids: pa.Array | None, design: dict[str, Any] | None) -> int:
    """How many distinct memories a log names (contexts, rankings, every round's pool)."""
    parts = [ctx_ids] + ([rk_ids] if rk_ids is not None else [])
    pool = list(union_pool(design))
    if pool:
        parts.append(pa.array(pool, pa.large_string()))
    parts = [p for p in parts if len(p)]
    return len(pc.unique(pa.concat_arrays(parts)).drop_null()) if parts else 0


def filled_before_window(ctx: pd.DataFrame, source: Codes | None = None, arm: Codes | None = None) -> np.ndarray:
    """The slots that fill the context before its window slots: retriever and pool slots, (n,) bool."""
    src = source if source is not None else encode(ctx["source"])
    is_retr = src.indices == src.code_of(RETRIEVER)
    is_exp = src.indices == src.code_of(EXPOSURE)
    return is_retr | (is_exp & ~window_rows(ctx, arm))


def window_rows(ctx: pd.DataFrame, arm: Codes | None = None) -> np.ndarray:
    """The slots logged with ``arm: "window"``, shape (n,) bool."""
    if arm is None:
        if "arm" not in ctx.columns:
            return np.zeros(len(ctx), dtype=bool)
        arm = encode(ctx["arm"])
    return arm.indices == arm.code_of(WINDOW_ARM)


def check_window_rankings(
    steps: pd.DataFrame,
    has_ranking: np.ndarray,
    rk_step: np.ndarray,
    design: dict[str, Any],
    store: Store,
    rows: Rows,
) -> None:
    """Every step of a window design logs a ranking covering the window (field ``ranking``).

    ``has_ranking``: whether each step (row of ``steps``) carries a ranking;
    ``rk_step``: the step of each ranking entry. A ranking shorter than ranks
    ``0 .. B - k + W - 1`` passes only when it lists every memory in the store.
    """
    st = steps["step"].to_numpy(np.int64)
    fail_at(steps, ~np.asarray(has_ranking, dtype=bool), rows, "ranking",
            "no ranking: every step of a window design logs the retriever's ranking")
    _, need = window_needs(design)
    pos = np.searchsorted(st, np.asarray(rk_step, dtype=np.int64))
    length = np.bincount(pos, minlength=len(st))[: len(st)] if len(st) else np.zeros(0, np.int64)
    short = length < need
    if short.any():
        size = store.sizes(st)
        bad = short & (size > length)
        if bad.any():
            i = int(np.argmax(bad))
            fail_at(steps, bad, rows, "ranking",
                    f"the ranking lists {int(length[i])} memories; a window design needs ranks 0..{need - 1} "
                    f"(slots - exposure_slots + window) or every memory in the store ({int(size[i])} at step {{step}})")


def check_window_slots(
    contexts: pd.DataFrame,
    window: tuple[np.ndarray, pa.Array, np.ndarray],
    rows: Rows,
    memory: Codes | None = None,
    arm: Codes | None = None,
) -> None:
    """Each window slot's memory is in its step's ``W_t``, with propensity ``(k - j)/|W_t|``.

    ``window``: :func:`window_table` of the same log; errors name the slot's
    ``memory_id`` (not in ``W_t``) or ``propensity`` (off by more than a relative 1e-9).
    """
    win = np.flatnonzero(window_rows(contexts, arm))
    if len(win) == 0:
        return
    mem = memory if memory is not None else encode(contexts["memory_id"])
    w_step, w_ids, w_prop = window
    ctx_step = contexts["step"].to_numpy(np.int64)[win]
    ids = {"memory_id": mem}
    # (step, memory) keys over the window members' ids as the dictionary
    d = mem.dictionary if pa.types.is_large_string(mem.dictionary.type) else mem.dictionary.cast(pa.large_string())
    u = pc.unique(w_ids) if len(w_ids) else pa.array([], pa.large_string())
    width = max(len(u), 1)
    code = mem.lookup(pc.index_in(d, value_set=u).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64),
                      -1, win)
    steps_u = np.unique(np.concatenate([w_step, ctx_step]))
    wk = np.searchsorted(steps_u, w_step) * width + pc.index_in(w_ids, value_set=u).to_numpy(zero_copy_only=False)
    ck = np.searchsorted(steps_u, ctx_step) * width + code
    order = np.argsort(wk, kind="stable")
    wk, wp = wk[order], w_prop[order]
    at = np.minimum(np.searchsorted(wk, ck), max(len(wk) - 1, 0))
    found = (code >= 0) & (len(wk) > 0) & (wk[at] == ck if len(wk) else False)
    mask = np.zeros(len(contexts), dtype=bool)
    mask[win[~found]] = True
    fail_at(contexts, mask, rows, "context[{slot}].memory_id",
            "window slot for memory '{memory_id}' at step {step}, which is not in that step's window W_t "
            "(ranks slots - exposure_slots .. + window - 1 of its ranking, in the store, not retrieved "
            "and not in a pool slot)", ids)
    want = wp[at]
    got = contexts["propensity"].to_numpy(dtype=float, na_value=np.nan)[win]
    off = ~np.isclose(got, want, rtol=PROPENSITY_RTOL, atol=0.0)
    if off.any():
        i = int(np.argmax(off))
        mask[:] = False
        mask[win[i]] = True
        fail_at(contexts, mask, rows, "context[{slot}].propensity",
                f"window slot propensity {{propensity}} differs from (exposure_slots - pool_slots) / |W_t| "
                f"= {float(want[i])!r} at step {{step}}", ids)


@dataclass(frozen=True)
class ReadRows:
    """Where a reader found each step and slot, for the window checks' messages.

    ``has_ranking``: whether each step (row of the steps table) carried a ranking.
    """

    steps: Rows
    contexts: Rows | None
    has_ranking: np.ndarray


def check_window_log(log: ExposureLog, where: ReadRows) -> None:
    """The rules of a window design a reader applies once the whole log is read.

    Every step logs a ranking that covers the window
    (:func:`check_window_rankings`), and every window slot is in its step's
    ``W_t`` with the window propensity (:func:`check_window_slots`). Nothing to
    do for other designs.
    """
    if not is_window(log.design):
        return
    design = log.design
    store = log_store(log)
    rk = log.rankings
    rk_step = rk["step"].to_numpy(np.int64) if rk is not None else np.zeros(0, np.int64)
    check_window_rankings(log.steps, where.has_ranking, rk_step, design, store, where.steps)
    if log.contexts.empty or where.contexts is None or rk is None:
        return
    ctx = log.contexts
    table = window_table(
        design, ctx["step"].to_numpy(np.int64), _strings(ctx["memory_id"]), filled_before_window(ctx),
        rk_step, rk["rank"].to_numpy(np.int64), _strings(rk["memory_id"]), store,
    )
    check_window_slots(ctx, table, where.contexts)


def _strings(values: pd.Series) -> pa.Array:
    arr = arrow_column(values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if pa.types.is_large_string(arr.type) else arr.cast(pa.large_string())
