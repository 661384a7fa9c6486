"""Estimators: formulas on a hand log; Hajek against exact truth over repeated CMP draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _stats_fixtures import cmp_log

from cmp_bayes.cli.main import main
from cmp_bayes.estimators import estimate, estimate_from_stats
from cmp_bayes.evaluation import auc_interval
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.statistics import exposure_stats


def _hand_log(assignment: str = "balanced", outcomes=(1, 0, 1, 1, 0, 0)) -> ExposureLog:
    """m1 exposed at steps 0, 2, 4 (propensity 0.5); m2 retrieved at 0, 1; 6 steps, one query."""
    steps = pd.DataFrame({"step": range(6), "query_id": "q", "outcome": list(outcomes)})
    ctx = pd.DataFrame(
        {
            "step": [0, 0, 1, 2, 4],
            "slot": [0, 1, 0, 0, 0],
            "memory_id": ["m2", "m1", "m2", "m1", "m1"],
            "source": ["retriever", "exposure", "retriever", "exposure", "exposure"],
            "rank": [0, None, 0, None, None],
            "propensity": [None, 0.5, None, 0.5, 0.5],
        }
    )
    return ExposureLog(
        steps=coerce(steps, STEP_COLUMNS),
        contexts=coerce(ctx, CONTEXT_COLUMNS),
        design={
            "slots": 2,
            "exposure_slots": 1,
            "assignment": assignment,
            "steps": 6,
            "pool": {"m1": 0.5},
        },
    )


def test_formulas_by_hand() -> None:
    log = _hand_log()
    # m1: exposed y = (1, 1, 0) at steps 0, 2, 4; control steps 1, 3, 5: y = (0, 1, 0)
    h = estimate(log).set_index("memory_id")
    assert h.loc["m1", "estimate"] == pytest.approx(2 / 3 - 1 / 3)
    # s^2 of (1,1,0) and of (0,1,0) are both 1/3 (n - 1 denominators); se = sqrt(1/9 + 1/9)
    assert h.loc["m1", "std_error"] == pytest.approx(np.sqrt(2 / 9))
    assert np.isnan(h.loc["m2", "estimate"]) and np.isnan(h.loc["m2", "std_error"])
    assert (h.loc["m1", "status"], h.loc["m2", "status"]) == ("identified", "retrieved-only")
    assert list(h.columns[:8]) == [
        "status",
        "retrieved",
        "exposed",
        "control",
        "in_store",
        "estimate",
        "std_error",
        "method",
    ]
    # IPW: N = 6 eligible steps, pi = 0.5: 2/(0.5*6) - 1/(0.5*6) = 1/3;
    # variance bound (2/0.25 + 1/0.25)/36 = 12/36
    i = estimate(log, method="ipw").set_index("memory_id")
    assert i.loc["m1", "estimate"] == pytest.approx(1 / 3)
    assert i.loc["m1", "std_error"] == pytest.approx(np.sqrt(12 / 36))
    # logged: m2 retrieved at steps 0, 1: y = (1, 0); control for m2 = steps 2..5: (1, 1, 0, 0)
    s = estimate(log, method="logged-success").set_index("memory_id")
    assert s.loc["m2", "estimate"] == pytest.approx(0.5)
    assert s.loc["m2", "std_error"] == pytest.approx(np.sqrt(0.5 / 2))
    assert np.isnan(s.loc["m1", "estimate"])  # never retrieved: undefined, not 0
    d = estimate(log, method="logged-diff").set_index("memory_id")
    assert d.loc["m2", "estimate"] == pytest.approx(0.5 - 0.5)
    assert d.loc["m2", "std_error"] == pytest.approx(np.sqrt(0.5 / 2 + (1 / 3) / 4))


def test_conservative_variance_off_balance() -> None:
    # binary outcomes: the Bernoulli bound equals the sample variance, so both designs agree
    b = estimate(_hand_log("balanced")).set_index("memory_id").loc["m1", "std_error"]
    c = estimate(_hand_log("bernoulli")).set_index("memory_id").loc["m1", "std_error"]
    assert c == pytest.approx(b)
    # fractional outcomes: exposed (0.5, 0.5, 0.5) has s^2 = 0 but bound 0.25 * 3/2
    y = (0.5, 0.0, 0.5, 1.0, 0.5, 0.0)
    b = estimate(_hand_log("balanced", y)).set_index("memory_id").loc["m1", "std_error"]
    c = estimate(_hand_log("bernoulli", y)).set_index("memory_id").loc["m1", "std_error"]
    # control (0, 1, 0): s^2 = 1/3 = bound (1/3)(2/3)(3/2)
    assert b == pytest.approx(np.sqrt(0 / 3 + (1 / 3) / 3))
    assert c == pytest.approx(np.sqrt(0.375 / 3 + (1 / 3) / 3))


R = 200  # replications of one design


@pytest.fixture(scope="session")
def replications() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Hajek estimates and squared SEs over R draws of one CMP design, and tau_true."""
    ests, vars_ = [], []
    truth = None
    for r in range(R):
        log, tr = cmp_log(seed=r, truth_seed=7, n_memories=50, n_queries=2, n_steps=800)
        h = estimate_from_stats(exposure_stats(log), "hajek")
        ests.append(h["estimate"].to_numpy())
        vars_.append(h["std_error"].to_numpy() ** 2)
        truth = tr.memories
    return truth, np.array(ests), np.array(vars_)


def test_hajek_unbiased(replications) -> None:
    truth, est, _ = replications
    ok = truth["in_pool"].to_numpy()
    assert ok.sum() >= 30 and np.all(np.isfinite(est[:, ok])) and np.all(np.isnan(est[:, ~ok]))
    err = est[:, ok] - truth["tau_true"].to_numpy()[ok]
    for name, cols in (
        ("required", truth["required"].to_numpy()[ok]),
        ("not required", ~truth["required"].to_numpy()[ok]),
    ):
        # per-replication mean error over the memories of the class; memories share
        # control steps within a draw, so the Monte Carlo SE is taken across the R
        # independent draws: SE = sd(e_r) / sqrt(R). Under zero bias |mean| < 3 SE fails
        # with probability 0.27% (CLT over R = 200 draws).
        e_r = err[:, cols].mean(axis=1)
        se = e_r.std(ddof=1) / np.sqrt(R)
        assert abs(e_r.mean()) < 3 * se, (name, e_r.mean(), se)
    # power check: the naive truth tau/Q (no displaced occupant) is ~0.01 away and must fail
    naive = truth["tau"].to_numpy()[ok] / 2
    e_naive = (est[:, ok] - naive).mean(axis=1)
    assert abs(e_naive.mean()) > 3 * e_naive.std(ddof=1) / np.sqrt(R)


def test_hajek_variance_formula(replications) -> None:
    truth, est, var = replications
    ok = truth["in_pool"].to_numpy()
    est, var = est[:, ok], var[:, ok]
    ratio = est.var(axis=0, ddof=1).sum() / var.mean(axis=0).sum()
    # Monte Carlo SE of the ratio by the jackknife over the R independent draws
    jack = np.empty(R)
    for r in range(R):
        keep = np.arange(R) != r
        jack[r] = est[keep].var(axis=0, ddof=1).sum() / var[keep].mean(axis=0).sum()
    se = np.sqrt((R - 1) / R * ((jack - jack.mean()) ** 2).sum())
    # Allowed bias: the formula omits Neyman's -S_tau^2/N term; a step-level effect is at
    # most 2 * effect = 0.5 in size, so S_tau^2 / N <= 0.25 / 800 per memory, relative to
    # the mean estimated variance.
    bias = (0.25 / 800) / var.mean()
    assert abs(ratio - 1) < 3 * se + bias, (ratio, se, bias)
    assert se < 0.1  # the check has teeth: an n vs n - 1 slip is ~6% here


def test_logged_at_chance_where_hajek_is_not() -> None:
    log, tr = cmp_log(seed=1, truth_seed=3, n_memories=200, n_queries=2, n_steps=4000)
    t = tr.memories
    never = ~t["memory_id"].isin(
        log.contexts.loc[log.contexts["source"] == "retriever", "memory_id"]
    )
    y = t["required"].to_numpy()[never.to_numpy()]
    assert y.sum() >= 20 and (~y).sum() >= 20
    for method, at_chance in (("logged-success", True), ("logged-diff", True), ("hajek", False)):
        e = estimate(log, method=method).set_index("memory_id").loc[t["memory_id"][never]]
        s = e["estimate"].fillna(-np.inf).to_numpy()  # the "last" rule of evaluate
        a, lo, hi = auc_interval(s, y, n_boot=500, seed=0)
        if at_chance:
            # no never-retrieved memory has a logged estimate: every score ties, AUC = 1/2
            # exactly and so is every bootstrap draw
            assert e["estimate"].isna().all() and a == 0.5 and lo <= 0.5 <= hi
        else:
            # tau_true of a required memory ~ (0.25 - 0.025) / 2 against an SE of ~0.14 for
            # ~20 exposures: population AUC ~ Phi(0.11 / (0.14 sqrt 2)) ~ 0.78; the
            # stratified bootstrap interval must exclude chance
            assert lo > 0.5, (a, lo, hi)


def test_estimate_cli_and_by_query(tmp_path) -> None:
    from cmp_bayes.log.export import write_log

    log, _ = cmp_log(seed=0, truth_seed=0, n_memories=20, n_queries=2, n_steps=200)
    root = write_log(log, tmp_path / "log")
    out = tmp_path / "out" / "est.csv"
    assert main(["estimate", str(root), "--by", "query", "--method", "ipw", "-o", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.columns[:3]) == ["memory_id", "query_id", "status"]
    assert set(table["method"]) == {"ipw"}
    # one row per (memory, query) with the memory in the store: no lifetimes, so all 20 x 2
    assert len(table) == 40
    assert [p.name for p in out.parent.iterdir()] == ["est.csv"]  # no temporary left behind
    with pytest.raises(SystemExit) as exc:
        main(["estimate", str(root), "--method", "nope", "-o", str(out)])
    assert exc.value.code == 2
    g = estimate(log, by="group")
    assert set(g["group"]) == {""} and len(g) == 20
