"""The measured reader: a reader curve fitted to real reader calls, used in place of the hand-picked gain.

:func:`fit_reader_curve` fits, to the calls of
:mod:`cmp_bayes.replicate.reader_calibration`, a logistic model of the
reader's score ``y_i`` in [0, 1]:

    logit mu_i = alpha + sigma_q z_q + beta_share * share_i
                 + beta_slots * (B_i - B_ref) + beta_position * (position_i - 0.5) * [e_i > 0]
    z_q ~ Normal(0, 1)  (one per question: how answerable it is)

and, with ``question_slopes=True``, a per-question share slope as well:
``beta_share + sigma_share w_q``, ``w_q ~ Normal(0, 1)``, ``sigma_share ~
HalfNormal(1.5)`` (some questions use their evidence fully, others not at all)

with the fractional-logit (Bernoulli quasi-) likelihood
``sum_i y_i log mu_i + (1 - y_i) log(1 - mu_i)``, which is the Bernoulli
likelihood itself for binary outcomes and, for fractional scores, has the right
mean (Papke & Wooldridge 1996); since a score in [0, 1] has at most the
Bernoulli's variance, its intervals are if anything wide. Priors: ``alpha ~
N(-1.5, 1.5)``, ``beta_share ~ N(0, 2.5)``, ``beta_slots ~ N(0, 0.5)``,
``beta_position ~ N(0, 2)``, ``sigma_q ~ HalfNormal(1.5)``. ``B_ref`` is the
median ``B`` of the calls; ``position`` is the evidence's mean slot scaled to
[0, 1] (0 first).

The published curve (:attr:`ReaderCurve.curve`) is the mean score over
questions, ``E_z[expit(...)]`` at the middle position, per ``B`` and share,
with 90% intervals over the posterior draws.

:class:`MeasuredReader` is the semi-synthetic reader the curve defines: each
question draws ``z_q``, each step succeeds with probability ``mu_t`` from its
evidence share, the experiment's ``B`` and the evidence's position in the
step's context, at the posterior means of the parameters. Results with it
are still **semi-synthetic**: no text is read.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.errors import ConfigError

#: The model's coefficients, in the order they are reported.
COEFFICIENTS: tuple[str, ...] = ("alpha", "beta_share", "beta_slots", "beta_position", "sigma_q")

#: Coefficients only some curves have (``question_slopes=True``); absent means 0.
OPTIONAL_COEFFICIENTS: tuple[str, ...] = ("sigma_share",)

#: Evidence shares at which the curve is tabulated.
SHARE_GRID: tuple[float, ...] = tuple(round(x, 2) for x in np.linspace(0.0, 1.0, 11))

def _normal_nodes(n: int = 64) -> np.ndarray:
    """Standard normal quantiles at (i + 0.5) / n: the average over questions without random numbers."""
    from scipy.stats import norm

    return np.asarray(norm.ppf((np.arange(n) + 0.5) / n))


@dataclass(frozen=True)
class ReaderCurve:
    """A fitted reader curve (module docstring); JSON-ready with :meth:`to_dict`.

    Attributes
    ----------
    benchmark : str
        The dataset the calls came from.
    reader : str
        The text reader's name (``"llm:<model>"``).
    outcome : {"fractional", "binary"}
        The outcome form fitted.
    calls, questions : int
        Calibration calls and distinct questions.
    ref_slots : int
        ``B_ref``.
    slots : list of int
        The context sizes the calls used.
    coefficients : dict
        Name (:data:`COEFFICIENTS`) -> ``{"mean", "low", "high"}`` (90% interval).
    curve : list of dict
        ``{"slots", "share", "mean", "low", "high"}`` rows: the mean score over questions.
    empirical : list of dict
        ``{"slots", "evidence_in_context", "share", "calls", "mean_score"}``: the raw means.
    fit_health : dict
        ``max_rhat``, ``divergences``.
    """

    benchmark: str
    reader: str
    outcome: str
    calls: int
    questions: int
    ref_slots: int
    slots: list[int]
    coefficients: dict[str, dict[str, float]]
    curve: list[dict[str, float]] = field(default_factory=list)
    empirical: list[dict[str, Any]] = field(default_factory=list)
    fit_health: dict[str, Any] = field(default_factory=dict)

    def point(self) -> dict[str, float]:
        """Posterior means of the coefficients, plus ``ref_slots``."""
        names = [*COEFFICIENTS, *(k for k in OPTIONAL_COEFFICIENTS if k in self.coefficients)]
        return {k: float(self.coefficients[k]["mean"]) for k in names} | {"ref_slots": float(self.ref_slots)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "reader curve") -> ReaderCurve:
        """From :meth:`to_dict`'s output; ConfigError naming ``source`` and the field otherwise."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
        missing = [f for f in ("benchmark", "reader", "outcome", "calls", "questions", "ref_slots", "slots",
                               "coefficients") if f not in data]
        if missing:
            raise ConfigError(f"{source}: missing field(s) {missing}")
        coef = data["coefficients"]
        for name in (*COEFFICIENTS, *(k for k in OPTIONAL_COEFFICIENTS if isinstance(coef, dict) and k in coef)):
            value = coef.get(name, {}).get("mean") if isinstance(coef, dict) else None
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{source}: field coefficients.{name}.mean must be a finite number, got {value!r}")
        known = {f for f in cls.__dataclass_fields__}
        extra = sorted(set(data) - known)
        if extra:
            raise ConfigError(f"{source}: unknown field(s) {extra}")
        return cls(**data)

    @classmethod
    def read(cls, path: str | Path) -> ReaderCurve:
        """Read a curve JSON written by ``cmp-bayes replicate calibrate-reader -o``."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{p}: no such reader curve file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: line {exc.lineno}: not JSON ({exc.msg})") from None
        return cls.from_dict(data.get("curve", data) if isinstance(data, dict) else data, source=str(p))

    def describe(self) -> str:
        """One line: the curve's point estimates."""
        c = self.point()
        slope = f" + {c['sigma_share']:.2f} w_q" if "sigma_share" in c else ""
        return (f"measured reader ({self.reader} on {self.benchmark}, {self.calls} calls, {self.outcome}): "
                f"logit p = {c['alpha']:.2f} + {c['sigma_q']:.2f} z_q + ({c['beta_share']:.2f}{slope}) * share "
                f"+ {c['beta_slots']:.2f} * (B - {self.ref_slots}) + {c['beta_position']:.2f} * (position - 0.5)")


def fit_reader_curve(
    calls: pd.DataFrame,
    benchmark: str,
    reader: str,
    outcome: str = "fractional",
    draws: int = 500,
    tune: int = 500,
    chains: int = 2,
    seed: int = 0,
    question_slopes: bool = False,
) -> ReaderCurve:
    """Fit the reader curve (module docstring) to calibration calls.

    Parameters
    ----------
    calls : pandas.DataFrame
        :func:`~cmp_bayes.replicate.reader_calibration.run_calibration`'s table:
        ``query_id``, ``slots``, ``evidence_in_context``, ``share``, ``position``, ``score``.
    benchmark, reader : str
        Recorded in the curve.
    outcome : {"fractional", "binary"}
        Fit the scores, or their binary form (``score >= 0.5``).
    draws, tune, chains, seed : int
        The sampler (nutpie).
    question_slopes : bool
        Also fit a per-question share slope (``sigma_share``, module docstring).

    Returns
    -------
    ReaderCurve
    """
    import pymc as pm
    import pytensor.tensor as pt

    from cmp_bayes.model.config import SamplerConfig
    from cmp_bayes.model.sampling import sample_hyper
    from cmp_bayes.replicate.answer_scoring import binary_outcome
    from cmp_bayes.replicate.reading import check_outcome_form

    check_outcome_form(outcome)
    if len(calls) < 10:
        raise ConfigError(f"a reader curve needs at least 10 calls, got {len(calls)}")
    y = calls["score"].to_numpy(np.float64)
    if outcome == "binary":
        y = np.array([binary_outcome(v) for v in y], dtype=np.float64)
    qidx, quniq = pd.factorize(calls["query_id"].astype(str))
    b = calls["slots"].to_numpy(np.float64)
    ref = int(np.median(calls["slots"]))
    has = calls["evidence_in_context"].to_numpy() > 0
    pos = np.where(has, calls["position"].fillna(0.5).to_numpy(np.float64) - 0.5, 0.0)
    share = calls["share"].to_numpy(np.float64)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", -1.5, 1.5)
        beta_share = pm.Normal("beta_share", 0.0, 2.5)
        beta_slots = pm.Normal("beta_slots", 0.0, 0.5)
        beta_position = pm.Normal("beta_position", 0.0, 2.0)
        sigma_q = pm.HalfNormal("sigma_q", 1.5)
        z = pm.Normal("z", 0.0, 1.0, shape=len(quniq))
        eta = alpha + sigma_q * z[qidx] + beta_share * share + beta_slots * (b - ref) + beta_position * pos
        if question_slopes:
            sigma_share = pm.HalfNormal("sigma_share", 1.5)
            w = pm.Normal("w", 0.0, 1.0, shape=len(quniq))
            eta = eta + sigma_share * w[qidx] * share
        # fractional logit: y log mu + (1 - y) log(1 - mu), in the log-sigmoid form that cannot overflow
        pm.Potential("quasi_loglik", pt.sum(y * -pt.softplus(-eta) + (1.0 - y) * -pt.softplus(eta)))
    post, stats = sample_hyper(model, SamplerConfig(draws=draws, tune=tune, chains=chains, seed=seed,
                                                    progressbar=False))
    from cmp_bayes.constants import CI_PROB

    tail = (1.0 - CI_PROB) / 2.0
    names = [*COEFFICIENTS, *(["sigma_share"] if question_slopes else [])]
    flat = {k: post[k].to_numpy().reshape(-1) for k in names}
    coefficients = {k: {"mean": float(v.mean()), "low": float(np.quantile(v, tail)), "high": float(np.quantile(v, 1 - tail))}
                    for k, v in flat.items()}
    nodes = _normal_nodes()
    slope_sd = flat.get("sigma_share", np.zeros_like(flat["alpha"]))
    # with slopes, average over a grid of (z, w) pairs: the two question effects are independent
    z_n, w_n = (np.repeat(_normal_nodes(24), 24), np.tile(_normal_nodes(24), 24)) if question_slopes else (nodes, 0 * nodes)
    sizes = sorted({int(x) for x in calls["slots"]})
    curve = []
    for bb in sizes:
        for s in SHARE_GRID:
            eta_d = flat["alpha"] + flat["beta_share"] * s + flat["beta_slots"] * (bb - ref)
            mu = _expit(eta_d[:, None] + flat["sigma_q"][:, None] * z_n[None, :]
                        + slope_sd[:, None] * w_n[None, :] * s).mean(axis=1)
            curve.append({"slots": bb, "share": s, "mean": float(mu.mean()),
                          "low": float(np.quantile(mu, tail)), "high": float(np.quantile(mu, 1 - tail))})
    emp = (calls.assign(y=y).groupby(["slots", "evidence_in_context"], as_index=False)
           .agg(share=("share", "mean"), calls=("y", "size"), mean_score=("y", "mean")))
    from cmp_bayes.posterior.health import rhat

    r = rhat(post[names])
    health = {"max_rhat": float(max(float(r[k].max()) for k in names)),
              "divergences": int(stats["diverging"].sum()) if "diverging" in stats else 0}
    return ReaderCurve(benchmark, reader, outcome, int(len(calls)), int(len(quniq)), ref, sizes, coefficients,
                       curve, json.loads(emp.to_json(orient="records")), health)


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class MeasuredReader:
    """The semi-synthetic reader a :class:`ReaderCurve` defines (module docstring).

    Duck-types :class:`~cmp_bayes.replicate.reader.ReaderModel` (``base_rates``,
    ``probability``, ``outcomes``, ``describe``, ``to_dict``), with the
    question effects ``z_q sigma_q`` (logit scale) as the "base rates".

    Parameters
    ----------
    params : dict
        :meth:`ReaderCurve.point`: the coefficients and ``ref_slots``.
    slots : int
        The experiment's ``B``.
    source : str
        What the curve was fitted on (for :meth:`describe`).
    """

    params: dict[str, float]
    slots: int
    source: str = ""

    @property
    def slopes(self) -> bool:
        """Whether the curve has per-question share slopes (``sigma_share > 0``)."""
        return self.params.get("sigma_share", 0.0) > 0

    def base_rates(self, n_queries: int, rng: np.random.Generator) -> np.ndarray:
        """Per-question logit effects: ``sigma_q z_q``, shape ``(n_queries,)``; with per-question
        slopes, shape ``(n_queries, 2)``: ``(sigma_q z_q, sigma_share w_q)``."""
        if self.slopes:
            return rng.standard_normal((n_queries, 2)) * np.array([self.params["sigma_q"], self.params["sigma_share"]])
        return self.params["sigma_q"] * rng.standard_normal(n_queries)

    def probability(self, base: np.ndarray, share: np.ndarray, noise: np.ndarray | None = None,
                    position: np.ndarray | None = None) -> np.ndarray:
        """Success probability per step; ``position`` (evidence's mean slot in [0, 1]) defaults to the middle.

        ``noise`` is ignored: the question effects are the measured heterogeneity.
        """
        p = self.params
        base = np.asarray(base, dtype=np.float64)
        slope: np.ndarray | float = 0.0
        if self.slopes:
            base, slope = base[..., 0], base[..., 1]
        eta = (p["alpha"] + base + (p["beta_share"] + slope) * np.asarray(share)
               + p["beta_slots"] * (self.slots - p["ref_slots"]))
        if position is not None:
            pos = np.where(np.asarray(share) > 0, np.nan_to_num(np.asarray(position, dtype=np.float64), nan=0.5) - 0.5, 0.0)
            eta = eta + p["beta_position"] * pos
        return _expit(eta)

    def outcomes(self, base: np.ndarray, share: np.ndarray, rng: np.random.Generator,
                 position: np.ndarray | None = None) -> np.ndarray:
        """Binary outcomes (float64 0/1) with the measured success probability."""
        return (rng.random(np.shape(share)) < self.probability(base, share, position=position)).astype(np.float64)

    def describe(self) -> str:
        """One line stating the reader, for reports."""
        p = self.params
        slope = f" + N(0, {p['sigma_share']:.2f}^2)_q" if self.slopes else ""
        return (f"semi-synthetic measured reader{f' ({self.source})' if self.source else ''}: "
                f"p = expit({p['alpha']:.2f} + N(0, {p['sigma_q']:.2f}^2)_q + ({p['beta_share']:.2f}{slope}) * evidence share "
                f"+ {p['beta_slots']:.2f} * (B - {p['ref_slots']:g}) + {p['beta_position']:.2f} * (position - 0.5)), B = {self.slots}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return {"measured": dict(self.params), "slots": self.slots, "source": self.source}
