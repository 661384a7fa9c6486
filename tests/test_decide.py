"""decide(posterior, costs): the asymmetric Bayes rule, its guards, Costs and the CLI."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmp_bayes.cli.main import main
from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, STATUSES, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import RULE_COLUMNS
from cmp_bayes.decision.preposterior import exposures_to_resolve
from cmp_bayes.decision.rule import COLUMNS, DecisionWarning, decide
from cmp_bayes.errors import ConfigError, PosteriorError
from cmp_bayes.testing import memory_table, synthetic_posterior

quiet = pytest.mark.filterwarnings("ignore::cmp_bayes.decision.rule.DecisionWarning")


def one_memory(status: str, exposed: int, retrieved: int, p: float, mid: str = "m0") -> dict:
    return {
        "memory_id": mid,
        "status": status,
        "exposed": exposed,
        "retrieved": retrieved,
        "in_store": 400,
        "p_useful": p,
        "rho_mean": 0.05,
    }


# --------------------------------------------------------------------------- Costs


def test_costs_defaults_and_threshold() -> None:
    c = Costs()
    assert (c.forget_cost, c.retain_cost, c.estimand, c.capacity) == (20.0, 1.0, "tau", None)
    assert c.min_exposures == 1 and c.max_rhat == 1.01 and c.max_divergence_share == 0.0
    assert c.forget_below == pytest.approx(1 / 21)
    assert Costs.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("forget_cost", 0.0),
        ("forget_cost", -1.0),
        ("retain_cost", math.inf),
        ("threshold", math.nan),
        ("estimand", "rho"),
        ("capacity", -1),
        ("capacity", 2.5),
        ("min_exposures", 0),
        ("min_exposures", True),
        ("min_mean_shift", -0.1),
        ("max_rhat", 0.99),
        ("max_divergence_share", 1.5),
        ("forget_cost", "20"),
    ],
)
def test_costs_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        Costs(**{field: value})


def test_costs_from_toml(tmp_path) -> None:
    top = tmp_path / "top.toml"
    top.write_text('forget_cost = 10\nretain_cost = 2.5\nestimand = "utility"\ncapacity = 7\n')
    assert Costs.from_toml(top) == Costs(
        forget_cost=10, retain_cost=2.5, estimand="utility", capacity=7
    )
    table = tmp_path / "table.toml"
    table.write_text("[costs]\nmin_exposures = 3\nthreshold = 0.1\n")
    assert Costs.from_toml(table) == Costs(min_exposures=3, threshold=0.1)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("forget_costs = 3\n", r"bad\.toml: unknown key 'forget_costs'"),
        ("min_exposures = 0\n", r"bad\.toml: min_exposures must be >= 1"),
        ('retain_cost = "cheap"\n', r"bad\.toml: retain_cost must be a number"),
        ("forget_cost = \n", r"bad\.toml: not valid TOML"),
        ("[costs]\ncapacity = -2\n", r"bad\.toml \[costs\]: capacity must be >= 0"),
    ],
)
def test_costs_from_toml_errors_name_file_and_key(tmp_path, text: str, match: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Costs.from_toml(bad)


# --------------------------------------------------------------------------- the rule


@pytest.fixture(scope="module")
def base_posterior() -> xr.DataTree:
    return synthetic_posterior(memory_table(40, seed=1), chains=2, draws=300, seed=1)


@quiet
def test_table_shape_and_bayes_rule(base_posterior: xr.DataTree) -> None:
    costs = Costs()
    decisions = decide(base_posterior, costs)
    table = decisions.table
    assert tuple(table.columns) == COLUMNS
    ids = base_posterior["posterior"]["memory"].to_numpy().astype(str)
    assert list(table["memory_id"]) == list(ids)
    tau = base_posterior["posterior"]["tau"].to_numpy()
    p = (tau > costs.threshold).mean(axis=(0, 1))
    np.testing.assert_allclose(table["p_useful"], p)
    np.testing.assert_allclose(table["expected_loss_forget"], 20.0 * p)
    np.testing.assert_allclose(table["expected_loss_retain"], 1.0 - p)
    identified = table["status"] == IDENTIFIED
    bayes_forget = p < 1 / 21
    # healthy posterior, no capacity, min_exposures 1: forget exactly when identified and
    # below the threshold (unless the memory's own R-hat fails, which the reason says)
    rhat_ok = ~(table["rhat"] > costs.max_rhat)
    assert ((table["action"] == "forget") == (identified & bayes_forget & rhat_ok)).all()
    assert ((table["action"] == "defer") == (bayes_forget & ~(identified & rhat_ok))).all()
    assert table.loc[table["action"] == "forget", "rhat"].notna().all()
    assert decisions.counts()["forget"] == int((table["action"] == "forget").sum()) > 0
    assert decisions.counts()["defer"] > 0
    assert table.loc[table["action"] == "defer", "exposures_needed"].notna().all()
    assert table.loc[table["action"] != "defer", "exposures_needed"].isna().all()


def test_prior_alone_never_forgets() -> None:
    # Unidentified memories whose prior says "useless" with P = 0.997: still deferred.
    mems = pd.DataFrame(
        [one_memory(UNIDENTIFIED, 0, 0, 0.003, f"u{i}") for i in range(3)]
        + [one_memory(RETRIEVED_ONLY, 0, 12, 0.003, f"r{i}") for i in range(3)]
    )
    table = decide(
        synthetic_posterior(mems, draws=300), Costs(forget_cost=1.0, retain_cost=100.0)
    ).table
    assert (table["action"] == "defer").all()
    assert (table["exposures_needed"] >= 1).all()
    assert table["reason"].str.contains("never forgotten|not forgotten").all()
    assert table.loc[table["status"] == UNIDENTIFIED, "reason"].str.contains("unidentified").all()
    assert table.loc[table["status"] == RETRIEVED_ONLY, "reason"].str.contains("ignorable").all()


def test_min_exposures_guard_and_reason() -> None:
    mems = pd.DataFrame(
        [one_memory(IDENTIFIED, 2, 5, 0.0, "few"), one_memory(IDENTIFIED, 6, 5, 0.0, "enough")]
    )
    table = decide(synthetic_posterior(mems, draws=300), Costs(min_exposures=5)).table.set_index(
        "memory_id"
    )
    assert table.loc["enough", "action"] == "forget"
    assert table.loc["few", "action"] == "defer"
    assert table.loc["few", "exposures_needed"] >= 3  # at least min_exposures - exposed
    assert "fewer than min_exposures=5" in table.loc["few", "reason"]


def test_mean_shift_floor() -> None:
    mems = pd.DataFrame(
        [one_memory(IDENTIFIED, 6, 5, 0.0, "weak"), one_memory(IDENTIFIED, 6, 5, 0.0, "strong")]
    ).assign(mean_shift=[0.1, 2.0])
    post = synthetic_posterior(mems, draws=300)
    table = decide(post, Costs(min_mean_shift=1.0)).table.set_index("memory_id")
    assert table.loc["strong", "action"] == "forget"
    assert table.loc["weak", "action"] == "defer"
    assert "prior sds" in table.loc["weak", "reason"]
    assert (decide(post).table["action"] == "forget").all()  # floor off by default


def test_fix_retrieval_reason() -> None:
    mems = pd.DataFrame([one_memory(IDENTIFIED, 6, 0, 0.95)])
    (reason,) = decide(synthetic_posterior(mems, draws=300)).table["reason"]
    assert reason.startswith("useful when read (P=0.9") and reason.endswith(
        "but retrieved 0 of 400 times: fix retrieval"
    )


def test_exposures_needed_matches_closed_form() -> None:
    # Two-point posterior: tau = 0 (useless) or a (useful) with share q. With n more
    # exposures and s2 = 0.25 the likelihood ratio of the two points is exp(+-2 n a^2), so
    # the rule forgets a useless-looking memory for every n (q < c) and keeps a
    # useful-looking one once n >= ln(c (1-q) / (q (1-c))) / (2 a^2).
    a, c, draws = 0.3, 1 / 21, 1000
    for k, start in [(10, 1), (30, 1), (10, 20), (1, 1)]:
        q = k / draws
        tau = np.where(np.arange(draws) < k, a, 0.0)[None, :]
        n = exposures_to_resolve(tau, tau, 0.05, c, np.array([start]))[0]
        expect = max(start, math.ceil(math.log(c * (1 - q) / (q * (1 - c))) / (2 * a * a)))
        assert n == expect


def test_per_query_posterior_uses_memory_level_variables() -> None:
    mems = memory_table(15, seed=4)
    flat = decide(synthetic_posterior(mems, seed=4), Costs(min_exposures=1)).table
    perq = synthetic_posterior(mems, seed=4, per_query=True)
    assert perq["posterior"]["tau"].dims == ("chain", "draw", "memory", "query")
    decisions = decide(perq, Costs(min_exposures=1))
    pd.testing.assert_series_equal(decisions.table["p_useful"], flat["p_useful"])
    assert decisions.rule.variable == "tau_memory"


def test_utility_estimand_reads_rho_times_tau(base_posterior: xr.DataTree) -> None:
    costs = Costs(estimand="utility", threshold=0.01)
    decisions = decide(base_posterior, costs)
    util = base_posterior["posterior"]["utility"].to_numpy()
    np.testing.assert_allclose(decisions.table["p_useful"], (util > 0.01).mean(axis=(0, 1)))
    assert decisions.rule.variable == "utility"


def test_unhealthy_posterior_forgets_nothing() -> None:
    mems = pd.DataFrame([one_memory(IDENTIFIED, 8, 3, 0.0, f"m{i}") for i in range(4)])
    assert (decide(synthetic_posterior(mems)).table["action"] == "forget").all()
    for kwargs, text in [
        ({"divergences": 1}, "divergent"),
        ({"stuck_chain": True}, "R-hat of tau_helps_mean"),
    ]:
        with pytest.warns(DecisionWarning, match="no memory forgotten"):
            decisions = decide(synthetic_posterior(mems, **kwargs))
        table = decisions.table
        assert (table["action"] == "defer").all()
        assert table["reason"].str.contains("sampler failed its checks").all()
        assert table["reason"].str.contains(text).all()
        assert not decisions.health.ok
        assert (table["exposures_needed"] == 0).all()
    # a tolerated share of divergences lets forgets through again
    table = decide(
        synthetic_posterior(mems, divergences=1), Costs(max_divergence_share=0.01)
    ).table
    assert (table["action"] == "forget").all()


def test_memory_rhat_blocks_that_memory_only() -> None:
    mems = pd.DataFrame([one_memory(IDENTIFIED, 8, 3, 0.0, f"m{i}") for i in range(3)])
    post = synthetic_posterior(mems)
    tau = post["posterior"]["tau"].copy()
    tau.loc[{"chain": 0, "memory": "m1"}] = tau.sel(chain=0, memory="m1") - 0.3  # chains disagree
    post["posterior"] = post["posterior"].to_dataset().assign(tau=tau)
    table = decide(post).table.set_index("memory_id")
    assert list(table["action"]) == ["forget", "defer", "forget"]
    assert table.loc["m1", "rhat"] > 1.01
    assert "R-hat of tau for this memory" in table.loc["m1", "reason"]


def test_capacity_forgets_lowest_value_first_and_reports_shortfall() -> None:
    mems = pd.DataFrame(
        [
            one_memory(IDENTIFIED, 6, 3, 0.3, "keep_hi"),
            one_memory(IDENTIFIED, 6, 3, 0.1, "keep_lo"),
            one_memory(IDENTIFIED, 6, 3, 0.2, "keep_mid"),
            one_memory(UNIDENTIFIED, 0, 0, 0.2, "unid"),
        ]
    )
    post = synthetic_posterior(mems, draws=500)
    decisions = decide(post, Costs(capacity=2))
    table = decisions.table.set_index("memory_id")
    assert list(table["action"]) == ["retain", "forget", "forget", "retain"]
    assert "capacity 2" in table.loc["keep_lo", "reason"]
    assert decisions.capacity_shortfall == 0
    with pytest.warns(DecisionWarning, match="capacity 0 not met"):
        decisions = decide(post, Costs(capacity=0))
    table = decisions.table.set_index("memory_id")
    assert table.loc["unid", "action"] == "retain"
    assert (table.drop(index="unid")["action"] == "forget").all()
    assert decisions.capacity_shortfall == 1
    assert (
        "capacity 0 not met (1 kept): not forgettable (unidentified)" in table.loc["unid", "reason"]
    )


def test_bad_posteriors_raise_posterior_error(base_posterior: xr.DataTree) -> None:
    no_ident = xr.DataTree.from_dict(
        {k: base_posterior[k].to_dataset() for k in ("posterior", "sample_stats")}
    )
    with pytest.raises(PosteriorError, match="no 'identification' group"):
        decide(no_ident)
    broken = base_posterior.copy()
    broken["identification"] = broken["identification"].to_dataset().drop_vars("exposed")
    with pytest.raises(PosteriorError, match="lacks exposed"):
        decide(broken)
    wrong = base_posterior.copy()
    wrong["posterior"] = wrong["posterior"].to_dataset().drop_vars("utility")
    with pytest.raises(PosteriorError, match="no 'utility' variable"):
        decide(wrong, Costs(estimand="utility"))


# --------------------------------------------------------------------------- properties


@st.composite
def memory_frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(1, 8))
    rows = []
    for i in range(n):
        status = draw(st.sampled_from(STATUSES))
        exposed = draw(st.integers(1, 8)) if status == IDENTIFIED else 0
        retrieved = draw(st.integers(1 if status == RETRIEVED_ONLY else 0, 40))
        if status == UNIDENTIFIED:
            retrieved = 0
        p = draw(st.sampled_from([0.0, 0.01, 0.04, 0.1, 0.5, 0.95, math.nan]))
        rows.append(one_memory(status, exposed, retrieved, p, f"m{i}"))
    return pd.DataFrame(rows)


cost_values = st.floats(0.01, 1000.0, allow_nan=False)


@st.composite
def cost_settings(draw: st.DrawFn, n: int) -> Costs:
    return Costs(
        forget_cost=draw(cost_values),
        retain_cost=draw(cost_values),
        threshold=draw(st.sampled_from([0.0, 0.05, 0.2])),
        estimand=draw(st.sampled_from(["tau", "utility"])),
        capacity=draw(st.none() | st.integers(0, n)),
        min_exposures=draw(st.integers(1, 4)),
    )


prop = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quiet
@prop
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_property_only_identified_memories_are_forgotten(data: st.DataObject, seed: int) -> None:
    mems = data.draw(memory_frames())
    costs = data.draw(cost_settings(len(mems)))
    decisions = decide(synthetic_posterior(mems, draws=40, seed=seed), costs)
    table = decisions.table
    gone = table[table["action"] == "forget"]
    assert (gone["status"] == IDENTIFIED).all()
    assert (gone["exposed"] >= costs.min_exposures).all()
    kept = table[table["action"] != "forget"]
    if costs.capacity is not None:
        # capacity is met, or every memory that may be forgotten has been
        short = decisions.capacity_shortfall
        if short:
            assert len(kept) - costs.capacity == short
            assert not kept["forgettable"].any()
        else:
            assert len(kept) <= costs.capacity


@quiet
@prop
@given(
    data=st.data(),
    seed=st.integers(0, 2**16),
    factor=st.floats(1.0, 50.0),
    raise_forget=st.booleans(),
)
def test_property_monotone_in_costs(
    data: st.DataObject, seed: int, factor: float, raise_forget: bool
) -> None:
    mems = data.draw(memory_frames())
    costs = data.draw(cost_settings(len(mems)))
    post = synthetic_posterior(mems, draws=40, seed=seed)
    name = "forget_cost" if raise_forget else "retain_cost"
    higher = dataclasses.replace(costs, **{name: getattr(costs, name) * factor})
    before = decide(post, costs).table["action"]
    after = decide(post, higher).table["action"]
    if raise_forget:  # never a new forget
        assert not ((after == "forget") & (before != "forget")).any()
    else:  # a forget stays a forget (so never becomes a retain)
        assert not ((before == "forget") & (after != "forget")).any()


@quiet
@prop
@given(data=st.data(), seed=st.integers(0, 2**16), stuck=st.booleans())
def test_property_unhealthy_posterior_forgets_nothing(
    data: st.DataObject, seed: int, stuck: bool
) -> None:
    mems = data.draw(memory_frames())
    costs = data.draw(cost_settings(len(mems)))
    post = synthetic_posterior(
        mems, draws=40, seed=seed, stuck_chain=stuck, divergences=0 if stuck else 3
    )
    decisions = decide(post, costs)
    assert not (decisions.table["action"] == "forget").any()
    assert not decisions.health.ok


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def posterior_file(tmp_path_factory, base_posterior: xr.DataTree):
    path = tmp_path_factory.mktemp("post") / "post.nc"
    base_posterior.to_netcdf(path, engine="h5netcdf")
    return path


def test_cli_decide_writes_csv_and_prints_summary(posterior_file, tmp_path, capsys) -> None:
    out = tmp_path / "decisions.csv"
    costs = tmp_path / "costs.toml"
    costs.write_text("forget_cost = 50\nretain_cost = 1\n")
    rc = main(
        ["decide", str(posterior_file), "--costs", str(costs), "--retain-cost", "2", "-o", str(out)]
    )
    assert rc == 0
    text = capsys.readouterr().out
    table = pd.read_csv(out)
    assert len(table) == 40 and list(table.columns) == [*COLUMNS, *RULE_COLUMNS]
    # the costs behind the rows: the file's forget cost, the flag's retain cost
    assert (table["forget_cost"] == 50.0).all() and (table["retain_cost"] == 2.0).all()
    assert (table["threshold"] == 0.05).all() and (table["estimand"] == "tau").all()
    assert table["forget_below"].to_numpy() == pytest.approx(2 / 52)
    counts = table["action"].value_counts()
    assert (
        f"40 memories: {counts.get('retain', 0)} retain, {counts.get('forget', 0)} forget" in text
    )
    assert "< 0.0385 (costs 50.0:2.0)" in text  # 2 / 52: the flag overrode the file
    assert "sampler health" in text
    expect = decide(posterior_file, Costs(forget_cost=50, retain_cost=2))
    assert list(table["action"]) == list(expect.table["action"])


def test_cli_decide_names_a_threshold_out_of_reach(posterior_file, capsys) -> None:
    assert main(["decide", str(posterior_file), "--threshold", "0.99", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "threshold out of reach: No draw of any memory's tau is above the threshold 0.99" in out
    assert main(["decide", str(posterior_file), "--top", "0"]) == 0
    assert "out of reach" not in capsys.readouterr().out


def test_cli_decide_user_errors_exit_2(posterior_file, tmp_path, capsys) -> None:
    assert main(["decide", str(posterior_file), "--forget-cost", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cmp-bayes decide: error:") and "forget_cost" in err
    assert "\n" not in err
    assert main(["decide", str(tmp_path / "missing.nc")]) == 2
    assert "missing.nc" in capsys.readouterr().err
    junk = tmp_path / "junk.nc"
    junk.write_text("not a posterior\n")
    assert main(["decide", str(junk)]) == 2
    err = capsys.readouterr().err
    assert "junk.nc" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- realized loss


def test_realized_loss_and_baselines_by_hand() -> None:
    from cmp_bayes.decision.baselines import (
        hajek_threshold,
        logged_success_eviction,
        realized_loss,
    )

    truth = pd.DataFrame(
        {
            "memory_id": ["a", "b", "c", "d"],
            "tau_true": [0.3, 0.0, 0.1, math.nan],
            "utility_true": [0.03, 0.0, 0.0, math.nan],
        }
    )
    actions = pd.Series(["forget", "retain", "defer", "forget"], index=["a", "b", "c", "d"])
    got = realized_loss(actions, truth, Costs(forget_cost=20, retain_cost=1))
    # a: useful and forgotten (20); b: useless and kept (1); c: useful, kept; d: NaN = useless
    assert got == {
        "loss": 21.0,
        "forgotten": 2,
        "forgotten_useful": 1,
        "kept_useless": 1,
        "useful": 2,
        "memories": 4,
    }
    stats = xr.Dataset(
        {
            "exposed": ("memory", [4, 0, 5]),
            "exposed_outcome_sum": ("memory", [3.0, 0.0, 1.0]),
            "control": ("memory", [100, 100, 100]),
            "control_outcome_sum": ("memory", [30.0, 30.0, 30.0]),
            "retrieved": ("memory", [10, 0, 3]),
            "in_store": ("memory", [110, 100, 108]),
            "retrieved_outcome_sum": ("memory", [4.0, 0.0, 2.0]),
        },
        coords={"memory": ["a", "b", "c"]},
    )
    # Hajek: a = .75 - .3 = .45 (keep), b undefined (keep), c = .2 - .3 = -.1 (forget)
    assert list(hajek_threshold(stats, Costs())) == ["retain", "retain", "forget"]
    assert list(logged_success_eviction(stats)) == ["retain", "forget", "retain"]
    assert list(logged_success_eviction(stats, n_forget=2)) == ["retain", "forget", "forget"]


@pytest.mark.slow
def test_realized_loss_beats_hajek_and_logged_counts_on_simulation() -> None:
    # A real fit on a small LongMemEval-like simulation (800 memories, about 4 min on 2 cores).
    # The claim is the issue's: realized loss of decide < thresholding Hajek estimates and
    # < eviction by logged success counts. No tolerance: it is a comparison of two totals on
    # the same truth, and the margin measured in reports/simulation/decide.md is large.
    from cmp_bayes.decision.baselines import hajek_threshold, logged_success_eviction, realized_loss
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.presets import PRESETS
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate
    from cmp_bayes.simulation.truth import memory_truth
    from cmp_bayes.statistics import exposure_stats

    log = simulate(SimulationConfig(**{**PRESETS["longmemeval-like"], "queries": 20}), seed=3)
    stats, truth, costs = exposure_stats(log), memory_truth(log), Costs()
    post = fit(log, draws=1000, tune=1000, chains=2, seed=3, progressbar=False)
    decisions = decide(post, costs)
    table = decisions.table.set_index("memory_id")
    assert decisions.health.ok, decisions.health
    assert not table.loc[table["status"] != IDENTIFIED, "action"].eq("forget").any()
    ours = realized_loss(table["action"], truth, costs)["loss"]
    assert ours < realized_loss(hajek_threshold(stats, costs), truth, costs)["loss"]
    assert ours < realized_loss(logged_success_eviction(stats), truth, costs)["loss"]
    n_forget = int((table["action"] == "forget").sum())
    matched = logged_success_eviction(stats, n_forget=n_forget)
    assert ours <= realized_loss(matched, truth, costs)["loss"]


def test_a_threshold_no_draw_reaches_is_named(base_posterior: xr.DataTree) -> None:
    tau = base_posterior["posterior"]["tau"].to_numpy()
    out_of_reach = float(tau.max()) + 0.01
    with pytest.warns(DecisionWarning, match=r"No draw of any memory's tau is above the threshold") as rec:
        decisions = decide(base_posterior, Costs(threshold=out_of_reach))
    assert any(f"the largest is {tau.max():.3g}" in str(w.message) for w in rec)
    assert (decisions.table["p_useful"] == 0).all()
    assert decisions.out_of_reach == pytest.approx(float(tau.max()))
    assert "No draw of any memory's tau is above the threshold" in decisions.summary()
    # a threshold some draw clears: no such warning
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        kept = decide(base_posterior, Costs(threshold=float(tau.max()) - 1e-6))
    assert not any("No draw of any memory" in str(w.message) for w in seen)
    assert kept.out_of_reach is None and "No draw" not in kept.summary()
