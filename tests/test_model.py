"""The hierarchical model: contract, identification, calibration against simulator truth.

One real fit (tests/_model_fixtures.simulated_fit: 800 memories, nutpie) is
shared by every test here and in test_posterior_io.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from _model_fixtures import SIM_QUERIES, auc, simulated_fit

from cmp_bayes.constants import CI_KIND, CI_PROB, IDENTIFIED, UNIDENTIFIED
from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import ModelConfig, SamplerConfig, load_config
from cmp_bayes.testing import synthetic_stats


@pytest.fixture(scope="session")
def fitted():
    return simulated_fit()


def _interval(tree: xr.DataTree) -> tuple[np.ndarray, np.ndarray]:
    assert CI_KIND == "eti"  # the equal-tailed interval below is what CI_KIND names
    tau = tree["posterior"]["tau"].values.reshape(-1, tree["posterior"].sizes["memory"])
    a = (1 - CI_PROB) / 2
    return np.quantile(tau, a, axis=0), np.quantile(tau, 1 - a, axis=0)


def test_contract_groups_vars_and_attrs(fitted) -> None:
    log, tree, _ = fitted
    for g in ("posterior", "prior", "posterior_predictive", "prior_predictive",
              "observed_data", "sample_stats", "identification"):
        assert g in tree.children, g
    post = tree["posterior"]
    for v in ("rho", "tau", "utility"):
        assert post[v].dims == ("chain", "draw", "memory")
        assert post[v].dtype == np.float32
        assert v in tree["prior"]
    assert list(post["memory"].values.astype(str)) == list(log.memory_ids())
    assert "tau_null_sd" in post and "weight_intercept" in post  # hyperparameters
    np.testing.assert_allclose(post["utility"], post["rho"] * post["tau"], rtol=1e-6)
    assert "diverging" in tree["sample_stats"]
    assert "exposed_outcome_sum" in tree["posterior_predictive"]
    assert "exposed_outcome_sum" in tree["prior_predictive"]
    obs = tree["observed_data"]
    assert int(obs["exposed"].sum()) == int((log.contexts["source"] == "exposure").sum())
    for key in ("cmp_bayes_version", "model_config", "sampler_config", "log_checksum",
                "log_path", "outcome_kind", "created_at"):
        assert key in tree.attrs, key
    assert ModelConfig.from_dict(json.loads(tree.attrs["model_config"])) == ModelConfig()
    assert json.loads(tree.attrs["sampler_config"])["sampler"] == "nutpie"
    assert tree.attrs["outcome_kind"] == "binary"
    # retrievability stays in [0, 1], tau in [-1, 1]
    assert float(post["rho"].min()) >= 0 and float(post["rho"].max()) <= 1
    assert float(np.abs(post["tau"]).max()) <= 1


def test_identification_matches_design(fitted) -> None:
    from cmp_bayes.diagnostics.positivity import identification_status
    from cmp_bayes.statistics import exposure_stats

    log, tree, _ = fitted
    ident = tree["identification"]
    expected = identification_status(exposure_stats(log))
    np.testing.assert_array_equal(ident["status"].values.astype(str), expected.values.astype(str))
    assert (ident["status"] == UNIDENTIFIED).sum() > 0  # pool_share 0.8 leaves some out


def test_unidentified_memories_learn_nothing(fitted) -> None:
    # Without exposures the tau likelihood is flat, so for every hyperparameter
    # draw the grid posterior IS the prior: contraction 1 and shift 0 up to rounding.
    _, tree, _ = fitted
    ident = tree["identification"]
    un = (ident["status"] != IDENTIFIED).values
    assert un.sum() > 0
    np.testing.assert_allclose(ident["contraction"].values[un], 1.0, atol=1e-9)
    np.testing.assert_allclose(ident["mean_shift"].values[un], 0.0, atol=1e-9)
    # identified ones do move: the median shift is clearly positive
    assert np.median(ident["mean_shift"].values[~un]) > 0.05


def test_interval_coverage_of_true_tau(fitted) -> None:
    # n identified memories; if the 90% intervals are calibrated the covered count is
    # ~Binomial(n, 0.9) (memories nearly independent given the hyperparameters), sd
    # sqrt(.9 * .1 / n); n ~ 512 here gives sd 0.013, so +-3 sd is [0.86, 0.94].
    _, tree, truth = fitted
    ok = (tree["identification"]["status"] == IDENTIFIED).values
    n = int(ok.sum())
    assert n >= 20 * SIM_QUERIES  # 32 pool memories per haystack, 80% pooled
    lo, hi = _interval(tree)
    t = truth["tau_true"].to_numpy()
    coverage = float(((t >= lo) & (t <= hi))[ok].mean())
    sd = np.sqrt(CI_PROB * (1 - CI_PROB) / n)
    assert abs(coverage - CI_PROB) <= 3 * sd, (coverage, n)


def test_mse_and_auc_against_hajek(fitted) -> None:
    _, tree, truth = fitted
    ok = (tree["identification"]["status"] == IDENTIFIED).values
    obs = tree["observed_data"]
    hajek = (obs["exposed_outcome_sum"] / obs["exposed"] - obs["control_outcome_sum"] / obs["control"]).values
    mean = tree["identification"]["tau_mean"].values
    t = truth["tau_true"].to_numpy()
    mse_bayes = np.mean((mean[ok] - t[ok]) ** 2)
    mse_hajek = np.mean((hajek[ok] - t[ok]) ** 2)
    # the claim of the issue, not loosened: at most half of Hajek's MSE
    assert mse_bayes <= 0.5 * mse_hajek, (mse_bayes, mse_hajek)
    # AUC: the claim is "no more than 0.01 below Hajek". With ~30 required memories
    # the two (paired) AUCs differ by sampling noise of sd ~0.015, so the check allows
    # 0.01 plus 2 sd of the paired difference, the sd measured by a paired bootstrap
    # over memories; the full-size check across seeds is benchmarks/simulation_model.py.
    req = truth["required"].to_numpy(dtype=bool)[ok]
    b, h = mean[ok], hajek[ok]
    diff = auc(b, req) - auc(h, req)
    rng = np.random.default_rng(0)
    boots = []
    for _ in range(200):
        i = rng.integers(0, req.size, req.size)
        if req[i].any() and not req[i].all():
            boots.append(auc(b[i], req[i]) - auc(h[i], req[i]))
    assert diff >= -0.01 - 2 * float(np.std(boots)), (diff, np.std(boots))


def test_posterior_respects_the_probability_bounds(fitted) -> None:
    # tau is a difference of success rates: with the exposed arm at b + tau, no draw may
    # leave 0 <= b + tau <= 1 for every baseline node the likelihood integrates over.
    # The extreme nodes are the 1/(2K) and 1 - 1/(2K) quantiles of the control arm's
    # Beta; a draw is jittered within its grid cell, so it may pass the last feasible
    # grid point by at most one cell width (<= 0.08 at +-1, far less near 0).
    from scipy import stats

    from cmp_bayes.model.grid import TauGrid

    _, tree, _ = fitted
    cfg = ModelConfig.from_dict(json.loads(tree.attrs["model_config"]))
    assert cfg.effect_bound == "truncate"
    grid = TauGrid.make(cfg.grid_size, cfg.grid_curvature)
    obs = tree["observed_data"]
    ok = (tree["identification"]["status"] == IDENTIFIED).values
    n0, y0 = obs["control"].values[ok], obs["control_outcome_sum"].values[ok]
    k = cfg.baseline_nodes
    b_lo = stats.beta.ppf(0.5 / k, y0 + 0.5, n0 - y0 + 0.5)
    b_hi = stats.beta.ppf(1 - 0.5 / k, y0 + 0.5, n0 - y0 + 0.5)
    top = grid.points[np.searchsorted(grid.points, 1 - b_lo, side="right") - 1]
    bottom = grid.points[np.searchsorted(grid.points, -b_hi, side="left")]
    tau = tree["posterior"]["tau"].values.reshape(-1, ok.size)[:, ok]
    cell = grid.widths.max()
    assert (tau.max(axis=0) <= top + cell).all()
    assert (tau.min(axis=0) >= bottom - cell).all()
    # and the bound binds somewhere: memories of high-baseline queries exist here
    assert (1 - b_lo < 0.3).any()


def test_truncated_likelihood_against_direct_computation() -> None:
    # L_g = log mean_k Binomial(y1 | n1, b_k + tau_g) 1[0 <= b_k + tau_g <= 1] (up to a
    # row constant) and F_g = log mean_k 1[0 <= b_k + tau_g <= 1], b_k the K quantile
    # nodes of Beta(y0 + 1/2, n0 - y0 + 1/2): computed here point by point with scipy.
    from scipy import stats

    from cmp_bayes.model.grid import TauGrid, log_feasibility, log_likelihood

    grid = TauGrid.make(31, 3.0)
    arms = {
        "exposed": np.array([7.0, 8.0, 6.0, 0.0]),
        "exposed_outcome_sum": np.array([7.0, 0.0, 3.0, 0.0]),
        "control": np.array([89.0, 88.0, 90.0, 96.0]),
        "control_outcome_sum": np.array([79.0, 2.0, 27.0, 40.0]),
    }
    arms["exposed_outcome_sumsq"] = arms["exposed_outcome_sum"]
    arms["control_outcome_sumsq"] = arms["control_outcome_sum"]
    k = 5
    nodes = (np.arange(k) + 0.5) / k
    ll = log_likelihood(arms, grid, "binary", k, bound="truncate")
    lf = log_feasibility(arms, grid, "binary", k)
    clip = log_likelihood(arms, grid, "binary", k, bound="clip")
    for m in range(3):
        n1, y1 = arms["exposed"][m], arms["exposed_outcome_sum"][m]
        n0, y0 = arms["control"][m], arms["control_outcome_sum"][m]
        b = stats.beta.ppf(nodes, y0 + 0.5, n0 - y0 + 0.5)
        p = b[:, None] + grid.points[None, :]  # (K, G)
        feasible = (p >= 0) & (p <= 1)
        direct = np.where(feasible, stats.binom.pmf(y1, n1, np.clip(p, 0, 1)), 0.0).mean(axis=0)
        np.testing.assert_allclose(np.exp(ll[m]), direct / direct.max(), rtol=1e-9, atol=1e-300)
        np.testing.assert_allclose(np.exp(lf[m]), feasible.mean(axis=0), rtol=1e-12)
        # clipping keeps a likelihood at every tau; truncation zeroes the impossible ones
        assert np.isfinite(clip[m]).all() and np.isneginf(ll[m]).any()
    # a memory without exposures: flat likelihood, no truncation (it learns nothing)
    assert (ll[3] == 0).all() and (lf[3] == 0).all()
    # 7 of 7 at a baseline near 0.89: clipping fits every tau past the bound as well as the
    # bound itself, truncation gives them likelihood 0
    past = grid.points > 0.3
    np.testing.assert_allclose(clip[0, past], 0.0, atol=1e-5)
    assert np.isneginf(ll[0, past]).all()
    # fractional outcomes: F_g = log P(0 <= b + tau_g <= 1) for b ~ Normal(control mean, v / n0)
    frac = {key: v.copy() for key, v in arms.items()}
    frac["exposed_outcome_sumsq"] = frac["exposed_outcome_sum"] * 0.9
    frac["control_outcome_sumsq"] = frac["control_outcome_sum"] * 0.9
    lf = log_feasibility(frac, grid, "fractional", k)
    lt = log_likelihood(frac, grid, "fractional", k, bound="truncate")
    lc = log_likelihood(frac, grid, "fractional", k, bound="clip")
    n1, y1, s1 = frac["exposed"][2], frac["exposed_outcome_sum"][2], frac["exposed_outcome_sumsq"][2]
    n0, y0, s0 = frac["control"][2], frac["control_outcome_sum"][2], frac["control_outcome_sumsq"][2]
    v = ((s1 - y1**2 / n1) + (s0 - y0**2 / n0)) / (n1 + n0 - 2)
    mean0 = y0 / n0
    sd0 = np.sqrt(v / n0)
    direct = stats.norm.cdf(1 - grid.points, mean0, sd0) - stats.norm.cdf(-grid.points, mean0, sd0)
    np.testing.assert_allclose(np.exp(lf[2]), direct, rtol=1e-9, atol=1e-300)
    shifted = lc[2] + lf[2]
    np.testing.assert_allclose(lt[2], shifted - shifted.max(), atol=1e-9)


def test_tau_potential_is_the_truncated_marginal_likelihood() -> None:
    # The tau potential must be sum over exposed memories of
    # log( sum_g prior_mg exp(L_mg) / sum_g prior_mg exp(F_mg) ): the marginal likelihood
    # under the mixture restricted to b + tau in [0, 1]. Computed here memory by memory
    # (no collapsed rows) at a random point of the hyperparameters; float64 sums of a few
    # hundred terms agree to rounding (1e-9 relative).
    import pytensor

    from cmp_bayes.model.build import build_model, model_data
    from cmp_bayes.model.recover import compile_prior_terms

    stats, _ = synthetic_stats(300, seed=7)
    # baselines near the ceiling so that the bound binds for many memories
    stats["control_outcome_sum"] = np.round(stats["control"] * 0.85)
    data = model_data(stats, ModelConfig(), None)
    model = build_model(data, ModelConfig())
    rng = np.random.default_rng(1)
    point = {key: v + rng.normal(0, 0.3, np.shape(v)) for key, v in model.initial_point().items()}
    outs = model.replace_rvs_by_values([*model.potentials, *model.free_RVs])
    fn = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    res = fn(*[point[v.name] for v in model.value_vars])
    values = {rv.name: v for rv, v in zip(model.free_RVs, res[2:], strict=True)}
    pmf, weight, _, _ = compile_prior_terms(data)(values)
    i = data.informative
    prior = weight[i] @ pmf  # (Mi, G)
    lik = np.exp(data.loglik[i])
    feas = np.exp(data.pattern_logfeas[data.pattern[i]])
    assert (feas < 1).any()
    ref = np.sum(np.log((prior * lik).sum(axis=1)) - np.log((prior * feas).sum(axis=1)))
    np.testing.assert_allclose(res[0], ref, rtol=1e-9)
    # the per-query variant swaps in its own (clipped) rows: the normaliser must not follow
    from cmp_bayes.model.per_query import with_pair_likelihood

    assert data.log_feasibility() is not None
    with_pair_likelihood(data, data.loglik.copy())
    assert data.log_feasibility() is None


def test_default_fit_has_no_divergences(fitted) -> None:
    # decide refuses every forget when a fit has divergent draws (max_divergence_share 0),
    # so the default model must sample cleanly; the weak null-scale priors it replaced
    # left 1-2 divergences on some fits (reports/simulation/decide.md history).
    _, tree, _ = fitted
    assert int(tree["sample_stats"]["diverging"].sum()) == 0


def test_bayes_rule_beats_hajek_thresholding_on_the_shared_fit(fitted) -> None:
    # The decision claim of issue 5 on the shared fit, with decide's rule applied to
    # identified memories (P(tau > threshold) < forget_below -> forget) and its
    # sampler-health guard left to test_decide's slow test (250 draws here). No
    # tolerance: a comparison of two realized totals on the same truth. What it
    # guards: with a null component wider than the truth, null memories keep
    # P(tau > 0.05) above 1/21 and nothing is forgotten (loss = keep-all).
    import pandas as pd

    from cmp_bayes.decision.baselines import hajek_threshold, realized_loss
    from cmp_bayes.decision.costs import Costs
    from cmp_bayes.statistics import exposure_stats

    log, tree, truth = fitted
    costs = Costs()
    post = tree["posterior"]
    ids = np.asarray(post["memory"].values).astype(str)
    p_useful = (post["tau"] > costs.threshold).mean(("chain", "draw")).values
    ok = (tree["identification"]["status"] == IDENTIFIED).values
    actions = pd.Series(np.where(ok & (p_useful < costs.forget_below), "forget", "retain"), index=ids)
    t = truth.reset_index()
    ours = realized_loss(actions, t, costs)
    keep_all = realized_loss(pd.Series("retain", index=ids), t, costs)
    hajek = realized_loss(hajek_threshold(exposure_stats(log), costs), t, costs)
    assert ours["forgotten"] > 0
    assert ours["loss"] < hajek["loss"] < keep_all["loss"], (ours, hajek, keep_all)


def test_rao_blackwell_mean_agrees_with_draws(fitted) -> None:
    # tau_mean is exact on the grid; the draw mean estimates it with MC error
    # sd_m / sqrt(S) (S = 500 kept draws, jitter adds < cell width): 5 such sds.
    _, tree, _ = fitted
    post = tree["posterior"]
    draws = post["tau"].values.reshape(-1, post.sizes["memory"])
    s = draws.shape[0]
    ident = tree["identification"]
    err = np.abs(draws.mean(axis=0) - ident["tau_mean"].values)
    tol = 5 * ident["tau_sd"].values / np.sqrt(s) + 0.01
    assert (err <= tol).mean() > 0.99


def test_synthetic_stats_dataset_input_and_fractional(mock_sample) -> None:
    # a statistics Dataset with fractional outcomes; sampling mocked (values not the point)
    from cmp_bayes.model.fit import fit

    stats, _ = synthetic_stats(150, seed=2, outcome_kind="fractional")
    tree = fit(stats, draws=40, chains=1, progressbar=False, keep_draws=20)
    assert tree.attrs["outcome_kind"] == "fractional"
    assert tree["posterior"].sizes["draw"] == 20  # thinned to keep_draws
    assert tree.attrs["log_checksum"] == "synthetic-2"
    ident = tree["identification"]
    unexposed = stats["exposed"].values == 0
    np.testing.assert_allclose(ident["contraction"].values[unexposed], 1.0, atol=1e-9)
    # Exposed memories all move (mean shift > 0) and most narrow. Not every one narrows:
    # under a sparse mixture prior, data that make "helps" and "null" about equally likely
    # give a bimodal posterior wider than the null-dominated prior (contraction > 1 is
    # correct there; DESIGN.md: contraction is a poor gauge under a sparse prior).
    assert (ident["mean_shift"].values[~unexposed] > 0).all()
    assert np.median(ident["contraction"].values[~unexposed]) < 1


def test_config_validation(tmp_path) -> None:
    with pytest.raises(ConfigError, match="grid_size"):
        ModelConfig(grid_size=10)
    with pytest.raises(ConfigError, match="effect_bound"):
        ModelConfig(effect_bound="censor")
    with pytest.raises(ConfigError, match="sampler"):
        SamplerConfig(sampler="gibbs")
    f = tmp_path / "fit.toml"
    f.write_text('[model]\ngrid_size = 61\n[sampler]\ndraws = 10\nchains = 1\n')
    cfg = load_config(f)
    assert cfg.model.grid_size == 61 and cfg.sampler.draws == 10
    f.write_text('[model]\ngrid_sise = 61\n')
    with pytest.raises(ConfigError, match=r"fit\.toml.*grid_sise"):
        load_config(f)
    with pytest.raises(ConfigError, match="rank_summary"):
        ModelConfig(rank_summary="mean")
    f.write_text('[model]\nrank_summary = "best"\n')
    assert load_config(f).model.rank_summary == "best"


def test_rank_summary_chooses_the_statistic_of_the_covariate() -> None:
    from cmp_bayes.model.build import rank_covariates

    # a: near the top for one question, deep for the others; b: mid-ranked for all; c: never ranked
    stats = xr.Dataset(
        {
            "ranked": ("memory", np.array([3, 3, 0])),
            "rank_median": ("memory", np.array([300.0, 40.0, np.nan])),
            "rank_best": ("memory", np.array([1.0, 30.0, np.nan])),
        },
        coords={"memory": ["a", "b", "c"]},
    )
    for summary, a_first in (("median", False), ("best", True)):
        x, names = rank_covariates(stats, summary)
        assert names == ["log_rank", "never_ranked"]
        v = np.log1p(stats[f"rank_{summary}"].values[:2])
        np.testing.assert_allclose(x[:2, 0], (v - v.mean()) / v.std())
        assert x[2, 0] == 0.0
        assert (x[0, 0] < x[1, 0]) == a_first  # a lower rank is a smaller covariate
    with pytest.raises(ConfigError, match="rank_best"):
        rank_covariates(stats.drop_vars("rank_best"), "best")


def test_numpyro_without_jax_is_a_config_error() -> None:
    import importlib.util

    from cmp_bayes.model.fit import fit

    if importlib.util.find_spec("numpyro") and importlib.util.find_spec("jax"):
        pytest.skip("numpyro is installed here")
    stats, _ = synthetic_stats(20, seed=0)
    with pytest.raises(ConfigError, match="pip install numpyro"):
        fit(stats, sampler="numpyro", progressbar=False)


def test_cli_fit_writes_a_loadable_posterior(tmp_path, monkeypatch, mock_sample) -> None:
    # sampling itself is not the point here: it is mocked by prior draws
    from cmp_bayes.cli.main import main
    from cmp_bayes.posterior.io import load_posterior
    from cmp_bayes.simulation.simulator import simulate

    simulate("tiny", out=tmp_path / "tinylog", seed=1)
    monkeypatch.chdir(tmp_path)
    rc = main(["fit", str(tmp_path / "tinylog"), "--draws", "20", "--chains", "1", "--no-progress"])
    assert rc == 0
    tree = load_posterior(tmp_path / "models" / "tinylog.nc")
    assert tree.attrs["log_path"].endswith("tinylog")
    assert tree["posterior"].sizes["memory"] == tree["identification"].sizes["memory"]
    assert main(["fit", str(tmp_path / "nolog"), "--no-progress"]) == 2


def test_per_query_likelihood_reduces_to_the_product_of_pairs() -> None:
    # With a kernel much narrower than the grid spacing near 0 the convolution is the
    # identity on the grid, so a memory's likelihood is the sum of its pair log-likelihoods;
    # a pair without exposures contributes exactly 0 whatever the kernel.
    from cmp_bayes.model.grid import TauGrid
    from cmp_bayes.model.per_query import memory_loglik, query_kernel

    grid = TauGrid.make(61, 5.0)
    wide = query_kernel(grid, 0.1)
    np.testing.assert_allclose(wide.sum(axis=1), 1.0, rtol=1e-12)
    narrow = query_kernel(grid, 1e-6)
    np.testing.assert_allclose(narrow, np.eye(61), atol=1e-12)
    rng = np.random.default_rng(0)
    ll = -rng.random((3, 4, 61)) * 5
    ll[:, 2] = 0.0  # pair without exposures
    ll[2] = 0.0  # memory without exposures
    direct = ll.sum(axis=1)
    direct[:2] -= direct[:2].max(axis=1, keepdims=True)
    np.testing.assert_allclose(memory_loglik(ll, narrow), direct, atol=1e-9)
    out = memory_loglik(ll, wide)
    np.testing.assert_array_equal(out[2], 0.0)
    # a kernel spreads the pairs: the memory likelihood is flatter than the plain product
    assert out[:2].min() > direct[:2].min()


def test_per_query_contract(mock_sample) -> None:
    # the per-query posterior's layout (sampling mocked: values are not the point)
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate
    from cmp_bayes.statistics import exposure_stats

    log = simulate(SimulationConfig.preset("longmemeval-like", queries=3, repeats=12), seed=2)
    tree = fit(log, by="query", draws=30, chains=1, progressbar=False)
    assert tree.attrs["by"] == "query"
    pairs = exposure_stats(log, by="query").transpose("memory", "query")
    post = tree["posterior"]
    for v in ("rho", "tau", "utility"):
        assert post[v].dims == ("chain", "draw", "memory", "query")
        assert post[f"{v}_memory"].dims == ("chain", "draw", "memory")
        assert tree["prior"][v].dims == post[v].dims
    assert list(post["query"].values.astype(str)) == list(pairs["query"].values.astype(str))
    off = (pairs["in_store"] == 0).values
    assert off.any() and (~off).any()  # per-query haystacks: a memory exists for one query
    tau = post["tau"].values
    assert np.isnan(tau[:, :, off]).all() and np.isfinite(tau[:, :, ~off]).all()
    np.testing.assert_allclose(post["utility"], post["rho"] * post["tau"], rtol=1e-6)
    assert tree["observed_data"]["exposed"].dims == ("memory", "query")
    assert int(tree["observed_data"]["exposed"].sum()) == int(pairs["exposed"].sum())
    assert tree["posterior_predictive"]["exposed_outcome_sum"].dims == post["tau"].dims
    # never-exposed memories still learn nothing at the memory level
    ident = tree["identification"]
    un = (ident["exposed"] == 0).values
    np.testing.assert_allclose(ident["contraction"].values[un], 1.0, atol=1e-9)
    with pytest.raises(ConfigError, match="ExposureLog"):
        fit(exposure_stats(log), by="query", progressbar=False)


def test_pair_recovery_draws_from_kernel_times_pair_likelihood(monkeypatch) -> None:
    # Given tau_m, tau_mq's grid cell is drawn with probability K[cell(tau_m), h] * lik_mq(h):
    # the kernel row alone for a pair without exposures. Checked by a chi-square test of
    # 20,000 draws per pair against those exact pmfs (fixed seed; a wrong pmf, e.g. the
    # likelihood dropped or applied to the wrong pair, gives p < 1e-10 here).
    from types import SimpleNamespace

    from scipy.stats import chisquare

    from cmp_bayes.model import recover
    from cmp_bayes.model.grid import TauGrid
    from cmp_bayes.model.per_query import query_kernel, recover_pairs

    grid = TauGrid.make(61, 5.0)
    g = grid.points.size
    kernel = query_kernel(grid, 0.1)
    s = 20_000
    monkeypatch.setattr(
        recover, "compile_prior_terms", lambda data: lambda h: (None, None, np.ones(2), np.ones(2))
    )
    pair_stats = xr.Dataset(
        {
            "in_store": (("memory", "query"), np.array([[5, 5, 0], [5, 5, 5]])),
            "retrieved": (("memory", "query"), np.array([[1, 0, 0], [0, 2, 0]])),
        },
        coords={"memory": ["a", "b"], "query": ["q1", "q2", "q3"]},
    )
    ll = np.zeros((2, 3, g))
    ll[0, 0] = -0.5 * ((grid.points - 0.3) / 0.1) ** 2  # a's pair with q1 was exposed
    ll[1, 2] = -0.5 * ((grid.points + 0.2) / 0.05) ** 2
    tau_m = np.tile([0.2, -0.1], (s, 1))
    tau, rho = recover_pairs(
        SimpleNamespace(grid=grid), {"x": np.zeros(s)}, tau_m, ll, pair_stats, kernel,
        np.random.default_rng(7),
    )
    assert tau.shape == rho.shape == (s, 2, 3)
    assert np.isnan(tau[:, 0, 2]).all() and np.isnan(rho[:, 0, 2]).all()
    cells_m = np.searchsorted(grid.edges, tau_m[0], side="right") - 1
    for mem, qry in ((0, 0), (0, 1), (1, 0), (1, 1), (1, 2)):
        pmf = kernel[cells_m[mem]] * np.exp(ll[mem, qry])
        pmf /= pmf.sum()
        cell = np.searchsorted(grid.edges, tau[:, mem, qry], side="right") - 1
        counts = np.bincount(cell, minlength=g)
        big = pmf * s >= 5
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(pmf[big], pmf[~big].sum()) * s
        assert chisquare(obs, exp).pvalue > 1e-4, (mem, qry)
