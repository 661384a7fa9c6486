"""The pointwise log-likelihood (``log_likelihood`` group) and LOO on it.

The model-level checks compile the PyMC model's tau potential and compare it,
draw by draw, with the pointwise values recovery writes; the fit-level checks
reuse the session's shared real fit (tests/_model_fixtures.simulated_fit).
"""

from __future__ import annotations

import numpy as np
import pytest
from _model_fixtures import simulated_fit

from cmp_bayes.model.config import ModelConfig
from cmp_bayes.testing import synthetic_stats


@pytest.fixture(scope="session")
def fitted():
    return simulated_fit()


def _potential_at_draws(data, config: ModelConfig, n: int, seed: int):
    """The model's tau potential and the constrained hyperparameters at ``n`` random points."""
    import pytensor

    from cmp_bayes.model.build import build_model

    model = build_model(data, config)
    tau_term = next(p for p in model.potentials if p.name == "tau_marginal")
    outs = model.replace_rvs_by_values([tau_term, *model.free_RVs])
    fn = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    rng = np.random.default_rng(seed)
    start = model.initial_point()
    potentials, hyper = [], {rv.name: [] for rv in model.free_RVs}
    for _ in range(n):
        point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in start.items()}
        res = fn(*[point[v.name] for v in model.value_vars])
        potentials.append(float(res[0]))
        for rv, v in zip(model.free_RVs, res[1:], strict=True):
            hyper[rv.name].append(np.asarray(v, dtype=np.float64))
    return np.array(potentials), {k: np.stack(v) for k, v in hyper.items()}


@pytest.mark.parametrize(
    ("bound", "kind"), [("truncate", "binary"), ("clip", "binary"), ("truncate", "fractional")]
)
def test_pointwise_sum_is_the_models_tau_potential(bound: str, kind: str) -> None:
    # Summed over exposed memories, the pointwise log-likelihood minus its offsets (what
    # the grid rows' shift removed) must be the model's tau potential at every draw. The
    # model sums collapsed rows with multiplicities, recovery sums memory by memory: a few
    # hundred float64 terms agree to rounding, 1e-9 relative.
    from cmp_bayes.model.build import model_data
    from cmp_bayes.model.recover import pointwise_offset, recover

    stats, _ = synthetic_stats(300, seed=11, outcome_kind=kind)
    # baselines near the ceiling so that the bound binds for many memories
    stats["control_outcome_sum"] = np.round(stats["control"] * 0.85)
    config = ModelConfig(effect_bound=bound)
    data = model_data(stats, config, np.array([f"g{i % 3}" for i in range(300)]))
    potential, hyper = _potential_at_draws(data, config, n=4, seed=2)
    rec = recover(data, hyper, np.random.default_rng(0), pointwise=True)
    assert rec.log_lik.shape == (4, data.informative.size)
    assert data.informative.size < data.memory.size  # unexposed memories are left out
    offset = pointwise_offset(data)
    np.testing.assert_allclose((rec.log_lik - offset).sum(axis=1), potential, rtol=1e-9)
    # a log-likelihood of binary counts (with its binomial coefficient) is at most 0
    if kind == "binary":
        assert (rec.log_lik <= 1e-12).all()


def test_pointwise_offset_makes_the_values_full_log_likelihoods() -> None:
    # The offset turns a shifted grid row back into the full log-likelihood: the log of
    # the Binomial pmf (coefficient included) averaged over the baseline nodes. Without
    # it, variants whose rows peak at different heights (clip vs truncate) would not
    # compare. A row without exposures stays 0 with offset 0.
    from scipy import stats as sps

    from cmp_bayes.model.grid import TauGrid, _baseline_nodes, log_likelihood

    grid = TauGrid.make(61, 5.0)
    arms = {
        "exposed": np.array([6.0, 0.0]), "exposed_outcome_sum": np.array([4.0, 0.0]),
        "exposed_outcome_sumsq": np.array([4.0, 0.0]), "control": np.array([300.0, 50.0]),
        "control_outcome_sum": np.array([150.0, 20.0]), "control_outcome_sumsq": np.array([150.0, 20.0]),
    }
    rows, offset = log_likelihood(arms, grid, "binary", 12, bound="clip", return_offset=True)
    b = _baseline_nodes(arms["control"][:1], arms["control_outcome_sum"][:1], 12)[0]
    p = np.clip(b[:, None] + grid.points[None, :], 1e-6, 1 - 1e-6)
    direct = np.log(sps.binom.pmf(4, 6, p).mean(axis=0))
    np.testing.assert_allclose(rows[0] + offset[0], direct, rtol=1e-10)
    assert offset[1] == 0 and (rows[1] == 0).all()
