"""The relevance-gated pair model (``fit(log, by="query", model=ModelConfig(pair_model="gated"))``).

Model, per (memory, query) pair of the sparse pair statistics
(``exposure_stats(log, by="pair")``):

    tau(m, q) = z(m, q) * delta_m,       z(m, q) ~ Bernoulli(p_mq),
    logit p_mq = gate_intercept + gate_coef . x_mq,

``x_mq`` the retriever's rank of m for q at that query's steps (standardised
``log1p`` of the pair's best or median rank, ``ModelConfig.rank_summary``, a
never-ranked pair placed one past the deepest listed rank, and a centred
never-ranked indicator), ``delta_m`` the memory's effect when relevant
under the memory-level mixture prior of :mod:`cmp_bayes.model.build`
(intercept-only weights: the rank information goes to the gate).

delta_m is the mixture's helps / hurts components (a relevant memory does
something); an irrelevant pair's effect is the null component Normal(0, s0),
small but not exactly 0, as in the memory-level model. Both z and delta are
integrated out on the grid. Per pair the likelihood of delta at grid point g is
``p_mq exp(L_mq,g) + (1 - p_mq) sum_h null_h exp(L_mq,h) / sum_h null_h F_mq,h``
(the null restricted to the effects the pair's baseline allows, ``F`` its
feasibility; with s0 -> 0 the second term is ``exp(L_mq,0)``), where
``L_mq`` (the pair's exposed arm against its controls, :func:`pair_arms`,
truncated to b + tau in [0, 1] under the default ``effect_bound``) is
computed once as data; a memory's marginal likelihood is
``sum_g prior_g(theta) prod_q [...]``. Only the pairs with exposures enter the
graph (a pair without any has a flat L and contributes exactly 0), through one
fused Op over the distinct (pairs x G) likelihood rows
(:mod:`cmp_bayes.model.gated_kernel`): never memory x query. rho is the memory-level hierarchy of
build.py without covariates.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.tensor.variable import TensorVariable

from cmp_bayes.model.build import ModelData, build_model, hyper_shapes, model_data, prior_terms
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.gated_kernel import FLOOR, distinct_rows, gated_marginal
from cmp_bayes.model.grid import log_feasibility, log_likelihood

#: The pair statistics the recovery and the posterior's groups read after :func:`gated_data`
#: (the likelihood's arms and the gate's covariates are computed there): the other
#: variables are dropped, 20 float arrays of a million pairs each on a shared store.
PAIR_VARS_KEPT: tuple[str, ...] = (
    "exposed", "exposed_outcome_sum", "control", "control_outcome_sum", "retrieved", "in_store",
    "window_eligible", "window_exposed", "window_certain", "in_pool",
)
#: Hyperparameters the gated model adds to the memory-level ones.
GATE_VARS: tuple[str, ...] = ("gate_intercept", "gate_coef")
#: Under ``gate_rank_monotone``: each rank covariate's coefficient is minus this
#: HalfNormal, so a worse rank, or no rank at all, is never more likely relevant.
MONOTONE_GATE: dict[str, str] = {"log_rank": "gate_rank_slope", "never_ranked": "gate_never_penalty"}


@dataclass
class GatedData:
    """What the graph and the recovery of the gated model share.

    Attributes
    ----------
    base : ModelData
        The memory-level data (no covariates, no groups; its ``informative`` is
        empty: tau enters only through the gate potential).
    pairs : xarray.Dataset
        The sparse pair statistics, dim ``pair``: the variables the later stages read
        (:data:`PAIR_VARS_KEPT`, sorted by memory).
    pair_memory : ndarray of int, shape (N,)
        Each pair's memory (row of ``base.memory``); pairs sorted by memory.
    loglik : ndarray, shape (Ni, G)
        Log-likelihood of tau on the grid of each informative pair (row i is pair
        ``informative[i]``), shifted to maximum 0 (``-inf`` where the truncated
        likelihood makes tau infeasible). A pair without exposures has a flat
        likelihood (a row of 0) and is not stored: on a shared store those are
        about 97% of the pairs (LoCoMo: 1.16M rows, 1.1 GB).
    informative : ndarray of int, shape (Ni,)
        Pairs with at least one exposure (pool or window arm).
    lik_rows : ndarray, shape (U, G)
        The distinct rows of ``exp(loglik)`` (pairs with equal arms share a row).
    feas_rows : ndarray, shape (U, G)
        Each of those rows' feasibility: the share of the pair's baseline nodes with
        b + tau_g in [0, 1] (:func:`cmp_bayes.model.grid.log_feasibility`); all ones
        when ``effect_bound="clip"``. The null component of a pair is renormalised
        over it (:mod:`cmp_bayes.model.gated_kernel`).
    lik_unit : ndarray of int64, shape (Ni,)
        Each informative pair's row of ``lik_rows`` and ``feas_rows`` (distinct over both).
    x : ndarray, shape (N, P)
        Standardised gate covariates.
    x_never : ndarray, shape (P,)
        The covariates of a pair its memory's queries never ranked (memories without pairs).
    covariate_names : list of str
    arms : dict of ndarray, shape (N,)
        The pair arms the likelihood used (:func:`pair_arms`).
    class_x : ndarray, shape (C, P)
        The distinct rows of ``x`` (ranks take few values: C = 689 of LoCoMo's 1.19M pairs).
    covariate_class : ndarray of int64, shape (N,)
        Each pair's row of ``class_x``: pairs of one class share their gate probability.
    """

    base: ModelData
    pairs: xr.Dataset
    pair_memory: np.ndarray
    loglik: np.ndarray
    informative: np.ndarray
    lik_rows: np.ndarray
    feas_rows: np.ndarray
    lik_unit: np.ndarray
    x: np.ndarray
    x_never: np.ndarray
    covariate_names: list[str]
    arms: dict[str, np.ndarray]
    class_x: np.ndarray
    covariate_class: np.ndarray

    @functools.cached_property
    def pair_coords(self) -> dict[str, tuple[str, np.ndarray]]:
        """``memory_id`` and ``query_id`` along ``pair`` (object arrays of str), built once:
        four groups of the posterior carry them, and on a shared store each copy is
        1.19M Python strings."""
        out = {}
        for name in ("memory_id", "query_id"):
            # codes into the distinct ids: each id's string exists once, not once per pair
            codes, ids = pd.factorize(np.asarray(self.pairs[name].values).astype(str))
            out[name] = ("pair", np.asarray(ids, dtype=object)[codes])
        return out

    @property
    def zero(self) -> int:
        """Index of the grid point tau = 0."""
        return self.base.grid.points.size // 2


def pair_arms(pairs: xr.Dataset, outcome_kind: str) -> dict[str, np.ndarray]:
    """Each pair's exposed and control arms, both designs' evidence together, shape (pair,).

    Exposed: the pool arm's exposures plus the window arm's randomized exposures
    (``pi_t < 1``; a ``pi_t = 1`` step has no chance of being a control and is
    left out), the latter's outcome sum ``n_w * ybar_w`` with ``ybar_w`` the
    self-normalized IPW mean ``sum w Y / sum w`` (``w = 1 / pi_t``). Control: the
    pool arm's control, every step of the query with the memory in the store and
    not in the context, which includes the window arm's eligible-but-not-exposed
    steps. Fractional outcomes: the window exposures' sum of squares is bounded by
    their sum (``Y^2 <= Y`` on [0, 1]), a conservative variance.
    """
    def v(name: str) -> np.ndarray:
        return np.asarray(pairs[name].values, dtype=np.float64)

    n_w = np.maximum(v("window_exposed") - v("window_certain"), 0.0)
    w = v("window_exposed_w")
    ybar = np.divide(v("window_exposed_wy"), w, out=np.zeros_like(w), where=w > 0)
    n_w = np.where(w > 0, n_w, 0.0)
    y_w = n_w * ybar
    return {
        "exposed": v("exposed") + n_w,
        "exposed_outcome_sum": v("exposed_outcome_sum") + y_w,
        # Y^2 = Y for binary outcomes; a bound (Y^2 <= Y) for fractional ones
        "exposed_outcome_sumsq": v("exposed_outcome_sumsq") + y_w,
        "control": v("control"),
        "control_outcome_sum": v("control_outcome_sum"),
        "control_outcome_sumsq": v("control_outcome_sumsq"),
    }


def gate_covariates(pairs: xr.Dataset, summary: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The gate's covariates per pair: the rank of m in the rankings of q's steps.

    ``log_rank``: log1p of the pair's median or best 0-based rank (``summary``),
    standardised over ranked pairs; a never-ranked pair (no ranking of the
    query's steps lists m) takes the rank one past the deepest rank any pair
    was seen at, because the rankings a log lists are cut at a depth and a
    memory below the cut ranks below everything above it. ``never_ranked``: 1
    for a never-ranked pair, centred, so that the gate can put such pairs
    further down than the depth alone says. Constant columns dropped.

    Returns
    -------
    (x (N, P), x_never (P,), names): ``x_never`` is the row of a never-ranked pair.
    """
    var = {"median": "rank_median", "best": "rank_best"}[summary]
    ranked = np.asarray(pairs["ranked"].values) > 0
    rank = np.asarray(pairs[var].values, dtype=np.float64)
    cols, never_row, names = [], [], []
    if ranked.sum() >= 2:
        lr = np.log1p(np.where(ranked, rank, 0.0))
        mu, sd = lr[ranked].mean(), lr[ranked].std()
        if sd > 0:
            below = (np.log1p(rank[ranked].max() + 1.0) - mu) / sd
            cols.append(np.where(ranked, (lr - mu) / sd, below))
            never_row.append(below)
            names.append("log_rank")
    never = (~ranked).astype(np.float64)
    if 0 < never.sum() < never.size:
        cols.append(never - never.mean())
        never_row.append(1.0 - never.mean())
        names.append("never_ranked")
    if not cols:
        return np.zeros((ranked.size, 0)), np.zeros(0), []
    return np.column_stack(cols), np.asarray(never_row), names


def gated_data(stats: xr.Dataset, pairs: xr.Dataset, config: ModelConfig) -> GatedData:
    """Precompute the gated model's data from the memory-level and the pair statistics."""
    base_cfg = dataclasses.replace(config, use_rank=False, use_groups=False)
    base = model_data(stats, base_cfg, None)
    base.informative = np.zeros(0, dtype=np.int64)
    kind = base.outcome_kind
    memory = pd.Index(base.memory)
    pair_memory = memory.get_indexer(np.asarray(pairs["memory_id"].values).astype(str))
    if (pair_memory < 0).any():
        raise ValueError("pair statistics name a memory the memory-level statistics lack")
    order = np.argsort(pair_memory, kind="stable")
    if not np.array_equal(order, np.arange(order.size)):
        pairs = pairs.isel(pair=order)
        pair_memory = pair_memory[order]
    arms = pair_arms(pairs, kind)
    informative = np.flatnonzero(arms["exposed"] > 0)
    # Truncated, not clipped, and not renormalised: a query whose controls always
    # succeed (or always fail) leaves no room for a large effect, and that is evidence.
    # Clipped, each of its pairs fitted an effect slightly better than none, and over
    # LoCoMo's 31,434 randomized pairs that put the null at -0.10 and called a third of
    # all pairs relevant (reports/benchmarks/fit_pairs.md, "Clipped or truncated").
    inf_arms = {k: v[informative] for k, v in arms.items()}
    loglik = log_likelihood(inf_arms, base.grid, kind, config.baseline_nodes, bound=config.effect_bound)
    n_grid = base.grid.points.size
    feas = (
        np.exp(log_feasibility(inf_arms, base.grid, kind, config.baseline_nodes))
        if config.effect_bound == "truncate" else np.ones_like(loglik)
    )
    rows, lik_unit = distinct_rows(np.hstack([np.exp(loglik), feas]))
    lik_rows, feas_rows = np.ascontiguousarray(rows[:, :n_grid]), np.ascontiguousarray(rows[:, n_grid:])
    x, x_never, names = gate_covariates(pairs, config.rank_summary) if config.use_rank else (
        np.zeros((pair_memory.size, 0)), np.zeros(0), [])
    if x.shape[1]:
        class_x, covariate_class = np.unique(x, axis=0, return_inverse=True)
    else:
        class_x, covariate_class = np.zeros((1, 0)), np.zeros(pair_memory.size, dtype=np.int64)
    return GatedData(
        base=base, pairs=pairs[[v for v in PAIR_VARS_KEPT if v in pairs]],
        pair_memory=pair_memory.astype(np.int64), loglik=loglik,
        informative=informative, lik_rows=lik_rows, feas_rows=feas_rows, lik_unit=lik_unit, x=x, x_never=x_never,
        covariate_names=names, arms=arms, class_x=class_x,
        covariate_class=np.asarray(covariate_class, dtype=np.int64).reshape(-1),
    )


def gated_hyper_shapes(gd: GatedData, config: ModelConfig | None = None) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every hyperparameter the gated graph samples (and ``gate_coef``)."""
    shapes = dict(hyper_shapes(gd.base))
    shapes["gate_intercept"] = ()
    if gd.covariate_names:
        shapes["gate_coef"] = (len(gd.covariate_names),)
        if _monotone(gd, config):
            shapes.update({MONOTONE_GATE[n]: () for n in gd.covariate_names if n in MONOTONE_GATE})
            free = [n for n in gd.covariate_names if n not in MONOTONE_GATE]
            if free:
                shapes["gate_coef_other"] = (len(free),)
    return shapes


def _monotone(gd: GatedData, config: ModelConfig | None) -> bool:
    return bool(config is not None and config.gate_rank_monotone and "log_rank" in gd.covariate_names)


def _gate_coef(gd: GatedData, config: ModelConfig) -> TensorVariable:
    """``gate_coef`` over ``gate_covariate``: free Normals, or with ``gate_rank_monotone`` the
    rank covariates' entries negated HalfNormals (:data:`MONOTONE_GATE`) and any others
    free (a Deterministic)."""
    if not _monotone(gd, config):
        return pm.Normal("gate_coef", 0.0, config.coef_sd, dims="gate_covariate")
    names = gd.covariate_names
    free = [n for n in names if n not in MONOTONE_GATE]
    others = pm.Normal("gate_coef_other", 0.0, config.coef_sd, shape=(len(free),)) if free else None
    parts = []
    for n in names:
        if n in MONOTONE_GATE:
            parts.append(-pm.HalfNormal(MONOTONE_GATE[n], config.coef_sd))
        else:
            assert others is not None
            parts.append(others[free.index(n)])
    return pm.Deterministic("gate_coef", pt.stack(parts), dims="gate_covariate")


def delta_prior(h: dict[str, TensorVariable], base: ModelData) -> tuple[TensorVariable, TensorVariable]:
    """Pmf of delta on the grid, shape (G,), and the null component's pmf, shape (G,) (symbolic).

    delta (the effect when relevant) is the mixture's "helps" and "hurts"
    components with weights softmax(eta_helps, eta_hurts): a memory that is
    relevant to a query does something; "does nothing" is the gate's z = 0, under
    which a pair's effect is the null component Normal(0, s0). (Probabilities, not
    logs: the point tau = 0 has probability 0 under delta, and a log there has no
    gradient.)
    """
    terms = prior_terms(h, base, np.zeros(1, dtype=np.int64))
    w = pt.special.softmax(terms["eta"][0])
    pmf = pt.exp(terms["log_pmf"])
    return pt.dot(w, pmf[1:]), pmf[0]


def build_gated_model(gd: GatedData, config: ModelConfig) -> pm.Model:
    """The PyMC model: memory-level hyperparameters, the gate, and the gated tau potential."""
    base_cfg = dataclasses.replace(config, use_rank=False, use_groups=False)
    model = build_model(gd.base, base_cfg)
    inf = gd.informative
    with model:
        h = {n: model[n] for n in hyper_shapes(gd.base)}
        gate = pm.Normal("gate_intercept", mu=config.gate_intercept[0], sigma=config.gate_intercept[1])
        logit = pt.zeros((inf.size,)) + gate
        if gd.covariate_names:
            model.add_coord("gate_covariate", gd.covariate_names)
            coef = _gate_coef(gd, config)
            logit = logit + pt.dot(pt.as_tensor_variable(gd.x[inf]), coef)
        if inf.size:
            prior, null_pmf = delta_prior(h, gd.base)
            # (U, G), row max 1, and their feasibility; pairs with equal arms share a row
            lik, feas, unit = gd.lik_rows, gd.feas_rows, gd.lik_unit
            pm_inf = gd.pair_memory[inf]
            starts = np.flatnonzero(np.r_[True, pm_inf[1:] != pm_inf[:-1], True])
            # sum over memories of log sum_g prior_g prod_q [p exp(L_g) + (1 - p) sum_h null_h exp(L_h)]
            pm.Potential("tau_gated", gated_marginal(lik, feas, unit, starts, pt.sigmoid(logit), null_pmf, prior))
    return model


def grid_pair_likelihood(gd: GatedData, p: np.ndarray, null_pmf: np.ndarray) -> np.ndarray:
    """The gated likelihood of delta per informative pair, shape (Ni, G) (numpy).

    ``p exp(L_g) + (1 - p) sum_h null_h exp(L_h) / sum_h null_h F_h``: relevant with
    probability p (tau = delta = tau_g), else a null effect drawn from the null pmf
    ``null_pmf`` (G,) restricted to the effects the pair's baseline allows (``F`` its
    feasibility row). With a null pmf that is a point mass at 0 this is the brief's
    ``p exp(L_g) + (1 - p) exp(L_0)``. ``p`` is every pair's gate probability (N,).
    """
    lik = gd.lik_rows[gd.lik_unit]
    null = (lik @ null_pmf) / np.maximum(gd.feas_rows[gd.lik_unit] @ null_pmf, FLOOR)
    pi = p[gd.informative, None]
    return pi * lik + (1 - pi) * null[:, None]


def gate_probability(gd: GatedData, intercept: float, coef: np.ndarray | None) -> np.ndarray:
    """p_mq for every pair, shape (N,)."""
    return class_probability(gd, intercept, coef)[gd.covariate_class]


def class_probability(gd: GatedData, intercept: float, coef: np.ndarray | None) -> np.ndarray:
    """The gate probability of each covariate class (``gd.class_x``), shape (C,)."""
    eta = np.full(gd.class_x.shape[0], float(intercept))
    if gd.covariate_names and coef is not None:
        eta = eta + gd.class_x @ np.asarray(coef, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-eta))

