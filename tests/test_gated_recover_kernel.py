"""The gated recovery's numba kernels against their numpy formulas (cmp_bayes.model.gated_recover_kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from cmp_bayes.model.gated_kernel import FLOOR
from cmp_bayes.model.gated_recover_kernel import (
    class_memory_means,
    memory_products,
    pair_moments,
    stored_pair_terms,
)

G = 31


@pytest.fixture(scope="module")
def case():
    """Distinct likelihood rows, three memories (one of 900 pairs, whose product must be
    rescaled), gate probabilities, a null pmf and the grid."""
    rng = np.random.default_rng(7)
    pts = np.linspace(-1, 1, G)
    lik = rng.random((9, G)) ** 3
    lik[3, :5] = 0.0  # truncation: infeasible cells
    lik /= lik.max(axis=1, keepdims=True)
    sizes = [4, 900, 1]
    unit = rng.integers(0, lik.shape[0], sum(sizes)).astype(np.int64)
    starts = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    p = rng.uniform(0.01, 0.99, unit.size)
    q = rng.random(G)
    q /= q.sum()
    return lik, unit, starts, p, q, pts


def _terms(lik, unit, p, q):
    """Each pair's A_ig = max(p L + (1 - p) n, FLOOR) and r_ig = p L / A_ig (numpy, expanded)."""
    null = lik @ q
    top = p[:, None] * lik[unit]
    den = np.maximum(top + ((1 - p) * null[unit])[:, None], FLOOR)
    return den, top / den


def test_memory_products_equal_the_log_sum(case) -> None:
    lik, unit, starts, p, q, _ = case
    den, _ = _terms(lik, unit, p, q)
    got = memory_products(lik, lik @ q, unit, starts, p)
    for k in range(starts.size - 1):
        log = np.log(den[starts[k]:starts[k + 1]]).sum(axis=0)
        # a cell that falls below the rescaling bound (1e-150 of the row's maximum) may pass
        # through subnormals or flush to 0 in the running product; it weighs nothing in
        # the posterior (row maximum 1)
        np.testing.assert_allclose(got[k], np.exp(log - log.max()), rtol=1e-9, atol=1e-150)
    # the 900-pair memory's raw product underflows a double: only rescaling keeps it
    assert np.prod(den[starts[1]:starts[2]], axis=0).max() == 0.0
    assert got[1].max() == 1.0


def test_pair_moments_and_stored_terms_equal_their_formulas(case) -> None:
    lik, unit, starts, p, q, pts = case
    den, r = _terms(lik, unit, p, q)
    null = lik @ q
    null_mean = (lik * q) @ pts / null
    rng = np.random.default_rng(1)
    post = rng.random((starts.size - 1, G))
    post /= post.sum(axis=1, keepdims=True)
    first_positive = int(np.argmax(pts > 0))
    mem = np.repeat(np.arange(starts.size - 1), np.diff(starts))
    p_rel, e_tau, p_pos = pair_moments(lik, null, null_mean, unit, starts, p, post, pts, first_positive)
    w = post[mem] * r
    np.testing.assert_allclose(p_rel, w.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(e_tau, w @ pts + (1 - w.sum(axis=1)) * null_mean[unit], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(p_pos, w[:, pts > 0].sum(axis=1), rtol=1e-12, atol=1e-300)
    cell = rng.integers(0, G, starts.size - 1)
    pz, log_none = stored_pair_terms(lik, null, unit, starts, p, cell)
    np.testing.assert_array_equal(pz, r[np.arange(unit.size), cell[mem]])
    want = np.zeros((starts.size - 1, G))
    np.add.at(want, mem, np.log1p(-np.minimum(r, 1 - 1e-15)))
    np.testing.assert_allclose(log_none, want, rtol=1e-10)


def test_class_memory_means_equal_the_sums_over_draws() -> None:
    rng = np.random.default_rng(3)
    n_class, n_mem, s, n = 5, 7, 13, 40
    p_class, d_mean, d_pos = rng.random((n_class, s)), rng.normal(size=(n_mem, s)), rng.random((n_mem, s))
    null_mean = rng.normal(size=s)
    cls, mem = rng.integers(0, n_class, n).astype(np.int64), rng.integers(0, n_mem, n).astype(np.int64)
    # a block of draws is a column slice, as the recovery passes it
    sp, st, spos = class_memory_means(p_class[:, :9], d_mean[:, :9], d_pos[:, :9], null_mean[:9], cls, mem)
    pc = p_class[cls, :9]
    np.testing.assert_allclose(sp, pc.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(st, (pc * d_mean[mem, :9] + (1 - pc) * null_mean[None, :9]).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(spos, (pc * d_pos[mem, :9]).sum(axis=1), rtol=1e-12)
