"""The tau quadrature grid and the per-memory log-likelihood matrix on it.

Each memory's conditional utility tau_m lives on a fixed grid of G points in
[-1, 1]. Its exposed-arm likelihood is evaluated at every grid point ONCE, as
data (an M x G matrix), so the sampler only sees the hyperparameters and the
cost of a gradient is one (M x G) @ (G x 3) product.

tau is a difference of two expected outcomes in [0, 1], so with the control-arm
baseline b it must keep b + tau in [0, 1]. ``bound="truncate"`` (the memory-level
model's default) gives the likelihood zero where b + tau leaves [0, 1] and
:func:`log_feasibility` gives the matching normaliser of the truncated prior;
``bound="clip"`` (the per-query pairs) clips b + tau instead, which leaves tau
unbounded above 1 - b: every value past the bound fits the data as well as the
bound itself (docs/model.md, "Why the posterior mean ranked below Hajek").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import xarray as xr
from scipy import special, stats

#: Probabilities are clipped to [EPS, 1 - EPS] where b + tau leaves (0, 1).
EPS: float = 1e-6
#: Floor of the pooled outcome variance of fractional outcomes (outcome units squared).
VAR_FLOOR: float = 1e-4
#: How the likelihood treats grid points where b + tau leaves [0, 1].
BOUNDS: tuple[str, ...] = ("truncate", "clip")


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
    same n1, arm-mean difference and control mean within ``resolution``,
    variance and control size within 5%.
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
            # the control mean too: the truncated likelihood's bound depends on it
            key = np.column_stack([
                n1, np.round(a / resolution), np.round(b / 0.05), np.round(c / 0.05),
                np.round(mean0 / resolution),
            ])
    else:
        key = np.column_stack([n1, y1, n0, y0, arms["exposed_outcome_sumsq"], arms["control_outcome_sumsq"]])
    _, first, index = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, index.reshape(-1)


def _baseline_nodes(n0: np.ndarray, y0: np.ndarray, baseline_nodes: int) -> np.ndarray:
    """Equal-probability quantile nodes of each control-arm baseline posterior, shape (r, K).

    Binary outcomes: Beta(y0 + 1/2, n0 - y0 + 1/2) (Jeffreys prior).
    """
    q = (np.arange(baseline_nodes) + 0.5) / baseline_nodes
    a = y0 + 0.5
    b = np.maximum(n0 - y0, 0.0) + 0.5
    return stats.beta.ppf(q[None, :], a[:, None], b[:, None])


def _fractional_arms(arms: dict[str, np.ndarray], r: np.ndarray) -> tuple[np.ndarray, ...]:
    """Fractional outcomes: arm-mean difference d, its variance, control mean and its sd."""
    n1, y1 = arms["exposed"][r], arms["exposed_outcome_sum"][r]
    n0, y0 = arms["control"][r], arms["control_outcome_sum"][r]
    s1, s0 = arms["exposed_outcome_sumsq"][r], arms["control_outcome_sumsq"][r]
    mean1 = y1 / n1
    mean0 = np.where(n0 > 0, y0 / np.maximum(n0, 1), 0.5)
    ss = (s1 - n1 * mean1**2) + np.where(n0 > 0, s0 - n0 * mean0**2, 0.0)
    dof = n1 + n0 - 2
    pooled = np.where(dof > 0, ss / np.maximum(dof, 1), 0.25)
    v = np.maximum(pooled, VAR_FLOOR)
    var = v * (1 / n1 + 1 / np.maximum(n0, 1))
    return mean1 - mean0, var, mean0, np.sqrt(v / np.maximum(n0, 1))


def _fractional_feasible(points: np.ndarray, mean0: np.ndarray, sd0: np.ndarray) -> np.ndarray:
    """P(0 <= b + tau_g <= 1) for b ~ Normal(mean0, sd0), shape (r, G)."""
    hi = (1.0 - points[None, :] - mean0[:, None]) / sd0[:, None]
    lo = (-points[None, :] - mean0[:, None]) / sd0[:, None]
    return np.maximum(special.ndtr(hi) - special.ndtr(lo), 0.0)


@overload
def log_likelihood(
    arms: dict[str, np.ndarray], grid: TauGrid, outcome_kind: str, baseline_nodes: int,
    chunk: int = 2048, bound: str = "clip", return_offset: Literal[False] = False,
) -> np.ndarray: ...
@overload
def log_likelihood(
    arms: dict[str, np.ndarray], grid: TauGrid, outcome_kind: str, baseline_nodes: int,
    chunk: int = 2048, bound: str = "clip", *, return_offset: Literal[True],
) -> tuple[np.ndarray, np.ndarray]: ...
def log_likelihood(
    arms: dict[str, np.ndarray], grid: TauGrid, outcome_kind: str, baseline_nodes: int,
    chunk: int = 2048, bound: str = "clip", return_offset: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Log-likelihood of each memory's exposed arm at each grid point.

    Binary outcomes: y1 ~ Binomial(n1, b + tau), with the baseline b integrated
    over its control-arm posterior Beta(y0 + 1/2, n0 - y0 + 1/2) (Jeffreys prior)
    by ``baseline_nodes`` equal-probability quantile nodes b_k:
    ``L_g = log mean_k Binomial(y1 | n1, b_k + tau_g) 1[0 <= b_k + tau_g <= 1]``
    (``bound="truncate"``) or with ``b_k + tau_g`` clipped to [1e-6, 1 - 1e-6]
    (``bound="clip"``). Fractional outcomes: the difference of arm means
    d ~ Normal(tau, v (1/n1 + 1/n0)) with v the pooled within-arm variance
    (floored at ``VAR_FLOOR``), times ``P(0 <= b + tau_g <= 1)`` for
    b ~ Normal(control mean, v / n0) when truncating.
    Rows without exposures are 0 (a flat likelihood: the arm says nothing).

    Parameters
    ----------
    arms : dict of ndarray, each shape (M,)
        Output of :func:`arm_arrays` (flattened when per pair).
    grid : TauGrid
    outcome_kind : {"binary", "fractional"}
    baseline_nodes : int
    chunk : int
        Memories per vectorised block (memory use ~ chunk x K x G floats).
    bound : {"clip", "truncate"}
    return_offset : bool
        Also return what each row's shift removed, so that ``out + offset[:, None]``
        is the full log-likelihood (for the pointwise log-likelihood of LOO,
        which must be comparable between model variants).

    Returns
    -------
    ndarray, shape (M, G)
        Each informative row shifted so that its maximum is 0 (constants do not
        matter to the posterior or the hyperparameters' likelihood); -inf where
        ``bound="truncate"`` makes b + tau infeasible for every baseline node.
    offset : ndarray, shape (M,)
        Only with ``return_offset``: the removed row maximum plus the data-only
        normaliser the rows leave out (binary: log C(n1, y1); fractional:
        -log(2 pi var) / 2 of the arm-mean difference), 0 for rows without
        exposures. It depends on the data and on ``bound`` and the grid, not on
        the hyperparameters.
    """
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    n1, y1 = arms["exposed"], arms["exposed_outcome_sum"]
    n0, y0 = arms["control"], arms["control_outcome_sum"]
    m = n1.shape[0]
    out = np.zeros((m, grid.points.size))
    rows = np.flatnonzero(n1 > 0)
    offset = np.zeros(m)
    if outcome_kind == "binary":
        offset[rows] = special.gammaln(n1[rows] + 1) - special.gammaln(y1[rows] + 1) - special.gammaln(
            n1[rows] - y1[rows] + 1
        )
        for start in range(0, rows.size, chunk):
            r = rows[start : start + chunk]
            base = _baseline_nodes(n0[r], y0[r], baseline_nodes)  # (r, K)
            raw = base[:, :, None] + grid.points[None, None, :]
            p = np.clip(raw, EPS, 1 - EPS)
            ll = y1[r, None, None] * np.log(p) + (n1[r] - y1[r])[:, None, None] * np.log1p(-p)
            if bound == "truncate":
                ll = np.where((raw >= 0) & (raw <= 1), ll, -np.inf)
            with np.errstate(divide="ignore"):
                out[r] = special.logsumexp(ll, axis=1) - np.log(baseline_nodes)
    elif rows.size:
        d, var, mean0, sd0 = _fractional_arms(arms, rows)
        offset[rows] = -0.5 * np.log(2 * np.pi * var)
        out[rows] = -0.5 * (d[:, None] - grid.points[None, :]) ** 2 / var[:, None]
        if bound == "truncate":
            with np.errstate(divide="ignore"):
                out[rows] += np.log(_fractional_feasible(grid.points, mean0, sd0))
    peak = out[rows].max(axis=1, keepdims=True)
    out[rows] -= peak
    if return_offset:
        offset[rows] += peak[:, 0]
        return out, offset
    return out


def log_feasibility(
    arms: dict[str, np.ndarray], grid: TauGrid, outcome_kind: str, baseline_nodes: int,
    chunk: int = 2048,
) -> np.ndarray:
    """Log prior probability that b + tau_g stays in [0, 1], per memory and grid point.

    ``F_g = log mean_k 1[0 <= b_k + tau_g <= 1]`` over the same baseline nodes as
    :func:`log_likelihood` (binary), or ``log P(0 <= b + tau_g <= 1)`` for
    b ~ Normal(control mean, v / n0) (fractional). With the truncated likelihood,
    a memory's marginal likelihood under a prior pmf f is
    ``sum_g f_g exp(L_g) / sum_g f_g exp(F_g)``: the denominator normalises the
    prior of (b, tau) restricted to its feasible set. Rows without exposures are 0.

    Returns
    -------
    ndarray, shape (M, G)
        0 where every node is feasible, -inf where none is.
    """
    n1 = arms["exposed"]
    n0, y0 = arms["control"], arms["control_outcome_sum"]
    out = np.zeros((n1.shape[0], grid.points.size))
    rows = np.flatnonzero(n1 > 0)
    if not rows.size:
        return out
    if outcome_kind == "binary":
        feasible = np.empty((rows.size, grid.points.size))
        for start in range(0, rows.size, chunk):
            r = rows[start : start + chunk]
            raw = _baseline_nodes(n0[r], y0[r], baseline_nodes)[:, :, None] + grid.points[None, None, :]
            feasible[start : start + r.size] = ((raw >= 0) & (raw <= 1)).mean(axis=1)
    else:
        _, _, mean0, sd0 = _fractional_arms(arms, rows)
        feasible = _fractional_feasible(grid.points, mean0, sd0)
    with np.errstate(divide="ignore"):
        out[rows] = np.log(feasible)
    return out
