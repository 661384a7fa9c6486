"""What an exposure design is, checked: ``B``, ``k``, its length or rounds, its assignment, slot positions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from cmp_bayes.errors import ConfigError

#: How the exposure slots are dealt (see :mod:`cmp_bayes.design.scheduler`).
Assignment = Literal["balanced", "bernoulli", "window"]
#: Where the exposure slots go in the context.
Positions = Literal["end", "random"]


@dataclass(frozen=True)
class DesignConfig:
    """The settings of an :class:`~cmp_bayes.design.scheduler.ExposureScheduler`, validated.

    Attributes
    ----------
    slots, exposure_slots : int
        ``B`` and ``k`` (``0 <= k <= B``).
    steps : int or None
        ``T`` of a fixed design; ``None`` for an open-ended one (needs ``round_steps``).
    assignment : {"balanced", "bernoulli", "window"}
    seed : int
    bernoulli_rate : float or None
        In ``(0, 1]``; ``None``: the default rate.
    round_steps : int or None
        ``R >= 1``, an open-ended design's round length (not with ``steps``).
    window : int or None
        ``W >= 1``, window designs only.
    pool_slots : int
        ``j`` in ``[0, k]``, window designs only.
    positions : {"end", "random"}
    """

    slots: int
    exposure_slots: int
    steps: int | None
    assignment: Assignment = "balanced"
    seed: int = 0
    bernoulli_rate: float | None = None
    round_steps: int | None = None
    window: int | None = None
    pool_slots: int = 0
    positions: Positions = "end"

    def __post_init__(self) -> None:
        slots, k = self.slots, self.exposure_slots
        if not (isinstance(slots, int | np.integer) and slots >= 1):
            raise ConfigError(f"slots must be a positive integer, got {slots!r}")
        if not (0 <= k <= slots):
            raise ConfigError(f"exposure_slots must be in [0, slots={slots}], got {k!r}")
        if self.steps is None:
            if self.round_steps is None or int(self.round_steps) < 1:
                raise ConfigError(
                    f"an open-ended design (steps=None) needs round_steps >= 1, got {self.round_steps!r}"
                )
        elif self.round_steps is not None:
            raise ConfigError("give steps (a fixed design) or round_steps (an open-ended one), not both")
        elif self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps!r}")
        if self.assignment not in ("balanced", "bernoulli", "window"):
            raise ConfigError(f"assignment must be 'balanced', 'bernoulli' or 'window', got {self.assignment!r}")
        if self.assignment == "window":
            if self.window is None or int(self.window) < 1:
                raise ConfigError(f"a window design needs window >= 1, got {self.window!r}")
            if not (0 <= int(self.pool_slots) <= k):
                raise ConfigError(f"pool_slots must be in [0, exposure_slots={k}], got {self.pool_slots!r}")
        elif self.window is not None or self.pool_slots:
            raise ConfigError("window and pool_slots are for assignment='window'")
        if self.positions not in ("end", "random"):
            raise ConfigError(f"positions must be 'end' or 'random', got {self.positions!r}")
        if self.bernoulli_rate is not None and not (0.0 < float(self.bernoulli_rate) <= 1.0):
            raise ConfigError(f"bernoulli_rate must be in (0, 1], got {self.bernoulli_rate!r}")
        for name, cast in (("slots", int), ("exposure_slots", int), ("seed", int), ("pool_slots", int)):
            object.__setattr__(self, name, cast(getattr(self, name)))
        for name in ("steps", "round_steps", "window"):
            v = getattr(self, name)
            object.__setattr__(self, name, None if v is None else int(v))
        if self.bernoulli_rate is not None:
            object.__setattr__(self, "bernoulli_rate", float(self.bernoulli_rate))

    @property
    def pool_k(self) -> int:
        """Exposure slots per step dealt over the pool (all of them outside window designs)."""
        return self.pool_slots if self.assignment == "window" else self.exposure_slots

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; ``DesignConfig(**d)`` rebuilds it."""
        return asdict(self)
