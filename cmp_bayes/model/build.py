"""Build the PyMC graph of the rho x tau model from a ModelConfig and the statistics.

Hyperparameters theta are the only random variables NUTS sees:

* tau: a three-component mixture prior on the grid (null ~ Normal(0, s0);
  helps ~ Normal(mu_h, s_h) restricted to tau > 0; hurts ~ Normal(-mu_n, s_n)
  restricted to tau < 0) whose weights are a softmax of covariates (retriever
  rank) and group effects per memory. Each memory's tau is integrated out on the
  grid: the marginal likelihood sum_m log sum_g prior_mg(theta) exp(L_mg) enters
  as a ``pm.Potential`` and, because prior_mg = sum_k w_mk p_kg, costs one
  (M x G) @ (G x 3) product. The likelihood is zero where b + tau leaves [0, 1]
  (``effect_bound="truncate"``), and each exposed memory's prior is the mixture
  restricted to its feasible set, so the term is divided by
  sum_g prior_mg(theta) exp(F_mg) (F = log feasibility, a second product).
* rho: retrieved_m ~ BetaBinomial(in_store_m, mu_m kappa, (1 - mu_m) kappa),
  logit mu_m linear in the same covariates plus group effects; rho_m is
  integrated out in closed form (conjugate).

Everything a per-draw recovery needs (component pmfs, weights, Beta
parameters) comes from :func:`prior_terms`, called once with the model's random
variables and once with plain symbolic inputs (for the compiled recovery
function), so both use the same formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.distributions.transforms import Interval
from pytensor.tensor.variable import TensorVariable

from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.grid import (
    TauGrid,
    arm_arrays,
    likelihood_patterns,
    log_feasibility,
    log_likelihood,
)

#: Mixture components of the tau prior, in order.
COMPONENTS: tuple[str, ...] = ("null", "helps", "hurts")
#: The null component's location lies in (-bound, bound) (outcome units).
NULL_MEAN_BOUND: float = 0.1
#: Non-null components (those with weights against "null").
EFFECT_KINDS: tuple[str, ...] = ("helps", "hurts")


@dataclass
class ModelData:
    """Arrays the graph and the recovery share; all over the memory dim in stats order.

    Attributes
    ----------
    memory : ndarray of str, shape (M,)
    grid : TauGrid
    loglik : ndarray, shape (M, G)
        Exposed-arm log-likelihood on the grid (rows without exposures are 0),
        ``pattern_loglik[pattern]``.
    pattern_loglik : ndarray, shape (P, G)
        The distinct likelihood rows (see :func:`cmp_bayes.model.grid.likelihood_patterns`).
    pattern : ndarray of int, shape (M,)
    pattern_logfeas : ndarray, shape (P, G), or None
        Log probability that b + tau_g stays in [0, 1] per pattern
        (:func:`cmp_bayes.model.grid.log_feasibility`): the normaliser of the
        truncated prior. None when the likelihood is not truncated.
    feasibility_of : ndarray or None
        The ``pattern_loglik`` array ``pattern_logfeas`` belongs to (see :meth:`log_feasibility`).
    informative : ndarray of int
        Rows of ``loglik`` with at least one exposure.
    covariates : ndarray, shape (M, P)
        Standardised covariates (P may be 0).
    covariate_names : list of str
    group_index : ndarray of int, shape (M,)
        Index of each memory's main group into ``groups`` (all 0 without groups).
    groups : list of str
        Group names; group effects are used only when there are >= 2.
    retrieved, in_store : ndarray, shape (M,)
    arms : dict of ndarray
        Arm counts and sums (see :func:`cmp_bayes.model.grid.arm_arrays`).
    outcome_kind : str
    pattern_offset : ndarray, shape (P,), or None
        What ``pattern_loglik``'s row shift and omitted normalisers removed
        (``grid.log_likelihood(return_offset=True)``): the pointwise
        log-likelihood adds it back so that model variants compare on one scale.
        None when ``pattern_loglik`` was swapped for another likelihood (per-query).
    learn_null_mean : bool
        Whether the null component's location is a hyperparameter (``tau_null_mean``).
    prior_family : {"mixture", "gmodel"}
        See :class:`cmp_bayes.model.config.ModelConfig`.
    null_atom : bool
        gmodel with ``gmodel_null="atom"``: the null component is a point mass at 0.
    spline : ndarray, shape (G, D), or None
        gmodel only: the log-spline basis over the cells (:func:`spline_basis`).
    """

    memory: np.ndarray
    grid: TauGrid
    loglik: np.ndarray
    pattern_loglik: np.ndarray
    pattern: np.ndarray
    pattern_logfeas: np.ndarray | None
    feasibility_of: np.ndarray | None
    informative: np.ndarray
    covariates: np.ndarray
    covariate_names: list[str]
    group_index: np.ndarray
    groups: list[str]
    retrieved: np.ndarray
    in_store: np.ndarray
    arms: dict[str, np.ndarray]
    outcome_kind: str
    pattern_offset: np.ndarray | None = None
    learn_null_mean: bool = False
    prior_family: str = "mixture"
    null_atom: bool = False
    spline: np.ndarray | None = None
    #: compiled prior-terms functions (:func:`cmp_bayes.model.recover.compile_prior_terms`) by
    #: the rows they cover: fit's recovery and its prior-sensitivity pmfs share one compile.
    #: Not an init field, so ``dataclasses.replace`` starts a copy with an empty cache.
    prior_fn_cache: dict[bytes | None, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def use_groups(self) -> bool:
        return len(self.groups) >= 2

    def log_feasibility(self) -> np.ndarray | None:
        """``pattern_logfeas`` if it belongs to the current ``pattern_loglik``, else None.

        The per-query variant swaps in its own likelihood rows
        (``per_query.with_pair_likelihood``: clipped pair likelihoods, one row per
        memory), to which the memory-level normaliser does not apply.
        """
        if self.pattern_logfeas is None or self.feasibility_of is not self.pattern_loglik:
            return None
        return self.pattern_logfeas


def spline_basis(cells: int, df: int) -> np.ndarray:
    """The g-model's log-spline basis over the grid cells, shape (cells, df - 1).

    Cubic B-splines over the cell index (not tau: the grid's cells are narrow near
    0, so the basis resolves small effects finely and large ones coarsely), with
    ``df`` functions and evenly spaced knots. B-splines sum to 1 in every cell, so
    the constant direction of the coefficients only rescales exp(Q alpha), which
    the normalisation undoes; it is projected out (an orthonormal basis of its
    complement), leaving ``df - 1`` identified coefficients and making an
    isotropic prior on them a penalty on the shape alone.
    """
    from scipy.interpolate import BSpline

    k = 3
    x = np.arange(cells, dtype=np.float64)
    inner = np.linspace(0.0, cells - 1.0, df - k + 1)
    knots = np.concatenate([[0.0] * k, inner, [cells - 1.0] * k])
    b = BSpline.design_matrix(x, knots, k).toarray()  # (cells, df)
    q, _ = np.linalg.qr(np.column_stack([np.ones(df), np.eye(df)[:, : df - 1]]))
    return b @ q[:, 1:]


def rank_covariates(stats: xr.Dataset, summary: str = "median") -> tuple[np.ndarray, list[str]]:
    """Retriever-rank covariates per memory, standardised, constant columns dropped.

    ``log_rank``: log1p of the memory's median (``summary="median"``) or smallest
    (``"best"``) 0-based rank over the steps whose ranking lists it, standardised
    over ranked memories and 0 for never-ranked ones; ``never_ranked``: 1 when no
    ranking lists the memory, centred.

    Returns
    -------
    (ndarray of shape (M, P), list of P names)
    """
    var = {"median": "rank_median", "best": "rank_best"}[summary]
    if var not in stats:
        raise ConfigError(
            f"model.rank_summary = {summary!r} needs the statistic {var!r}, which these "
            "statistics lack (computed by an older cmp_bayes?); recompute them with exposure_stats"
        )
    ranked = np.asarray(stats["ranked"].values) > 0
    med = np.asarray(stats[var].values, dtype=np.float64)
    cols, names = [], []
    if ranked.sum() >= 2:
        lr = np.log1p(np.where(ranked, med, 0.0))
        mu, sd = lr[ranked].mean(), lr[ranked].std()
        if sd > 0:
            cols.append(np.where(ranked, (lr - mu) / sd, 0.0))
            names.append("log_rank")
    never = (~ranked).astype(np.float64)
    if 0 < never.sum() < never.size:
        cols.append(never - never.mean())
        names.append("never_ranked")
    if not cols:
        return np.zeros((ranked.size, 0)), []
    return np.column_stack(cols), names


def model_data(stats: xr.Dataset, config: ModelConfig, memory_group: np.ndarray | None) -> ModelData:
    """Precompute everything the graph needs from a memory-level statistics Dataset."""
    grid = TauGrid.make(config.grid_size, config.grid_curvature)
    arms = arm_arrays(stats)
    kind = str(stats.attrs.get("outcome_kind", "binary"))
    first, pattern = likelihood_patterns(arms, kind, config.pattern_resolution)
    rep = {k: v[first] for k, v in arms.items()}
    pattern_loglik, offset = log_likelihood(
        rep, grid, kind, config.baseline_nodes, bound=config.effect_bound, return_offset=True
    )
    logfeas = None
    if config.effect_bound == "truncate":
        logfeas = log_feasibility(rep, grid, kind, config.baseline_nodes)
    if config.use_rank:
        x, names = rank_covariates(stats, config.rank_summary)
    else:
        x, names = np.zeros((stats.sizes["memory"], 0)), []
    if memory_group is not None and config.use_groups:
        group_names, gidx = np.unique(np.asarray(memory_group, dtype=str), return_inverse=True)
        groups = [str(g) for g in group_names]
    else:
        groups, gidx = [""], np.zeros(stats.sizes["memory"], dtype=np.int64)
    return ModelData(
        memory=np.asarray(stats["memory"].values).astype(str),
        grid=grid,
        loglik=pattern_loglik[pattern],
        pattern_loglik=pattern_loglik,
        pattern=pattern,
        pattern_logfeas=logfeas,
        feasibility_of=pattern_loglik if logfeas is not None else None,
        informative=np.flatnonzero(arms["exposed"] > 0),
        covariates=x,
        covariate_names=names,
        group_index=np.asarray(gidx, dtype=np.int64),
        groups=groups,
        retrieved=np.asarray(stats["retrieved"].values, dtype=np.float64),
        in_store=np.asarray(stats["in_store"].values, dtype=np.float64),
        arms=arms,
        outcome_kind=kind,
        pattern_offset=offset,
        learn_null_mean=config.learn_null_mean and not (
            config.prior_family == "gmodel" and config.gmodel_null == "atom"
        ),
        prior_family=config.prior_family,
        null_atom=config.prior_family == "gmodel" and config.gmodel_null == "atom",
        spline=(
            spline_basis(grid.points.size, config.spline_df) if config.prior_family == "gmodel" else None
        ),
    )


def hyper_shapes(data: ModelData) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every hyperparameter the graph samples."""
    p, g = len(data.covariate_names), len(data.groups)
    shapes: dict[str, tuple[int, ...]] = {}
    if not data.null_atom:
        shapes["tau_null_sd"] = ()
    if data.spline is None:
        shapes.update(
            {"tau_helps_mean": (), "tau_helps_sd": (), "tau_hurts_mean": (), "tau_hurts_sd": ()}
        )
    else:
        shapes["tau_spline_coef"] = (data.spline.shape[1],)
    shapes.update({"weight_intercept": (2,), "rho_intercept": (), "rho_kappa": ()})
    if data.learn_null_mean:
        shapes["tau_null_mean"] = ()
    if p:
        shapes["weight_coef"] = (2, p)
        shapes["rho_coef"] = (p,)
    if data.use_groups:
        shapes["weight_group_sd"] = ()
        shapes["weight_group_z"] = (2, g)
        shapes["rho_group_sd"] = ()
        shapes["rho_group_z"] = (g,)
    return shapes


def _normal_logpmf(
    points: np.ndarray, log_widths: np.ndarray, mask: np.ndarray, mu: TensorVariable | float, sd: TensorVariable
) -> TensorVariable:
    """Log pmf on the grid of a Normal(mu, sd) density restricted to ``mask`` (cells)."""
    z = (points - mu) / sd
    logd = -0.5 * z**2 + log_widths
    logd = pt.where(mask, logd, -np.inf)
    return logd - pt.logsumexp(logd)


def _component_log_pmf(h: dict, data: ModelData) -> TensorVariable:
    """(3, G) log pmf of the null, helps and hurts components on the grid."""
    grid = data.grid
    lw = np.log(grid.widths)
    pts = grid.points
    if data.null_atom:
        null = pt.as_tensor_variable(np.where(pts == 0.0, 0.0, -np.inf))
    else:
        null = _normal_logpmf(
            pts, lw, np.ones_like(pts, dtype=bool), h.get("tau_null_mean", 0.0), h["tau_null_sd"]
        )
    if data.spline is None:
        helps = _normal_logpmf(pts, lw, pts > 0, h["tau_helps_mean"], h["tau_helps_sd"])
        hurts = _normal_logpmf(pts, lw, pts < 0, -h["tau_hurts_mean"], h["tau_hurts_sd"])
    else:
        # one log-spline density g over the cells; "helps" and "hurts" are its two sides
        logg = pt.dot(pt.as_tensor_variable(data.spline), h["tau_spline_coef"])
        helps = pt.where(pts > 0, logg, -np.inf)
        helps = helps - pt.logsumexp(helps)
        hurts = pt.where(pts < 0, logg, -np.inf)
        hurts = hurts - pt.logsumexp(hurts)
    return pt.stack([null, helps, hurts])


def prior_terms(h: dict, data: ModelData, rows: np.ndarray | None = None) -> dict:
    """Symbolic prior quantities from hyperparameters ``h`` (name -> tensor).

    ``rows`` restricts the per-memory outputs to those memories (indexing the
    constants in numpy keeps gather/scatter ops out of the gradient).

    Returns
    -------
    dict with
        ``log_pmf`` (3, G): log pmf of each mixture component on the grid;
        ``log_weight`` (M, 3): log mixture weights per memory (null, helps, hurts);
        ``eta`` (M, 2): log-odds of helps and hurts against null;
        ``rho_a``, ``rho_b`` (M,): Beta prior parameters of each memory's rho.
    """
    log_pmf = _component_log_pmf(h, data)
    rows = np.arange(data.memory.size) if rows is None else rows
    m = rows.size
    eta = pt.zeros((m, 2)) + h["weight_intercept"][None, :]
    rho_eta = pt.zeros((m,)) + h["rho_intercept"]
    if data.covariate_names:
        x = pt.as_tensor_variable(data.covariates[rows])
        eta = eta + pt.dot(x, h["weight_coef"].T)
        rho_eta = rho_eta + pt.dot(x, h["rho_coef"])
    if data.use_groups:
        gi = data.group_index[rows]
        eta = eta + (h["weight_group_sd"] * h["weight_group_z"]).T[gi]
        rho_eta = rho_eta + (h["rho_group_sd"] * h["rho_group_z"])[gi]
    full = pt.concatenate([pt.zeros((m, 1)), eta], axis=1)
    log_weight = full - pt.logsumexp(full, axis=1, keepdims=True)
    mu = pt.sigmoid(rho_eta)
    return {
        "log_pmf": log_pmf,
        "log_weight": log_weight,
        "eta": eta,
        "rho_a": mu * h["rho_kappa"],
        "rho_b": (1 - mu) * h["rho_kappa"],
    }


def _betaln(a: TensorVariable, b: TensorVariable) -> TensorVariable:
    return pt.gammaln(a) + pt.gammaln(b) - pt.gammaln(a + b)


def prior_key(data: ModelData, rows: np.ndarray) -> np.ndarray:
    """What a memory's prior depends on, one row per memory in ``rows``: (group, covariates).

    Memories with equal keys have identical mixture weights and rho priors for
    every theta (:func:`prior_terms`), which the row collapsing here and the
    recovery in :mod:`cmp_bayes.model.recover` both rely on.
    """
    return np.column_stack([data.group_index[rows].astype(np.float64), data.covariates[rows]])


def unique_rows(data: ModelData, rows: np.ndarray, *keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Representatives of ``rows`` with distinct (keys, covariates, group), and their counts.

    Returns
    -------
    (ndarray of int (R,), ndarray of float (R,)): one memory index per distinct row
    and how many of ``rows`` share it.
    """
    if rows.size == 0:
        return rows, np.zeros(0)
    cols = [np.asarray(k, dtype=np.float64)[rows] for k in keys]
    key = np.column_stack([*cols, prior_key(data, rows)])
    _, first, count = np.unique(key, axis=0, return_index=True, return_counts=True)
    return rows[first], count.astype(np.float64)


def build_model(data: ModelData, config: ModelConfig) -> pm.Model:
    """The PyMC model over the hyperparameters (see the module docstring)."""
    coords = {
        "memory": data.memory,
        "component": list(COMPONENTS),
        "effect_kind": list(EFFECT_KINDS),
    }
    if data.spline is not None:
        coords["spline_basis"] = np.arange(data.spline.shape[1])
    if data.covariate_names:
        coords["covariate"] = data.covariate_names
    if data.use_groups:
        coords["memory_group"] = data.groups
    c = config
    with pm.Model(coords=coords) as model:
        h: dict[str, Any] = {}
        if not data.null_atom:
            h["tau_null_sd"] = pm.LogNormal("tau_null_sd", mu=np.log(c.null_sd[0]), sigma=c.null_sd[1])
        if data.spline is None:
            h["tau_helps_mean"] = pm.LogNormal("tau_helps_mean", mu=np.log(c.help_mean[0]), sigma=c.help_mean[1])
            h["tau_helps_sd"] = pm.LogNormal("tau_helps_sd", mu=np.log(c.help_sd[0]), sigma=c.help_sd[1])
            h["tau_hurts_mean"] = pm.LogNormal("tau_hurts_mean", mu=np.log(c.harm_mean[0]), sigma=c.harm_mean[1])
            h["tau_hurts_sd"] = pm.LogNormal("tau_hurts_sd", mu=np.log(c.harm_sd[0]), sigma=c.harm_sd[1])
        else:
            h["tau_spline_coef"] = pm.Normal("tau_spline_coef", 0.0, c.spline_coef_sd, dims="spline_basis")
        h |= {
            "weight_intercept": pm.Normal(
                "weight_intercept", mu=c.weight_intercept[0], sigma=c.weight_intercept[1],
                dims="effect_kind",
            ),
            "rho_intercept": pm.Normal("rho_intercept", mu=c.rho_intercept[0], sigma=c.rho_intercept[1]),
            "rho_kappa": pm.LogNormal("rho_kappa", mu=np.log(c.rho_kappa[0]), sigma=c.rho_kappa[1]),
        }
        if data.learn_null_mean:
            # a memory that does nothing still takes a slot, so its design contrast is
            # minus what it displaces (about -0.04 in a store where a tenth of memories
            # add 0.4); with the null fixed at 0 that shift went to the "hurts"
            # component, whose weights then mixed badly. Bounded: far from 0 the null
            # could trade places with "hurts" (a chain once parked it at -0.5). A Normal
            # on an interval transform is the truncated Normal up to a constant
            # (TruncatedNormal would make numba draw its prior in object mode, with a
            # warning); prior draws are the untruncated Normal's (0.1% beyond the bound).
            h["tau_null_mean"] = pm.Normal(
                "tau_null_mean", mu=c.null_mean[0], sigma=c.null_mean[1],
                transform=Interval(-NULL_MEAN_BOUND, NULL_MEAN_BOUND),
            )
        if data.covariate_names:
            h["weight_coef"] = pm.Normal("weight_coef", 0.0, c.coef_sd, dims=("effect_kind", "covariate"))
            h["rho_coef"] = pm.Normal("rho_coef", 0.0, c.coef_sd, dims="covariate")
        if data.use_groups:
            # non-centred: few groups, weakly informed sd
            h["weight_group_sd"] = pm.HalfNormal("weight_group_sd", c.group_sd)
            h["weight_group_z"] = pm.Normal("weight_group_z", 0, 1, dims=("effect_kind", "memory_group"))
            h["rho_group_sd"] = pm.HalfNormal("rho_group_sd", c.group_sd)
            h["rho_group_z"] = pm.Normal("rho_group_z", 0, 1, dims="memory_group")
        # Memories whose terms are the same function of theta (same likelihood pattern,
        # covariates and group; same retrieval counts for rho) are summed once with
        # their multiplicity: exact, and the cost per gradient stops growing with M.
        rows, count = unique_rows(data, data.informative, data.pattern)
        if rows.size:
            terms = prior_terms(h, data, rows)
            # the likelihood integrals are computed once per distinct pattern, then gathered
            used, local = np.unique(data.pattern[rows], return_inverse=True)
            lik = np.exp(data.pattern_loglik[used])  # (P, G) in [0, 1], row max 1
            comp_p = pt.dot(pt.as_tensor_variable(lik), pt.exp(terms["log_pmf"]).T)  # (P, 3)
            comp = comp_p[local.reshape(-1)]  # (rows, 3)
            # log sum_k w_k comp_k with w = softmax(0, eta): two exps and two logs per row
            # (cheaper than a logsumexp; eta stays far from overflow under its priors)
            odds = pt.exp(terms["eta"])
            num = comp[:, 0] + pt.sum(odds * comp[:, 1:], axis=1)
            # the floor only matters for rows whose likelihood is negligible under every component
            lmix = pt.log(pt.maximum(num, 1e-300))
            logfeas = data.log_feasibility()
            if logfeas is None:
                lmix = lmix - pt.log1p(pt.sum(odds, axis=1))
            else:
                # truncated prior: divide by its feasible mass sum_k w_k (p_k . exp(F)); the
                # softmax's denominator 1 + sum(odds) cancels between the two. F depends on the
                # control arm only, so patterns share far fewer distinct F rows (10k memories:
                # 566 of 2257)
                frows, floc = np.unique(logfeas[used], axis=0, return_inverse=True)
                feas_p = pt.dot(pt.as_tensor_variable(np.exp(frows)), pt.exp(terms["log_pmf"]).T)
                feas = feas_p[floc.reshape(-1)[local.reshape(-1)]]
                lmix = lmix - pt.log(feas[:, 0] + pt.sum(odds * feas[:, 1:], axis=1))
            pm.Potential("tau_marginal", pt.sum(count * lmix))
        keep, count = unique_rows(
            data, np.flatnonzero(data.in_store > 0), data.retrieved, data.in_store
        )
        if keep.size:
            terms = prior_terms(h, data, keep)
            y, n = data.retrieved[keep], data.in_store[keep]
            a, b = terms["rho_a"], terms["rho_b"]
            pm.Potential("rho_marginal", pt.sum(count * (_betaln(y + a, n - y + b) - _betaln(a, b))))
    return model
