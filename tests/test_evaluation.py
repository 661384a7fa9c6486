"""AUC, its bootstrap interval, NaN rules, result formats, and the evaluate CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from _stats_fixtures import cmp_log
from scipy.stats import norm

from cmp_bayes.cli.main import main
from cmp_bayes.constants import CI_PROB
from cmp_bayes.estimators import estimate
from cmp_bayes.evaluation import auc, auc_interval, evaluate


def test_auc_matches_pairwise_count() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = rng.integers(0, 5, 40).astype(float)  # many ties
        s[rng.random(40) < 0.2] = -np.inf
        y = rng.random(40) < 0.4
        pos, neg = s[y], s[~y]
        want = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
        assert auc(s, y) == pytest.approx(want)
    assert np.isnan(auc(np.array([1.0, 2.0]), np.array([True, True])))


def test_bootstrap_interval_coverage() -> None:
    # positives ~ N(d, 1), negatives ~ N(0, 1): true AUC = Phi(d / sqrt 2). Over K = 100
    # independent samples the interval's coverage is binomial around CI_PROB = 0.9 with
    # sd sqrt(0.09 / 100) = 0.03; 3 sd either side, widened by 0.03 for the percentile
    # bootstrap's known undercoverage at n = 60 + 60 (its error is O(1/n)).
    d, k = 0.8, 100
    truth = norm.cdf(d / np.sqrt(2))
    rng = np.random.default_rng(1)
    hits = 0
    for i in range(k):
        s = np.concatenate([rng.normal(d, 1, 60), rng.normal(0, 1, 60)])
        y = np.arange(120) < 60
        _, lo, hi = auc_interval(s, y, n_boot=200, seed=i)
        hits += lo <= truth <= hi
    sd = np.sqrt(CI_PROB * (1 - CI_PROB) / k)
    assert CI_PROB - 3 * sd - 0.03 <= hits / k <= CI_PROB + 3 * sd, hits / k


@pytest.fixture(scope="module")
def small() -> tuple:
    log, truth = cmp_log(seed=2, truth_seed=5, n_memories=80, n_queries=2, n_steps=1600, pool_share=0.8)
    return log, truth


def test_nan_rules_and_levels(small) -> None:
    log, _ = small
    est = estimate(log)  # retrieved-only and out-of-pool memories have no Hajek estimate
    n_nan = int(est["estimate"].isna().sum())
    assert n_nan > 0
    last = evaluate(log, est, n_boot=200)
    excl = evaluate(log, est, n_boot=200, nan="exclude")
    m = len(log.memory_ids())  # no memories file: out-of-pool unretrieved ones are unnamed
    assert last["n"] == m == len(est) and last["n_nan"] == n_nan and excl["n"] == m - n_nan
    assert excl["n_nan"] == n_nan and last["nan_rule"] == "last"
    assert last["ci_low"] <= last["auc"] <= last["ci_high"] and last["ci_prob"] == CI_PROB
    # "last" by hand: NaN scores become -inf
    req = log.labels.groupby("memory_id")["required"].any()
    s = est.set_index("memory_id")["estimate"].fillna(-np.inf)
    assert last["auc"] == pytest.approx(auc(s.to_numpy(), req.reindex(s.index).to_numpy()))
    assert set(last["by_status"]) <= {"identified", "retrieved-only", "unidentified"}
    # pair level from a memory-level result: every (memory, query) pair, memory's score
    pair = evaluate(log, est, level="pair", n_boot=100)
    lab = log.labels[log.labels["memory_id"].isin(log.memory_ids())]
    assert pair["n"] == m * 2 and pair["n_required"] == int(lab["required"].sum())
    # pair level from a per-query result uses its rows
    per_q = estimate(log, by="query")
    pq = evaluate(log, per_q, level="pair", n_boot=100)
    assert pq["n"] == len(per_q)
    # memory level from a per-query result: max over queries
    mq = evaluate(log, per_q, level="memory", n_boot=0)
    best = per_q.groupby("memory_id")["estimate"].max().fillna(-np.inf)
    assert mq["auc"] == pytest.approx(auc(best.to_numpy(), req.reindex(best.index).to_numpy()))


def test_posterior_tree_is_scored_by_mean(small) -> None:
    log, truth = small
    mem = log.memory_ids()
    rng = np.random.default_rng(0)
    tau = truth.memories.set_index("memory_id")["tau"].reindex(mem).to_numpy()
    draws = tau[None, None, :] + rng.normal(0, 0.01, (2, 50, len(mem)))
    tree = xr.DataTree.from_dict(
        {"posterior": xr.Dataset({"tau": (("chain", "draw", "memory"), draws)}, coords={"memory": mem})}
    )
    r = evaluate(log, tree, n_boot=100)
    # scores are the structural effects: required memories score 0.25 > 0 for all others
    assert r["auc"] == pytest.approx(1.0) and r["method"] == "posterior-mean" and r["n_nan"] == 0


def test_per_query_posterior_is_scored_over_in_store_pairs_with_pair_status(small) -> None:
    # A per-query posterior has a cell for every memory x query of its grid; the units are
    # the log's in-store pairs only, and a pair's status is its own (exposed under that
    # query or not), as for a per-query table, not the memory's status repeated.
    from cmp_bayes.diagnostics.positivity import identification_status
    from cmp_bayes.statistics import exposure_stats

    log, truth = small
    mem = log.memory_ids()
    ds = exposure_stats(log, by="query")
    queries = [*ds["query"].values.astype(str), "q-never-asked"]
    rng = np.random.default_rng(0)
    tau = truth.memories.set_index("memory_id")["tau"].reindex(mem).to_numpy()
    draws = tau[None, None, :, None] + rng.normal(0, 0.01, (2, 50, len(mem), len(queries)))
    draws[..., -1] = np.nan  # what the fit writes where the memory is never in the store
    tree = xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {"tau": (("chain", "draw", "memory", "query"), draws)},
                coords={"memory": mem, "query": queries},
            ),
            "identification": xr.Dataset(
                {"status": ("memory", np.full(len(mem), "identified", dtype=object))}, coords={"memory": mem}
            ),
        }
    )
    r = evaluate(log, tree, level="pair", n_boot=50)
    in_store = ds["in_store"].to_numpy() > 0
    assert r["n"] == int(in_store.sum()) and r["n_nan"] == 0
    want = pd.Series(identification_status(ds).to_numpy()[in_store]).value_counts()
    got = pd.Series({k: v["n"] for k, v in r["by_status"].items()})
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index(), check_names=False)
    assert len(want) > 1  # the memory-level status ("identified" everywhere) was not kept


def test_evaluate_cli(small, tmp_path, capsys) -> None:
    from cmp_bayes.log.export import write_log

    log, _ = small
    root = write_log(log, tmp_path / "log")
    csv = tmp_path / "est.csv"
    estimate(log, method="logged-diff").to_csv(csv, index=False)
    assert main(["evaluate", str(root), str(csv), "--json", "--n-boot", "100"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out)
    assert out.count("\n") == 1 and set(res) == {"memory", "pair"}
    assert res["memory"]["method"] == "logged-diff"
    assert main(["evaluate", str(root), str(csv), "--level", "memory", "--nan", "exclude"]) == 0
    assert "AUC" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"x": [1]}).to_csv(bad, index=False)
    assert main(["evaluate", str(root), str(bad)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
