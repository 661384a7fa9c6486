"""The per-step draws of a context: window slots (the spec's window designs) and slot positions.

Window designs (spec, "Targeted exposure: window designs"): the step's
window ``W_t`` is the set of memories at ranks ``B - k .. B - k + W - 1`` of
the step's full ranking that are in the store and not already in the context;
``k - j`` of them are drawn uniformly without replacement, each with
propensity ``min(1, (k - j) / |W_t|)``, the exact inclusion probability of
any member of ``W_t`` under that draw.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np


def window_members(
    ranking: Sequence[str],
    cut: int,
    window: int,
    in_context: Collection[str],
    in_store: Callable[[str], bool],
) -> list[str]:
    """``W_t``: ranks ``cut .. cut + window - 1`` of ``ranking``, in the store, not in the context.

    Parameters
    ----------
    ranking : sequence of str
        The step's full ranking, best first (positions are ranks).
    cut : int
        ``B - k``, the first rank below the retriever's cut.
    window : int
        ``W``, how many ranks are eligible.
    in_context : collection of str
        Memories already in the context (retriever and pool slots).
    in_store : callable
        Whether a memory is in the store at this step.

    Returns
    -------
    list of str
        The members in rank order, each once.
    """
    out: list[str] = []
    seen = set(in_context)
    for m in ranking[cut : cut + window]:
        m = str(m)
        if m not in seen and in_store(m):
            out.append(m)
            seen.add(m)
    return out


def draw_window(
    members: Sequence[str], n: int, rng: np.random.Generator
) -> tuple[list[str], float]:
    """Draw ``min(n, |W_t|)`` members uniformly without replacement.

    Returns the drawn memories (in draw order) and their common propensity
    ``min(1, n / |W_t|)``; ``([], 0.0)`` when the window is empty or ``n == 0``.
    When ``|W_t| <= n`` every member is taken, in rank order, without using ``rng``.
    """
    size = len(members)
    if size == 0 or n <= 0:
        return [], 0.0
    if size <= n:
        return list(members), 1.0
    pick = rng.choice(size, size=n, replace=False)
    return [members[int(i)] for i in pick], min(1.0, n / size)


def place(
    retriever: list[dict[str, Any]], exposure: list[dict[str, Any]], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Put the exposure slots at uniformly random positions among all the context's slots.

    The exposure slots take ``len(exposure)`` distinct positions drawn
    uniformly without replacement (slot ``i`` gets the ``i``-th draw, so each
    exposure slot's position is uniform over the context); the retriever slots
    fill the other positions in their own order.
    """
    if not exposure:
        return retriever + exposure
    n = len(retriever) + len(exposure)
    pos = rng.choice(n, size=len(exposure), replace=False)
    out: list[dict[str, Any] | None] = [None] * n
    for p, slot in zip(pos.tolist(), exposure, strict=True):
        out[p] = slot
    it = iter(retriever)
    return [s if s is not None else next(it) for s in out]
