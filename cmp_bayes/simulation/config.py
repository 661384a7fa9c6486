"""``SimulationConfig``: the simulator's knobs, validated, serialisable, and named presets."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from cmp_bayes.errors import ConfigError

GROUP_NAMES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial", "preference")


@dataclass(frozen=True)
class SimulationConfig:
    """Knobs of the simulator (TOML/JSON friendly: plain numbers and strings).

    Attributes
    ----------
    memories : int
        Store size (``shared``) or haystack size per query (``per-query``).
    queries : int
        Distinct queries.
    repeats : int
        How often each query is asked; ``steps = queries * repeats``.
    slots : int
        Context slots ``B`` per step.
    exposure_slots : int
        Exposure slots ``k`` of the ``B``.
    assignment : {"balanced", "bernoulli", "window"}
        How exposures are dealt (:class:`~cmp_bayes.design.scheduler.ExposureScheduler`);
        "window": the spec's window design (``window``, ``pool_slots``).
    window : int or None
        ``W >= 1``, ranks below the retriever's cut a window design draws from
        (``assignment="window"`` only).
    pool_slots : int
        ``j`` in ``[0, exposure_slots]``: a window design's exposure slots per step
        dealt balanced over the pool (``assignment="window"`` only).
    pool_share : float
        Share of the exposable memories put in the exposure pool.
    lexical_gap : float
        Share of required memories the retriever scores mid-list (rarely retrieved).
    near_miss : float
        Share of those lexical-gap memories the retriever ranks just below its
        cut instead of mid-list: a log-uniform rank between the cut
        (``slots - exposure_slots``) and the bottom of the store, the shape of
        BM25's missed evidence on LoCoMo (0 keeps every gap memory mid-list).
    required_per_query : int
        Required memories per query (at least 1).
    effect_size : float
        Mean effect of a required memory on the success probability.
    harmful_share : float
        Share of non-required memories with a negative effect.
    null_sd : float
        Sd of the small effects of all other memories.
    noise : float
        Sd of the step-level shock of the success probability.
    outcomes : {"binary", "fractional"}
        Outcome scale: success or failure, or a score in [0, 1].
    concentration : float
        Beta concentration for fractional outcomes.
    store : {"shared", "per-query"}
        One store for all queries, or a haystack per query.
    churn : float
        Share of memories (shared store) created and deleted during the run.
    ranking_depth : int
        Length of the logged ranking (0 = the whole store); a window design logs
        at least ``slots - exposure_slots + window`` ranks, as the spec requires.
    groups : int
        Number of query groups (kinds); group shifts the base success rate.
    base_rate : float
        Mean success probability without any memory.
    """

    memories: int = 40
    queries: int = 8
    repeats: int = 25
    slots: int = 6
    exposure_slots: int = 2
    assignment: Literal["balanced", "bernoulli", "window"] = "balanced"
    window: int | None = None
    pool_slots: int = 0
    pool_share: float = 1.0
    lexical_gap: float = 0.5
    near_miss: float = 0.0
    required_per_query: int = 2
    effect_size: float = 0.25
    harmful_share: float = 0.05
    null_sd: float = 0.01
    noise: float = 0.0
    outcomes: Literal["binary", "fractional"] = "binary"
    concentration: float = 20.0
    store: Literal["shared", "per-query"] = "shared"
    churn: float = 0.0
    ranking_depth: int = 50
    groups: int = 3
    base_rate: float = 0.3

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ConfigError(f"SimulationConfig: {msg}")

        need(self.memories >= 1 and self.queries >= 1 and self.repeats >= 1, "memories, queries, repeats must be >= 1")
        need(self.slots >= 1 and 0 <= self.exposure_slots <= self.slots, "need 1 <= slots and 0 <= exposure_slots <= slots")
        need(self.assignment in ("balanced", "bernoulli", "window"),
             f"assignment must be 'balanced', 'bernoulli' or 'window', got {self.assignment!r}")
        if self.assignment == "window":
            need(_is_int(self.window) and self.window >= 1, f"window must be an integer >= 1, got {self.window!r}")
            need(self.exposure_slots >= 1, "a window design (assignment='window') needs exposure_slots >= 1")
            need(_is_int(self.pool_slots) and 0 <= self.pool_slots <= self.exposure_slots,
                 f"pool_slots must be an integer in [0, exposure_slots={self.exposure_slots}], "
                 f"got {self.pool_slots!r}")
        else:
            need(self.window is None, "window is for assignment='window' only")
            need(self.pool_slots == 0, "pool_slots is for assignment='window' only")
        need(self.store in ("shared", "per-query"), "store must be 'shared' or 'per-query'")
        need(self.outcomes in ("binary", "fractional"), "outcomes must be 'binary' or 'fractional'")
        for name in ("pool_share", "lexical_gap", "near_miss", "harmful_share", "churn"):
            need(0.0 <= getattr(self, name) <= 1.0, f"{name} must be in [0, 1]")
        need(1 <= self.required_per_query <= self.memories, "required_per_query must be in [1, memories]")
        need(self.noise >= 0 and self.null_sd >= 0 and self.concentration > 0, "noise, null_sd >= 0, concentration > 0")
        need(1 <= self.groups <= len(GROUP_NAMES), f"groups must be in [1, {len(GROUP_NAMES)}]")
        need(self.ranking_depth >= 0, "ranking_depth must be >= 0")
        need(self.store == "shared" or self.churn == 0, "churn applies to a shared store only")
        # plain ints, so to_dict stays JSON-serialisable whatever integer type was passed
        if self.window is not None:
            object.__setattr__(self, "window", int(self.window))
        object.__setattr__(self, "pool_slots", int(self.pool_slots))

    @property
    def window_slots(self) -> int:
        """Exposure slots per step drawn from the step's window (``k - j``; 0 outside window designs)."""
        return self.exposure_slots - self.pool_slots if self.assignment == "window" else 0

    @property
    def steps(self) -> int:
        """Number of steps, ``queries * repeats``."""
        return self.queries * self.repeats

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (``window`` and ``pool_slots`` only in window designs).

        Outside window designs those two are at their defaults and left out (as is
        ``near_miss`` at 0), so
        the ``simulation.json`` of a log simulated before window designs existed
        (the bundled example) is written byte for byte as it was.
        """
        out = dataclasses.asdict(self)
        if self.assignment != "window":
            del out["window"], out["pool_slots"]
        if self.near_miss == 0:
            del out["near_miss"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimulationConfig:
        """Build from a dict (unknown keys are an error)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"SimulationConfig: unknown field(s) {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SimulationConfig:
        """A named preset (:data:`cmp_bayes.simulation.presets.PRESETS`) with overrides."""
        from cmp_bayes.simulation.presets import PRESETS

        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})


def _is_int(value: Any) -> TypeGuard[int]:
    # numpy integers pass too; they compare and count as int does
    # bool is an int subclass; a flag or JSON true must not pass as a window of 1
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
