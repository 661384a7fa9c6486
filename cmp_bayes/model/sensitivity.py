"""Each exposed memory's tau posterior on the grid under a stated set of alternative priors.

A forget is irreversible, and where the data of a memory are few (a handful of
binary exposures) its P(useful) is mostly the prior's: how wide the null
component is, how many memories matter, how large a useful effect is. The data
cannot pin those down (docs/model.md, "Why the priors are informative"), so
:func:`cmp_bayes.decide` asks whether a forget survives when they are moved.

For each alternative, every kept hyperparameter draw theta is changed as the
alternative says (:data:`ALTERNATIVES`) and each memory's grid posterior
w_mg ∝ prior_mg(theta') exp(L_mg) is computed exactly (as in
:mod:`cmp_bayes.model.recover`: per (pattern, component) tables and the
memory's responsibilities), then averaged over draws (Rao-Blackwellised). The
result is a pmf over the grid cells per (alternative, memory); because recovered
tau draws are spread uniformly within their cell, P(tau > t) under it is exact
for any threshold t (linear within the cell that holds t). The alternative
``fitted`` is theta itself, so the grid and the draws can be compared.

The changed theta keeps the data's likelihood and the other hyperparameters as
drawn: this asks "what if the prior's shape were this, the rest as fitted",
not "refit under that prior" (a refit would let the other hyperparameters
move back; the question here is how much of a decision the stated shape makes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import numpy as np
import xarray as xr

from cmp_bayes.constants import (
    PRIOR_LOG_RATIO_FLOOR,
    PRIOR_LOG_RATIO_VAR,
    PRIOR_SENSITIVITY_GROUP,
    PRIOR_SENSITIVITY_VAR,
)
from cmp_bayes.model.build import ModelData, prior_key
from cmp_bayes.model.recover import compile_prior_terms, pointwise_context

Hyper = dict[str, np.ndarray]


def _change(name: str | None, op: str, by: float) -> Callable[[Hyper], Hyper]:
    """Theta with hyperparameter ``name`` multiplied (``op="*"``) or shifted (``"+"``) by ``by``."""
    if name is None:
        return lambda h: h
    if op == "*":
        return lambda h: {**h, name: h[name] * by}
    return lambda h: {**h, name: h[name] + by}


#: Each alternative prior: the hyperparameter it changes (None: none), and how.
_SPECS: Final[dict[str, tuple[str | None, str, float]]] = {
    "fitted": (None, "*", 1.0),
    "null_sd_half": ("tau_null_sd", "*", 0.5),
    "null_sd_double": ("tau_null_sd", "*", 2.0),
    "effect_share_double": ("weight_intercept", "+", float(np.log(2.0))),
    "helps_mean_half": ("tau_helps_mean", "*", 0.5),
    "shape_flat_half": ("tau_spline_coef", "*", 0.5),
}

#: The alternative priors, by name: how each changes a hyperparameter draw.
#: ``fitted`` changes nothing; the null's width halved and doubled (the data cannot
#: tell them apart, so a forget that depends on it is the prior's); twice the odds
#: of "helps" and of "hurts" against "null" (a store where twice as many memories
#: matter); a useful effect half as large (the small-effect stores of
#: reports/robustness, where the default prior pulls 0.05-0.1 effects into the null).
#: Under the flexible prior (``prior_family="gmodel"``) the fitted shape's spline
#: coefficients halved: a flatter effect distribution (half as far, in log density,
#: from uniform over the cells). Alternatives whose hyperparameter a fit lacks (a
#: null atom has no width, the g-model no helps location) are left out of it.
ALTERNATIVES: Final[dict[str, Callable[[Hyper], Hyper]]] = {
    a: _change(name, op, by) for a, (name, op, by) in _SPECS.items()
}
#: The hyperparameter each alternative changes (None: none).
CHANGES: Final[dict[str, str | None]] = {a: spec[0] for a, spec in _SPECS.items()}
#: What each alternative means, in words (the group's attrs and decide's reasons).
DESCRIPTIONS: Final[dict[str, str]] = {
    "fitted": "the fitted prior",
    "null_sd_half": "the null component half as wide",
    "null_sd_double": "the null component twice as wide",
    "effect_share_double": "twice the odds that a memory helps or hurts",
    "helps_mean_half": "useful effects half as large",
    "shape_flat_half": "the fitted effect distribution half as far from flat",
}
#: Hyperparameter draws (evenly thinned) the pmfs average over: the pmfs are exact
#: per draw, so what is left is the spread of theta, small beside the threshold's
#: margin (the Monte Carlo sd of an average of 100 P(useful) values in [0, 1] is at
#: most 0.05 and in practice far less: theta's posterior is narrow, and on the test
#: simulation the fitted pmf's P(tau > 0.05) is within 0.01 on average of the 500
#: draws'). About 0.25 s per fit of 800 memories.
SENSITIVITY_DRAWS: Final[int] = 100
GROUP, VARIABLE = PRIOR_SENSITIVITY_GROUP, PRIOR_SENSITIVITY_VAR
LOG_RATIO_VAR, LOG_RATIO_FLOOR = PRIOR_LOG_RATIO_VAR, PRIOR_LOG_RATIO_FLOOR


def applicable(hyper: Hyper | dict) -> list[str]:
    """The alternatives a fit with these hyperparameters (names) can be moved by, in order."""
    return [a for a, name in CHANGES.items() if name is None or name in hyper]


def grid_pmfs(
    data: ModelData, hyper: Hyper, draws: int = SENSITIVITY_DRAWS, *, with_ratio: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Posterior pmf of tau over the grid cells, per alternative and exposed memory.

    Parameters
    ----------
    data : ModelData
    hyper : dict name -> ndarray (S, ...)
        Hyperparameter draws, flattened over chains.
    draws : int
        At most this many of the S draws, evenly thinned.

    with_ratio : bool
        Also return each alternative's log-likelihood ratio (below).

    Returns
    -------
    ndarray, shape (A, Mi, G), float32
        A = len(applicable(hyper)), Mi = ``data.informative`` (memories with
        exposures, in that order), G grid cells; rows sum to 1.
    ndarray, shape (A,), float64 (with ``with_ratio``)
        Mean over the draws of log p(data | theta') - log p(data | theta): the
        exposed memories' marginal likelihood (the model's ``tau_marginal`` term,
        truncation normaliser included) under the alternative against the fitted
        prior. Strongly negative: the data rule the alternative out, and decide
        does not let it flip a forget (``LOG_RATIO_FLOOR``).
    """
    rows = data.informative
    g = data.grid.points.size
    names = applicable(hyper)
    out = np.zeros((len(names), rows.size, g))
    if rows.size == 0:
        return (out.astype(np.float32), np.zeros(len(names))) if with_ratio else out.astype(np.float32)
    # the same distinct priors as the recovery, so its compiled function is reused
    key = prior_key(data, np.arange(data.memory.size))
    _, first, prior_of = np.unique(key, axis=0, return_index=True, return_inverse=True)
    fn = compile_prior_terms(data, first)
    prior_of = prior_of.reshape(-1)[rows]
    lik = np.exp(data.pattern_loglik)  # (P, G)
    pats, pattern = np.unique(data.pattern[rows], return_inverse=True)
    lik = lik[pats]
    # the truncated prior's feasible mass per memory, as the pointwise log-likelihood has it
    pw = pointwise_context(data)
    feas, feas_of = pw.feas, pw.feas_of
    s = next(iter(hyper.values())).shape[0]
    picked = np.unique(np.linspace(0, s - 1, min(draws, s)).round().astype(int))
    total = np.zeros((len(names), picked.size))
    for a, change in enumerate(ALTERNATIVES[n] for n in names):
        for j, i in enumerate(picked):
            pmf, weight = fn(change({k: v[i] for k, v in hyper.items()}))[:2]
            dens = pmf[None, :, :] * lik[:, None, :]  # (P, 3, G)
            c = dens.sum(axis=2)  # (P, 3)
            with np.errstate(invalid="ignore", divide="ignore"):
                table = np.where(c[..., None] > 0, dens / c[..., None], 0.0)
            w = weight[prior_of]
            resp = w * c[pattern]  # (Mi, 3)
            marginal = np.maximum(resp.sum(axis=1, keepdims=True), 1e-300)
            ll = np.log(marginal[:, 0])
            if feas is not None:
                ll -= np.log(np.maximum(np.einsum("mk,mk->m", w, (feas @ pmf.T)[feas_of]), 1e-300))
            total[a, j] = ll.sum()
            resp /= marginal
            out[a] += np.einsum("mk,mkg->mg", resp, table[pattern])
        out[a] /= picked.size
    pmfs = out.astype(np.float32)
    if not with_ratio:
        return pmfs
    return pmfs, (total - total[names.index("fitted")]).mean(axis=1)


def sensitivity_group(
    data: ModelData,
    pmfs: np.ndarray,
    names: list[str] | None = None,
    log_ratio: np.ndarray | None = None,
) -> xr.Dataset:
    """The ``prior_sensitivity`` group: ``tau_pmf`` over (prior_alternative, memory, tau_cell).

    ``names``: the alternatives along ``pmfs``' first axis (default: all of
    :data:`ALTERNATIVES`; :func:`applicable` for a fit's own).
    """
    names = list(ALTERNATIVES) if names is None else names
    edges = data.grid.edges
    ds = xr.Dataset(
        {VARIABLE: (("prior_alternative", "memory", "tau_cell"), pmfs)},
        coords={
            "prior_alternative": names,
            "memory": data.memory[data.informative].astype(object),
            "tau_cell_lower": ("tau_cell", edges[:-1]),
            "tau_cell_upper": ("tau_cell", edges[1:]),
        },
    )
    if log_ratio is not None:
        ds[LOG_RATIO_VAR] = ("prior_alternative", np.asarray(log_ratio, dtype=np.float64))
        ds[LOG_RATIO_VAR].attrs["description"] = (
            "mean over hyperparameter draws of the exposed memories' log marginal likelihood "
            "under the alternative minus under the fitted prior (nats); below "
            f"{LOG_RATIO_FLOOR:.2f} (a likelihood ratio under 1/20) decide ignores the alternative"
        )
    ds[VARIABLE].attrs["description"] = (
        "posterior pmf of each exposed memory's tau over the grid cells under each alternative "
        "prior (uniform within a cell), averaged over hyperparameter draws; see docs/model.md"
    )
    ds.attrs["alternatives"] = json.dumps({n: DESCRIPTIONS[n] for n in names})
    return ds
