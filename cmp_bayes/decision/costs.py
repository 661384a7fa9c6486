"""Costs and guards of the retain / forget / defer decision.

A :class:`Costs` holds everything :func:`cmp_bayes.decision.rule.decide` needs
besides the posterior: the two error costs of the asymmetric loss, the utility
threshold that defines a "useful" memory, the estimand it applies to, an
optional capacity, and the guards that stand between the Bayes rule and an
irreversible forget (least exposures, an optional evidence floor, sampler
health). A user writes it as TOML::

    # costs.toml (keys at the top level or under a [costs] table)
    forget_cost = 20.0      # forgetting a useful memory (irreversible)
    retain_cost = 1.0       # keeping a useless one for another period
    threshold = 0.05        # "useful" = estimand > 0.05
    estimand = "tau"        # or "utility" (= rho * tau), "relevant", "workload"
    capacity = 5000         # keep at most 5000 memories (omit: no limit)
    min_exposures = 3       # exposures a memory needs before it may be forgotten
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Final

from cmp_bayes.constants import MAX_DIVERGENCE_SHARE, RHAT_CHAINWISE_MAX, RHAT_MAX
from cmp_bayes.errors import ConfigError

#: Estimands a threshold may apply to.
ESTIMANDS: Final[tuple[str, ...]] = ("tau", "utility", "relevant", "workload")
#: What decide does with a prior-driven forget (see ``Costs.prior_driven``).
PRIOR_DRIVEN: Final[tuple[str, ...]] = ("defer", "defer_few", "allow")
#: What decide does with a forget on a shared-store average (see ``Costs.store_average``).
STORE_AVERAGE: Final[tuple[str, ...]] = ("defer", "allow")
#: Open interval a threshold must lie in, per estimand. tau is a difference of two
#: expected outcomes in [0, 1] (binary or fractional), so it lies in [-1, 1]; utility
#: is rho * tau with rho a retrieval probability in [0, 1], so it lies in [-1, 1] too.
#: A threshold at or beyond an end makes "useful" certain or impossible: the rule
#: would then forget every identified memory (or none) whatever the data say.
#: ``relevant`` (delta_m, a memory's tau when relevant) is a tau; ``workload``
#: (E_q[rho tau], a weighted mean of utilities) is a utility: both in [-1, 1].
ESTIMAND_RANGE: Final[dict[str, tuple[float, float]]] = {
    "tau": (-1.0, 1.0), "utility": (-1.0, 1.0), "relevant": (-1.0, 1.0), "workload": (-1.0, 1.0),
}


@dataclass(frozen=True)
class Costs:
    """Costs and guards of the decision rule (all costs in the same, arbitrary unit).

    Parameters
    ----------
    forget_cost : float
        Cost of forgetting a memory that is useful (estimand > ``threshold``).
        Irreversible: a forgotten memory can never be re-estimated. > 0.
    retain_cost : float
        Cost of retaining a memory that is useless (estimand <= ``threshold``)
        for one more decision period. Reversible. > 0. The rule depends on the
        costs only through ``retain_cost / (forget_cost + retain_cost)``.
    threshold : float
        Utility threshold defining "useful", on the scale of the estimand: for
        ``tau``, a change in the success probability (outcome units, in
        [-1, 1]); the default 0.05 means "raises the expected outcome by more
        than 5 points when in the context". With ``estimand="utility"``
        (= rho * tau, rho a retrieval probability) choose a smaller value.
        Must lie in the open interval (-1, 1) (:data:`ESTIMAND_RANGE`): both
        estimands lie in [-1, 1] (tau is a difference of expected outcomes in
        [0, 1], and rho in [0, 1] only shrinks it), so a threshold at or past
        an end would make every identified memory useless (or none) before
        any data are read.
    estimand : {"tau", "utility", "relevant", "workload"}
        Which posterior quantity the threshold applies to: the conditional
        utility ``tau`` (default: what the memory does when read; in a
        per-query or gated posterior its memory-level ``tau_memory``),
        ``utility = rho * tau`` (what it does given how often it is
        retrieved), ``relevant`` (gated posteriors: ``tau_relevant``, what it
        does when read for a question it is relevant to: "useful when
        relevant"), or ``workload`` (per-query or gated posteriors: the
        expected contribution over a query mix, ``E_q[rho(m, q) tau(m, q)]``,
        :mod:`cmp_bayes.decision.workload`; the mix is ``decide(workload=...)``,
        the log's by default). ``workload`` is a utility: choose a smaller
        threshold than for ``tau``.
    capacity : int or None
        Keep at most this many memories (retained plus deferred). ``None``: no
        limit.
    min_exposures : int
        Least number of randomized exposures before a memory may be forgotten.
        At least 1 always: a memory never exposed has no design-identified
        utility (DESIGN.md, "Identification status").
    min_mean_shift : float
        Optional evidence floor: least shift of the posterior mean of ``tau``
        from its prior mean, in prior sds (the ``mean_shift`` of the
        posterior's ``identification`` group), before a forget. 0 (default)
        turns it off: a useless memory whose data agree with the prior's null
        component moves the mean little, so a floor mostly blocks correct
        forgets; the status and ``min_exposures`` are the real guards.
    max_rhat : float
        Largest rank-normalized split R-hat (arviz_stats) allowed over the
        hyperparameters, and over the estimand of a memory about to be
        forgotten. Default 1.01, the threshold of Vehtari et al. (2021); on
        independent draws (2 chains x 1000) the largest R-hat over 10,000
        memories measured here was 1.007, so 1.01 refuses few sound forgets.
    max_rhat_chainwise : float
        A fit whose only failed check is a hyperparameter R-hat above ``max_rhat``
        but at most this (default 1.1) is not refused outright: each forget the
        rule would make must then hold in every chain, i.e. the share of the
        chain's draws with the estimand above ``threshold`` is below
        ``forget_below`` in each chain separately (the ``p_useful_chain_max``
        column), in place of the memory's own R-hat. Chains that disagree about
        a hyperparameter but agree that a memory is useless make the forget
        whichever of them is right. Divergences and R-hat above this still refuse
        every forget. At or below ``max_rhat``: the strict gate alone.
    prior_driven : {"defer", "defer_few", "allow"}
        What happens to a prior-driven forget: one the Bayes rule makes under the
        fitted prior but not under one of the stated alternative priors (null
        component half or twice as wide, twice as many memories that matter,
        useful effects half as large, a flatter fitted shape;
        :mod:`cmp_bayes.decision.sensitivity`).
        ``defer`` (default): every prior-driven forget waits; ``defer_few``: it
        waits when the memory has at most 2 exposures, and is made (and flagged
        ``prior_driven``) otherwise; ``allow``: flagged only (for studies: it
        lets a forget on 1-2 exposures rest on the prior).
        Applies to tau decisions on posteriors that carry the check (fit writes
        it for memory-level posteriors).
    store_average : {"defer", "allow"}
        What happens to a forget on a gated (shared-store) posterior's ``tau`` or
        ``utility``: each averages a memory's effect over the log's questions, so a
        memory that serves one of 200 questions scores about delta / 200, and a
        threshold on it forgets memories whether or not they serve a question (all
        ten LoCoMo conversations at 0.02: 5,854 of 5,882, at the store's share of
        required ones; the Mem0 store: all 5,882). ``defer`` (default): such a
        forget waits, with a reason that names ``estimand="relevant"``; ``allow``:
        made, with a ``DecisionWarning`` (the user's criterion is the store average).
        Other posteriors and estimands: no effect.
    max_divergence_share : float
        Largest share of post-warmup draws that may be divergent before every
        forget is refused. Default 0: any divergence means the sampler may
        have missed part of the posterior, and forgetting is irreversible.
    """

    forget_cost: float = 20.0
    retain_cost: float = 1.0
    threshold: float = 0.05
    estimand: str = "tau"
    capacity: int | None = None
    min_exposures: int = 1
    min_mean_shift: float = 0.0
    max_rhat: float = RHAT_MAX
    max_divergence_share: float = MAX_DIVERGENCE_SHARE
    max_rhat_chainwise: float = RHAT_CHAINWISE_MAX
    prior_driven: str = "defer"
    store_average: str = "defer"

    def __post_init__(self) -> None:
        # each check raises a one-line ConfigError naming the field, its value and
        # the allowed range (from_dict / from_toml put the file in front)
        _positive_float(self, "forget_cost")
        _positive_float(self, "retain_cost")
        if self.estimand not in ESTIMANDS:
            raise ConfigError(
                f"costs: estimand must be one of {', '.join(ESTIMANDS)}, got {self.estimand!r}"
            )
        _finite_float(self, "threshold")
        low, high = ESTIMAND_RANGE[self.estimand]
        if not low < self.threshold < high:
            raise ConfigError(
                f"costs: threshold must lie in ({low:g}, {high:g}) for estimand "
                f"{self.estimand!r} (a change in the success probability), got {self.threshold!r}"
            )
        if self.prior_driven not in PRIOR_DRIVEN:
            raise ConfigError(
                f"costs: prior_driven must be one of {', '.join(PRIOR_DRIVEN)}, got {self.prior_driven!r}"
            )
        if self.store_average not in STORE_AVERAGE:
            raise ConfigError(
                f"costs: store_average must be one of {', '.join(STORE_AVERAGE)}, got {self.store_average!r}"
            )
        if self.capacity is not None:
            _int_at_least(self, "capacity", 0)
        _int_at_least(self, "min_exposures", 1)
        _finite_float(self, "min_mean_shift")
        if self.min_mean_shift < 0:
            raise ConfigError(
                f"costs: min_mean_shift must be >= 0 (prior sds), got {self.min_mean_shift!r}"
            )
        _finite_float(self, "max_rhat")
        if self.max_rhat < 1.0:
            raise ConfigError(f"costs: max_rhat must be >= 1, got {self.max_rhat!r}")
        _finite_float(self, "max_rhat_chainwise")
        if self.max_rhat_chainwise < 1.0:
            raise ConfigError(f"costs: max_rhat_chainwise must be >= 1, got {self.max_rhat_chainwise!r}")
        _finite_float(self, "max_divergence_share")
        if not 0.0 <= self.max_divergence_share <= 1.0:
            raise ConfigError(
                "costs: max_divergence_share must be in [0, 1] (a share of draws), got "
                f"{self.max_divergence_share!r}"
            )
        for name in (
            "forget_cost", "retain_cost", "threshold", "min_mean_shift", "max_rhat",
            "max_rhat_chainwise", "max_divergence_share",
        ):
            # TOML and argparse may give ints; store floats so equal costs print alike
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def forget_below(self) -> float:
        """The P(useful) below which the Bayes rule forgets: r / (f + r)."""
        return self.retain_cost / (self.forget_cost + self.retain_cost)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (``capacity`` may be ``None``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "costs") -> Costs:
        """Build from a dict; unknown keys raise :class:`ConfigError` naming ``where``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
            )
        try:
            return cls(**data)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {str(exc).removeprefix('costs: ')}") from None

    @classmethod
    def from_toml(cls, path: str | Path) -> Costs:
        """Read costs from a TOML file (keys at the top level or under ``[costs]``).

        Raises
        ------
        ConfigError
            Unreadable TOML, an unknown key or an invalid value; the message
            names the file and the key.
        """
        path = Path(path)
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        if "costs" in data:
            table = data["costs"]
            extra = sorted(set(data) - {"costs"})
            if not isinstance(table, dict) or extra:
                raise ConfigError(
                    f"{path}: put every key under [costs] or none (found {extra[0] if extra else 'costs'!r})"
                )
            return cls.from_dict(table, where=f"{path} [costs]")
        return cls.from_dict(data, where=str(path))


def _finite_float(costs: Costs, name: str) -> None:
    value = getattr(costs, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"costs: {name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"costs: {name} must be finite, got {value!r}")


def _positive_float(costs: Costs, name: str) -> None:
    _finite_float(costs, name)
    if getattr(costs, name) <= 0:
        raise ConfigError(f"costs: {name} must be > 0, got {getattr(costs, name)!r}")


def _int_at_least(costs: Costs, name: str, low: int) -> None:
    value = getattr(costs, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"costs: {name} must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(f"costs: {name} must be >= {low}, got {value}")
