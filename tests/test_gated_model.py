"""The relevance-gated pair model (``fit(log, by="query", model=ModelConfig(pair_model="gated"))``).

Checked: the combined pair arms; the grid likelihood of a pair and the graph's
potential against direct computations; the per-draw recovery against brute-force
enumeration of the gates; a small real nutpie fit on a hand-built log with one
strong pair effect; the posterior contract (check_posterior, save/load, a
broken tree refused) and that decide does not crash on the gated form.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytensor.tensor as pt
import pytest
import xarray as xr
from pytensor.graph.replace import graph_replace
from scipy import stats as sps

from cmp_bayes import read_log
from cmp_bayes.errors import ConfigError, PosteriorError
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.model.gated import (
    build_gated_model,
    gate_probability,
    gated_data,
    gated_hyper_shapes,
    grid_pair_likelihood,
    pair_arms,
)
from cmp_bayes.model.gated_recover import recover_gated
from cmp_bayes.model.recover import compile_prior_terms
from cmp_bayes.statistics import exposure_stats
from cmp_bayes.testing.posterior import synthetic_posterior

N_MEM, N_Q, T = 8, 4, 480
STRONG = ("m0", "q0")


def _write_log(path, seed: int = 0, depth: int | None = None, saturated: str | None = None) -> None:
    """A balanced pool design (B = k = 1): m0 adds +0.5 to q0's success rate, nothing elsewhere.

    Each step ranks the memories for its query (m0 first for q0, last elsewhere),
    the ranking cut to its first ``depth`` memories when given. Every step of
    the query ``saturated`` succeeds (a question the reader always answers).
    """
    rng = np.random.default_rng(seed)
    mems = [f"m{i}" for i in range(N_MEM)]
    deal = np.tile(np.arange(N_MEM), T // N_MEM)
    rng.shuffle(deal)
    lines = []
    for t in range(T):
        q = t % N_Q
        m = mems[deal[t]]
        p = 0.3 + (0.5 if (m, f"q{q}") == STRONG else 0.0)
        p = 1.0 if f"q{q}" == saturated else p
        others = [x for x in mems if x != "m0"]
        rng.shuffle(others)
        ranking = ["m0", *others] if q == 0 else [*others, "m0"]
        ranking = ranking[:depth] if depth is not None else ranking
        lines.append(json.dumps({
            "step": t, "query_id": f"q{q}", "outcome": int(rng.random() < p), "ranking": ranking,
            "context": [{"memory_id": m, "source": "exposure", "propensity": 1 / N_MEM}],
        }))
    (path / "steps.jsonl").write_text("\n".join(lines) + "\n")
    design = {"slots": 1, "exposure_slots": 1, "assignment": "balanced", "steps": T, "seed": seed,
              "pool": {m: 1 / N_MEM for m in mems}}
    (path / "design.json").write_text(json.dumps(design))


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("gated_log")
    _write_log(path)
    return read_log(path)


@pytest.fixture(scope="module")
def gd(log):
    return gated_data(exposure_stats(log), exposure_stats(log, by="pair"), ModelConfig(pair_model="gated", prior_family="mixture", learn_null_mean=False))


def _theta(gd, **values) -> dict[str, np.ndarray]:
    base = {
        "tau_null_sd": 0.02, "tau_helps_mean": 0.25, "tau_helps_sd": 0.1, "tau_hurts_mean": 0.1,
        "tau_hurts_sd": 0.05, "weight_intercept": np.array([-1.0, -2.0]), "rho_intercept": -1.0,
        "rho_kappa": 5.0, "gate_intercept": -1.5, "gate_coef": np.array([-0.8, 0.0])[: len(gd.covariate_names)],
    }
    base.update(values)
    return {k: np.asarray(base[k], dtype=np.float64) for k in gated_hyper_shapes(gd)}


def _pieces(gd, theta):
    """delta's prior pmf, the null pmf and the gates at ``theta`` (numpy, from the shared formulas)."""
    pmf, weight, _, _ = compile_prior_terms(gd.base, np.zeros(1, dtype=np.int64))(theta)
    w = weight[0, 1:] / weight[0, 1:].sum()
    p = gate_probability(gd, theta["gate_intercept"], theta.get("gate_coef"))
    return w @ pmf[1:], pmf[0], p


def test_pair_arms_combine_pool_and_window() -> None:
    ds = xr.Dataset({k: ("pair", np.asarray(v, dtype=float)) for k, v in {
        "exposed": [2, 0], "exposed_outcome_sum": [1, 0], "exposed_outcome_sumsq": [1, 0],
        "control": [10, 5], "control_outcome_sum": [4, 2], "control_outcome_sumsq": [4, 2],
        "window_exposed": [3, 1], "window_certain": [0, 1], "window_exposed_w": [12.0, 0.0],
        "window_exposed_wy": [8.0, 0.0],
    }.items()})
    arms = pair_arms(ds, "binary")
    # pair 0: 2 pool exposures + 3 window exposures with SNIPW mean 8/12; pair 1: only a pi = 1 step
    np.testing.assert_allclose(arms["exposed"], [5, 0])
    np.testing.assert_allclose(arms["exposed_outcome_sum"], [1 + 3 * 8 / 12, 0])
    np.testing.assert_allclose(arms["control"], [10, 5])


def test_pair_likelihood_equals_direct_computation(gd) -> None:
    theta = _theta(gd)
    _, null_pmf, p = _pieces(gd, theta)
    gated = grid_pair_likelihood(gd, p, null_pmf)
    pts = gd.base.grid.points
    k = 12
    nodes = (np.arange(k) + 0.5) / k
    for row, pair in enumerate(gd.informative[:5]):
        a = {n: v[pair] for n, v in gd.arms.items()}
        base = sps.beta.ppf(nodes, a["control_outcome_sum"] + 0.5, a["control"] - a["control_outcome_sum"] + 0.5)
        raw = base[:, None] + pts[None, :]
        ok = (raw >= 0) & (raw <= 1)  # the truncated likelihood: an infeasible b + tau has no mass
        lik = (sps.binom.pmf(a["exposed_outcome_sum"], a["exposed"], np.clip(raw, 0, 1)) * ok).mean(axis=0)
        assert not ok.all()  # the grid's ends are infeasible at this baseline: the truncation matters
        direct = p[pair] * lik + (1 - p[pair]) * (null_pmf @ lik)
        ratio = gated[row] / direct  # the grid rows drop a constant per pair
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_potential_equals_sum_over_memories(gd) -> None:
    config = ModelConfig(pair_model="gated", prior_family="mixture", learn_null_mean=False)
    model = build_gated_model(gd, config)
    theta = _theta(gd)
    prior, null_pmf, p = _pieces(gd, theta)
    lik = grid_pair_likelihood(gd, p, null_pmf)
    expected = 0.0
    for m in np.unique(gd.pair_memory[gd.informative]):
        rows = gd.pair_memory[gd.informative] == m
        expected += np.log(prior @ np.prod(lik[rows], axis=0))
    potential = next(v for v in model.potentials if v.name == "tau_gated")
    fixed = {model[name]: pt.constant(value) for name, value in theta.items()}
    got = float(graph_replace(potential, fixed, strict=False).eval())
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_recovery_matches_enumeration_of_the_gates(gd) -> None:
    theta = _theta(gd)
    prior, null_pmf, p = _pieces(gd, theta)
    lik = np.ones((gd.pair_memory.size, gd.base.grid.points.size))  # a pair without exposures: flat
    lik[gd.informative] = np.exp(gd.loglik)
    feas = np.ones_like(lik)
    feas[gd.informative] = gd.feas_rows[gd.lik_unit]
    assert (feas < 1).any()  # the truncated likelihood: the null's renormalisation matters here
    null_lik = (lik @ null_pmf) / (feas @ null_pmf)  # the null restricted to the pair's feasible effects
    pts = gd.base.grid.points
    s = 400
    hyper = {k: np.repeat(v[None], s, axis=0) for k, v in theta.items()}
    rec = recover_gated(gd, hyper, np.random.default_rng(0), jitter=False)
    memory = list(gd.base.memory)
    for m in ("m0", "m3"):
        i = memory.index(m)
        pairs = np.flatnonzero(gd.pair_memory == i)
        joint = np.zeros(pts.size)
        p_rel = np.zeros(pairs.size)
        p_pos = np.zeros(pairs.size)
        e_tau = np.zeros(pairs.size)
        null_mean = (lik[pairs] * null_pmf) @ pts / (lik[pairs] @ null_pmf)  # each pair's null posterior mean
        any_pos = 0.0
        # every configuration of the memory's gates, each grid value of delta
        for z in itertools.product((0, 1), repeat=pairs.size):
            z = np.asarray(z)
            terms = np.where(z[:, None] == 1, p[pairs, None] * lik[pairs], ((1 - p[pairs]) * null_lik[pairs])[:, None])
            weight = prior * terms.prod(axis=0)  # (G,)
            joint += weight
            p_rel += z * weight.sum()
            p_pos += z * weight[pts > 0].sum()
            e_tau += np.where(z == 1, weight @ pts, null_mean * weight.sum())
            if z.any():
                any_pos += weight[pts > 0].sum()
        total = joint.sum()
        np.testing.assert_allclose(rec.p_relevant[0, pairs], p_rel / total, rtol=1e-5)
        np.testing.assert_allclose(rec.p_relevant_any[0, i], any_pos / total, rtol=1e-5)
        np.testing.assert_allclose(rec.pair_p_relevant_mean[pairs], p_rel / total, rtol=1e-9)
        np.testing.assert_allclose(rec.pair_p_relevant_positive_mean[pairs], p_pos / total, rtol=1e-9, atol=1e-15)
        assert (rec.pair_p_relevant_positive_mean[pairs] <= rec.pair_p_relevant_mean[pairs] + 1e-12).all()
        np.testing.assert_allclose(rec.pair_tau_mean[pairs], e_tau / total, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(rec.p_relevant_max[i], (p_rel / total).max(), rtol=1e-9)
        post = joint / total
        np.testing.assert_allclose(rec.post_mean[i], post @ pts, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(rec.delta_pmf[i], post, rtol=1e-9, atol=1e-15)
        # the draws of delta follow that posterior (Monte Carlo, 400 draws)
        sd = np.sqrt(post @ pts**2 - (post @ pts) ** 2)
        assert abs(rec.tau_relevant[:, i].mean() - post @ pts) < 5 * sd / np.sqrt(s) + 1e-6


def test_recovery_stores_the_chosen_draws_and_averages_all(gd) -> None:
    draws = [_theta(gd, gate_intercept=g) for g in (-2.0, -1.0, 0.0, 0.5)]
    hyper = {k: np.stack([d[k] for d in draws]) for k in draws[0]}
    full = recover_gated(gd, hyper, np.random.default_rng(2), jitter=False)
    some = recover_gated(gd, hyper, np.random.default_rng(2), jitter=False, store=np.array([1, 3]))
    assert some.tau.shape == (2, gd.pair_memory.size) and some.tau_relevant.shape == (2, gd.base.memory.size)
    # the moments are every draw's, not only the stored ones'
    np.testing.assert_array_equal(some.pair_tau_mean, full.pair_tau_mean)
    np.testing.assert_array_equal(some.pair_p_relevant_mean, full.pair_p_relevant_mean)
    np.testing.assert_array_equal(some.post_mean, full.post_mean)
    assert not np.allclose(some.pair_p_relevant_mean, full.p_relevant[[1, 3]].mean(axis=0))


@pytest.fixture(scope="module")
def tree(log):
    from cmp_bayes.model.fit import fit

    return fit(log, by="query", model=ModelConfig(pair_model="gated", prior_draws=50),
               draws=200, tune=300, chains=2, seed=3, progressbar=False, max_attempts=1)


def test_real_fit_recovers_the_strong_pair(tree) -> None:
    post = tree["posterior"]
    mid = np.asarray(post["memory_id"].values).astype(str)
    qid = np.asarray(post["query_id"].values).astype(str)
    strong = np.flatnonzero((mid == STRONG[0]) & (qid == STRONG[1]))[0]
    others_m0 = np.flatnonzero((mid == "m0") & (qid != "q0"))
    p_rel = post["p_relevant"].mean(("chain", "draw")).values
    tau = post["tau"].mean(("chain", "draw")).values
    # true +0.5 at a 0.3 baseline: the helps prior (median 0.2) shrinks it, not to nothing
    assert p_rel[strong] > 0.7  # its prior gate is about 0.1-0.3
    assert tau[strong] > 0.15
    assert np.all(np.abs(tau[others_m0]) < 0.1)
    assert np.all(p_rel[others_m0] < 0.5)
    memory = list(np.asarray(post["memory"].values).astype(str))
    tr = post["tau_relevant"].mean(("chain", "draw")).values
    pany = post["p_relevant_any"].mean(("chain", "draw")).values
    # the posterior mean of m0's delta (about 0.2 here) within its Monte Carlo error: nutpie's
    # draws differ between processes, and 400 draws of a wide posterior leave about 0.01
    import arviz_stats

    m0 = post["tau_relevant"].isel(memory=memory.index("m0"))
    mcse = float(arviz_stats.mcse(m0.to_dataset(name="d"), sample_dims=["chain", "draw"])["d"])
    assert tr[memory.index("m0")] > 0.2 - 3 * mcse
    assert pany[memory.index("m0")] > 0.8
    assert pany[memory.index("m0")] > np.max(np.delete(pany, memory.index("m0"))) + 0.25


def test_contract_save_load_and_refusal(tree, tmp_path) -> None:
    from cmp_bayes.posterior.io import check_posterior, load_posterior, save_posterior

    check_posterior(tree)
    assert tree.attrs["pair_model"] == "gated" and tree.attrs["by"] == "query"
    # stored draws not thinned for memory (32 pairs): R-hat is judged on them, nothing recorded
    assert "hyper_diagnostics" not in tree.children
    post = tree["posterior"]
    assert post["tau"].dims == ("chain", "draw", "pair")
    assert post["memory_id"].dims == ("pair",) and post["query_id"].dims == ("pair",)
    for v in ("tau_relevant", "p_relevant_any"):
        assert post[v].dims == ("chain", "draw", "memory")
    assert {"gate_intercept", "gate_coef"} <= set(post.data_vars)
    assert set(tree["pair_identification"]["status"].values) <= {"identified", "retrieved-only", "unidentified"}
    back = load_posterior(save_posterior(tree, tmp_path / "gated.nc"))
    assert back.attrs["pair_model"] == "gated"
    np.testing.assert_array_equal(back["posterior"]["tau"].values, post["tau"].values)
    assert ModelConfig.from_posterior(back).pair_model == "gated"
    broken = tree.copy()
    broken["posterior"] = xr.DataTree(post.to_dataset().drop_vars("p_relevant_any"))
    with pytest.raises(PosteriorError, match="p_relevant_any"):
        check_posterior(broken)
    # the exact grid group: each malformation named on its own
    grid = tree["tau_relevant_grid"].to_dataset()
    no_coord = tree.copy()
    no_coord["tau_relevant_grid"] = xr.DataTree(grid.drop_vars("tau_cell_point"))
    with pytest.raises(PosteriorError, match="lacks coordinate\\(s\\) tau_cell_point"):
        check_posterior(no_coord)
    odd = tree.copy()
    odd_grid = grid.copy()
    odd_grid.attrs["within_cell"] = "spread"
    odd["tau_relevant_grid"] = xr.DataTree(odd_grid)
    with pytest.raises(PosteriorError, match="within_cell='spread', not 'uniform' or 'point'"):
        check_posterior(odd)


def test_decide_report_and_config_errors(tree, log, tmp_path) -> None:
    from cmp_bayes import Costs, decide, report
    from cmp_bayes.model.fit import fit

    # every estimand decides on the real gated posterior: tau and utility from the
    # _memory variables, relevant from tau_relevant, workload over the log's query mix
    # (observed_data.query_steps)
    for est in ("tau", "utility", "relevant", "workload"):
        dec = decide(tree, Costs(estimand=est))
        assert len(dec) == tree["posterior"].sizes["memory"], est
        assert dec.rule.variable in tree["posterior"] or est == "workload", est
    assert tree["observed_data"]["query_steps"].dims == ("query",)
    assert report(tree, tmp_path / "report").exists()
    with pytest.raises(ConfigError, match="pair_model"):
        ModelConfig(pair_model="sparse")
    with pytest.raises(ConfigError, match="by='query'"):
        fit(log, model=ModelConfig(pair_model="gated"))


def test_evaluate_scores_the_pairs_of_a_gated_posterior(tree, log) -> None:
    import dataclasses

    import pandas as pd

    from cmp_bayes.evaluation import auc, evaluate, load_result

    labels = pd.DataFrame({"memory_id": [STRONG[0]], "query_id": [STRONG[1]], "required": [True]})
    labelled = dataclasses.replace(log, labels=labels)
    scores = load_result(tree)
    post = tree["posterior"]
    assert list(scores.columns[:3]) == ["memory_id", "query_id", "score"]
    assert len(scores) == post.sizes["pair"]
    exact = tree["pair_identification"]["tau_mean"].values
    np.testing.assert_array_equal(scores["score"].to_numpy(), exact)
    # the stored draws average to it within their Monte Carlo error (plus 1e-3: the draws are
    # jittered within their grid cell, the exact mean uses the cell's point)
    draws = post["tau"].values.reshape(-1, post.sizes["pair"])
    se = draws.std(axis=0) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 5 * se + 1e-3)
    assert set(scores["status"]) <= {"identified", "retrieved-only", "unidentified"}
    ev = evaluate(labelled, tree, level="pair", n_boot=20)
    # every (memory, query) of this store is a pair of the posterior (each was exposed)
    y = (scores["memory_id"] == STRONG[0]).to_numpy() & (scores["query_id"] == STRONG[1]).to_numpy()
    assert ev["n"] == len(scores) and ev["n_required"] == 1
    assert ev["auc"] == pytest.approx(auc(scores["score"].to_numpy(), y))
    assert ev["auc"] > 0.9  # the strong pair's posterior mean is above the others' (test above)


def test_monotone_gate_keeps_the_rank_slope_negative(log) -> None:
    from cmp_bayes.model.fit import fit

    tree = fit(log, by="query", model=ModelConfig(pair_model="gated", gate_rank_monotone=True, prior_draws=20),
               draws=100, tune=150, chains=2, seed=5, progressbar=False, max_attempts=1)
    for group in ("posterior", "prior"):
        ds = tree[group]
        coef = ds["gate_coef"].sel(gate_covariate="log_rank").values
        assert (coef <= 0).all()
        np.testing.assert_allclose(coef, -ds["gate_rank_slope"].values, rtol=1e-6)
    # the pair means follow the constrained gate: on this log m0 is ranked first for q0 only
    pid = tree["pair_identification"]
    assert pid["tau_mean"].sizes["pair"] == tree["posterior"].sizes["pair"]
    assert json.loads(tree.attrs["model_config"])["gate_rank_monotone"] is True


def test_gate_covariates_rank_a_never_ranked_pair_below_the_deepest_rank() -> None:
    from cmp_bayes.model.gated import gate_covariates

    # ranked at 0, 5 and 30 (0-based), and two pairs no ranking of their query lists
    pairs = xr.Dataset({
        "ranked": ("pair", np.array([2, 1, 3, 0, 0])),
        "rank_median": ("pair", np.array([0.0, 5.0, 30.0, np.nan, np.nan])),
        "rank_best": ("pair", np.array([0.0, 4.0, 20.0, np.nan, np.nan])),
    })
    for summary, deepest in (("median", 30.0), ("best", 20.0)):
        x, x_never, names = gate_covariates(pairs, summary)
        assert names == ["log_rank", "never_ranked"]
        lr = np.log1p(pairs[f"rank_{summary}"].values[:3])
        mu, sd = lr.mean(), lr.std()
        np.testing.assert_allclose(x[:3, 0], (lr - mu) / sd)
        # one past the deepest rank seen, on the same scale
        np.testing.assert_allclose(x[3:, 0], (np.log1p(deepest + 1.0) - mu) / sd)
        assert x[3:, 0].min() > x[:3, 0].max()
        np.testing.assert_allclose(x[:, 1], np.r_[0, 0, 0, 1, 1] - 0.4)
        np.testing.assert_allclose(x_never, x[3])


def test_monotone_gate_never_puts_an_unranked_pair_above_a_ranked_one(tmp_path) -> None:
    import pymc as pm

    from cmp_bayes.model.gated import MONOTONE_GATE

    _write_log(tmp_path, depth=3)  # rankings list 3 of the 8 memories
    lg = read_log(tmp_path)
    cfg = ModelConfig(pair_model="gated", gate_rank_monotone=True)
    g = gated_data(exposure_stats(lg), exposure_stats(lg, by="pair"), cfg)
    assert g.covariate_names == ["log_rank", "never_ranked"]
    never = g.x[:, 1] > 0
    assert never.any() and (~never).any()
    assert set(gated_hyper_shapes(g, cfg)) >= set(MONOTONE_GATE.values())
    model = build_gated_model(g, cfg)
    icpt, coef = pm.draw([model["gate_intercept"], model["gate_coef"]], draws=300, random_seed=3)
    assert (coef <= 0).all()
    deepest = np.argmax(np.where(never, -np.inf, g.x[:, 0]))
    for i in range(300):
        p = gate_probability(g, icpt[i], coef[i])
        # every draw of the prior: no never-ranked pair above the deepest ranked pair
        assert p[never].max() <= p[deepest] + 1e-12
    # the free gate has no such guarantee: its never_ranked coefficient can be positive
    free = ModelConfig(pair_model="gated", gate_rank_monotone=False)
    assert "gate_never_penalty" not in gated_hyper_shapes(
        gated_data(exposure_stats(lg), exposure_stats(lg, by="pair"), free), free)


def test_a_query_that_always_succeeds_is_no_evidence_of_relevance(tmp_path) -> None:
    # Every step of q1 succeeds, exposed or not: no memory can show an effect there. Clipped,
    # b + tau above 1 fits as well as 1 does, so each q1 pair fitted "relevant, helps" a little
    # better than "does nothing" (over LoCoMo's 31,434 randomized pairs this put the null at
    # -0.10 and called a third of all pairs relevant); truncated, an effect that has no room
    # is evidence against relevance there.
    _write_log(tmp_path, saturated="q1")
    lg = read_log(tmp_path)
    stats, pairs = exposure_stats(lg), exposure_stats(lg, by="pair")
    got = {}
    for bound in ("clip", "truncate"):
        cfg = ModelConfig(pair_model="gated", prior_family="mixture", learn_null_mean=False, effect_bound=bound)
        g = gated_data(stats, pairs, cfg)
        theta = _theta(g, weight_intercept=np.array([0.0, -30.0]))  # delta helps: a positive effect
        hyper = {k: v[None] for k, v in theta.items()}
        rec = recover_gated(g, hyper, np.random.default_rng(0), jitter=False)
        prior_p = gate_probability(g, theta["gate_intercept"], theta.get("gate_coef"))
        q1 = np.flatnonzero((np.asarray(g.pairs["query_id"].values).astype(str) == "q1")
                            & (g.arms["exposed"] > 0))
        assert q1.size == N_MEM
        got[bound] = rec.pair_p_relevant_mean[q1] / prior_p[q1]
    assert (got["clip"] > 1.0).all()  # the clipped likelihood leans towards an effect
    assert (got["truncate"] < 1.0).all()


def test_config_file_bools_must_be_booleans() -> None:
    # a TOML "yes" is a string, and a string would pass as true
    with pytest.raises(ConfigError, match="'gate_rank_monotone' must be true or false"):
        ModelConfig.from_dict({"pair_model": "gated", "gate_rank_monotone": "yes"})
    assert ModelConfig.from_dict({"gate_rank_monotone": True}).gate_rank_monotone is True


def test_p_relevant_max_is_the_best_pair_or_the_never_ranked_prior(log) -> None:
    # drop every pair of m5: a memory the pair statistics never saw keeps the prior of a
    # never-ranked pair, averaged over the draws; the others their best pair's P(z = 1 | data)
    pairs = exposure_stats(log, by="pair")
    keep = np.asarray(pairs["memory_id"].values).astype(str) != "m5"
    cfg = ModelConfig(pair_model="gated", prior_family="mixture", learn_null_mean=False)
    g = gated_data(exposure_stats(log), pairs.isel(pair=np.flatnonzero(keep)), cfg)
    draws = [_theta(g, gate_intercept=v) for v in (-2.0, -0.5)]
    hyper = {k: np.stack([d[k] for d in draws]) for k in draws[0]}
    rec = recover_gated(g, hyper, np.random.default_rng(4), jitter=False)
    memory = list(g.base.memory)
    for i, m in enumerate(memory):
        rows = g.pair_memory == i
        if m == "m5":
            assert not rows.any()
            eta = hyper["gate_intercept"] + (hyper["gate_coef"] @ g.x_never if g.covariate_names else 0.0)
            np.testing.assert_allclose(rec.p_relevant_max[i], np.mean(1 / (1 + np.exp(-eta))), rtol=1e-12)
        else:
            assert rec.p_relevant_max[i] == rec.pair_p_relevant_mean[rows].max()


def test_conditional_means_are_each_draws_exact_means_and_the_draws_average_to_them(log) -> None:
    # m5's pairs dropped: a memory without pairs takes the never-ranked gate's prior
    # and m6's and m7's q3 pairs emptied of exposures: pairs without data (the closed form)
    pairs = exposure_stats(log, by="pair")
    mem, qry = (np.asarray(pairs[c].values).astype(str) for c in ("memory_id", "query_id"))
    pairs = pairs.isel(pair=np.flatnonzero(mem != "m5"))
    empty = np.isin(mem[mem != "m5"], ["m6", "m7"]) & (qry[mem != "m5"] == "q3")
    for name in ("exposed", "exposed_outcome_sum", "exposed_outcome_sumsq", "window_exposed", "window_exposed_w"):
        pairs[name] = pairs[name].where(~xr.DataArray(empty, dims="pair"), 0)
    # a null off zero: the pairs without data add (1 - p) E[null]
    cfg = ModelConfig(pair_model="gated", prior_family="mixture", learn_null_mean=True)
    g = gated_data(exposure_stats(log), pairs, cfg)
    assert g.informative.size == g.pair_memory.size - 2  # pairs with and without data
    thetas = [_theta(g, gate_intercept=v, rho_intercept=r, tau_null_mean=-0.05)
              for v, r in ((-2.0, -1.0), (-0.5, 0.5), (0.3, 0.0))]
    assert "tau_null_mean" in thetas[0]
    hyper = {k: np.stack([d[k] for d in thetas]) for k in thetas[0]}
    rec = recover_gated(g, hyper, np.random.default_rng(5), jitter=False, conditional=True, store=np.array([1]))
    assert rec.conditional is not None and rec.tau.shape[0] == 1
    m = g.base.memory.size
    y, n = g.base.retrieved, g.base.in_store
    for d in range(len(thetas)):
        one = recover_gated(g, {k: v[d : d + 1] for k, v in hyper.items()}, np.random.default_rng(0), jitter=False)
        np.testing.assert_allclose(rec.conditional["tau_relevant"][d], one.post_mean, rtol=1e-12, atol=1e-15)
        # the mean of the memory's pairs' exact E[tau]; without pairs P(z = 1) E[delta]
        sums = np.bincount(g.pair_memory, weights=one.pair_tau_mean, minlength=m)
        counts = np.bincount(g.pair_memory, minlength=m)
        want = np.where(counts > 0, sums / np.maximum(counts, 1), one.p_relevant_max * one.post_mean)
        np.testing.assert_allclose(rec.conditional["tau_memory"][d], want, rtol=1e-9, atol=1e-13)
        _, _, ra, rb = compile_prior_terms(g.base, np.zeros(1, dtype=np.int64))({k: v[d] for k, v in hyper.items()})
        rho = (ra[0] + y) / (ra[0] + rb[0] + np.maximum(n - y, 0) + y)
        np.testing.assert_allclose(rec.conditional["utility_memory"][d], rho * want, rtol=1e-9, atol=1e-13)
    # and they are the expectations of the variables the recovery draws (Monte Carlo, one theta)
    s = 2000
    fixed = {k: np.repeat(v[1:2], s, axis=0) for k, v in hyper.items()}
    many = recover_gated(g, fixed, np.random.default_rng(6), jitter=False, conditional=True)
    for name, drawn in (("tau_memory", many.tau_memory), ("utility_memory", many.rho_memory * many.tau_memory),
                        ("tau_relevant", many.tau_relevant)):
        cond = many.conditional[name][0]
        np.testing.assert_allclose(many.conditional[name], np.broadcast_to(cond, (s, m)), rtol=1e-12)
        se = drawn.std(axis=0) / np.sqrt(s)
        assert (np.abs(drawn.mean(axis=0) - cond) <= 5 * se + 1e-6).all(), name


def test_forgets_on_a_store_average_wait_unless_allowed(tree, tmp_path, capsys) -> None:
    # tau_memory of a gated posterior averages over the log's questions (N_Q here): its
    # forgets wait by default, with a reason naming estimand 'relevant'; store_average='allow'
    # makes the same forgets, flagged; tau_relevant is not touched
    from cmp_bayes import Costs, decide, save_posterior
    from cmp_bayes.cli.main import main
    from cmp_bayes.decision.rule import DecisionWarning
    from cmp_bayes.reporting.actions import decisions_section

    with pytest.warns(DecisionWarning, match=f"over the log's {N_Q} questions"):
        allowed = decide(tree, Costs(estimand="tau", threshold=0.1, store_average="allow"))
    forgets = allowed.counts()["forget"]
    assert forgets > 0 and allowed.store_average == N_Q
    assert f"{forgets} forgets on tau_memory, a shared-store average" in allowed.summary()
    with pytest.warns(DecisionWarning, match="deferred"):
        waited = decide(tree, Costs(estimand="tau", threshold=0.1))
    assert waited.counts()["forget"] == 0 and waited.store_average == N_Q
    held = allowed.table["action"] == "forget"
    assert (waited.table.loc[held, "action"] == "defer").all()
    assert waited.table.loc[held, "reason"].str.contains("estimand='relevant'").all()
    np.testing.assert_array_equal(waited.table["p_useful"], allowed.table["p_useful"])
    assert (waited.table.loc[held, "exposures_needed"] == 0).all()  # exposures do not help
    assert f"{forgets} forgets on tau_memory deferred" in waited.summary()
    assert f"{forgets} forgets on tau_memory deferred" in decisions_section(waited).markdown
    assert allowed.store_average_count == forgets and waited.store_average_count == forgets
    relevant = decide(tree, Costs(estimand="relevant", threshold=0.1))
    assert relevant.store_average is None and relevant.store_average_count == 0
    # a memory-level posterior's forgets are not a store average, however many there are
    level = decide(synthetic_posterior(n_memories=40, seed=1), Costs(threshold=0.05))
    assert level.counts()["forget"] > 0 and level.store_average_count == 0
    path = save_posterior(tree, tmp_path / "g.nc")
    capsys.readouterr()
    assert main(["decide", str(path), "--threshold", "0.1", "-o", str(tmp_path / "d.csv")]) == 0
    assert "shared-store average:" in capsys.readouterr().out
    assert main(["decide", str(path), "--threshold", "0.1", "--store-average", "allow"]) == 0
    assert f"{forgets} forget" in capsys.readouterr().out


def test_decide_on_relevant_takes_the_exact_grid_posterior(tree) -> None:
    # the fit keeps delta's pmf over the grid, averaged over every judged draw; decide's
    # P(tau_relevant > t) and mean are that pmf's, and the stored draws are a sample of it
    from cmp_bayes import Costs, decide
    from cmp_bayes.decision.draws import grid_summaries

    grid = tree["tau_relevant_grid"].to_dataset()
    assert grid.attrs["within_cell"] == "uniform"  # ModelConfig.jitter's default
    pmf = grid["pmf"].to_numpy()
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, rtol=1e-12)
    draws = tree["posterior"]["tau_relevant"].transpose("chain", "draw", "memory").to_numpy()
    n = draws.shape[0] * draws.shape[1]
    for t in (0.0, 0.05, 0.2):
        p, mean = grid_summaries(grid, t)
        share = (draws > t).mean(axis=(0, 1))
        # the draws of one chain are dependent through the hyperparameters only: 5 binomial sds
        # of n draws, widened by the chains' count (2) for that dependence
        assert (np.abs(share - p) <= 5 * np.sqrt(p * (1 - p) / n) * np.sqrt(2) + 1.5 / n).all(), t
        dec = decide(tree, Costs(estimand="relevant", threshold=t))
        np.testing.assert_allclose(dec.table["p_useful"].to_numpy(), p, rtol=1e-12)
        np.testing.assert_allclose(dec.table["expected_value"].to_numpy(), mean, rtol=1e-12)
    # and the grid's mean is delta's posterior mean up to where in the cell delta sits
    ident = tree["identification"]["tau_mean"].to_numpy()
    width = (grid["tau_cell_upper"] - grid["tau_cell_lower"]).to_numpy()
    assert (np.abs(mean - ident) <= pmf @ width / 2 + 1e-12).all()


def test_grid_summaries_count_the_share_of_a_straddling_cell() -> None:
    from cmp_bayes.decision.draws import grid_summaries

    grid = xr.Dataset(
        {"pmf": (("memory", "tau_cell"), np.array([[0.5, 0.5], [0.0, 1.0]]))},
        coords={"memory": ["a", "b"], "tau_cell_lower": ("tau_cell", [-0.1, 0.0]),
                "tau_cell_upper": ("tau_cell", [0.0, 0.1]), "tau_cell_point": ("tau_cell", [-0.04, 0.05])},
        attrs={"within_cell": "uniform"},
    )
    p, mean = grid_summaries(grid, 0.025)
    np.testing.assert_allclose(p, [0.5 * 0.75, 0.75])
    np.testing.assert_allclose(mean, [0.0, 0.05])
    grid.attrs["within_cell"] = "point"
    p, mean = grid_summaries(grid, 0.025)
    np.testing.assert_allclose(p, [0.5, 1.0])
    np.testing.assert_allclose(mean, [0.005, 0.05])


def test_the_conditional_mean_rhat_sees_chains_that_disagree(gd) -> None:
    # two "chains" of hyperparameter draws around different gate intercepts: every memory's
    # conditional means differ by chain, and its recorded R-hat says so; the same draws
    # shuffled across the chains mix, and pass
    from cmp_bayes.posterior.memory_diagnostics import judged_memory_diagnostics

    rng = np.random.default_rng(7)
    chains, draws = 2, 100
    thetas = [_theta(gd, gate_intercept=g) for g in rng.normal(-1.5, 0.1, (chains * draws))]
    thetas = [_theta(gd, gate_intercept=float(t["gate_intercept"]) + (1.0 if i >= draws else 0.0))
              for i, t in enumerate(thetas)]
    hyper = {k: np.stack([t[k] for t in thetas]) for k in thetas[0]}
    stored = np.arange(0, chains * draws, 20)  # 5 stored draws per chain
    m = gd.base.memory.size

    def group(order: np.ndarray) -> xr.Dataset:
        h = {k: v[order] for k, v in hyper.items()}
        rec = recover_gated(gd, h, np.random.default_rng(0), jitter=False, store=stored, conditional=True)
        post = xr.Dataset(
            {"tau_memory": (("chain", "draw", "memory"), rec.tau_memory.reshape(chains, -1, m)),
             "utility_memory": (("chain", "draw", "memory"), (rec.rho_memory * rec.tau_memory).reshape(chains, -1, m)),
             "tau_relevant": (("chain", "draw", "memory"), rec.tau_relevant.reshape(chains, -1, m))},
            coords={"memory": gd.base.memory},
        )
        out = judged_memory_diagnostics(post, {k: v.reshape(chains, draws, m) for k, v in rec.conditional.items()})
        assert out is not None and out.attrs["fit_draws"] == draws and out.attrs["draws"] == 5
        return out

    apart = group(np.arange(chains * draws))
    mixed = group(rng.permutation(chains * draws))
    # the gate moves E[tau_memory] of every memory: the chains sit apart in all of them
    assert (apart["rhat_tau"].values > 1.5).all() and (apart["rhat_utility"].values > 1.5).all()
    # shuffled: 4 split chains of 50 independent draws; 1.1 is far above their noise
    assert (mixed["rhat_tau"].values < 1.1).all() and (mixed["rhat_utility"].values < 1.1).all()
    assert (mixed["rhat_tau_relevant"].values < 1.1).all()
