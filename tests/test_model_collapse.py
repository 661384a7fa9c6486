"""The model's cost-saving steps are exact: collapsed rows and the per-table recovery.

``build_model`` sums the terms of memories that share (pattern, covariates, group)
once, with their counts, and ``recover`` draws each memory's tau from per-(pattern,
component) tables. Both are checked here against the uncollapsed formulas computed
directly in numpy.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytest
from scipy.special import betaln

from cmp_bayes.model.build import build_model, model_data, unique_rows
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.recover import compile_prior_terms, sample_rows
from cmp_bayes.testing import synthetic_stats


@pytest.fixture(scope="module")
def small():
    stats, _ = synthetic_stats(400, seed=5)
    data = model_data(stats, ModelConfig(), None)
    return data, build_model(data, ModelConfig())


def test_collapsed_potentials_equal_the_sum_over_memories(small) -> None:
    data, model = small
    # rows do collapse here, or the test would not test the counts
    rows, count = unique_rows(data, data.informative, data.pattern)
    assert rows.size < data.informative.size and count.sum() == data.informative.size
    point = model.initial_point()
    # move off the initial point so that covariate coefficients are not all zero
    rng = np.random.default_rng(0)
    point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in point.items()}
    outs = model.replace_rvs_by_values([*model.potentials, *model.free_RVs])
    fn = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    res = fn(*[point[v.name] for v in model.value_vars])
    pots, hyper = res[:2], res[2:]
    values = {rv.name: v for rv, v in zip(model.free_RVs, hyper, strict=True)}
    pmf, weight, ra, rb = compile_prior_terms(data)(values)
    lik = np.exp(data.loglik[data.informative])  # (Mi, G), uncollapsed
    # each exposed memory's term is divided by the prior mass its baseline allows
    # (effect_bound="truncate", docs/model.md)
    feas = np.exp(data.pattern_logfeas[data.pattern[data.informative]])
    w = weight[data.informative]
    tau_ref = np.sum(np.log(np.sum(w * (lik @ pmf.T), axis=1)) - np.log(np.sum(w * (feas @ pmf.T), axis=1)))
    keep = data.in_store > 0
    y, n = data.retrieved[keep], data.in_store[keep]
    rho_ref = np.sum(betaln(y + ra[keep], n - y + rb[keep]) - betaln(ra[keep], rb[keep]))
    # float64 sums of ~400 terms of size ~10: agreement to 1e-9 relative is rounding
    np.testing.assert_allclose(pots[0], tau_ref, rtol=1e-9)
    np.testing.assert_allclose(pots[1], rho_ref, rtol=1e-9)


def _assert_each_row_drawn_by_its_shape(dens: np.ndarray, rng: np.random.Generator, n: int = 40_000) -> int:
    """Draw ``n`` cells from each row of ``dens`` and compare the frequencies with its shape."""
    for r in range(dens.shape[0]):
        idx = sample_rows(dens, np.full(n, r), rng.random(n))
        freq = np.bincount(idx, minlength=dens.shape[1]) / n
        p = dens[r] / dens[r].sum()
        # each cell's count is Binomial(n, p): 5 sd of the frequency (~1e-6 false alarms per cell)
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12), (r, freq, p)
    return n


def test_sample_rows_draws_each_rows_distribution() -> None:
    rng = np.random.default_rng(1)
    dens = rng.random((4, 9)) ** 3
    dens[1, 3:6] = 0.0  # zero-mass cells are never drawn
    dens[2] *= 1e-12  # a row of tiny mass is drawn as its own shape, not lost in rounding
    n = _assert_each_row_drawn_by_its_shape(dens, rng)
    assert not np.isin(sample_rows(dens, np.full(n, 1), rng.random(n)), [3, 4, 5]).any()


def test_sample_rows_survives_a_row_of_subnormal_mass() -> None:
    # A row whose total is subnormal has no finite reciprocal; before the fix its
    # 0 * inf = NaN ran through the shared cumulative sum and broke every later row.
    rng = np.random.default_rng(2)
    dens = rng.random((4, 9)) ** 3
    dens[1, :4] = 0.0
    dens[1] *= 1e-310 / dens[1].sum()
    assert 0 < dens[1].sum() < np.finfo(float).tiny and np.isinf(1.0 / dens[1].sum())
    _assert_each_row_drawn_by_its_shape(dens, rng)
