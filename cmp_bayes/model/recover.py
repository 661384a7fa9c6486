"""Per-draw recovery of each memory's tau and rho from hyperparameter draws.

For one draw of theta, memory m's posterior on the grid is exactly
w_mg ∝ prior_mg(theta) exp(L_mg), and its prior (its own data excluded) is
prior_mg(theta). We draw one tau per draw from w (uniform within the grid cell
when ``jitter``), and one rho from its conjugate Beta posterior, and accumulate
the Rao-Blackwellised moments of both prior and posterior (law of total
variance over draws) for contraction and mean shift.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt

from cmp_bayes.model.build import ModelData, hyper_shapes, prior_terms


@dataclass
class Recovered:
    """Per-memory draws and Rao-Blackwellised moments.

    Attributes
    ----------
    tau, rho : ndarray, shape (S, M), float32
        One draw per hyperparameter draw.
    post_mean, post_sd, prior_mean, prior_sd : ndarray, shape (M,)
        Exact (on the grid) moments of tau, averaged over the S draws.
    p_positive : ndarray, shape (M,)
        Rao-Blackwellised P(tau > 0 | data).
    p_helps : ndarray, shape (M,)
        Rao-Blackwellised posterior probability that the memory belongs to the
        "helps" component of the mixture (its prior weight when it has no data).
    """

    tau: np.ndarray
    rho: np.ndarray
    post_mean: np.ndarray
    post_sd: np.ndarray
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    p_positive: np.ndarray
    p_helps: np.ndarray


def compile_prior_terms(data: ModelData):
    """A compiled function theta (keyword arrays) -> (pmf (3, G), weight (M, 3), rho_a, rho_b)."""
    shapes = hyper_shapes(data)
    inputs = {n: pt.tensor(name=n, shape=s, dtype="float64") for n, s in shapes.items()}
    terms = prior_terms(inputs, data)
    fn = pytensor.function(
        list(inputs.values()),
        [pt.exp(terms["log_pmf"]), pt.exp(terms["log_weight"]), terms["rho_a"], terms["rho_b"]],
        on_unused_input="ignore",
    )
    names = list(inputs)
    return lambda values: fn(*[np.asarray(values[n], dtype=np.float64) for n in names])


def recover(
    data: ModelData,
    hyper: dict[str, np.ndarray],
    rng: np.random.Generator,
    *,
    use_data: bool = True,
    jitter: bool = True,
) -> Recovered:
    """Draw tau and rho per memory for each of the S hyperparameter draws.

    Parameters
    ----------
    data : ModelData
    hyper : dict name -> ndarray of shape (S, *shape)
        Hyperparameter draws, flattened over chains.
    rng : numpy Generator
    use_data : bool
        False draws from the prior (the prior group): no likelihood, rho from its Beta prior.
    jitter : bool
        Spread tau uniformly within its grid cell.
    """
    fn = compile_prior_terms(data)
    s = next(iter(hyper.values())).shape[0]
    m, g = data.loglik.shape
    pts, edges, widths = data.grid.points, data.grid.edges, data.grid.widths
    lik = np.exp(data.loglik) if use_data else None
    tau = np.empty((s, m), dtype=np.float32)
    rho = np.empty((s, m), dtype=np.float32)
    acc = {k: np.zeros(m) for k in ("pm", "pm2", "pv", "qm", "qm2", "qv", "ppos", "phelp")}
    y, n = data.retrieved, data.in_store
    pos = pts > 0
    for i in range(s):
        pmf, weight, ra, rb = fn({k: v[i] for k, v in hyper.items()})
        prior = weight @ pmf  # (M, G)
        qm = prior @ pts
        qv = np.maximum(prior @ pts**2 - qm**2, 0.0)
        acc["qm"] += qm
        acc["qm2"] += qm**2
        acc["qv"] += qv
        # component responsibilities: w_mk * (lik_m . pmf_k) / sum over k
        resp = weight * (lik @ pmf.T) if use_data else weight
        acc["phelp"] += resp[:, 1] / resp.sum(axis=1)
        post = prior * lik if use_data else prior
        post /= post.sum(axis=1, keepdims=True)
        pmn = post @ pts
        acc["pm"] += pmn
        acc["pm2"] += pmn**2
        acc["pv"] += np.maximum(post @ pts**2 - pmn**2, 0.0)
        acc["ppos"] += post[:, pos].sum(axis=1)
        cdf = np.cumsum(post, axis=1)
        u = rng.random(m) * cdf[:, -1]
        idx = np.minimum((cdf < u[:, None]).sum(axis=1), g - 1)
        t = pts[idx]
        if jitter:
            t = edges[idx] + rng.random(m) * widths[idx]
        tau[i] = t
        if use_data:
            rho[i] = rng.beta(ra + y, rb + np.maximum(n - y, 0.0))
        else:
            rho[i] = rng.beta(ra, rb)
    # law of total variance over the hyperparameter draws
    post_mean = acc["pm"] / s
    post_sd = np.sqrt(np.maximum(acc["pv"] / s + acc["pm2"] / s - post_mean**2, 0.0))
    prior_mean = acc["qm"] / s
    prior_sd = np.sqrt(np.maximum(acc["qv"] / s + acc["qm2"] / s - prior_mean**2, 0.0))
    return Recovered(
        tau=tau, rho=rho, post_mean=post_mean, post_sd=post_sd,
        prior_mean=prior_mean, prior_sd=prior_sd, p_positive=acc["ppos"] / s,
        p_helps=acc["phelp"] / s,
    )
