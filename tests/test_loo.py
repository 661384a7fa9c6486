"""The pointwise log-likelihood (``log_likelihood`` group) and LOO on it.

The model-level checks compile the PyMC model's tau potential and compare it,
draw by draw, with the pointwise values recovery writes; the fit-level checks
reuse the session's shared real fit (tests/_model_fixtures.simulated_fit).
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
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


def test_fit_writes_the_log_likelihood_group(fitted) -> None:
    # tau_obs over (chain, draw, memory) for exactly the memories with exposures, draws
    # aligned with the posterior's, float64, finite; the tree passes check_posterior.
    from cmp_bayes.posterior.io import check_posterior

    _, tree, _ = fitted
    check_posterior(tree)
    ll = tree["log_likelihood"]["tau_obs"]
    post = tree["posterior"]
    assert ll.dims == ("chain", "draw", "memory")
    assert (ll.sizes["chain"], ll.sizes["draw"]) == (post.sizes["chain"], post.sizes["draw"])
    exposed = tree["observed_data"]["exposed"].to_series()
    want = exposed.index[exposed.to_numpy() > 0].astype(str)
    assert list(np.asarray(ll["memory"].values).astype(str)) == list(want)
    assert 0 < ll.sizes["memory"] < post.sizes["memory"]  # pool_share 0.8: some never exposed
    assert ll.dtype == np.float64 and np.isfinite(ll.values).all()
    assert (ll.values <= 1e-12).all()  # log-probabilities of binary counts


def test_fit_log_likelihood_sums_to_the_models_potential(fitted) -> None:
    # The real fit's tau_obs, summed over memories, minus the offsets, is the compiled
    # model's tau potential at the fit's own hyperparameter draws (rebuilt from the log
    # and the stored ModelConfig); 1e-9 relative, float64 rounding over ~600 terms.
    import pytensor

    from cmp_bayes.model.build import build_model, model_data
    from cmp_bayes.model.fit import memory_inputs
    from cmp_bayes.model.recover import pointwise_offset

    log, tree, _ = fitted
    config = ModelConfig.from_posterior(tree)
    stats, group, _ = memory_inputs(log)
    data = model_data(stats, config, group)
    model = build_model(data, config)
    tau_term = next(p for p in model.potentials if p.name == "tau_marginal")
    # the potential as a function of the constrained hyperparameters
    fn = pytensor.function([rv for rv in model.free_RVs], tau_term, on_unused_input="ignore")
    post = tree["posterior"]
    ll = tree["log_likelihood"]["tau_obs"]
    offset = pointwise_offset(data).sum()
    for chain, draw in [(0, 0), (0, 7), (1, post.sizes["draw"] - 1)]:
        values = [post[rv.name].isel(chain=chain, draw=draw).values for rv in model.free_RVs]
        expected = float(fn(*values))
        got = float(ll.isel(chain=chain, draw=draw).sum()) - offset
        np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_loo_section_of_the_fit_shows_elpd(fitted) -> None:
    from cmp_bayes.reporting.checks import PARETO_K_BAD, loo_section

    _, tree, _ = fitted
    sec = loo_section(tree)
    assert "Not computed" not in sec.markdown
    assert "elpd_loo" in sec.markdown and "tau_obs" in sec.markdown
    assert f"k > {PARETO_K_BAD}" in sec.markdown and "cmp-bayes compare" in sec.markdown
    row = next(line for line in sec.markdown.splitlines() if line.startswith("| tau_obs"))
    elpd = float(row.split("|")[2].replace(",", ""))
    # elpd_loo is below the in-sample log predictive density (mean over draws is an upper bound)
    lpd = float(np.log(np.exp(tree["log_likelihood"]["tau_obs"]).mean(("chain", "draw"))).sum())
    assert elpd < lpd


def test_thinned_save_keeps_the_group_aligned(fitted, tmp_path) -> None:
    from cmp_bayes.posterior.io import load_posterior, save_posterior

    _, tree, _ = fitted
    back = load_posterior(save_posterior(tree, tmp_path / "p.nc", thin=5))
    assert back["log_likelihood"].sizes["draw"] == back["posterior"].sizes["draw"]
    np.testing.assert_array_equal(
        back["log_likelihood"]["tau_obs"].values, tree["log_likelihood"]["tau_obs"].values[:, ::5]
    )


def test_check_posterior_refuses_a_misaligned_group(fitted) -> None:
    from cmp_bayes.errors import PosteriorError
    from cmp_bayes.posterior.io import check_posterior

    _, tree, _ = fitted
    bad = tree.copy()
    bad["log_likelihood"] = xr.DataTree(tree["log_likelihood"].to_dataset().isel(draw=slice(0, 10)))
    with pytest.raises(PosteriorError, match="log_likelihood"):
        check_posterior(bad)
    stray = tree["log_likelihood"].to_dataset()
    stray = stray.assign_coords(memory=np.array(["nope", *stray["memory"].values[1:]], dtype=object))
    bad["log_likelihood"] = xr.DataTree(stray)
    with pytest.raises(PosteriorError, match="nope"):
        check_posterior(bad)


@pytest.fixture(scope="module")
def unlearned(fitted, mock_sample_module):
    """The shared log fitted with its hyperparameters drawn from the prior (mock sampling)
    and the clipped likelihood: a variant that must predict worse than the real fit."""
    from cmp_bayes.model.fit import fit

    log, _, _ = fitted
    return fit(log, model=ModelConfig(effect_bound="clip"), draws=150, chains=2, seed=5, progressbar=False)


@pytest.fixture(scope="module")
def mock_sample_module():
    # tests/conftest.py's mock_sample, at module scope (one mocked fit for three tests)
    with pytest.MonkeyPatch.context() as mp:
        import warnings
        from functools import partial

        from pymc.testing import mock_sample as pm_mock_sample

        from cmp_bayes.model import sampling

        mock = partial(pm_mock_sample, sample_stats={"diverging": lambda size: np.zeros(size, dtype=bool)})

        def sample_hyper(model, cfg):  # noqa: ANN001, ANN202 - as sampling's
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The effect of Potentials")
                tree = mock(model=model, draws=cfg.draws, chains=cfg.chains, random_seed=cfg.seed)
            return sampling._groups(tree)

        mp.setattr(sampling, "sample_hyper", sample_hyper)
        yield


def test_compare_posteriors_ranks_the_real_fit_first(fitted, unlearned) -> None:
    from cmp_bayes.reporting.checks import compare_posteriors

    _, tree, _ = fitted
    table = compare_posteriors({"prior_draws_clip": unlearned, "fit": tree})
    assert list(table["model"]) == ["fit", "prior_draws_clip"]
    assert table["elpd_diff"].iloc[1] < 0
    assert {"memories", "k > 0.7", "weight", "dse"} <= set(table.columns)
    assert (table["memories"] == tree["log_likelihood"].sizes["memory"]).all()


def test_compare_refuses_what_it_cannot_compare(fitted) -> None:
    from cmp_bayes.errors import ConfigError, PosteriorError
    from cmp_bayes.reporting.checks import compare_posteriors

    _, tree, _ = fitted
    with pytest.raises(ConfigError, match="at least two"):
        compare_posteriors({"a": tree})
    without = tree.copy()
    del without["log_likelihood"]
    with pytest.raises(PosteriorError, match="no log_likelihood"):
        compare_posteriors({"a": tree, "b": without})
    fewer = tree.copy()
    fewer["log_likelihood"] = xr.DataTree(tree["log_likelihood"].to_dataset().isel(memory=slice(1, None)))
    with pytest.raises(PosteriorError, match="different exposed memories"):
        compare_posteriors({"a": tree, "b": fewer})
    other = tree.copy()
    other.attrs["log_checksum"] = "something else"
    if tree.attrs.get("log_checksum"):
        with pytest.raises(PosteriorError, match="different logs"):
            compare_posteriors({"a": tree, "b": other})


def test_cli_compare_prints_the_table(fitted, unlearned, tmp_path, capsys) -> None:
    from cmp_bayes.cli.main import main
    from cmp_bayes.posterior.io import save_posterior

    _, tree, _ = fitted
    a = save_posterior(tree, tmp_path / "default.nc", drop_groups=("prior_predictive", "posterior_predictive"))
    b = save_posterior(unlearned, tmp_path / "clip.nc", drop_groups=("prior_predictive", "posterior_predictive"))
    assert main(["compare", str(b), str(a), "-o", str(tmp_path / "cmp.csv")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split()[0] == "default" and lines[2].split()[0] == "clip"
    assert (tmp_path / "cmp.csv").exists()
    # a posterior without the group: one line, exit 2
    c = save_posterior(tree, tmp_path / "nolik.nc", drop_groups=("log_likelihood",))
    assert main(["compare", str(a), str(c)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "log_likelihood" in err[0]


def test_synthetic_posterior_with_log_likelihood_passes_the_contract(tmp_path) -> None:
    # The builder's option changes nothing else (no random draws), follows the contract,
    # and the report's section computes elpd on it; without it the section says why not.
    from cmp_bayes.posterior.io import check_posterior
    from cmp_bayes.reporting.checks import loo_section
    from cmp_bayes.testing import synthetic_posterior

    plain = synthetic_posterior(seed=4)
    with_ll = synthetic_posterior(seed=4, log_likelihood=True)
    check_posterior(with_ll)
    xr.testing.assert_identical(plain["posterior"].to_dataset(), with_ll["posterior"].to_dataset())
    exposed = (plain["observed_data"]["exposed"] > 0).values
    assert with_ll["log_likelihood"].sizes["memory"] == int(exposed.sum())
    assert "elpd_loo" in loo_section(with_ll).markdown
    sec = loo_section(plain)
    assert "Not computed" in sec.markdown and "no log_likelihood group" in sec.markdown
    check_posterior(synthetic_posterior(per_query=True, log_likelihood=True, n_memories=8, draws=20))
    # the whole report renders it, saved and loaded
    from cmp_bayes.posterior.io import save_posterior
    from cmp_bayes.reporting.html import SUMMARY_MD, report

    index = report(save_posterior(with_ll, tmp_path / "p.nc"), tmp_path / "report")
    assert "elpd_loo" in (index.parent / SUMMARY_MD).read_text(encoding="utf-8")
