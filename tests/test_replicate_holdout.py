"""Held-out questions in ``replicate experiment`` (ExperimentConfig.holdout; replicate/holdout.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from _replication_fixtures import HOTPOTQA, LOCOMO, need

from cmp_bayes.cli.main import main
from cmp_bayes.errors import ConfigError
from cmp_bayes.evaluation import auc
from cmp_bayes.replicate.config import ExperimentConfig
from cmp_bayes.replicate.experiment import run_experiment
from cmp_bayes.replicate.holdout import held_out_labels, memory_scores
from cmp_bayes.replicate.layout import build_log
from cmp_bayes.retrieval.bm25 import BM25Retriever

FAST = {"n_boot": 50, "n_perturbations": 3, "fit": False}


@pytest.fixture(scope="module")
def conv42():
    from cmp_bayes.datasets.locomo import load_locomo

    return load_locomo(need(LOCOMO), conversations=["conv-42"])


def _held_ids(blocks) -> set[str]:
    return {str(q) for b in blocks for q in b.query_ids[b.held_out]}


def _frames(log) -> dict[str, pd.DataFrame]:
    return {"steps": log.steps, "contexts": log.contexts, "rankings": log.rankings,
            "memories": log.memories, "labels": log.labels}


def test_holdout_zero_is_todays_log_bit_for_bit(conv42) -> None:
    a, ba = build_log(conv42, BM25Retriever(), ExperimentConfig(**FAST))
    b, bb = build_log(conv42, BM25Retriever(), ExperimentConfig(**FAST, holdout=0.0))
    for name, frame in _frames(a).items():
        pd.testing.assert_frame_equal(frame, _frames(b)[name])
    assert a.design == b.design and all(len(x.held_out) == 0 for x in ba + bb)


def test_the_split_never_leaks_a_held_out_question_into_the_log(conv42) -> None:
    cfg = ExperimentConfig(**FAST, holdout=0.3)
    log, blocks = build_log(conv42, BM25Retriever(), cfg)
    held = _held_ids(blocks)
    all_q = set(conv42.stores[0].queries["query_id"].astype(str))
    assert len(held) == round(0.3 * len(all_q)) == 78
    asked_steps = set(log.steps["query_id"].astype(str))
    assert not asked_steps & held
    assert asked_steps == all_q - held  # 1887 steps over 182 questions: every asked one is asked
    assert not set(log.labels["query_id"].astype(str)) & held
    step_query = log.steps.set_index("step")["query_id"].astype(str)
    assert not set(step_query.reindex(log.rankings["step"].unique())) & held
    # the same steps as without held-out questions (steps depend on the pool, not on the questions)
    base, _ = build_log(conv42, BM25Retriever(), ExperimentConfig(**FAST))
    assert log.n_steps == base.n_steps
    # seeded: the same seed holds the same questions out, another seed others
    _, again = build_log(conv42, BM25Retriever(), cfg)
    assert _held_ids(again) == held
    _, other = build_log(conv42, BM25Retriever(), ExperimentConfig(**{**FAST, "seed": 1}, holdout=0.3))
    assert _held_ids(other) != held
    # the labels of the held-out questions are the benchmark's evidence for them
    labels = held_out_labels(blocks)
    ev = conv42.stores[0].evidence
    want = set(ev.loc[ev["query_id"].astype(str).isin(held), "memory_id"].astype(str))
    assert set(labels.loc[labels["required"], "memory_id"]) == want and len(labels) == conv42.stores[0].size


def test_a_one_question_store_holds_nothing_out() -> None:
    from cmp_bayes.datasets.hotpotqa import load_hotpotqa

    d = load_hotpotqa(need(HOTPOTQA), limit=4)
    cfg = ExperimentConfig(slots=4, exposure_slots=1, **FAST)
    a, _ = build_log(d, BM25Retriever(), cfg)
    import dataclasses

    b, blocks = build_log(d, BM25Retriever(), dataclasses.replace(cfg, holdout=0.5))
    assert all(len(x.held_out) == 0 for x in blocks)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    res = run_experiment(d, BM25Retriever(), dataclasses.replace(cfg, holdout=0.5))
    assert res.holdout["questions"] == 0 and res.holdout["memories"] == 0
    assert all(r["auc"] is None for r in res.holdout["auc"])


def test_experiment_scores_each_ranking_on_the_held_out_evidence(conv42) -> None:
    cfg = ExperimentConfig(**FAST, holdout=0.3, assignment="window", window=10, pool_slots=1)
    res = run_experiment(conv42, BM25Retriever(), cfg)
    h = res.holdout
    rows = {r["method"]: r for r in h["auc"]}
    assert set(rows) == {"logged-success", "hajek", "best rank", "window SNIPW max over pairs"}
    assert h["questions"] == 78 and h["asked"] == 182 and h["memories"] == 629
    assert all(r["n"] == 629 and r["n_required"] == h["required"] > 0 for r in rows.values())
    for r in rows.values():
        assert r["ci_low"] <= r["auc"] <= r["ci_high"]
    # best rank by hand: minus the smallest rank the log's rankings show, AUC against the
    # memories some held-out question needs (NaN = never ranked, last)
    log, blocks = build_log(conv42, BM25Retriever(), cfg)
    labels = held_out_labels(blocks)
    best = log.rankings.groupby("memory_id")["rank"].min().reindex(labels["memory_id"]).to_numpy(float)
    score = np.where(np.isnan(best), -np.inf, -best)
    assert rows["best rank"]["auc"] == pytest.approx(auc(score, labels["required"].to_numpy()), abs=1e-12)
    # the paired differences compare every method with both baselines
    pairs = {(d["method"], d["baseline"]) for d in h["auc_difference"]}
    assert ("hajek", "logged-success") in pairs and ("hajek", "best rank") in pairs
    assert ("best rank", "logged-success") in pairs and ("best rank", "best rank") not in pairs
    out = json.loads(res.to_json())
    assert out["holdout"]["questions"] == 78 and out["config"]["holdout"] == 0.3
    assert "held-out questions: 78 of 260" in res.to_text()
    # the asked-question AUCs of today's table read only the asked questions' labels
    assert res.log_summary["required_memories"] == log.labels["memory_id"].nunique()
    # without held-out questions the JSON has no holdout entry
    plain = run_experiment(conv42, BM25Retriever(), ExperimentConfig(**FAST))
    assert "holdout" not in json.loads(plain.to_json()) and plain.holdout == {}


def test_posterior_scores_enter_when_fits_run(conv42) -> None:
    # the fits' scores (memory-level tau; per-query tau_memory; gated tau_relevant,
    # p_relevant_any and p_relevant_max), here from synthetic posteriors over the log's memories
    from cmp_bayes.estimators import estimate
    from cmp_bayes.statistics import exposure_stats
    from cmp_bayes.testing import memory_table, synthetic_posterior

    log, blocks = build_log(conv42, BM25Retriever(), ExperimentConfig(**FAST, holdout=0.3))
    stats = exposure_stats(log)
    ids = stats["memory"].to_numpy().astype(str)
    mem = memory_table(len(ids), seed=1).assign(memory_id=ids)
    fits = {"memory": synthetic_posterior(mem, draws=20), "query": synthetic_posterior(mem, draws=20, pair_model="gated")}
    tables = {m: estimate(log, method=m) for m in ("logged-success", "hajek")}
    scores = memory_scores(stats, tables, estimate(log, by="query", method="hajek"), fits)
    assert {"posterior mean tau", "posterior mean tau_memory", "posterior mean tau_relevant",
            "posterior p_relevant_any", "posterior p_relevant_max"} <= set(scores)
    rel = fits["query"]["posterior"]["tau_relevant"].mean(("chain", "draw"))
    np.testing.assert_allclose(scores["posterior mean tau_relevant"].reindex(ids).to_numpy(), rel.to_numpy())
    # p_relevant_max is read as stored (identification), not averaged over draws
    best = fits["query"]["identification"]["p_relevant_max"]
    np.testing.assert_array_equal(scores["posterior p_relevant_max"].reindex(ids).to_numpy(), best.to_numpy())


def test_config_and_cli(tmp_path, capsys) -> None:
    for bad in (1.0, -0.1, True, "0.2"):
        with pytest.raises(ConfigError, match="holdout"):
            ExperimentConfig(holdout=bad)  # type: ignore[arg-type]
    assert ExperimentConfig.from_dict(ExperimentConfig(holdout=0.25).to_dict()).holdout == 0.25
    rc = main(["replicate", "experiment", "--dataset", "locomo", "--data", str(need(LOCOMO)),
               "--conversations", "conv-42", "--no-fit", "--holdout", "0.2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["holdout"]["questions"] == 52 and out["config"]["holdout"] == 0.2
