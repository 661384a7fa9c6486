"""What the hierarchical model is (``ModelConfig``) and how it is fitted (``SamplerConfig``).

Both are plain dataclasses, JSON-serialisable (they travel as root attributes
of every saved posterior) and loadable from a TOML file a user writes::

    [model]
    grid_size = 121
    use_rank = true

    [sampler]
    sampler = "nutpie"
    draws = 1000

The PyMC graph is built from a ``ModelConfig`` by :mod:`cmp_bayes.model.build`;
nothing here imports PyMC, so another backend could read the same description.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cmp_bayes.errors import ConfigError, PosteriorError

if TYPE_CHECKING:
    import xarray as xr

SAMPLERS: tuple[str, ...] = ("nutpie", "pymc", "numpyro", "advi")
#: The least target acceptance of fit attempt 1, 2, 3 (and later) of the retry schedule.
_RETRY_TARGET_ACCEPT: tuple[float, ...] = (0.0, 0.98, 0.99)
#: Tuning steps a retry doubles at least (tune=0 would otherwise stay 0).
_MIN_RETRY_TUNE: int = 200


@dataclass(frozen=True)
class ModelConfig:
    """The model's description: grid, likelihood and priors (see docs/model.md).

    Attributes
    ----------
    grid_size : int
        Number of quadrature points G of the tau grid on [-1, 1] (odd, so 0 is a point).
    grid_curvature : float
        The grid is ``sinh(c * u) / sinh(c)`` for u evenly spaced on [-1, 1]; larger c
        puts more points near 0 (c = 5, G = 121: spacing 0.0011 at 0, 0.08 at +-1).
    baseline_nodes : int
        Quadrature nodes K over the control-arm baseline b_m (its Beta posterior);
        binary outcomes only.
    pattern_resolution : float
        Memories whose arms give the same likelihood up to this resolution of the
        control-arm mean share one likelihood row (cost per gradient stops growing
        with M); 0 = only identical arms (exact). See ``grid.likelihood_patterns``.
    effect_bound : {"truncate", "clip"}
        How the exposed-arm likelihood treats effects that would take the exposed
        arm's expected outcome b + tau outside [0, 1]. "truncate" (default): they are
        impossible, and each exposed memory's prior of (b, tau) is the mixture
        restricted to b + tau in [0, 1] (normalised). "clip": b + tau is clipped, so
        every tau above 1 - b fits the data as well as 1 - b does (the earlier model;
        its posterior mean ranked memories of high-baseline queries too high; see
        docs/model.md). The per-query variant's pair likelihoods always clip. The
        gated pair model follows this setting but does not renormalise its
        truncated prior: a query whose controls always succeed leaves no room for
        a large effect, and its pairs count as evidence against one (clipped, on
        LoCoMo, they put the null at -0.10 and called a third of pairs relevant).
    use_rank : bool
        Let the mixture weights (and retrievability) depend on the retriever's rank
        covariates (log1p of the memory's rank summary, never-ranked indicator) when
        the log has rankings.
    rank_summary : {"median", "best"}
        Which 0-based rank of a memory over the logged rankings the rank covariate
        uses. "median" (default; what the simulator validation used) suits stores
        asked one question, or questions that all concern every memory. "best" (the
        smallest rank) suits stores asked many unrelated questions: a memory matters
        if it is near the top for *some* question, and its median over unrelated
        questions measures its text (length, shared names), not its use. On the ten
        LoCoMo conversations with BM25 the median ranks evidence turns *below* the
        others (AUC 0.27-0.45), the best rank above them (0.61-0.75); see
        reports/replication/README.md. Where each memory is ranked for one question
        the two are equal.
    use_groups : bool
        Add hierarchical group effects (per memory's main query group) when the log has
        at least two groups.
    learn_null_mean : bool
        Learn the null component's location (hyperparameter ``tau_null_mean``)
        instead of fixing it at 0. On by default since the robustness study
        (reports/robustness/comparison.md); see null_mean.
    null_mean : tuple of float
        With ``learn_null_mean``: Normal prior (mean, sd) of the null component's
        location (outcome units), truncated to (-0.1, 0.1). Default (0, 0.03). A memory that does nothing is not at exactly 0 under the
        design contrast: exposed, it takes a slot another memory would have filled,
        so its tau is minus the average effect of what it displaces (-0.04 in a
        store where 10% of memories add 0.4), and a distracting store can push the
        null further down. Fixed at 0, that shift had to be carried by the
        "hurts" component (fits with a third of the memories "harmful" and
        chains that disagreed on its weights). On four logs of reports/robustness
        that fixed the failing R-hat (weight_coef 1.42 and 1.59 -> below 1.01); on
        our own simulator it widens the null memories' 90% intervals (coverage
        0.92 -> 0.94 in tests/test_model.py, at the edge of its band). The study
        measured it together with the g-model, the default beside it.
    prior_family : {"mixture", "gmodel"}
        The shape of the effect distribution (docs/model.md, "The flexible prior").
        "gmodel" (default since issue 15's robustness study,
        reports/robustness/comparison.md): a log-spline density over the grid
        cells whose shape is fitted (Efron's g-modeling, Biometrika 2016): g(cell) ∝ exp(Q alpha), Q a cubic B-spline
        basis over the cell index with ``spline_df`` functions (the constant
        direction removed: it cancels in the normalisation), alpha ~
        Normal(0, ``spline_coef_sd``) (the penalty; alpha = 0 is uniform over the
        cells). "helps" is g restricted to tau > 0, "hurts" g restricted to
        tau < 0, "null" is ``gmodel_null``; the weights stay a softmax of the rank
        covariates and group effects, as in the mixture. "mixture": the three
        Normal components below (the default before; with ``learn_null_mean=False``
        it is exactly the earlier model).
    spline_df : int
        gmodel only: B-spline basis functions over the cell index (>= 4). The
        default grid's cells are narrow near 0, so the knots of the default 8 fall
        near tau = 0, +-0.03, +-0.11, +-0.47 and +-1: fine where effects are small.
    spline_coef_sd : float
        gmodel only: sd of the Normal prior of each spline coefficient (log-density units).
    gmodel_null : {"normal", "atom"}
        gmodel only: the null component. "normal" (default): the mixture's
        Normal(0, s0) null (``null_sd``; its location learned with
        ``learn_null_mean``). "atom": a point mass at tau = 0 (the grid's middle
        cell): right only where useless memories do exactly nothing; on a log whose
        null effects spread with sd 0.02 (reports/robustness, spread-small seed 3)
        it covered 5% of the true taus and forgot nearly every memory.
    null_sd : tuple of float
        LogNormal prior (median, log-sd) of the null component's sd (outcome units).
        Default (0.015, 0.3): "does nothing" means an effect of a point or two on the
        success rate (95% prior range of the sd 0.008-0.027). It must be informative:
        with a handful of binary exposures per memory the data cannot tell a null sd
        of 0.01 from 0.03 (see docs/model.md, "Why the priors are informative").
    help_mean, harm_mean : tuple of float
        LogNormal prior (median, log-sd) of the location of the helpful component
        (tau > 0) and of the magnitude of the harmful component (tau < 0, centred at
        minus it). Positive by construction, so "helps" and "hurts" stay separated from
        "null": a memory that matters moves the success rate by tens of points
        (defaults 0.2 (95%: 0.09-0.44) and 0.1 (0.04-0.27)).
    help_sd, harm_sd : tuple of float
        LogNormal prior (median, log-sd) of those components' scales.
    weight_intercept : tuple of float
        Normal prior (mean, sd) of the log-odds of "helps" and "hurts" against "null".
        Default (-3, 1): a few percent of a store matters to any query (e^-3 = 5%).
    coef_sd : float
        Normal(0, coef_sd) prior of every covariate coefficient (covariates are standardised).
    group_sd : float
        HalfNormal scale of the between-group sd of group effects.
    rho_intercept : tuple of float
        Normal prior (mean, sd) of the logit mean retrievability.
    rho_kappa : tuple of float
        LogNormal prior (median, log-sd) of the Beta concentration of retrievability.
    query_sd : float
        Per-query variant only (``by="query"``): the sd of a memory-query pair's tau
        around the memory's tau (outcome units; fixed, not learned, because a handful
        of exposures per pair cannot estimate it; see cmp_bayes.model.per_query).
    pair_model : {"normal", "gated"}
        Per-query variant only (``by="query"``): "normal" (default) pools each pair's
        tau toward the memory's tau with a Normal kernel of sd ``query_sd`` (dense
        memory x query posterior); "gated" is the relevance-gated pair model
        tau(m, q) = z(m, q) delta_m, z ~ Bernoulli(p_mq), logit p_mq linear in the
        retriever's rank of m for q (sparse ``pair`` posterior; see
        cmp_bayes.model.gated and docs/model.md).
    gate_intercept : tuple of float
        Gated pair model only: Normal prior (mean, sd) of the gate's intercept, the
        log-odds that a pair with average rank covariates is relevant. Default
        (-2, 1.5): about one pair in eight among the pairs a design touched, wide.
    gate_rank_monotone : bool
        Gated pair model only: constrain the gate's log-rank coefficient to be at
        most 0 (a better rank is never less likely relevant), as ``-gate_rank_slope``
        with ``gate_rank_slope ~ HalfNormal(coef_sd)``, and the never-ranked
        indicator's likewise (``-gate_never_penalty``: a pair no ranking lists is
        never more likely relevant than one at the deepest listed rank);
        ``gate_coef`` is then deterministic. On by default: on all ten LoCoMo
        conversations the free slope came out flat or of the wrong sign in two
        modes (R-hat 1.88) and ranked required pairs at 0.261 AUC; the
        constrained one had one mode and ranks them as the rank does
        (reports/benchmarks/fit_pairs.md). ``False`` frees both coefficients
        (a retriever whose ranks may point the wrong way).
    prior_draws : int
        Draws of the prior and prior predictive groups.
    jitter : bool
        Spread each posterior tau draw uniformly within its grid cell (the grid's
        pmf stands for a piecewise-constant density).
    """

    grid_size: int = 121
    grid_curvature: float = 5.0
    baseline_nodes: int = 12
    pattern_resolution: float = 0.0025
    effect_bound: str = "truncate"
    use_rank: bool = True
    rank_summary: str = "median"
    use_groups: bool = True
    learn_null_mean: bool = True
    null_mean: tuple[float, float] = (0.0, 0.03)
    prior_family: str = "gmodel"
    spline_df: int = 8
    spline_coef_sd: float = 2.0
    gmodel_null: str = "normal"
    null_sd: tuple[float, float] = (0.015, 0.3)
    help_mean: tuple[float, float] = (0.2, 0.4)
    help_sd: tuple[float, float] = (0.08, 0.5)
    harm_mean: tuple[float, float] = (0.1, 0.5)
    harm_sd: tuple[float, float] = (0.05, 0.5)
    weight_intercept: tuple[float, float] = (-3.0, 1.0)
    coef_sd: float = 1.0
    group_sd: float = 0.5
    rho_intercept: tuple[float, float] = (-2.0, 2.0)
    rho_kappa: tuple[float, float] = (5.0, 1.5)
    query_sd: float = 0.05
    pair_model: str = "normal"
    gate_intercept: tuple[float, float] = (-2.0, 1.5)
    gate_rank_monotone: bool = True
    prior_draws: int = 500
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.grid_size < 11 or self.grid_size % 2 == 0:
            raise ConfigError(f"model.grid_size must be an odd integer >= 11, got {self.grid_size}")
        if not self.grid_curvature > 0:
            raise ConfigError(f"model.grid_curvature must be > 0, got {self.grid_curvature}")
        if self.baseline_nodes < 1:
            raise ConfigError(f"model.baseline_nodes must be >= 1, got {self.baseline_nodes}")
        if self.effect_bound not in ("truncate", "clip"):
            raise ConfigError(f"model.effect_bound must be 'truncate' or 'clip', got {self.effect_bound!r}")
        if self.rank_summary not in ("median", "best"):
            raise ConfigError(f"model.rank_summary must be 'median' or 'best', got {self.rank_summary!r}")
        if self.prior_family not in ("mixture", "gmodel"):
            raise ConfigError(f"model.prior_family must be 'mixture' or 'gmodel', got {self.prior_family!r}")
        if self.gmodel_null not in ("atom", "normal"):
            raise ConfigError(f"model.gmodel_null must be 'atom' or 'normal', got {self.gmodel_null!r}")
        if not 4 <= self.spline_df <= self.grid_size // 2:
            raise ConfigError(
                f"model.spline_df must be an integer in [4, grid_size // 2 = {self.grid_size // 2}], "
                f"got {self.spline_df}"
            )
        if not self.spline_coef_sd > 0:
            raise ConfigError(f"model.spline_coef_sd must be > 0, got {self.spline_coef_sd}")
        if not 0 <= self.pattern_resolution < 0.1:
            raise ConfigError(f"model.pattern_resolution must be in [0, 0.1), got {self.pattern_resolution}")
        if self.prior_draws < 1:
            raise ConfigError(f"model.prior_draws must be >= 1, got {self.prior_draws}")
        for name in ("null_sd", "help_mean", "help_sd", "harm_mean", "harm_sd", "rho_kappa"):
            med, lsd = getattr(self, name)
            if not (med > 0 and lsd > 0):
                raise ConfigError(f"model.{name} must be (median > 0, log-sd > 0), got {(med, lsd)}")
        for name in ("null_mean", "weight_intercept", "rho_intercept"):
            _, sd = getattr(self, name)
            if not sd > 0:
                raise ConfigError(f"model.{name} must be (mean, sd > 0), got {getattr(self, name)}")
        if self.pair_model not in ("normal", "gated"):
            raise ConfigError(f"model.pair_model must be 'normal' or 'gated', got {self.pair_model!r}")
        if not self.gate_intercept[1] > 0:
            raise ConfigError(f"model.gate_intercept must be (mean, sd > 0), got {self.gate_intercept}")
        if not 0 < self.query_sd <= 1:
            raise ConfigError(f"model.query_sd must be in (0, 1], got {self.query_sd}")
        if not (self.coef_sd > 0 and self.group_sd > 0):
            raise ConfigError("model.coef_sd and model.group_sd must be > 0")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def to_json(self) -> str:
        """The config as one JSON string (stored in the posterior's root attributes)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "model config") -> ModelConfig:
        """Build from a dict; unknown keys and bad values raise :class:`ConfigError`."""
        return _from_dict(cls, data, source)

    @classmethod
    def from_posterior(cls, tree: xr.DataTree) -> ModelConfig:
        """The model a posterior was fitted with (its ``model_config`` root attribute).

        Raises
        ------
        PosteriorError
            The attribute is missing or not a JSON object.
        ConfigError
            It names a key or value this ModelConfig does not accept.
        """
        return _from_posterior(cls, tree, "model_config")


@dataclass(frozen=True)
class SamplerConfig:
    """How the model is fitted.

    Attributes
    ----------
    sampler : str
        ``"nutpie"`` (default), ``"pymc"`` (PyMC's NUTS), ``"numpyro"`` (needs jax and
        numpyro) or ``"advi"`` (mean-field ADVI: fast, but it underestimates posterior
        spread of correlated hyperparameters and has no R-hat; for screening large logs).
    draws : int
        Posterior draws per chain.
    tune : int
        Tuning steps per chain.
    chains : int
        Number of chains.
    seed : int
        Random seed of everything (sampling, grid draws, predictive draws).
    progressbar : bool
        Show the sampler's progress bar, and a bar over the per-memory recovery
        of the draws when that runs longer than a few seconds. Either draws only
        when stderr is a terminal (the sampler's also in a notebook) and nothing
        asked for quiet (``--quiet``; :mod:`cmp_bayes.progress`).
    keep_draws : int
        At most this many posterior draws in total (over chains) are kept for the
        per-memory variables; more are thinned evenly (posterior size grows as
        memories x kept draws; 10k memories x 1000 draws x 3 vars = 120 MB float32).
    advi_iterations : int
        Optimisation steps of ADVI.
    target_accept : float
        NUTS target acceptance rate (nutpie, pymc, numpyro). 0.95 rather than the
        usual 0.8: the mixture weights' group effects are weakly identified
        (non-centred, sd near 0 reachable), and at 0.8 some fits had one divergent
        draw, which makes decide refuse every forget (reports/simulation/decide.md).
    adaptation : {"low_rank", "diag"}
        nutpie's mass-matrix adaptation. "low_rank" (default) learns the few strongly
        correlated directions of the mixture's hyperparameters and halves the leapfrog
        steps per draw against "diag" (10k memories: 14 against 29; reports/benchmarks/fit.md).
    max_attempts : int
        How many NUTS fits ``fit`` may run before it keeps an unhealthy one (default 3;
        1 fits once, as before retries existed; ignored by "advi", which has no divergences
        or R-hat). A fit is retried when its divergences or hyperparameter R-hat fail the
        sampler-health verdict (:func:`cmp_bayes.posterior.health.sampler_health`, every
        hyperparameter, default thresholds). Schedule (:meth:`attempt`): attempt 1 runs these
        settings; attempt 2 raises target_accept to at least 0.98 and doubles tune (same
        seed); attempt k >= 3 raises target_accept to at least 0.99, tune to
        ``tune * 2**(k - 1)`` and the seed to ``seed + k``. (A tune below 200 counts as 200
        when doubled.) The posterior kept is the first healthy attempt, else the last; every
        attempt is recorded in the posterior's ``fit_attempts`` root attribute.
    """

    sampler: str = "nutpie"
    draws: int = 1000
    tune: int = 1000
    chains: int = 2
    seed: int = 0
    progressbar: bool = True
    keep_draws: int = 1000
    advi_iterations: int = 20_000
    target_accept: float = 0.95
    adaptation: str = "low_rank"
    max_attempts: int = 3

    def __post_init__(self) -> None:
        if self.adaptation not in ("low_rank", "diag"):
            raise ConfigError(f"sampler.adaptation must be 'low_rank' or 'diag', got {self.adaptation!r}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"sampler must be one of {', '.join(SAMPLERS)}; got {self.sampler!r}")
        for name in ("draws", "chains", "keep_draws", "advi_iterations", "max_attempts"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"sampler.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.target_accept < 1:
            raise ConfigError(f"sampler.target_accept must be in (0, 1), got {self.target_accept}")
        if int(self.tune) < 0:
            raise ConfigError(f"sampler.tune must be >= 0, got {self.tune}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"sampler.seed must be an int, got {self.seed!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The config as one JSON string (stored in the posterior's root attributes)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def attempt(self, k: int) -> SamplerConfig:
        """The settings of fit attempt ``k`` (1-based) of the retry schedule (see ``max_attempts``).

        Raises
        ------
        ConfigError
            ``k`` below 1.
        """
        if k < 1:
            raise ConfigError(f"fit attempts are numbered from 1, got {k}")
        if k == 1:
            return self
        # divergences in this model sit where the step size is too large for the
        # weakly identified group sds: a smaller step (higher acceptance) and a longer
        # warm-up for the mass matrix are the standard remedies; a new seed last, in
        # case one chain was started in a bad region
        tune = max(int(self.tune), _MIN_RETRY_TUNE) * 2 ** (k - 1)
        floor = _RETRY_TARGET_ACCEPT[min(k, len(_RETRY_TARGET_ACCEPT)) - 1]
        return dataclasses.replace(
            self,
            target_accept=max(float(self.target_accept), floor),
            tune=tune,
            seed=self.seed if k == 2 else self.seed + k,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "sampler config") -> SamplerConfig:
        """Build from a dict; unknown keys and bad values raise :class:`ConfigError`."""
        return _from_dict(cls, data, source)

    @classmethod
    def from_posterior(cls, tree: xr.DataTree) -> SamplerConfig:
        """The sampler settings a posterior was fitted with (its ``sampler_config`` root
        attribute); raises as :meth:`ModelConfig.from_posterior`."""
        return _from_posterior(cls, tree, "sampler_config")


@dataclass(frozen=True)
class FitConfig:
    """A TOML file's ``[model]`` and ``[sampler]`` tables."""

    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


def load_config(path: str | Path) -> FitConfig:
    """Read ``[model]`` and ``[sampler]`` tables from a TOML file.

    Raises
    ------
    ConfigError
        Unreadable TOML, unknown tables or keys, bad values (the message names file and key).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"model", "sampler"}
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {sorted(unknown)}; expected [model], [sampler]")
    return FitConfig(
        model=ModelConfig.from_dict(data.get("model", {}), source=f"{path} [model]"),
        sampler=SamplerConfig.from_dict(data.get("sampler", {}), source=f"{path} [sampler]"),
    )


def _from_posterior(cls: type, tree: xr.DataTree, attr: str) -> Any:
    where = str(tree.attrs.get("log_path") or "posterior")
    if attr not in tree.attrs:
        raise PosteriorError(f"{where}: the posterior has no '{attr}' root attribute")
    try:
        data = json.loads(str(tree.attrs[attr]))
    except json.JSONDecodeError as exc:
        raise PosteriorError(f"{where}: root attribute '{attr}' is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise PosteriorError(f"{where}: root attribute '{attr}' is not a JSON object")
    return _from_dict(cls, data, f"{where} [{attr}]")


def _from_dict(cls: type, data: dict[str, Any], source: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {sorted(unknown)}")
    kwargs = {}
    for key, value in data.items():
        default = names[key].default
        if isinstance(default, tuple):
            if not isinstance(value, list | tuple) or len(value) != len(default):
                raise ConfigError(f"{source}: key '{key}' must be a list of {len(default)} numbers")
            value = tuple(float(v) for v in value)
        elif isinstance(default, bool) and not isinstance(value, bool):
            # a string such as "yes" or "false" would otherwise pass as truthy
            raise ConfigError(f"{source}: key '{key}' must be true or false, got {value!r}")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
