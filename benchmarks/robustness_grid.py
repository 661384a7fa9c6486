"""Grid posteriors for the robustness study: an NPMLE plug-in and the oracle prior.

Both use the model's own tau grid and each memory's exposed-arm likelihood on
it (``cmp_bayes.model.build.model_data``: the truncated likelihood, baseline
integrated over its control-arm posterior), so they differ from the fitted
model only in the prior:

* NPMLE: the prior pmf over the grid cells that maximises the marginal
  likelihood of the exposed memories, ``sum_m log(l_m . f)``, by EM (see
  :func:`npmle` for why without the truncation normaliser). One prior for
  all memories: no rank covariate, no groups.
* oracle: the histogram of the true taus of all memories over the cells.

A memory's posterior is ``f * l_m`` normalised; tau is uniform within its
cell (as the model's recovery draws it with ``jitter``), which gives means,
P(tau > u) and equal-tailed intervals in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from cmp_bayes.model.build import model_data
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.grid import TauGrid


@dataclass
class GridLikelihood:
    """Each memory's likelihood and feasibility on the grid, shape (M, G) each."""

    grid: TauGrid
    lik: np.ndarray
    feas: np.ndarray
    exposed: np.ndarray

    @classmethod
    def from_stats(
        cls, stats: xr.Dataset, memory_group: np.ndarray | None, config: ModelConfig | None = None
    ) -> GridLikelihood:
        data = model_data(stats, config or ModelConfig(), memory_group)
        with np.errstate(under="ignore"):
            lik = np.exp(data.pattern_loglik[data.pattern])
            logfeas = data.pattern_logfeas
            feas = np.ones_like(lik) if logfeas is None else np.exp(logfeas[data.pattern])
        return cls(grid=data.grid, lik=lik, feas=feas, exposed=data.arms["exposed"] > 0)


def npmle(gl: GridLikelihood, iterations: int = 20000, tol: float = 1e-10) -> tuple[np.ndarray, dict]:
    """The NPMLE prior pmf over the grid cells, shape (G,), and how the iteration ended.

    EM on the mixing weights (Kiefer-Wolfowitz NPMLE; Jiang and Zhang 2009):
    ``f <- f * mean_m l_m / (l_m . f)``, which never lowers the marginal
    likelihood ``sum_m log(l_m . f)`` of the exposed memories. The truncated
    prior's normaliser is left out on purpose: with it, mass at cells that are
    infeasible for most memories costs them nothing (their prior is
    renormalised over the feasible cells), so the maximiser is not identified
    there and piles mass at the grid's ends (tried: 23% at tau = 0.66 on a log
    whose largest effect is 0.6). Without it, that mass is simply likelihood lost.
    EM from the uniform pmf approaches the (sparse) maximiser slowly: after the
    ``iterations`` cap the pmf is smoother than the exact NPMLE (the returned
    info says where it stopped).
    """
    lik = gl.lik[gl.exposed]
    g = lik.shape[1]
    f = np.full(g, 1.0 / g)
    prev = -np.inf
    value = prev
    done = 0
    while done < iterations:
        done += 1
        a = np.maximum(lik @ f, 1e-300)
        value = float(np.log(a).sum())
        f = f * (lik / a[:, None]).mean(axis=0)
        f /= f.sum()
        if value - prev < tol * max(1.0, abs(value)):
            break
        prev = value
    return f, {"iterations": done, "log_marginal": value}


def oracle_prior(grid: TauGrid, true_tau: np.ndarray) -> np.ndarray:
    """Histogram of the true taus over the grid's cells, as a pmf of shape (G,)."""
    t = np.clip(np.asarray(true_tau, dtype=np.float64), -1.0, 1.0)
    hist = np.histogram(t[np.isfinite(t)], bins=grid.edges)[0].astype(np.float64)
    return hist / hist.sum()


@dataclass
class GridPosterior:
    """Per-memory grid posterior summaries, each shape (M,)."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    weights: np.ndarray
    grid: TauGrid

    def p_above(self, u: float) -> np.ndarray:
        """P(tau > u) per memory, tau uniform within its cell."""
        e = self.grid.edges
        share = np.clip((e[1:] - u) / np.diff(e), 0.0, 1.0)
        return self.weights @ share


def grid_posterior(gl: GridLikelihood, prior: np.ndarray, level: float = 0.9) -> GridPosterior:
    """Posterior of every memory under ``prior`` (shape (G,)): mean and equal-tailed interval."""
    w = gl.lik * prior[None, :]
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    e = gl.grid.edges
    mids = (e[1:] + e[:-1]) / 2
    cdf = np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(w, axis=1)], axis=1)
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    lower = np.array([np.interp(lo_q, c, e) for c in cdf])
    upper = np.array([np.interp(hi_q, c, e) for c in cdf])
    return GridPosterior(mean=w @ mids, lower=lower, upper=upper, weights=w, grid=gl.grid)
