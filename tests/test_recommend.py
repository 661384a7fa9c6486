"""recommend_exposures: value of information of the next exposures, and the pool file."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import integrate, stats

from cmp_bayes.cli.main import main
from cmp_bayes.constants import IDENTIFIED, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.preposterior import OUTCOME_VAR, expected_loss_after
from cmp_bayes.decision.recommend import recommend_exposures
from cmp_bayes.errors import ConfigError
from cmp_bayes.testing import memory_table, synthetic_posterior


@pytest.fixture(scope="module")
def posterior() -> xr.DataTree:
    return synthetic_posterior(memory_table(40, seed=2), draws=300, seed=2)


def test_ranking_deferred_first_and_selection(posterior: xr.DataTree) -> None:
    table = recommend_exposures(posterior, budget=6, costs=Costs(min_exposures=2))
    assert list(table["rank"]) == list(range(40))
    actions = table["action"].tolist()
    # defer block, then retain block, then forget block; VOI decreasing inside each
    order = {"defer": 0, "retain": 1, "forget": 2}
    assert [order[a] for a in actions] == sorted(order[a] for a in actions)
    for _, block in table.groupby("action"):
        assert (np.diff(block["voi"].to_numpy()) <= 0).all()
    assert table["selected"].sum() == 6
    assert table.loc[table["selected"], "action"].eq("defer").all()
    assert not table.loc[table["action"] == "forget", "selected"].any()
    assert (table["voi"] >= 0).all()
    assert (table.loc[table["action"] == "forget", "voi"] == 0).all()
    # a deferred memory cannot be forgotten now, so its current loss is r * (1 - p)
    defer = table[table["action"] == "defer"]
    assert (defer["loss_now"] > 0.5).all() and (defer["voi"] > 0).all()


def test_budget_larger_than_candidates(posterior: xr.DataTree) -> None:
    table = recommend_exposures(posterior, budget=1000)
    assert table["selected"].sum() == (table["action"] != "forget").sum()


def test_unhealthy_posterior_has_no_value_of_information() -> None:
    # exposures cannot make a forget available while the sampler fails: loss stays r (1 - p)
    post = synthetic_posterior(memory_table(12, seed=3), seed=3, divergences=2)
    table = recommend_exposures(post, budget=3)
    assert (table["voi"] == 0).all()


def two_point_loss(q: float, a: float, n: float, f: float, r: float) -> float:
    """Exact preposterior loss for a posterior with mass q at tau = a and 1 - q at 0.

    With x = tau_hat ~ Normal(tau, s2 / n), the posterior odds are q phi_a(x) / ((1-q) phi_0(x)),
    and min(f p'(x), r (1 - p'(x))) times the predictive density of x equals
    min(f q phi_a(x), r (1 - q) phi_0(x)): the normaliser cancels. Integrate that.
    """
    sd = math.sqrt(OUTCOME_VAR / n)

    def g(x: float) -> float:
        return min(f * q * stats.norm.pdf(x, a, sd), r * (1 - q) * stats.norm.pdf(x, 0.0, sd))

    value, _ = integrate.quad(g, -1.5, 1.5 + a, points=[0.0, a / 2, a], limit=200)
    return value


@pytest.mark.parametrize(("q", "n"), [(0.03, 6), (0.2, 3), (0.05, 30)])
def test_preposterior_loss_matches_exact_two_point(q: float, n: int) -> None:
    # D draws, each the truth once, one hypothetical data set each: the Monte Carlo mean of
    # losses L_j in [0, f r / (f + r)] has sd <= (f r / (f + r)) / 2 / sqrt(D). With
    # f = 20, r = 1, D = 2000: sd <= 0.476 / 44.7 = 0.0107; 4 sd = 0.043.
    f, r, a, draws = 20.0, 1.0, 0.3, 2000
    k = round(q * draws)
    tau = np.where(np.arange(draws) < k, a, 0.0)[None, :]
    rng = np.random.default_rng(11)
    got = expected_loss_after(tau, tau, np.array([float(n)]), 0.05, f, r, rng)[0]
    exact = two_point_loss(k / draws, a, n, f, r)
    assert got == pytest.approx(exact, abs=0.043)
    # and information never hurts: exact loss after <= loss now
    assert exact <= min(f * k / draws, r * (1 - k / draws)) + 1e-12


def test_more_exposures_are_worth_more() -> None:
    mems = pd.DataFrame(
        {
            "memory_id": ["u"],
            "status": [UNIDENTIFIED],
            "exposed": [0],
            "retrieved": [0],
            "in_store": [300],
            "p_useful": [math.nan],
            "rho_mean": [0.01],
        }
    )
    post = synthetic_posterior(mems, draws=1000, seed=5)
    vois = [
        recommend_exposures(post, 1, exposures=e, draws=1000)["voi"].iloc[0] for e in (1, 6, 60)
    ]
    # exact VOI is non-decreasing in n (Blackwell); MC sd per value <= 0.476/sqrt(1000) = 0.015
    assert vois[0] < vois[1] + 0.03 and vois[1] < vois[2] + 0.03
    assert vois[2] > vois[0] + 0.1


def test_argument_validation(posterior: xr.DataTree) -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="budget"):
            recommend_exposures(posterior, bad)
    with pytest.raises(ConfigError, match="exposures"):
        recommend_exposures(posterior, 3, exposures=0)


def test_cli_recommend_writes_a_pool_the_scheduler_takes(posterior, tmp_path, capsys) -> None:
    from cmp_bayes.design.scheduler import ExposureScheduler

    post = tmp_path / "post.nc"
    posterior.to_netcdf(post, engine="h5netcdf")
    out = tmp_path / "pool.json"
    assert main(["recommend", str(post), "--budget", "5", "-o", str(out)]) == 0
    assert "5 of 40 memories selected" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    expect = recommend_exposures(posterior, 5)
    assert doc["pool"] == list(expect.loc[expect["selected"], "memory_id"])
    assert set(doc["value_of_information"]) == set(doc["pool"])
    assert doc["budget"] == 5 and doc["exposures_per_memory"] == 6
    sched = ExposureScheduler(slots=4, exposure_slots=1, pool=doc["pool"], steps=30)
    assert sched.pool == doc["pool"]
    assert set(sched.design()["pool"]) == set(doc["pool"])
    assert main(["recommend", str(post), "--budget", "0"]) == 2


def test_identified_memory_near_threshold_gains_from_exposure() -> None:
    # an identified memory with P(useful) just above 1/21 is retained at loss r (1 - p) ~ 0.94;
    # more data would let the rule forget it if it is useless, so its VOI is clearly positive
    mems = pd.DataFrame(
        {
            "memory_id": ["m"],
            "status": [IDENTIFIED],
            "exposed": [6],
            "retrieved": [3],
            "in_store": [300],
            "p_useful": [0.06],
            "rho_mean": [0.05],
        }
    )
    table = recommend_exposures(synthetic_posterior(mems, draws=1000, seed=6), 1, draws=1000)
    assert table["action"].iloc[0] == "retain"
    assert table["voi"].iloc[0] > 0.2
