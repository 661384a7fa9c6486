"""The tau quadrature grid and the per-memory log-likelihood matrix on it.

Each memory's conditional utility tau_m lives on a fixed grid of G points in
[-1, 1]. Its exposed-arm likelihood is evaluated at every grid point ONCE, as
data (an M x G matrix), so the sampler only sees the hyperparameters and the
cost of a gradient is one (M x G) @ (G x 3) product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy import special, stats

#: Probabilities are clipped to [EPS, 1 - EPS] where b + tau leaves (0, 1).
EPS: float = 1e-6
#: Floor of the pooled outcome variance of fractional outcomes (outcome units squared).
VAR_FLOOR: float = 1e-4


@dataclass(frozen=True)
class TauGrid:
    """Grid points, cell edges and cell widths (all in outcome units).

    Attributes
    ----------
    points : ndarray, shape (G,)
        Grid points, increasing, symmetric, with 0 the middle point.
    edges : ndarray, shape (G + 1,)
        Cell boundaries (midpoints between points; -1 and 1 at the ends).
    widths : ndarray, shape (G,)
        Cell widths; a density f becomes the pmf f(points) * widths.
    """

    points: np.ndarray
    edges: np.ndarray
    widths: np.ndarray

    @classmethod
    def make(cls, size: int, curvature: float) -> TauGrid:
        """A sinh-spaced grid: dense near 0 where the null effects live."""
        u = np.linspace(-1.0, 1.0, size)
        points = np.sinh(curvature * u) / np.sinh(curvature)
        points[size // 2] = 0.0
        edges = np.concatenate([[-1.0], (points[1:] + points[:-1]) / 2, [1.0]])
        return cls(points=points, edges=edges, widths=np.diff(edges))


def arm_arrays(stats: xr.Dataset) -> dict[str, np.ndarray]:
    """Arm counts and sums per memory as float64 arrays of shape (M,) (or (M, Q))."""
    names = (
        "exposed", "exposed_outcome_sum", "exposed_outcome_sumsq",
        "control", "control_outcome_sum", "control_outcome_sumsq",
    )
    return {n: np.asarray(stats[n].values, dtype=np.float64) for n in names}


def likelihood_patterns(
    arms: dict[str, np.ndarray], outcome_kind: str, resolution: float
) -> tuple[np.ndarray, np.ndarray]:
    """Group memories whose exposed-arm likelihoods are the same up to ``resolution``.

    Binary: same (n1, y1), control-arm mean within ``resolution`` and control
    size within 5% (so the baseline posterior's sd within ~2.5%). Fractional:
    same n1, arm-mean difference within ``resolution``, variance within 5%.
    Each pattern's likelihood is computed from its first member. With
    ``resolution`` = 0.0025 the baseline moves by at most 1/20 of its posterior
    sd at 400 control steps; the number of patterns stops growing with M, so the
    sampler's cost per gradient does too. ``resolution`` = 0 groups only
    identical arms.

    Returns
    -------
    first : ndarray of int, shape (P,)
        A representative memory per pattern (rows of ``arms``).
    index : ndarray of int, shape (M,)
        The pattern of each memory.
    """
    n1, y1 = arms["exposed"], arms["exposed_outcome_sum"]
    n0, y0 = arms["control"], arms["control_outcome_sum"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean0 = np.where(n0 > 0, y0 / n0, -1.0)
        if outcome_kind == "binary":
            a, b = y1, mean0
            c = np.log1p(n0)
        else:
            a = np.where(n1 > 0, y1 / n1, 0.0) - mean0
            b = np.log(np.maximum(arms["exposed_outcome_sumsq"] + arms["control_outcome_sumsq"], 1e-12))
            c = np.log1p(n0)
    if resolution > 0:
        if outcome_kind == "binary":
            key = np.column_stack([n1, a, np.round(b / resolution), np.round(c / 0.05)])
        else:
            key = np.column_stack([n1, np.round(a / resolution), np.round(b / 0.05), np.round(c / 0.05)])
    else:
        key = np.column_stack([n1, y1, n0, y0, arms["exposed_outcome_sumsq"], arms["control_outcome_sumsq"]])
    _, first, index = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, index.reshape(-1)


def log_likelihood(
    arms: dict[str, np.ndarray], grid: TauGrid, outcome_kind: str, baseline_nodes: int,
    chunk: int = 2048,
) -> np.ndarray:
    """Log-likelihood of each memory's exposed arm at each grid point.

    Binary outcomes: y1 ~ Binomial(n1, b + tau), with the baseline b integrated
    over its control-arm posterior Beta(y0 + 1/2, n0 - y0 + 1/2) (Jeffreys prior)
    by ``baseline_nodes`` equal-probability quantile nodes. Fractional outcomes:
    the difference of arm means d ~ Normal(tau, v (1/n1 + 1/n0)) with v the
    pooled within-arm variance (floored at ``VAR_FLOOR``).
    Rows without exposures are 0 (a flat likelihood: the arm says nothing).

    Parameters
    ----------
    arms : dict of ndarray, each shape (M,)
        Output of :func:`arm_arrays` (flattened when per pair).
    grid : TauGrid
    outcome_kind : {"binary", "fractional"}
    baseline_nodes : int

    Returns
    -------
    ndarray, shape (M, G)
        Each informative row shifted so that its maximum is 0 (constants do not
        matter to the posterior or the hyperparameters' likelihood).
    """
    n1, y1 = arms["exposed"], arms["exposed_outcome_sum"]
    n0, y0 = arms["control"], arms["control_outcome_sum"]
    m = n1.shape[0]
    out = np.zeros((m, grid.points.size))
    rows = np.flatnonzero(n1 > 0)
    if outcome_kind == "binary":
        q = (np.arange(baseline_nodes) + 0.5) / baseline_nodes
        for start in range(0, rows.size, chunk):
            r = rows[start : start + chunk]
            a = y0[r] + 0.5
            b = np.maximum(n0[r] - y0[r], 0.0) + 0.5
            base = stats.beta.ppf(q[None, :], a[:, None], b[:, None])  # (r, K)
            p = np.clip(base[:, :, None] + grid.points[None, None, :], EPS, 1 - EPS)
            ll = y1[r, None, None] * np.log(p) + (n1[r] - y1[r])[:, None, None] * np.log1p(-p)
            out[r] = special.logsumexp(ll, axis=1) - np.log(baseline_nodes)
    else:
        s1, s0 = arms["exposed_outcome_sumsq"], arms["control_outcome_sumsq"]
        r = rows
        mean1 = y1[r] / n1[r]
        mean0 = np.where(n0[r] > 0, y0[r] / np.maximum(n0[r], 1), 0.5)
        ss = (s1[r] - n1[r] * mean1**2) + np.where(n0[r] > 0, s0[r] - n0[r] * mean0**2, 0.0)
        dof = n1[r] + n0[r] - 2
        pooled = np.where(dof > 0, ss / np.maximum(dof, 1), 0.25)
        v = np.maximum(pooled, VAR_FLOOR)
        var = v * (1 / n1[r] + 1 / np.maximum(n0[r], 1))
        d = mean1 - mean0
        out[r] = -0.5 * (d[:, None] - grid.points[None, :]) ** 2 / var[:, None]
    out[rows] -= out[rows].max(axis=1, keepdims=True)
    return out
