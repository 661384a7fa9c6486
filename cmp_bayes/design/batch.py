"""The batch deal: every step's exposures of a fixed design at once (for simulators).

A simulator knows every step's retrieved memories in advance, so it needs no
step loop: a balanced design is laid out and its collisions repaired by swaps
(:func:`cmp_bayes.design.balance.repair`); a Bernoulli design draws each
memory's count and spreads it over its lifetime; a window design's window
slots are drawn for every step at once from each step's window ``W_t``
(:func:`window_candidates`, :func:`deal_window`), its pool slots dealt as a
balanced design of ``j`` slots. The live path is
:meth:`cmp_bayes.design.scheduler.ExposureScheduler.context`.
"""

from __future__ import annotations

import numpy as np

from cmp_bayes.design.balance import balanced_counts, plan_slots, repair


def deal_balanced(
    created: np.ndarray,
    deleted: np.ndarray,
    steps: int,
    k: int,
    seed: int,
    retrieved: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """The balanced design's exposures with collisions swapped away.

    Parameters
    ----------
    created, deleted : numpy.ndarray of int64, shape (pool,)
        Each pool memory's steps ``[created, deleted)`` in the store.
    steps, k : int
        ``T`` and the exposure slots per step.
    seed : int
        The design's seed (the same layout as the live scheduler's).
    retrieved : numpy.ndarray of int, shape (steps, r), optional
        Pool indices retrieved at each step, ``-1`` pads.

    Returns
    -------
    steps, memories : numpy.ndarray of int64, shape (n_exposures,)
        Sorted by step; ``memories`` are pool indices.
    lost : dict
        Pool index -> exposures that could not be placed.
    """
    rng = np.random.default_rng(seed)
    counts = balanced_counts(created, deleted, steps, k, rng)
    tok_mem, tok_step = plan_slots(counts, created, deleted, steps, k, rng)
    lost = repair(tok_mem, tok_step, created, deleted, blocked=retrieved)
    keep = tok_mem >= 0
    return tok_step[keep], tok_mem[keep], lost


def deal_bernoulli(
    created: np.ndarray,
    in_store_steps: np.ndarray,
    propensity: np.ndarray,
    k: int,
    seed: int,
    retrieved: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Bernoulli exposures: each memory's count ``Binomial(T_m, p_m)`` spread over its lifetime.

    Returns the steps and pool indices of the exposures kept (sorted by step,
    at most ``k`` per step) and the number of steps where the cap bound.
    """
    rng = np.random.default_rng(seed)
    n = rng.binomial(in_store_steps, propensity)
    mem = np.repeat(np.arange(created.size), n)
    # n draws without replacement from each memory's lifetime [created, deleted)
    u = rng.random(mem.size)
    order = np.lexsort((u, mem))
    mem = mem[order]
    start = np.r_[0, np.cumsum(n)[:-1]]
    j = np.arange(mem.size) - np.repeat(start, n)
    # stratified positions are distinct within a memory: j-th of n_m strata
    span = in_store_steps[mem]
    lo = (j * span) // np.maximum(n[mem], 1)
    hi = ((j + 1) * span) // np.maximum(n[mem], 1)
    step = created[mem] + lo + (rng.random(mem.size) * (hi - lo)).astype(np.int64)
    if retrieved is not None and mem.size:
        hit = (retrieved[step] == mem[:, None]).any(axis=1)
        mem, step = mem[~hit], step[~hit]
    order = np.lexsort((rng.random(mem.size), step))
    mem, step = mem[order], step[order]
    first = np.r_[0, np.flatnonzero(np.diff(step)) + 1] if step.size else np.zeros(0, np.int64)
    within = np.arange(step.size) - np.repeat(first, np.diff(np.r_[first, step.size]))
    keep = within < k
    capped = int(np.unique(step[~keep]).size)
    # the stratified draw is not exactly Bernoulli per step; it keeps the
    # per-memory count Binomial(T_m, p) and spreads it uniformly over the lifetime
    return step[keep], mem[keep], capped


def window_candidates(
    ranking: np.ndarray, cut: int, window: int, in_context: np.ndarray
) -> np.ndarray:
    """Every step's window ``W_t`` as a padded array (spec, "Targeted exposure", rule 3).

    Parameters
    ----------
    ranking : numpy.ndarray of int, shape (steps, n)
        Each step's ranking of the memories in the store (integer memory ids,
        best first, ``-1`` pads after the last one in the store).
    cut : int
        ``B - k``, the first rank below the retriever's cut.
    window : int
        ``W``.
    in_context : numpy.ndarray of int, shape (steps, c)
        The memories already in each step's context (retriever and pool
        slots), ``-1`` pads.

    Returns
    -------
    numpy.ndarray of int64, shape (steps, window)
        Ranks ``cut .. cut + window - 1`` of each ranking, with ``-1`` where
        the rank is past the store's end or its memory is already in the context
        (members stay in rank order).
    """
    steps = ranking.shape[0]
    cand = np.full((steps, window), -1, dtype=np.int64)
    part = ranking[:, cut : cut + window]
    cand[:, : part.shape[1]] = part
    if in_context.size:
        taken = (cand[:, :, None] == in_context[:, None, :]).any(axis=2)
        cand[taken] = -1
    return cand


def deal_window(
    candidates: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every step's window slots at once: ``min(n, |W_t|)`` members drawn uniformly without replacement.

    Parameters
    ----------
    candidates : numpy.ndarray of int, shape (steps, W)
        Each step's window members (:func:`window_candidates`), ``-1`` where none.
    n : int
        ``k - j``, the window slots per step.
    rng : numpy.random.Generator

    Returns
    -------
    steps, memories : numpy.ndarray of int64, shape (n_window_slots,)
        Sorted by step, in draw order within a step.
    propensity : numpy.ndarray of float64, shape (n_window_slots,)
        ``min(1, n / |W_t|)`` of the slot's step: each member's exact inclusion
        probability (a uniformly random ordering of ``W_t``, first ``n`` kept).
    """
    steps, width = candidates.shape
    member = candidates >= 0
    size = member.sum(axis=1)
    if n <= 0 or width == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0)
    # a uniform random key per member, non-members last: the n smallest keys are a
    # uniform draw without replacement from W_t
    key = np.where(member, rng.random((steps, width)), np.inf)
    order = np.argsort(key, axis=1, kind="stable")[:, : min(n, width)]
    pick = np.take_along_axis(candidates, order, axis=1)
    keep = np.arange(order.shape[1])[None, :] < np.minimum(size, n)[:, None]
    step = np.broadcast_to(np.arange(steps)[:, None], pick.shape)[keep].astype(np.int64)
    prop = np.minimum(1.0, n / np.maximum(size, 1).astype(np.float64))
    return step, pick[keep].astype(np.int64), prop[step]
