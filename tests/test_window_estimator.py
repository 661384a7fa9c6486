"""The window arm's self-normalized IPW per (memory, query) pair (issue 16, estimators under per-step propensities)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from _pair_fixtures import WindowStudy, scheduler_log
from _window_fixtures import rounds_steps, write_jsonl

from cmp_bayes import read_log
from cmp_bayes.estimators import estimate, estimate_from_stats
from cmp_bayes.estimators.window import window_snipw
from cmp_bayes.statistics import exposure_stats


def _loop_snipw(root) -> dict[tuple[str, str], tuple[float, float, int, int]]:
    """Per pair (estimate, std_error, exposed, control) by the spec's rules, one step at a time.

    W_t: ranks B - k .. B - k + W - 1 of the step's ranking, in the store, not in a retriever or
    pool slot; pi_t = min(1, (k - j) / |W_t|). Exposed steps with pi_t < 1 weigh 1 / pi_t,
    eligible steps not exposed 1 / (1 - pi_t); pi_t = 1 steps are left out.
    """
    design = json.loads((root / "design.json").read_text())
    life = {}
    for line in (root / "memories.jsonl").read_text().splitlines():
        m = json.loads(line)
        life[m["memory_id"]] = (m["created_step"], m["deleted_step"])
    B, k, j, W = design["slots"], design["exposure_slots"], design["pool_slots"], design["window"]
    arms: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: {"E": [], "C": []})
    exposed_all: dict[tuple[str, str], int] = defaultdict(int)
    for line in (root / "steps.jsonl").read_text().splitlines():
        s = json.loads(line)
        t = s["step"]
        before = {c["memory_id"] for c in s["context"] if c["source"] == "retriever" or c.get("arm") == "pool"}
        shown = {c["memory_id"] for c in s["context"] if c.get("arm") == "window"}
        window = []
        for m in s["ranking"][B - k : B - k + W]:
            c, d = life[m]
            if c <= t and (d is None or t < d) and m not in before:
                window.append(m)
        for m in window:
            pi = min(1.0, (k - j) / len(window))
            key = (m, s["query_id"])
            exposed_all[key] += m in shown
            if m in shown and pi < 1:
                arms[key]["E"].append((1 / pi, float(s["outcome"])))
            elif m not in shown:
                arms[key]["C"].append((1 / (1 - pi), float(s["outcome"])))

    def arm(obs: list[tuple[float, float]]) -> tuple[float, float]:
        if not obs:
            return float("nan"), float("nan")
        s1 = sum(w for w, _ in obs)
        mu = sum(w * y for w, y in obs) / s1
        if len(obs) < 2:
            return mu, float("nan")
        s2 = sum(w * w for w, _ in obs)
        s3 = sum(w**3 for w, _ in obs)
        resid = sum(w * w * (y - mu) ** 2 for w, y in obs)
        return mu, resid / s1**2 * s2 / (s2 - 2 * s3 / s1 + s2 * s2 / s1**2)

    out = {}
    for key, a in arms.items():
        m1, v1 = arm(a["E"])
        m0, v0 = arm(a["C"])
        est = m1 - m0
        out[key] = (est, float(np.sqrt(v1 + v0)) if np.isfinite(est) else float("nan"),
                    exposed_all[key], len(a["C"]))
    return out


def test_window_snipw_equals_a_plain_loop_over_the_steps(tmp_path) -> None:
    root, _ = scheduler_log(tmp_path / "log", seed=0)
    log = read_log(root)
    want = _loop_snipw(root)
    table = estimate(log, by="query")
    win = table[table["arm"] == "window"].set_index(["memory_id", "query_id"])
    assert set(win.index) == set(want)
    n_defined = 0
    for key, (est, se, n_exp, n_ctl) in want.items():
        row = win.loc[key]
        assert (row["exposed"], row["control"]) == (n_exp, n_ctl), key
        if np.isnan(est):
            assert np.isnan(row["estimate"]), key
        else:
            n_defined += 1
            assert row["estimate"] == pytest.approx(est, abs=1e-9, rel=0), key
        if np.isnan(se):
            assert np.isnan(row["std_error"]), key
        else:
            assert row["std_error"] == pytest.approx(se, abs=1e-9, rel=0), key
    assert n_defined > 50 and win["std_error"].notna().sum() > 50
    # the pool arm's rows are today's by="query" table, unchanged
    pool = table[table["arm"] == "pool"].drop(columns=["arm", "text"], errors="ignore").reset_index(drop=True)
    dense = estimate_from_stats(exposure_stats(log, by="query"), "hajek", balanced=False)
    pd.testing.assert_frame_equal(pool, dense.drop(columns="arm").reset_index(drop=True), check_dtype=False)
    keys = list(zip(table["memory_id"], table["query_id"], table["arm"], strict=True))
    assert keys == sorted(keys)


def test_statuses_and_undefined_window_cells(tmp_path) -> None:
    root, _ = scheduler_log(tmp_path / "log", seed=1)
    win = estimate(read_log(root), by="query").query("arm == 'window'")
    assert set(win["status"]) <= {"identified", "retrieved-only", "unidentified"}
    never = win["exposed"] == 0
    assert never.any() and win.loc[never, "estimate"].isna().all()
    assert (win.loc[never, "status"] != "identified").all()
    no_control = win["control"] == 0
    assert win.loc[no_control, "estimate"].isna().all()
    assert (win.loc[win["estimate"].notna(), "status"] == "identified").all()


def test_constant_propensity_is_the_difference_of_arm_means() -> None:
    # one pair, pi = 1/4 at every step: the SNIPW is ybar1 - ybar0 with se sqrt(s1^2/n1 + s0^2/n0)
    study = WindowStudy(n_queries=2, steps_per_query=60, seed=3)
    stats = exposure_stats(study.replicate(np.random.default_rng(0)), by="pair")
    est, se = window_snipw(stats)
    pi = 1.0 / 4
    y1, y0 = np.array([1, 1, 0, 1.0]), np.array([0, 1, 0, 0, 1, 0.0])
    for arm, y, w in (("exposed", y1, 1 / pi), ("control", y0, 1 / (1 - pi))):
        stats[f"window_{arm}_w"][0] = w * len(y)
        stats[f"window_{arm}_wy"][0] = w * y.sum()
        stats[f"window_{arm}_ww"][0] = w * w * len(y)
        stats[f"window_{arm}_www"][0] = w**3 * len(y)
        stats[f"window_{arm}_wwy"][0] = w * w * y.sum()
        stats[f"window_{arm}_wwyy"][0] = w * w * (y * y).sum()
    stats["window_exposed"][0], stats["window_certain"][0], stats["window_control"][0] = 4, 0, 6
    est, se = window_snipw(stats)
    assert est[0] == pytest.approx(y1.mean() - y0.mean(), abs=1e-12)
    assert se[0] == pytest.approx(np.sqrt(y1.var(ddof=1) / 4 + y0.var(ddof=1) / 6), abs=1e-12)


def test_no_window_rows_outside_window_designs_or_for_other_methods(tmp_path) -> None:
    log = read_log(write_jsonl(tmp_path / "rounds", *rounds_steps(seed=0)))
    table = estimate(log, by="query")
    assert set(table["arm"]) == {"pool"}
    assert "arm" not in estimate(log).columns and "arm" not in estimate(log, by="group").columns
    root, _ = scheduler_log(tmp_path / "log", seed=2)
    ipw = estimate(read_log(root), by="query", method="ipw")
    assert set(ipw["arm"]) == {"pool"}


def test_window_snipw_is_unbiased_with_calibrated_standard_errors() -> None:
    """Over R replications of one window design (fresh window draws and outcomes, known tau):

    * bias: each replication's mean error over the pairs, b_r, is i.i.d. over replications, so
      |mean b_r| < 4 sd(b_r) / sqrt(R); per pair, |mean error| < 4.5 sqrt(mean se^2 / R) for
      every pair (4.5 sigma: about 240 pairs tested at once);
    * standard errors: r_r = mean (est - truth)^2 / mean se^2 over the pairs (i.i.d. over
      replications) has mean within 4 of its standard errors of 1; and the replication sd of
      each pair's estimate over its root-mean-square se has median within 4 standard errors of
      1 (the sd of an sd estimated from R draws, sqrt((kurtosis - 1) / (4 R)) per pair, over the
      pairs' median: 1.2533 / sqrt(P)).
    """
    study = WindowStudy(n_queries=30, steps_per_query=120, seed=0)
    truth = study.truth()
    keys = list(truth)
    tau = np.array([truth[k] for k in keys])
    assert len(keys) >= 200 and (np.abs(tau) > 0.1).sum() > 50
    rng = np.random.default_rng(11)
    R = 200
    est = np.empty((R, len(keys)))
    se = np.empty((R, len(keys)))
    for r in range(R):
        stats = exposure_stats(study.replicate(rng), by="pair")
        index = pd.MultiIndex.from_arrays([stats["memory_id"].to_numpy(), stats["query_id"].to_numpy()])
        at = index.get_indexer(pd.MultiIndex.from_tuples(keys))
        assert (at >= 0).all()
        e, s = window_snipw(stats)
        est[r], se[r] = e[at], s[at]
    ok = np.isfinite(se)
    assert ok.mean() > 0.99
    est = np.where(ok, est, np.nan)
    err = est - tau
    b = np.nanmean(err, axis=1)
    assert abs(b.mean()) < 4 * b.std(ddof=1) / np.sqrt(R), (b.mean(), b.std(ddof=1))
    per_pair = np.nanmean(err, axis=0) / np.sqrt(np.nanmean(se**2, axis=0) / ok.sum(axis=0))
    assert np.nanmax(np.abs(per_pair)) < 4.5
    r_r = np.nanmean(err**2, axis=1) / np.nanmean(se**2, axis=1)
    assert abs(r_r.mean() - 1) < 4 * r_r.std(ddof=1) / np.sqrt(R), (r_r.mean(), r_r.std(ddof=1))
    ratio = np.nanstd(est, axis=0, ddof=1) / np.sqrt(np.nanmean(se**2, axis=0))
    dev = est - np.nanmean(est, axis=0)
    kurt = np.nanmean(dev**4, axis=0) / np.nanmean(dev**2, axis=0) ** 2
    band = 4 * 1.2533 * np.sqrt(np.mean((kurt - 1) / (4 * R))) / np.sqrt(len(keys))
    assert abs(np.median(ratio) - 1) < band, (np.median(ratio), band)
