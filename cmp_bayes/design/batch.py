"""The batch deal: every step's exposures of a fixed design at once (for simulators).

A simulator knows every step's retrieved memories in advance, so it needs no
step loop: a balanced design is laid out and its collisions repaired by swaps
(:func:`cmp_bayes.design.balance.repair`); a Bernoulli design draws each
memory's count and spreads it over its lifetime. The live path is
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
