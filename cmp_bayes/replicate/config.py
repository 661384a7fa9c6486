"""Settings of the CMP experiment on real stores (:func:`~cmp_bayes.replicate.experiment.run_experiment`).

The model and the sampler are the package's own :class:`ModelConfig` and
:class:`SamplerConfig`, held whole rather than restated field by field, so every
setting of the fit can be chosen here and every one travels in the result JSON.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.replicate.reader import ReaderModel

if TYPE_CHECKING:
    from cmp_bayes.replicate.measured_reader import MeasuredReader

#: Label of every result on real stores with simulated answers.
LABEL = "semi-synthetic"

#: Label of results on real stores whose outcomes a text reader gave (an LLM read the contexts).
REAL_LABEL = "real-reader"

#: The experiment's sampler: half the package default (500 draws, 500 tuning steps,
#: 2 chains), no progress bar (it runs inside a batch of experiments).
EXPERIMENT_SAMPLER: SamplerConfig = SamplerConfig(draws=500, tune=500, chains=2, progressbar=False)

#: The exposure designs the experiment can lay out (``ExperimentConfig.assignment``).
ASSIGNMENTS: tuple[str, ...] = ("balanced", "window")

#: Fields of results written before the experiment held whole configs: field -> (config, field)
_FLAT_KEYS: dict[str, tuple[str, str]] = {
    "draws": ("sampler", "draws"),
    "tune": ("sampler", "tune"),
    "chains": ("sampler", "chains"),
    "rank_summary": ("model", "rank_summary"),
}


@dataclass(frozen=True)
class ExperimentConfig:
    """Settings of the CMP experiment on real stores.

    Attributes
    ----------
    slots, exposure_slots : int
        ``B`` and ``k``.
    exposures_per_memory : float
        Target exposures per pool memory (sets each store's steps).
    reader_gain, reader_noise : float
        :class:`ReaderModel` ``gain`` and ``noise``.
    seed : int
        Seed of everything random (query order, exposures, reader, bootstrap)
        and of the fit: it replaces ``sampler.seed``, so the experiment has one seed.
    fit : bool
        Fit the Bayesian model (the slow part).
    model : ModelConfig
        The model of the fit. Its ``rank_summary`` chooses the rank covariate:
        "best" for stores asked many questions (LoCoMo).
    sampler : SamplerConfig
        The sampler of the fit (default :data:`EXPERIMENT_SAMPLER`: 500 draws,
        500 tuning steps, 2 chains).
    n_boot : int
        Bootstrap draws of the AUC intervals.
    delete_fraction, evict_fraction : float
        Store randomization settings
        (:func:`~cmp_bayes.replicate.randomization.block_store_randomization`).
    n_perturbations : int
        Random deletions per store.
    per_query_fit : bool
        Also fit the per-query variant (``fit(log, by="query")``) and score its
        posterior mean of tau per (memory, question) pair (needs ``fit``).
    pair_model : {"normal", "gated"}
        The per-query fit's pair model (:attr:`ModelConfig.pair_model`):
        "gated", the relevance-gated pair model, also scores memories by its
        ``tau_relevant``, ``p_relevant_any`` and ``p_relevant_max`` (needs ``per_query_fit``).
    assignment : {"balanced", "window"}
        How the ``k`` exposure slots are dealt: balanced over each store's pool
        (the paper's design), or the spec's window design, whose ``k - j``
        window slots per step are drawn from the step's near misses (retriever
        ranks ``B - k .. B - k + W - 1`` for that step's question). Steps per
        store do not depend on it, so both designs spend the same number of
        exposure slots.
    window : int or None
        ``W >= 1``, window designs only.
    pool_slots : int
        ``j`` in ``[0, exposure_slots]``: a window design's exposure slots per
        step dealt balanced over the pool (window designs only).
    holdout : float
        Share of each store's questions held out as future questions, in
        ``[0, 1)``: ``round(holdout * Q)`` of a store's ``Q`` questions, at most
        ``Q - 1`` (a store keeps one asked question; a one-question store holds
        none out), drawn with the experiment's seed. The log holds only the
        asked questions' steps, rankings and labels; the experiment scores each
        method's memory ranking against the evidence of the held-out ones
        (:mod:`cmp_bayes.replicate.holdout`). 0 (default): every question is
        asked, the log and the result are today's.
    measured_reader : dict or None
        A measured reader curve's point estimates
        (:meth:`~cmp_bayes.replicate.measured_reader.ReaderCurve.point`, plus a
        ``source`` line saying what it was fitted on): the outcomes then come
        from :class:`~cmp_bayes.replicate.measured_reader.MeasuredReader`
        instead of the hand-picked ``reader_gain`` (which is then unused).
        None (default): the hand-picked :class:`ReaderModel`.
    deterministic_reader : bool
        Semi-synthetic readers only: a step that repeats an earlier step's
        question and context (the same memories in the same slots) gets that
        step's outcome, as an LLM at temperature 0 gives the same answer to
        the same prompt. False (default): every step is its own draw.
    """

    slots: int = 10
    exposure_slots: int = 2
    exposures_per_memory: float = 6.0
    reader_gain: float = 0.6
    reader_noise: float = 0.05
    seed: int = 0
    fit: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = EXPERIMENT_SAMPLER
    n_boot: int = 200
    delete_fraction: float = 0.1
    evict_fraction: float = 0.1
    n_perturbations: int = 20
    per_query_fit: bool = False
    pair_model: str = "normal"
    assignment: str = "balanced"
    window: int | None = None
    pool_slots: int = 0
    holdout: float = 0.0
    measured_reader: dict[str, Any] | None = None
    deterministic_reader: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig):
            raise ConfigError(f"model must be a ModelConfig, got {type(self.model).__name__}")
        if not isinstance(self.sampler, SamplerConfig):
            raise ConfigError(f"sampler must be a SamplerConfig, got {type(self.sampler).__name__}")
        if not (1 <= self.exposure_slots < self.slots):
            raise ConfigError(f"need 1 <= exposure_slots < slots, got k={self.exposure_slots}, B={self.slots}")
        if not self.exposures_per_memory > 0:
            raise ConfigError("exposures_per_memory must be > 0")
        if self.per_query_fit and not self.fit:
            raise ConfigError("per_query_fit needs fit (the per-query model is a second fit)")
        if self.pair_model not in ("normal", "gated"):
            raise ConfigError(f"pair_model must be 'normal' or 'gated', got {self.pair_model!r}")
        if self.pair_model != "normal" and not self.per_query_fit:
            raise ConfigError("pair_model applies to the per-query fit: it needs per_query_fit")
        self._check_design()
        if isinstance(self.holdout, bool) or not isinstance(self.holdout, numbers.Real) or not (
            0.0 <= float(self.holdout) < 1.0
        ):
            raise ConfigError(f"holdout must be a share in [0, 1), got {self.holdout!r}")
        object.__setattr__(self, "holdout", float(self.holdout))
        if self.measured_reader is not None:
            from cmp_bayes.replicate.measured_reader import COEFFICIENTS

            m = self.measured_reader
            bad = [k for k in (*COEFFICIENTS, "ref_slots") if not isinstance(m.get(k) if isinstance(m, dict) else None, numbers.Real)]
            if bad:
                raise ConfigError(f"measured_reader needs numbers for {bad}")
        if self.sampler.seed != self.seed:
            # frozen: the one seed is written into the sampler so the result JSON shows what ran
            object.__setattr__(self, "sampler", dataclasses.replace(self.sampler, seed=self.seed))

    def _check_design(self) -> None:
        if self.assignment not in ASSIGNMENTS:
            raise ConfigError(f"assignment must be one of {list(ASSIGNMENTS)}, got {self.assignment!r}")
        if self.assignment == "window":
            if not (_is_int(self.window) and self.window >= 1):
                raise ConfigError(f"a window design needs window >= 1 (an integer), got {self.window!r}")
            if not (_is_int(self.pool_slots) and 0 <= self.pool_slots <= self.exposure_slots):
                raise ConfigError(
                    f"pool_slots must be an integer in [0, exposure_slots={self.exposure_slots}], got {self.pool_slots!r}"
                )
            # plain ints, so to_dict stays JSON-ready whatever integer type was passed
            object.__setattr__(self, "window", int(self.window))
            object.__setattr__(self, "pool_slots", int(self.pool_slots))
        else:
            if self.window is not None:
                raise ConfigError("window is for assignment='window' only")
            if self.pool_slots != 0:
                raise ConfigError("pool_slots is for assignment='window' only")

    @property
    def reader(self) -> ReaderModel | MeasuredReader:
        """The semi-synthetic reader these settings describe: the measured one where given, else the hand-picked model."""
        if self.measured_reader is not None:
            from cmp_bayes.replicate.measured_reader import COEFFICIENTS, MeasuredReader

            m = self.measured_reader
            params = {k: float(m[k]) for k in (*COEFFICIENTS, "ref_slots")}
            if m.get("sigma_share") is not None:
                params["sigma_share"] = float(m["sigma_share"])
            return MeasuredReader(params, self.slots, str(m.get("source", "")))
        return ReaderModel(gain=self.reader_gain, noise=self.reader_noise)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``model`` and ``sampler`` are nested dicts of their fields."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["model"] = self.model.to_dict()
        out["sampler"] = self.sampler.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentConfig:
        """Build from :meth:`to_dict`'s output, or from a result written before the
        experiment held whole configs (flat ``draws``, ``tune``, ``chains``, ``rank_summary``).

        Raises
        ------
        ConfigError
            Unknown keys or invalid values.
        """
        data = dict(data)
        nested: dict[str, dict[str, Any]] = {
            "model": dict(data.pop("model", None) or {}),
            "sampler": dict(data.pop("sampler", None) or {}),
        }
        for key, (part, name) in _FLAT_KEYS.items():
            if key in data:
                nested[part][name] = data.pop(key)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"experiment config: unknown key(s) {unknown}")
        model = ModelConfig.from_dict(nested["model"], source="experiment config [model]")
        sampler = SamplerConfig.from_dict(
            {**EXPERIMENT_SAMPLER.to_dict(), **nested["sampler"]}, source="experiment config [sampler]"
        )
        return cls(**data, model=model, sampler=sampler)


def _is_int(value: Any) -> TypeGuard[int]:
    # bool is an int subclass; JSON true must not pass as a window of 1
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
