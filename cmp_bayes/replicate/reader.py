"""The semi-synthetic reader model: how an answer's success depends on the context.

There is no LLM here. On real stores, with real queries, real evidence and a
real retriever, the outcome of a step is drawn from a stated model:

    p_t = clip(base_q + gain * e_t / n_q + eps_t, floor, ceil)
    outcome_t ~ Bernoulli(p_t)

* ``e_t``: how many of query ``q``'s evidence memories are in the step's
  context; ``n_q``: how many the benchmark lists (so ``e_t / n_q`` is the
  share of the question's evidence the reader sees);
* ``base_q ~ Beta(base_a, base_b)`` per query (how guessable the answer is
  without evidence; default mean 0.2);
* ``eps_t ~ Normal(0, noise)`` step noise (reader stochasticity beyond the
  Bernoulli draw).

Nominal truth: an evidence memory of ``q`` adds ``gain / n_q`` to the success
probability when in the context, every other memory adds 0 (before clipping).
Results that use this reader are **semi-synthetic** and labelled so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ReaderModel:
    """Parameters of the reader (see the module docstring).

    Attributes
    ----------
    gain : float
        Success-probability gain with all of the query's evidence in context.
    noise : float
        Sd of the per-step noise on the probability.
    base_a, base_b : float
        Beta prior of each query's evidence-free success rate.
    floor, ceil : float
        Clipping bounds of the probability.
    """

    gain: float = 0.6
    noise: float = 0.05
    base_a: float = 2.0
    base_b: float = 8.0
    floor: float = 0.02
    ceil: float = 0.98

    def base_rates(self, n_queries: int, rng: np.random.Generator) -> np.ndarray:
        """Per-query evidence-free success rates, shape ``(n_queries,)``."""
        return rng.beta(self.base_a, self.base_b, size=n_queries)

    def probability(self, base: np.ndarray, share: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        """Success probability per step from base rate and evidence share (arrays of one shape)."""
        p = base + self.gain * share
        if noise is not None:
            p = p + noise
        return np.clip(p, self.floor, self.ceil)

    def outcomes(self, base: np.ndarray, share: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Binary outcomes (float64 0/1) for steps with these base rates and evidence shares."""
        eps = rng.normal(0.0, self.noise, size=np.shape(share)) if self.noise > 0 else None
        return (rng.random(np.shape(share)) < self.probability(base, share, eps)).astype(np.float64)

    def describe(self) -> str:
        """One line stating the model, for reports."""
        return (
            f"semi-synthetic reader: p = clip(base_q + {self.gain} * evidence share + N(0, {self.noise}^2), "
            f"{self.floor}, {self.ceil}), base_q ~ Beta({self.base_a}, {self.base_b})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return asdict(self)
