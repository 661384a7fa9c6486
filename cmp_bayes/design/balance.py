"""Balanced assignment: how many exposures each pool memory gets and at which steps.

The arithmetic behind :class:`~cmp_bayes.design.scheduler.ExposureScheduler`'s
balanced design: every pool memory gets floor or ceil of its fair share of the
``T * k`` exposure slots over the steps it is in the store, each step holds at
most ``k`` exposures and never a memory twice, and a slot whose memory is
retrieved at that step is repaired by a swap with another step's slot.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: most slots examined in each direction when looking for a swap partner
_SEARCH = 50_000


# ---------------------------------------------------------------------- helpers
def alive_counts(created: np.ndarray, deleted: np.ndarray, steps: int) -> np.ndarray:
    """Number of memories alive at each step, shape (steps,)."""
    diff = np.zeros(steps + 1, dtype=np.int64)
    ok = deleted > created
    np.add.at(diff, created[ok], 1)
    np.add.at(diff, deleted[ok], -1)
    return np.cumsum(diff)[:steps]


def balanced_counts(
    created: np.ndarray, deleted: np.ndarray, steps: int, k: int, rng: np.random.Generator
) -> np.ndarray:
    """Exposures per pool memory: floor or ceil of its fair share (module docstring).

    Returns
    -------
    numpy.ndarray of int64, shape (pool,)
        Adds up to ``sum_t min(k, A_t)``.
    """
    p = created.size
    alive = alive_counts(created, deleted, steps)
    cap = np.minimum(k, alive)
    density = np.where(alive > 0, cap / np.maximum(alive, 1), 0.0)
    cum = np.r_[0.0, np.cumsum(density)]
    share = np.where(deleted > created, cum[deleted] - cum[np.minimum(created, deleted)], 0.0)
    # systematic rounding along (created, deleted, random): every prefix of the
    # order gets floor/ceil of its cumulative share, so blocks with an integer
    # total (a shared lifetime) get exactly that total
    order = np.lexsort((rng.random(p), deleted, created))
    c = np.round(np.cumsum(share[order]), 9)
    u = rng.random()
    fl = np.floor(c + u)
    counts_sorted = np.diff(np.r_[np.floor(u), fl]).astype(np.int64)
    counts = np.empty(p, dtype=np.int64)
    counts[order] = counts_sorted
    return counts


def plan_slots(
    counts: np.ndarray,
    created: np.ndarray,
    deleted: np.ndarray,
    steps: int,
    k: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Lay each memory's exposures out over its lifetime in random order, ``<= k`` per step.

    Each memory's ``n_m`` exposures get stratified random target times in its
    lifetime; all exposures sorted by target are poured into the slot sequence
    (``min(k, A_t)`` slots at step ``t``). Slots whose memory is not alive or is
    already exposed at that step are left for :func:`repair`.

    Returns
    -------
    tok_mem, tok_step : numpy.ndarray of int64, shape (sum(counts),)
        Memory (pool index) and step of every exposure slot, sorted by step.
    """
    mem = np.repeat(np.arange(counts.size), counts)
    start = np.r_[0, np.cumsum(counts)[:-1]]
    j = np.arange(mem.size) - np.repeat(start, counts)
    span = (deleted - created)[mem]
    target = created[mem] + (j + rng.random(mem.size)) * span / np.maximum(counts[mem], 1)
    order = np.lexsort((rng.random(mem.size), target))
    alive = alive_counts(created, deleted, steps)
    cap = np.minimum(k, alive)
    slot_step = np.repeat(np.arange(steps), cap)
    n = min(slot_step.size, mem.size)
    tok_mem = np.full(slot_step.size, -1, dtype=np.int64)
    tok_mem[:n] = mem[order][:n]
    return tok_mem, slot_step.astype(np.int64)


def repair(
    tok_mem: np.ndarray,
    tok_step: np.ndarray,
    created: np.ndarray,
    deleted: np.ndarray,
    blocked: np.ndarray | None,
) -> dict[int, int]:
    """Fix ineligible exposure slots in place by swapping with other slots.

    A slot is ineligible when its memory is not alive at its step, appears
    twice at the step, or is in ``blocked[step]`` (retrieved). Each is swapped
    with the nearest later slot (deferral), else the nearest earlier one, such
    that both memories are eligible at their new steps; counts never change.
    Slots that cannot be fixed are emptied (``-1``).

    Returns
    -------
    dict
        Pool index -> number of exposures that could not be placed.
    """
    n = tok_mem.size
    if n == 0:
        return {}
    steps_n = int(tok_step.max()) + 1
    first = np.searchsorted(tok_step, np.arange(steps_n + 1))

    def members(t: int) -> np.ndarray:
        return tok_mem[first[t] : first[t + 1]]

    def ok(m: int, t: int, skip_slot: int) -> bool:
        if not (created[m] <= t < deleted[m]):
            return False
        if blocked is not None and (blocked[t] == m).any():
            return False
        mem_t = members(t)
        hits = np.flatnonzero(mem_t == m) + first[t]
        return bool(np.all(hits == skip_slot))

    m = tok_mem
    bad = (m >= 0) & ((tok_step < created[np.maximum(m, 0)]) | (tok_step >= deleted[np.maximum(m, 0)]))
    order = np.lexsort((np.arange(n), m, tok_step))
    dup = np.zeros(n, bool)
    same = (np.diff(tok_step[order]) == 0) & (np.diff(m[order]) == 0) & (m[order][1:] >= 0)
    dup[order[1:][same]] = True
    bad |= dup
    if blocked is not None:
        bad |= (m >= 0) & (blocked[tok_step] == m[:, None]).any(axis=1)
    lost: dict[int, int] = {}
    for i in np.flatnonzero(bad).tolist():
        mi = int(tok_mem[i])
        if mi < 0 or ok(mi, int(tok_step[i]), i):
            continue  # fixed by an earlier swap
        ti = int(tok_step[i])
        fixed = False
        for j in _candidates(i, n, first, ti):
            mj = int(tok_mem[j])
            tj = int(tok_step[j])
            if tj == ti:
                continue
            if ok(mi, tj, j) and (mj < 0 or ok(mj, ti, i)):
                tok_mem[i], tok_mem[j] = mj, mi
                fixed = True
                break
        if not fixed:
            tok_mem[i] = -1
            lost[mi] = lost.get(mi, 0) + 1
    return lost


def _candidates(i: int, n: int, first: np.ndarray, t: int) -> Iterator[int]:
    """Slot indices to try for a swap: later steps nearest first, then earlier ones."""
    lo, hi = int(first[t]), int(first[t + 1])
    yield from range(hi, min(n, hi + _SEARCH))
    yield from range(lo - 1, max(-1, lo - 1 - _SEARCH), -1)
