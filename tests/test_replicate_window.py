"""``replicate experiment`` under a window design (spec, "Targeted exposure: window designs").

A hand-built dataset with known ranks (several questions per store, a store
smaller than the window) and the bundled HotpotQA sample; every check
recomputes the spec's rules from the log as read back by ``read_log``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _replication_fixtures import DATA, HOTPOTQA, need

from cmp_bayes.cli.main import main
from cmp_bayes.datasets.base import (
    EVIDENCE_COLUMNS,
    MEMORY_COLUMNS,
    QUERY_COLUMNS,
    Dataset,
    Store,
    frame,
)
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.read import read_log
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.replicate.config import ExperimentConfig
from cmp_bayes.replicate.experiment import run_experiment
from cmp_bayes.replicate.layout import build_log, write_and_check


class _Fixed:
    """Scores = minus a fixed rank table, so every memory's rank is known in advance."""

    name = "fixed"

    def __init__(self, ranks: dict[str, list[int]]) -> None:
        self.ranks = ranks

    def scores(self, documents, queries):
        return -np.array([self.ranks[q] for q in queries], dtype=float)


def _store(sid: str, n: int, queries: dict[str, list[int]]) -> Store:
    mem = frame([{"memory_id": f"{sid}/m{i}", "position": i, "session": "", "text": f"{sid}{i}"} for i in range(n)],
                MEMORY_COLUMNS)
    q = frame([{"query_id": k, "text": k, "group": "g", "answer": ""} for k in queries], QUERY_COLUMNS)
    first = next(iter(queries))
    ev = frame([{"query_id": first, "memory_id": f"{sid}/m0"}], EVIDENCE_COLUMNS)
    return Store(sid, mem, q, ev)


def _toy() -> tuple[Dataset, _Fixed]:
    """Store A: 16 memories, 3 questions with random ranks; store B: 6 memories, 2 questions."""
    rng = np.random.default_rng(0)
    ra = {f"a{i}": rng.permutation(16).tolist() for i in range(3)}
    rb = {f"b{i}": rng.permutation(6).tolist() for i in range(2)}
    ds = Dataset("toy", "turn", (_store("A", 16, ra), _store("B", 6, rb)), DATA, "none")
    return ds, _Fixed({**ra, **rb})


def _config(j: int, W: int, **kw) -> ExperimentConfig:
    base = {"slots": 5, "exposure_slots": 3, "exposures_per_memory": 6.0, "fit": False, "n_boot": 20,
            "n_perturbations": 2}
    return ExperimentConfig(**{**base, **kw, "assignment": "window", "window": W, "pool_slots": j})


def _check_window_log(log: ExposureLog, cfg: ExperimentConfig, rankings: dict[str, list[str]]) -> int:
    """The spec's four rules at every step; returns the number of window slots.

    ``rankings``: the retriever's ranking of the store for each question (memory ids, best first).
    """
    cut = cfg.slots - cfg.exposure_slots
    k, j, W = cfg.exposure_slots, cfg.pool_slots, cfg.window
    d = log.design
    assert (d["assignment"], d["window"], d["pool_slots"], d["exposure_slots"]) == ("window", W, j, k)
    rk = log.rankings.sort_values(["step", "rank"])
    logged = {int(t): g["memory_id"].astype(str).tolist() for t, g in rk.groupby("step")}
    mem = log.memories
    life = {str(m): (int(c), int(e)) for m, c, e in zip(mem["memory_id"], mem["created_step"], mem["deleted_step"],
                                                       strict=True)}
    ctx = log.contexts.assign(memory_id=log.contexts["memory_id"].astype(str))
    by_step = {int(t): g for t, g in ctx.groupby("step")}
    n_window = 0
    for t, q in zip(log.steps["step"], log.steps["query_id"].astype(str), strict=True):
        t = int(t)
        # every step logs the retriever's ranking of the store for its question
        assert logged[t] == rankings[q]
        g = by_step[t]
        retr = g[g["source"] == "retriever"]
        assert retr["memory_id"].tolist() == rankings[q][:cut]
        exp = g[g["source"] == "exposure"]
        assert exp["arm"].isin(["pool", "window"]).all()
        pooled, win = exp[exp["arm"] == "pool"], exp[exp["arm"] == "window"]
        assert len(pooled) <= j
        before = set(retr["memory_id"]) | set(pooled["memory_id"])
        wt = [m for m in rankings[q][cut : cut + W] if life[m][0] <= t < life[m][1] and m not in before]
        assert len(win) == min(k - j, len(wt))
        assert set(win["memory_id"]) <= set(wt)
        for p in win["propensity"]:
            assert p == pytest.approx(min(1.0, (k - j) / len(wt)), rel=1e-12)
        for m, p in zip(pooled["memory_id"], pooled["propensity"], strict=True):
            assert p == d["pool"][m]
        assert not g["memory_id"].duplicated().any()
        n_window += len(win)
    return n_window


def _store_rankings(ds: Dataset, retriever) -> dict[str, list[str]]:
    from cmp_bayes.retrieval.base import rank_store

    out: dict[str, list[str]] = {}
    for s in ds.stores:
        r = rank_store(s, retriever)
        mids = r["memory"].to_numpy()
        for qi, q in enumerate(r["query"].to_numpy()):
            out[str(q)] = [str(m) for m in mids[np.argsort(r.to_numpy()[qi], kind="stable")]]
    return out


@pytest.mark.parametrize(("j", "W"), [(0, 1), (0, 4), (1, 3), (1, 8), (2, 6)])
def test_window_log_reads_and_follows_the_spec(tmp_path: Path, j: int, W: int) -> None:
    ds, retr = _toy()
    cfg = _config(j, W)
    log, blocks = build_log(ds, retr, cfg)
    back = write_and_check(log, tmp_path / "log")  # read_log checks W_t and the window propensities too
    n_window = _check_window_log(back, cfg, _store_rankings(ds, retr))
    assert n_window > 0 if j < cfg.exposure_slots else n_window == 0
    # the same steps as the balanced design: the same number of exposure slots to spend
    balanced, b_blocks = build_log(ds, retr, ExperimentConfig(slots=5, exposure_slots=3, fit=False))
    assert [b.steps for b in blocks] == [b.steps for b in b_blocks]
    assert back.n_steps == balanced.n_steps
    on_disk = json.loads((tmp_path / "log" / "design.json").read_text())
    assert on_disk["assignment"] == "window" and on_disk["window"] == W and on_disk["pool_slots"] == j


def test_pool_slots_are_balanced_per_store() -> None:
    ds, retr = _toy()
    cfg = _config(1, 4)
    log, blocks = build_log(ds, retr, cfg)
    ctx = log.contexts
    pooled = ctx[ctx["arm"] == "pool"].assign(memory_id=lambda f: f["memory_id"].astype(str))
    assert pooled.groupby("step").size().max() == 1
    for b in blocks:
        ids = [str(m) for m in b.memory_ids[b.pool]]
        steps = pooled[(pooled["step"] >= b.start) & (pooled["step"] < b.start + b.steps)]
        counts = steps["memory_id"].value_counts().reindex(ids, fill_value=0)
        share = b.steps * cfg.pool_slots / len(ids)
        assert counts.between(math.floor(share), math.ceil(share)).all(), b.store_id
        assert counts.sum() == b.steps * cfg.pool_slots
        for m in ids:
            assert log.design["pool"][m] == pytest.approx(counts[m] / b.steps)  # n_m / T_m


def test_window_exposure_frequency_matches_the_propensity() -> None:
    # Given the step's window, each member is exposed with probability p_t = min(1, (k - j) / |W_t|),
    # independently across steps: exposures minus the sum of p_t has sd sqrt(sum p_t (1 - p_t)), 4 sd.
    ds, retr = _toy()
    cfg = _config(1, 6, exposures_per_memory=60.0)
    log, _ = build_log(ds, retr, cfg)
    rankings = _store_rankings(ds, retr)
    cut, k, j, W = cfg.slots - cfg.exposure_slots, cfg.exposure_slots, cfg.pool_slots, cfg.window
    ctx = log.contexts.assign(memory_id=log.contexts["memory_id"].astype(str))
    before = ctx[(ctx["source"] == "retriever") | (ctx["arm"] == "pool")].groupby("step")["memory_id"].agg(set)
    won = ctx[ctx["arm"] == "window"].groupby("step")["memory_id"].agg(list)
    count: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    var: Counter[str] = Counter()
    for t, q in zip(log.steps["step"], log.steps["query_id"].astype(str), strict=True):
        wt = [m for m in rankings[q][cut : cut + W] if m not in before.get(t, set())]
        p = min(1.0, (k - j) / len(wt))
        for m in wt:
            expected[m] += p
            var[m] += p * (1 - p)
        count.update(won.get(t, []))
    tested = [m for m in expected if var[m] > 5]
    assert len(tested) >= 12
    for m in tested:
        assert abs(count[m] - expected[m]) < 4 * math.sqrt(var[m]), m


def test_balanced_experiment_log_is_unchanged() -> None:
    ds, retr = _toy()
    log, _ = build_log(ds, retr, ExperimentConfig(slots=5, exposure_slots=3, fit=False))
    assert log.contexts["arm"].isna().all() and log.design["assignment"] == "balanced"
    # rankings only at the first step each question is asked in its block (5 questions)
    assert log.rankings["step"].nunique() == 5


def test_run_experiment_under_a_window_design(tmp_path: Path) -> None:
    ds, retr = _toy()
    cfg = _config(1, 4)
    res = run_experiment(ds, retr, cfg, log_out=tmp_path / "log")
    out = json.loads(res.to_json())
    assert (out["config"]["assignment"], out["config"]["window"], out["config"]["pool_slots"]) == ("window", 4, 1)
    assert "window design W=4, j=1" in res.to_text()
    assert ExperimentConfig.from_dict(out["config"]) == res.config
    assert read_log(tmp_path / "log").design["assignment"] == "window"


def test_experiment_config_validation_names_the_field() -> None:
    for kw, field in [
        ({"assignment": "window"}, "window"),
        ({"assignment": "window", "window": 0}, "window"),
        ({"assignment": "window", "window": True}, "window"),
        ({"assignment": "window", "window": 3, "pool_slots": 3}, "pool_slots"),
        ({"assignment": "window", "window": 3, "pool_slots": -1}, "pool_slots"),
        ({"window": 3}, "window"),
        ({"pool_slots": 1}, "pool_slots"),
        ({"assignment": "bernoulli"}, "assignment"),
    ]:
        with pytest.raises(ConfigError, match=field):
            ExperimentConfig(fit=False, **kw)
    cfg = ExperimentConfig(fit=False, assignment="window", window=np.int64(5), pool_slots=np.int64(1))
    assert type(cfg.window) is int and type(cfg.pool_slots) is int
    assert ExperimentConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_cli_experiment_window_design_on_hotpotqa(tmp_path: Path, capsys) -> None:
    rc = main(["replicate", "experiment", "--dataset", "hotpotqa", "--data", str(need(HOTPOTQA)), "--limit", "3",
               "--slots", "4", "--exposure-slots", "2", "--assignment", "window", "--window", "3",
               "--pool-slots", "1", "--no-fit", "--log-out", str(tmp_path / "log"), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["assignment"] == "window"
    log = read_log(tmp_path / "log")
    assert log.design["window"] == 3 and log.design["pool_slots"] == 1
    # 10 paragraphs per question, 2 retrieved: ranks 2..4 always hold a member besides the pool slot,
    # so every step spends both exposure slots, one per arm
    exp = log.contexts[log.contexts["source"] == "exposure"]
    assert (exp.groupby("step").size() == 2).all()
    assert (exp.groupby(["step", "arm"]).size() == 1).all()
    assert log.rankings.groupby("step").size().eq(10).all() and log.rankings["step"].nunique() == log.n_steps
    rc = main(["replicate", "experiment", "--dataset", "hotpotqa", "--data", str(HOTPOTQA), "--limit", "3",
               "--pool-slots", "1", "--no-fit"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pool_slots" in err[0]


def test_window_outcomes_see_the_window_slots() -> None:
    # the reader's evidence share counts every slot of the context, window slots included: with the
    # evidence memory A/m0 placed in the window of question a0, steps that expose it succeed more
    ds, _ = _toy()
    # ranks[q][i] is memory i's rank for q: A/m0 at rank 3 for a0 (in its window, ranks 2..9),
    # last for a1 and a2
    last = [15] + list(range(15))
    ranks = {"a0": [3, 0, 1, 2] + list(range(4, 16)), "a1": last, "a2": last,
             "b0": list(range(6)), "b1": list(range(6))}
    cfg = _config(0, 8, exposures_per_memory=100.0, reader_noise=0.0)
    log, _ = build_log(ds, _Fixed(ranks), cfg)
    steps = log.steps.assign(query_id=log.steps["query_id"].astype(str))
    a0 = steps[steps["query_id"] == "a0"].set_index("step")["outcome"]
    ctx = log.contexts
    shown = set(ctx.loc[(ctx["memory_id"].astype(str) == "A/m0") & (ctx["arm"] == "window"), "step"])
    exposed = a0[a0.index.isin(shown)]
    control = a0[~a0.index.isin(shown)]
    assert len(exposed) > 30 and len(control) > 30
    # p = 3 / 8 for A/m0 at every a0 step; A/m0 is a0's only evidence, so exposing it adds the
    # reader's gain 0.6 (less where clipping at 0.98 binds); the sd of the difference is below 0.12
    assert exposed.mean() - control.mean() > 0.3
    assert pd.api.types.is_float_dtype(steps["outcome"])
