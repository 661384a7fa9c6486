"""One sampler-health verdict: ``cmp-bayes fit``, the report and ``decide`` agree on every posterior.

All three read :func:`cmp_bayes.posterior.health.sampler_health`; these tests
check that they do by changing the one implementation (its R-hat, its
hyperparameter definition) and watching all three consumers follow, and by the
two edge cases the issue names: R-hat exactly at the 1.01 threshold (``<=``
passes) and a single divergent draw (fails).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import cmp_bayes as cb
from cmp_bayes.cli.fit import health_line
from cmp_bayes.cli.main import main
from cmp_bayes.constants import IDENTIFIED, RHAT_MAX
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import RULE_COLUMNS, Decisions
from cmp_bayes.decision.rule import DecisionWarning, decide
from cmp_bayes.posterior import health as health_mod
from cmp_bayes.posterior import sampling_checks
from cmp_bayes.replicate import experiment
from cmp_bayes.reporting import sections
from cmp_bayes.reporting.html import report
from cmp_bayes.testing import memory_table, synthetic_posterior
from cmp_bayes.testing.posterior import STUCK_HYPERPARAMETER


def forgettable_memories(n: int = 4) -> pd.DataFrame:
    """Identified, well exposed memories that are useless with P ~ 1: decide forgets them all."""
    return pd.DataFrame(
        {
            "memory_id": [f"m{i}" for i in range(n)],
            "status": IDENTIFIED,
            "exposed": 8,
            "retrieved": 3,
            "in_store": 400,
            "p_useful": 0.0,
            "rho_mean": 0.05,
        }
    )


def _no_trace_figures(posterior: xr.DataTree, hyper: list[str]) -> sections.Section:
    # the trace and rank figures are 3-4 s of a 4-5 s report and hold no verdict; the
    # report tests (test_report_robust: divergences, thinning, one chain) draw them
    return sections.Section("trace-rank", "Trace and rank plots", "", "", "")


def report_verdict(posterior: xr.DataTree, out: Path, costs: Costs | None = None) -> str:
    """The verdict line of the sampler-health section of the written summary.md."""
    with warnings.catch_warnings(), mock.patch.object(sections, "trace_rank_section", _no_trace_figures):
        warnings.simplefilter("ignore", DecisionWarning)  # decide inside the report
        report(posterior, out, costs=costs)
    md = (out / "summary.md").read_text(encoding="utf-8")
    section = md.split('<a id="sampler-health"></a>', 1)[1].split("<a id=", 1)[0]
    (line,) = [ln for ln in section.splitlines() if ln.startswith("**")]
    return line.strip("*")


def decide_quietly(posterior: xr.DataTree, costs: Costs | None = None) -> Decisions:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionWarning)
        return decide(posterior, costs)


def verdicts(posterior: xr.DataTree, out: Path, costs: Costs | None = None) -> dict[str, bool]:
    """Each consumer's pass/fail for one posterior."""
    line = health_line(posterior)
    page = report_verdict(posterior, out, costs)
    decisions = decide_quietly(posterior, costs)
    assert line.startswith(("health: ok:", "health: check:")), line
    assert page.startswith(("PASS:", "FAIL:")), page
    return {
        "fit": line.startswith("health: ok:"),
        "report": page.startswith("PASS:"),
        "decide": decisions.health.ok and bool((decisions.table["action"] == "forget").all()),
    }


# ----------------------------------------------------------------- R-hat at the threshold


def constant_rhat(value: float):  # noqa: ANN201 - a stand-in for health.rhat
    """An R-hat function that returns ``value`` for every element."""

    def fake(ds: xr.Dataset) -> xr.Dataset:
        return xr.Dataset(
            {
                name: da.isel(chain=0, draw=0, drop=True).astype("float64") * 0.0 + value
                for name, da in ds.data_vars.items()
            }
        )

    return fake


def test_rhat_exactly_at_threshold_passes_everywhere(tmp_path, monkeypatch) -> None:
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=3)
    monkeypatch.setattr(sampling_checks, "rhat", constant_rhat(RHAT_MAX))
    got = verdicts(post, tmp_path / "at")
    assert got == {"fit": True, "report": True, "decide": True}
    n_hyper = len(health_mod.hyperparameter_names(post))
    assert f"max R-hat 1.010 over {n_hyper} hyperparameters" in health_line(post)
    assert decide_quietly(post).health.max_rhat == RHAT_MAX
    # the next float above the threshold fails all three
    monkeypatch.setattr(sampling_checks, "rhat", constant_rhat(np.nextafter(RHAT_MAX, 2.0)))
    got = verdicts(post, tmp_path / "above")
    assert got == {"fit": False, "report": False, "decide": False}


def test_measured_rhat_as_threshold_passes_and_just_below_fails(tmp_path) -> None:
    # real draws, real R-hat: chain 0 of one hyperparameter shifted so R-hat is clearly > 1
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=4)
    ds = post["posterior"].to_dataset()
    shifted = ds[STUCK_HYPERPARAMETER].copy()
    shifted[0] = shifted[0] + 0.01
    post["posterior"] = xr.DataTree(ds.assign({STUCK_HYPERPARAMETER: shifted}))
    measured = health_mod.sampler_health(post).max_rhat
    assert measured is not None and measured > RHAT_MAX
    at = Costs(max_rhat=measured)
    just_below = float(np.nextafter(measured, 0.0))
    below = Costs(max_rhat=just_below, max_rhat_chainwise=just_below)  # the strict gate alone
    assert health_mod.sampler_health(post, max_rhat=measured).ok
    assert report_verdict(post, tmp_path / "at", at).startswith("PASS:")
    assert (decide_quietly(post, at).table["action"] == "forget").all()
    assert report_verdict(post, tmp_path / "below", below).startswith("FAIL:")
    refused = decide_quietly(post, below)
    assert not (refused.table["action"] == "forget").any()
    assert f"R-hat of {STUCK_HYPERPARAMETER}" in "; ".join(refused.health.problems)
    # within max_rhat_chainwise (default 1.1) the same fit forgets exactly the memories
    # that every chain alone calls useless
    assert measured <= Costs().max_rhat_chainwise
    chained = decide_quietly(post, Costs(max_rhat=just_below))
    assert chained.chainwise and not chained.health.ok
    tau = post["posterior"]["tau"].transpose("chain", "draw", "memory").to_numpy()
    agree = ((tau > chained.costs.threshold).mean(axis=1) < chained.costs.forget_below).all(axis=0)
    table = chained.table
    forgot = (table["action"] == "forget").to_numpy()
    assert forgot.any()
    design_ok = (table["status"] == IDENTIFIED).to_numpy() & (table["exposed"].to_numpy() >= 1)
    bayes = table["p_useful"].to_numpy() < chained.costs.forget_below
    np.testing.assert_array_equal(forgot, bayes & design_ok & agree)
    assert (table.loc[forgot, "p_useful_chain_max"] < chained.costs.forget_below).all()
    assert table.loc[forgot, "reason"].str.contains("in every chain").all()
    # with default thresholds fit, the report and decide all fail it
    assert verdicts(post, tmp_path / "default") == {"fit": False, "report": False, "decide": False}


# ----------------------------------------------------------------- one divergent draw


def test_single_divergent_draw_fails_everywhere(tmp_path, capsys) -> None:
    clean = synthetic_posterior(forgettable_memories(), draws=200, seed=5)
    assert verdicts(clean, tmp_path / "clean") == {"fit": True, "report": True, "decide": True}
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=5, divergences=1)
    assert verdicts(post, tmp_path / "div") == {"fit": False, "report": False, "decide": False}
    assert health_line(post).endswith("1 divergences in 400 draws")
    assert "divergences" in report_verdict(post, tmp_path / "div2")
    with pytest.warns(DecisionWarning, match="no memory forgotten: 1 divergent draws"):
        decisions = decide(post)
    assert decisions.counts() == {"retain": 0, "forget": 0, "defer": 4}
    assert decisions.table["reason"].str.contains("sampler failed its checks").all()
    assert "1 divergent draws" in decisions.summary()
    assert "No memory was forgotten" in decisions.text
    # the decide CLI prints the same health line
    path = tmp_path / "post.nc"
    post.to_netcdf(path, engine="h5netcdf")
    assert main(["decide", str(path)]) == 0
    assert decisions.health.summary() in capsys.readouterr().out


@pytest.mark.parametrize("case", ["clean", "stuck", "two-divergences", "no-diverging"])
def test_same_verdict_on_every_kind_of_posterior(tmp_path, case: str) -> None:
    kwargs = {"stuck": {"stuck_chain": True}, "two-divergences": {"divergences": 2}}
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=6, **kwargs.get(case, {}))
    if case == "no-diverging":
        post["sample_stats"] = post["sample_stats"].to_dataset().drop_vars("diverging")
    got = verdicts(post, tmp_path / case)
    assert len(set(got.values())) == 1, got
    assert got["fit"] is (case == "clean")


def test_one_chain_fails_everywhere() -> None:
    # R-hat cannot be checked with one chain. (The full report cannot draw its rank plot
    # from one chain, so the report's sampler-health section is built directly here.)
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=6, chains=1)
    assert health_line(post).startswith("health: check: R-hat n/a (one chain)")
    section = sections.sampler_health_section(health_mod.sampler_health(post))
    assert section.markdown.startswith("**FAIL: R-hat (hyperparameters)")
    decisions = decide_quietly(post)
    assert not decisions.health.ok and not (decisions.table["action"] == "forget").any()


# ----------------------------------------------------------------- one definition


def test_hyperparameter_definition_is_one_object() -> None:
    assert sections.hyperparameter_names is health_mod.hyperparameter_names
    assert health_mod.hyperparameter_names is sampling_checks.hyperparameter_names
    assert health_mod.rhat is sampling_checks.rhat
    post = synthetic_posterior(memory_table(6, seed=1), per_query=True, seed=1)
    names = health_mod.hyperparameter_names(post)
    # the model's hyperparameters; no memory- or query-dim variable (tau, rho_memory, ...)
    assert names == [
        "tau_null_sd", "tau_helps_mean", "tau_helps_sd", "tau_hurts_mean", "tau_hurts_sd",
        "weight_intercept", "rho_intercept", "rho_kappa",
    ]
    assert health_mod.sampler_health(post).hyperparameters == names


def test_changing_the_definition_changes_every_consumer(tmp_path, monkeypatch) -> None:
    # STUCK_HYPERPARAMETER's chains disagree; if the one definition stops calling it a hyperparameter,
    # fit, the report, decide and the replication harness must all stop checking it.
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=7, stuck_chain=True)
    assert verdicts(post, tmp_path / "a") == {"fit": False, "report": False, "decide": False}
    assert experiment._health(post)["ok"] is False
    original = sampling_checks.is_hyperparameter
    monkeypatch.setattr(
        sampling_checks, "is_hyperparameter", lambda da: da.name != STUCK_HYPERPARAMETER and original(da)
    )
    assert verdicts(post, tmp_path / "b") == {"fit": True, "report": True, "decide": True}
    got = experiment._health(post)
    assert got["ok"] is True and got["divergences"] == 0 and got["max_rhat_hyper"] < RHAT_MAX


def test_rhat_is_rank_normalized_max_of_bulk_and_folded() -> None:
    import arviz_stats

    post = synthetic_posterior(memory_table(5, seed=2), seed=2)
    ds = post["posterior"].to_dataset()[[STUCK_HYPERPARAMETER, "tau"]]
    got = health_mod.rhat(ds)
    ref = arviz_stats.rhat(ds, sample_dims=["chain", "draw"], method="rank")
    for name in ds.data_vars:
        np.testing.assert_allclose(got[name].to_numpy(), ref[name].to_numpy())
    # chains with the same centre but three times the spread: the bulk (location) R-hat
    # passes them, the folded part of the one R-hat does not
    rng = np.random.default_rng(0)
    wide = xr.Dataset(
        {"w": (("chain", "draw"), rng.normal(0.0, 1.0, (2, 1000)) * np.array([[1.0], [3.0]]))}
    )
    bulk = float(arviz_stats.rhat(wide, sample_dims=["chain", "draw"], method="z_scale")["w"])
    assert bulk <= RHAT_MAX < float(health_mod.rhat(wide)["w"])


# ----------------------------------------------------------------- the Decisions object


def test_decisions_object_carries_what_attrs_did(tmp_path) -> None:
    post = synthetic_posterior(memory_table(30, seed=8), draws=300, seed=8)
    costs = Costs(capacity=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionWarning)
        d = cb.decide(post, costs)
    assert isinstance(d, cb.Decisions) and cb.Decisions is Decisions
    assert len(d) == len(d.table) == 30
    counts = d.counts()
    assert set(counts) == {"retain", "forget", "defer"} and sum(counts.values()) == 30
    assert counts["forget"] == len(d.forgets) and counts["defer"] == len(d.defers)
    assert counts["retain"] == len(d.retains)
    assert d.costs is costs and d.rule.forget_below == pytest.approx(costs.forget_below)
    assert d.rule.variable == "tau" and d.rule.threshold == costs.threshold
    assert d.health.ok and d.health.rhat_threshold == costs.max_rhat
    kept = int((d.table["action"] != "forget").sum())
    assert d.capacity_shortfall == max(0, kept - 5)
    assert f"30 memories: {counts['retain']} retain, {counts['forget']} forget" in d.summary()
    assert d.rule.describe() in d.summary()
    assert repr(d).startswith("Decisions(30 memories") and "<table" in d._repr_html_()
    doc = d.to_dict()
    assert doc["counts"] == counts and doc["health"]["ok"] is True
    assert doc["costs"] == costs.to_dict()
    (tmp_path / "sub").mkdir()
    out = d.to_csv(tmp_path / "sub" / "decisions.csv")
    back = pd.read_csv(out, dtype={"memory_id": str})
    assert list(back.columns) == [*d.table.columns, *RULE_COLUMNS]
    assert list(back["action"]) == list(d.table["action"])
    assert not list((tmp_path / "sub").glob("*.tmp"))


# ----------------------------------------------------------------- what the decision depends on


def rho_only_stuck(seed: int = 9) -> xr.DataTree:
    """Forgettable memories whose only bad R-hat is a rho_* hyperparameter (rho_kappa)."""
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=seed)
    ds = post["posterior"].to_dataset()
    shifted = ds["rho_kappa"].copy()
    shifted[0] = shifted[0] + 5.0
    post["posterior"] = xr.DataTree(ds.assign(rho_kappa=shifted))
    return post


def test_estimand_dependence_is_one_definition() -> None:
    names = [
        "tau_null_sd", "tau_helps_mean", "weight_intercept", "weight_coef", "weight_group_sd",
        "weight_group_z", "rho_intercept", "rho_kappa", "rho_coef", "rho_group_sd", "rho_group_z",
    ]
    tau = sampling_checks.estimand_hyperparameters(names, "tau")
    assert tau == [n for n in names if not n.startswith("rho_")]
    assert sampling_checks.estimand_hyperparameters(names, "utility") == names
    assert sampling_checks.estimand_hyperparameters(names, None) == names
    # an unknown hyperparameter gates every estimand: the guard can only get stricter
    assert sampling_checks.estimand_depends_on("new_thing", "tau")
    with pytest.raises(ValueError, match="estimand"):
        sampling_checks.estimand_depends_on("tau_null_sd", "rho")
    with pytest.raises(ValueError, match="estimand"):
        health_mod.sampler_health(synthetic_posterior(n_memories=3, draws=20), estimand="rho")


def test_a_bad_rho_hyperparameter_blocks_utility_not_tau(tmp_path, capsys) -> None:
    post = rho_only_stuck()
    # utility with the strict gate alone (no chainwise forgets: see the chainwise tests)
    tau_costs = Costs()
    utility_costs = Costs(estimand="utility", max_rhat_chainwise=RHAT_MAX)
    # decide on tau forgets; on utility it refuses, naming the rho hyperparameter
    on_tau = decide_quietly(post, tau_costs)
    assert on_tau.health.ok and (on_tau.table["action"] == "forget").all()
    assert on_tau.health.advisory_rhat and "rho_kappa R-hat" in on_tau.health.advisory_rhat[0]
    assert "(advisory: rho only)" in on_tau.health.advisory_rhat[0]
    assert "rho_kappa" not in on_tau.health.gated
    on_utility = decide_quietly(post, utility_costs)
    assert not on_utility.health.ok and not (on_utility.table["action"] == "forget").any()
    assert "R-hat of rho_kappa" in "; ".join(on_utility.health.problems)
    assert on_utility.table["reason"].str.contains("sampler failed its checks").all()
    # the report says why the tau forgets are safe, and refuses utility
    page = report_verdict(post, tmp_path / "tau", tau_costs)
    assert page.startswith("PASS: ") and "decisions on tau depend on passed" in page
    assert "rho_kappa R-hat" in page and "decisions on tau do not depend on it" in page
    assert "decisions on utility would be refused" in page
    md = (tmp_path / "tau" / "summary.md").read_text(encoding="utf-8")
    assert health_mod.ADVISORY_RHAT_CHECK in md
    assert report_verdict(post, tmp_path / "utility", utility_costs).startswith("FAIL: ")
    # fit's line names both verdicts and the hyperparameter behind the difference
    line = health_line(post)
    assert line.startswith("health: ok for decisions on tau, check for utility: ")
    assert "rho_kappa R-hat" in line and "(advisory: rho only)" in line
    # the decide CLI's summary says the same as decide
    path = tmp_path / "post.nc"
    post.to_netcdf(path, engine="h5netcdf")
    assert main(["decide", str(path)]) == 0
    out = capsys.readouterr().out
    assert on_tau.health.summary() in out and "ok for decisions on tau" in out


def test_fit_report_and_decide_agree_for_each_estimand(tmp_path) -> None:
    # the issue-14 property, per estimand: the same posterior, the same verdict everywhere
    post = rho_only_stuck(seed=10)
    line_ok = health_mod.sampler_health(post, advisory=False).ok_by_estimand
    for estimand, expected in (("tau", True), ("utility", False)):
        costs = Costs(estimand=estimand)
        page = report_verdict(post, tmp_path / estimand, costs)
        decisions = decide_quietly(post, costs)
        got = {
            "fit": line_ok[estimand],
            "report": page.startswith("PASS:"),
            "decide": decisions.health.ok and bool((decisions.table["action"] == "forget").all()),
        }
        assert got == {"fit": expected, "report": expected, "decide": expected}, estimand
    # and with every hyperparameter clean nothing is split: the lines read as before
    clean = synthetic_posterior(forgettable_memories(), draws=200, seed=10)
    h = health_mod.sampler_health(clean, estimand="tau")
    assert not h.split and not h.advisory_rhat and health_line(clean).startswith("health: ok: ")


def test_changing_the_dependence_definition_changes_every_consumer(tmp_path, monkeypatch) -> None:
    post = rho_only_stuck(seed=11)
    assert decide_quietly(post).health.ok
    assert health_line(post).startswith("health: ok for decisions on tau, check for utility")
    # if the one definition says tau depends on everything, rho_kappa blocks tau decisions too
    monkeypatch.setattr(sampling_checks, "estimand_depends_on", lambda name, estimand: True)
    assert verdicts(post, tmp_path / "b") == {"fit": False, "report": False, "decide": False}


def test_divergences_block_every_estimand() -> None:
    post = synthetic_posterior(forgettable_memories(), draws=200, seed=12, divergences=1)
    for estimand in (None, "tau", "utility"):
        h = health_mod.sampler_health(post, estimand=estimand, advisory=False)
        assert not h.ok and not any(h.ok_by_estimand.values())
