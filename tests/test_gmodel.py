"""The flexible prior (``ModelConfig(prior_family="gmodel")``): basis, components, likelihood, a real fit."""

from __future__ import annotations

import numpy as np
import pytest

from cmp_bayes.constants import CI_PROB, IDENTIFIED
from cmp_bayes.errors import ConfigError
from cmp_bayes.model import sensitivity
from cmp_bayes.model.build import hyper_shapes, model_data, spline_basis
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.recover import compile_prior_terms
from cmp_bayes.testing import synthetic_stats

GMODEL = ModelConfig(prior_family="gmodel")
ATOM = ModelConfig(prior_family="gmodel", gmodel_null="atom")


def test_spline_basis_spans_shapes_not_scale() -> None:
    q = spline_basis(121, 8)
    assert q.shape == (121, 7)
    # the constant (a rescaling of exp(Q alpha), undone by the normalisation) is not in
    # the span, and nothing else is lost: [Q, 1] spans all of the 8 B-splines
    assert np.linalg.matrix_rank(np.column_stack([q, np.ones(121)])) == 8
    _, res, _, _ = np.linalg.lstsq(q, np.ones(121), rcond=None)
    assert res[0] > 1.0


def test_components_are_the_two_sides_of_one_log_spline() -> None:
    stats, _ = synthetic_stats(60, seed=2)
    data = model_data(stats, GMODEL, None)
    shapes = hyper_shapes(data)
    assert "tau_spline_coef" in shapes and shapes["tau_spline_coef"] == (7,)
    assert not {"tau_helps_mean", "tau_helps_sd", "tau_hurts_mean", "tau_hurts_sd"} & set(shapes)
    rng = np.random.default_rng(0)
    theta = {n: rng.normal(0, 0.5, s) for n, s in shapes.items()}
    theta["tau_null_sd"] = np.array(0.02)
    pmf, weight, _, _ = compile_prior_terms(data)(theta)
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(weight.sum(axis=1), 1.0, rtol=1e-12)
    pts = data.grid.points
    assert (pmf[1, pts <= 0] == 0).all() and (pmf[2, pts >= 0] == 0).all()
    # on each side the log pmf is Q alpha plus a constant
    logg = data.spline @ theta["tau_spline_coef"]
    for k, side in ((1, pts > 0), (2, pts < 0)):
        diff = np.log(pmf[k, side]) - logg[side]
        np.testing.assert_allclose(diff, diff[0], atol=1e-10)
    # the atom variant: the null is the middle cell, and it has no width to learn
    atom = model_data(stats, ATOM, None)
    assert "tau_null_sd" not in hyper_shapes(atom)
    theta.pop("tau_null_sd")
    pmf_atom = compile_prior_terms(atom)(theta)[0]
    np.testing.assert_array_equal(pmf_atom[0], (pts == 0).astype(float))


def test_sensitivity_alternatives_follow_the_family() -> None:
    stats, _ = synthetic_stats(40, seed=3)
    mix = sensitivity.applicable(hyper_shapes(model_data(stats, ModelConfig(prior_family="mixture"), None)))
    g = sensitivity.applicable(hyper_shapes(model_data(stats, GMODEL, None)))
    a = sensitivity.applicable(hyper_shapes(model_data(stats, ATOM, None)))
    assert mix == ["fitted", "null_sd_half", "null_sd_double", "effect_share_double", "helps_mean_half"]
    assert g == ["fitted", "null_sd_half", "null_sd_double", "effect_share_double", "shape_flat_half"]
    assert a == ["fitted", "effect_share_double", "shape_flat_half"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("prior_family", "spline"), ("gmodel_null", "point"), ("spline_df", 3), ("spline_coef_sd", 0.0)],
)
def test_config_rejects_bad_gmodel_fields(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"model.{field}"):
        ModelConfig(**{field: value})


@pytest.fixture(scope="module")
def gmodel_fit():
    from cmp_bayes.model.fit import fit

    stats, truth = synthetic_stats(400, seed=11, exposures=8)
    tree = fit(stats, model=GMODEL, draws=250, tune=300, chains=2, seed=11, progressbar=False)
    return stats, truth.set_index("memory_id").loc[tree["posterior"]["memory"].values.astype(str)], tree


@pytest.mark.slow
def test_gmodel_fit_covers_and_beats_hajek(gmodel_fit) -> None:
    # a real fit of 400 memories (about 25 s on 2 idle cores): run with --run-slow; the
    # study in reports/robustness/gmodel is the full-size check on logs we did not write
    stats, truth, tree = gmodel_fit
    assert "tau_spline_coef" in tree["posterior"]
    assert "shape_flat_half" in tree["prior_sensitivity"]["prior_alternative"].values
    ok = (tree["identification"]["status"] == IDENTIFIED).values
    n = int(ok.sum())
    tau = tree["posterior"]["tau"].values.reshape(-1, ok.size)
    a = (1 - CI_PROB) / 2
    lo, hi = np.quantile(tau, [a, 1 - a], axis=0)
    t = truth["tau_true"].to_numpy()
    coverage = float(((t >= lo) & (t <= hi))[ok].mean())
    # calibrated 90% intervals: the covered count is ~Binomial(n, 0.9), so +-3 sd
    # (n ~ 320 identified memories: sd 0.017, band [0.85, 0.95])
    sd = np.sqrt(CI_PROB * (1 - CI_PROB) / n)
    assert abs(coverage - CI_PROB) <= 3 * sd, (coverage, n)
    obs = tree["observed_data"]
    hajek = (obs["exposed_outcome_sum"] / obs["exposed"] - obs["control_outcome_sum"] / obs["control"]).values
    mean = tree["identification"]["tau_mean"].values
    # issue 15's claim, not loosened: at most half of Hajek's MSE
    assert np.mean((mean[ok] - t[ok]) ** 2) <= 0.5 * np.mean((hajek[ok] - t[ok]) ** 2)
