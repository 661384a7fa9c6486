"""The simulator's stated reader model: how a context turns into an outcome.

For query ``q`` with context ``C`` the pre-clipping score is
``s = base_q + sum over m in C of u(m, q)``; a step-level shock
``eps ~ Normal(0, noise)`` is added and the success probability is
``p = clip(s + eps, lo, hi)`` (``lo = 0.02``, ``hi = 0.98``). Binary outcomes are
``Bernoulli(p)``; fractional ones ``Beta(p * kappa, (1 - p) * kappa)`` (mean
``p``). Either way the expected outcome given ``s`` is
``g(s) = E[clip(s + eps, lo, hi)]``, in closed form below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

LO, HI = 0.02, 0.98


@dataclass(frozen=True)
class SimulatedReader:
    """Parameters of the reader (see module docstring).

    Attributes
    ----------
    noise : float
        Standard deviation of the step-level shock (probability units).
    outcomes : {"binary", "fractional"}
    concentration : float
        ``kappa`` of the Beta for fractional outcomes.
    """

    noise: float = 0.0
    outcomes: str = "binary"
    concentration: float = 20.0

    def mean(self, s: np.ndarray) -> np.ndarray:
        """Expected outcome ``g(s)`` for pre-clipping scores ``s`` (any shape)."""
        s = np.asarray(s, dtype=float)
        if self.noise <= 0:
            return np.clip(s, LO, HI)
        sd = self.noise
        a, b = (LO - s) / sd, (HI - s) / sd
        pa, pb = ndtr(a), ndtr(b)
        phi_a = np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)
        phi_b = np.exp(-0.5 * b * b) / np.sqrt(2 * np.pi)
        # E[clip(X, LO, HI)] for X ~ N(s, sd^2): the two clipped tails plus the
        # truncated mean of the middle
        return LO * pa + HI * (1 - pb) + s * (pb - pa) + sd * (phi_a - phi_b)

    def sample(self, s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One outcome per score; shape of ``s``."""
        s = np.asarray(s, dtype=float)
        eps = rng.normal(0.0, self.noise, size=s.shape) if self.noise > 0 else 0.0
        p = np.clip(s + eps, LO, HI)
        if self.outcomes == "binary":
            return (rng.random(s.shape) < p).astype(float)
        k = self.concentration
        return rng.beta(p * k, (1 - p) * k)
