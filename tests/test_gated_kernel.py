"""The gated model's fused marginal-likelihood Op (cmp_bayes.model.gated_kernel).

Checked against independent computations: the value against the log-domain sum
over pairs (with memories long enough for the running product to be rescaled,
and a row whose terms underflow to the floor), the gradient against central
finite differences of that log-domain value, the Op inside a graph under both
PyTensor backends (C through ``perform``, numba directly, without object mode),
and the distinct-row compression.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.special import logsumexp

from cmp_bayes.model.gated_kernel import (
    _RESCALE,
    FLOOR,
    distinct_rows,
    gated_marginal,
    gated_marginal_kernel,
)

G = 21


def _inputs(seed: int, pairs_per_memory: tuple[int, ...], floor: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = sum(pairs_per_memory)
    loglik = -rng.gamma(2.0, 8.0, size=(7, G))  # 7 distinct rows, some values far below the maximum
    loglik -= loglik.max(axis=1, keepdims=True)
    loglik[6] = np.where(np.arange(G) < G // 2, -800.0, 0.0)  # terms that underflow to 0 on half the grid
    # rows 4 and 5 peak at opposite ends and fall steeply: a memory alternating them has a small
    # product at every grid point
    loglik[4] = -np.linspace(0.0, 30.0, G)
    loglik[5] = loglik[4][::-1]
    unit = rng.integers(0, 7, size=n)
    if n > 200:
        unit[:200] = np.tile([4, 5], 100)
    q = rng.dirichlet(np.ones(G))
    # feasibility: the share of baseline nodes with b + tau_g in [0, 1]; row 3's baseline near 1
    # leaves no room above tau = 0, rows 0-1 are a clipped likelihood's (all ones)
    feas = np.clip(1.0 - rng.random((7, G)) * np.linspace(0, 1, G)[None, :] ** 2, 0.0, 1.0)
    feas[0:2] = 1.0
    feas[3, G // 2 + 1 :] = 0.0
    if floor:
        # the null's mass only where row 6 underflows: its null term is 0, and p * L meets the floor
        q[G // 2 :] = 0.0
        q /= q.sum()
    return {
        "lik": np.exp(loglik), "feas": feas, "unit": unit.astype(np.int64),
        "starts": np.r_[0, np.cumsum(pairs_per_memory)].astype(np.int64),
        "p": rng.uniform(0.01, 0.99, size=n), "q": q, "prior": rng.dirichlet(np.ones(G)),
    }


def _null(lik, feas, q) -> np.ndarray:
    """Each row's likelihood under the null pmf restricted to its feasible effects."""
    return (lik @ q) / np.maximum(feas @ q, FLOOR)


def _direct(lik, feas, unit, starts, p, q, prior) -> float:
    """sum_m log sum_g prior_g prod_i A_ig, in logs (no rescaling needed)."""
    null = _null(lik, feas, q)
    log_a = np.log(np.maximum(p[:, None] * lik[unit] + ((1 - p) * null[unit])[:, None], FLOOR))
    total = 0.0
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        with np.errstate(divide="ignore"):
            total += logsumexp(np.log(prior) + log_a[a:b].sum(axis=0))
    return float(total)


# one memory of 240 pairs: its running product falls below the rescaling point
CASES = [(0, (1, 3, 2, 5)), (1, (240, 2)), (2, (1,) * 9)]


def test_long_memory_needs_rescaling() -> None:
    x = _inputs(1, (240, 2))
    p, unit = x["p"][:240], x["unit"][:240]
    a = p[:, None] * x["lik"][unit] + ((1 - p) * _null(x["lik"], x["feas"], x["q"])[unit])[:, None]
    assert np.log(a).sum(axis=0).max() < np.log(_RESCALE)  # so the CASES above exercise it


@pytest.mark.parametrize(("seed", "sizes"), CASES)
def test_value_equals_the_log_domain_sum(seed, sizes) -> None:
    x = _inputs(seed, sizes)
    value, *_ = gated_marginal_kernel(**x)
    np.testing.assert_allclose(value, _direct(**x), rtol=1e-11)


@pytest.mark.parametrize(("seed", "sizes"), CASES)
def test_gradient_equals_finite_differences(seed, sizes) -> None:
    x = _inputs(seed, sizes)
    _, dp, dq, dprior = gated_marginal_kernel(**x)
    h = 1e-6
    for name, grad in (("p", dp), ("q", dq), ("prior", dprior)):
        num = np.empty_like(grad)
        for j in range(grad.size):
            up, down = dict(x), dict(x)
            up[name], down[name] = x[name].copy(), x[name].copy()
            up[name][j] += h
            down[name][j] -= h
            num[j] = (_direct(**up) - _direct(**down)) / (2 * h)
        # central differences of a smooth function: error O(h^2 f''') plus rounding O(eps f / h)
        np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-6, err_msg=name)


def test_floor_binds_without_breaking_value_or_gradient() -> None:
    x = _inputs(6, (3, 4, 2), floor=True)
    x["unit"][:] = 6
    null = _null(x["lik"], x["feas"], x["q"])
    assert null[6] == 0.0  # so half of every term is p * 0: the floor
    value, dp, _, _ = gated_marginal_kernel(**x)
    np.testing.assert_allclose(value, _direct(**x), rtol=1e-11)
    h = 1e-6
    for j in range(dp.size):
        up, down = dict(x), dict(x)
        up["p"], down["p"] = x["p"].copy(), x["p"].copy()
        up["p"][j] += h
        down["p"][j] -= h
        np.testing.assert_allclose(dp[j], (_direct(**up) - _direct(**down)) / (2 * h), rtol=1e-5)


def test_distinct_rows_reconstruct_the_array() -> None:
    rng = np.random.default_rng(3)
    base = rng.random((4, G))
    lik = base[rng.integers(0, 4, size=50)]
    rows, unit = distinct_rows(lik)
    assert rows.shape[0] == np.unique(lik, axis=0).shape[0] <= 4
    np.testing.assert_array_equal(rows[unit], lik)


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_op_in_a_graph_both_backends(mode) -> None:
    x = _inputs(4, (2, 4, 1, 7))
    eta = pt.dvector("eta")
    q_raw, prior_raw = pt.dvector("q_raw"), pt.dvector("prior_raw")
    q = pt.special.softmax(q_raw)
    prior = pt.special.softmax(prior_raw)
    value = gated_marginal(x["lik"], x["feas"], x["unit"], x["starts"], pt.sigmoid(eta), q, prior)
    grads = pytensor.grad(value, [eta, q_raw, prior_raw])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Numba will use object mode")
        fn = pytensor.function([eta, q_raw, prior_raw], [value, *grads], mode=mode)
    rng = np.random.default_rng(5)
    e = rng.normal(size=x["p"].size)
    qr, pr = np.log(x["q"] + 1e-3), rng.normal(size=G)
    got_value, got_de, got_dq, got_dpr = fn(e, qr, pr)

    def f(e, qr, pr) -> float:
        sq, sp = np.exp(qr - logsumexp(qr)), np.exp(pr - logsumexp(pr))
        return _direct(x["lik"], x["feas"], x["unit"], x["starts"], 1 / (1 + np.exp(-e)), sq, sp)

    np.testing.assert_allclose(got_value, f(e, qr, pr), rtol=1e-11)
    h = 1e-6
    for k, got in ((0, got_de), (1, got_dq), (2, got_dpr)):
        args = [e, qr, pr]
        for j in range(got.size):
            up = [a.copy() for a in args]
            down = [a.copy() for a in args]
            up[k][j] += h
            down[k][j] -= h
            np.testing.assert_allclose(got[j], (f(*up) - f(*down)) / (2 * h), rtol=1e-5, atol=1e-6)
