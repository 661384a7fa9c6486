"""The simulator's deterministic retriever.

Every (query, candidate memory) pair has a fixed relevance score; the ranking
for a query is its candidates in the store, by decreasing score. Scores are
drawn once per world: ``Normal(0, 1)`` for ordinary memories; a required
memory is findable (``Normal(3, 0.5)``, near the top) except for a
``lexical_gap`` share that the retriever scores like a slightly better than
average memory (``Normal(0.1, 0.5)``): ranked mid-list, so rank carries some
information but those memories are rarely or never retrieved. Harmful memories
are lexically close distractors (``Normal(0.5, 1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Retriever:
    """Scores of candidate memories per query, as (query, candidate) arrays.

    Attributes
    ----------
    cand : numpy.ndarray of int64, shape (query, candidate)
        Global memory index of each candidate (``-1`` pads).
    score : numpy.ndarray of float64, shape (query, candidate)
        Relevance score (``-inf`` on padding).
    """

    cand: np.ndarray
    score: np.ndarray

    def order(self) -> np.ndarray:
        """Candidate positions per query by decreasing score, shape (query, candidate)."""
        return np.argsort(-self.score, axis=1, kind="stable")

    def rank_in_store(self, q: np.ndarray, alive: np.ndarray) -> np.ndarray:
        """Rankings restricted to the store.

        Parameters
        ----------
        q : numpy.ndarray of int, shape (n,)
            Query index of each ranking wanted.
        alive : numpy.ndarray of bool, shape (n, candidate)
            Whether each candidate position of ``q`` is in the store.

        Returns
        -------
        numpy.ndarray of int64, shape (n, candidate)
            Candidate positions best first, in-store ones only, ``-1`` padded.
        """
        order = self.order()[q]
        ok = np.take_along_axis(alive, order, axis=1) & (self.cand[q][np.arange(len(q))[:, None], order] >= 0)
        # stable partition: in-store positions first, keeping score order
        key = np.argsort(~ok, axis=1, kind="stable")
        out = np.take_along_axis(order, key, axis=1)
        out[~np.take_along_axis(ok, key, axis=1)] = -1
        return out
