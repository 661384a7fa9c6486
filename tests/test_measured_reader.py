"""The measured reader: calibration design, the fitted curve against a reader of known curve, its use in the experiment."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from _replication_fixtures import HOTPOTQA, need

from cmp_bayes.cli.main import main
from cmp_bayes.errors import ConfigError
from cmp_bayes.replicate.config import ExperimentConfig
from cmp_bayes.replicate.experiment import localization_check
from cmp_bayes.replicate.measured_reader import MeasuredReader, ReaderCurve
from cmp_bayes.replicate.reader_calibration import calibration_design

#: The known curve of the stand-in reader: logit P(success) = ALPHA + BETA_SHARE * share (no slots, position or
#: question effect).
ALPHA, BETA_SHARE = -1.5, 3.0


@pytest.fixture(scope="module")
def hotpot20():
    from cmp_bayes.datasets.hotpotqa import load_hotpotqa

    return load_hotpotqa(need(HOTPOTQA), limit=20)


def test_calibration_design_follows_its_definition(hotpot20) -> None:
    from cmp_bayes.retrieval.base import rank_store
    from cmp_bayes.retrieval.bm25 import BM25Retriever

    calls, ctx = calibration_design(hotpot20, BM25Retriever(), calls=90, slots=(2, 4, 6), seed=3)
    assert len(calls) == 90 and set(calls["slots"]) == {2, 4, 6}
    # questions are dealt in turn: 20 questions, 90 calls -> 4 or 5 each
    assert calls["query_id"].value_counts().between(4, 5).all()
    per_call = ctx.groupby("call")
    assert (per_call.size().to_numpy() == calls["slots"].to_numpy()).all()
    np.testing.assert_array_equal(per_call["evidence"].sum().to_numpy(), calls["evidence_in_context"].to_numpy())
    np.testing.assert_allclose(calls["share"], calls["evidence_in_context"] / calls["n_evidence"])
    assert calls["evidence_in_context"].between(0, np.minimum(calls["n_evidence"], calls["slots"])).all()
    assert set(calls["evidence_in_context"]) == {0, 1, 2}  # HotpotQA: two supporting paragraphs
    # position: the evidence's mean slot / (B - 1); NaN without evidence
    for c, row in calls.set_index("call").iterrows():
        slots = ctx.loc[(ctx["call"] == c) & ctx["evidence"], "slot"]
        if row["evidence_in_context"] == 0:
            assert np.isnan(row["position"])
        else:
            assert row["position"] == pytest.approx(slots.mean() / (row["slots"] - 1))
    # the distractors are the retriever's best non-evidence memories for the question
    c0 = calls.iloc[0]
    store = hotpot20.store(c0["store_id"])
    ranks = rank_store(store, BM25Retriever()).sel(query=c0["query_id"]).to_series().sort_values()
    ev = set(store.evidence.loc[store.evidence["query_id"] == c0["query_id"], "memory_id"])
    best = [m for m in ranks.index if m not in ev][: c0["slots"] - c0["evidence_in_context"]]
    got = ctx.loc[(ctx["call"] == 0) & ~ctx["evidence"], "memory_id"]
    assert sorted(got) == sorted(best)
    with pytest.raises(ConfigError, match="calls >= 1"):
        calibration_design(hotpot20, BM25Retriever(), calls=0)


class _KnownCurveLLM:
    """Stands in for LLMReader: succeeds with probability expit(ALPHA + BETA_SHARE * share), where share is the
    share of the question's supporting paragraphs among the context texts; the draw is a hash of the call,
    so the same call always scores the same."""

    evidence: dict[str, set[str]] = {}

    def __init__(self, model_path=None, threads: int = 2, **_: object) -> None:
        self.name = "llm:known-curve"

    def score(self, question: str, contexts, answer: str) -> float:
        ev = self.evidence[question]
        share = sum(c in ev for c in contexts) / len(ev)
        p = 1.0 / (1.0 + np.exp(-(ALPHA + BETA_SHARE * share)))
        u = int(hashlib.sha256(repr((question, tuple(contexts))).encode()).hexdigest()[:12], 16) / 16**12
        return float(u < p)


@pytest.fixture(scope="module")
def known_curve(hotpot20, tmp_path_factory) -> tuple[dict, object]:
    """``replicate calibrate-reader`` run on the stand-in reader: the JSON it wrote and its path."""
    from cmp_bayes.replicate import llm_reader

    text = dict(zip(hotpot20.memories()["memory_id"], hotpot20.memories()["text"], strict=True))
    qtext = dict(zip(hotpot20.queries()["query_id"], hotpot20.queries()["text"], strict=True))
    ev = hotpot20.evidence()
    _KnownCurveLLM.evidence = {qtext[q]: {text[m] for m in g["memory_id"]} for q, g in ev.groupby("query_id")}
    out = tmp_path_factory.mktemp("curve") / "curve.json"
    mp = pytest.MonkeyPatch()
    mp.setattr(llm_reader, "LLMReader", _KnownCurveLLM)
    try:
        rc = main(["-q", "replicate", "calibrate-reader", "--dataset", "hotpotqa", "--data", str(need(HOTPOTQA)),
                   "--limit", "20", "--calls", "400", "--reader-outcome", "binary", "--draws", "300", "--tune", "300",
                   "--reader-cache", str(out.parent / "cache"), "-o", str(out)])
    finally:
        mp.undo()
    assert rc == 0
    return json.loads(out.read_text()), out


def test_calibrate_reader_recovers_a_known_curve(known_curve) -> None:
    """The stand-in's curve is known; the fit's posterior must hold it.

    Tolerance: 3 posterior sds (sd from the 90% interval, width / 3.29) for each
    coefficient. With a calibrated posterior the chance that one of the four
    checks fails is about 4 x 0.27% = 1%, and the run is seeded, so the check is
    fixed once it passes; a biased fit (e.g. the share effect halved) fails it:
    at 400 calls the sd of beta_share is about 0.3.
    """
    out, _ = known_curve
    c = out["curve"]
    assert out["label"] == "reader-calibration" and c["reader"] == "llm:known-curve" and c["calls"] == 400
    truth = {"alpha": ALPHA, "beta_share": BETA_SHARE, "beta_slots": 0.0, "beta_position": 0.0}
    for name, value in truth.items():
        v = c["coefficients"][name]
        sd = (v["high"] - v["low"]) / 3.29
        assert abs(v["mean"] - value) < 3 * sd, (name, v)
    assert c["coefficients"]["beta_share"]["low"] > 1.0  # the evidence effect is found, not only allowed
    assert c["fit_health"]["divergences"] == 0 and c["fit_health"]["max_rhat"] < 1.05
    # the published curve is the model's mean at share 0 and 1, close to the known curve (no question effect)
    at = {(p["slots"], p["share"]): p for p in c["curve"]}
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    for share in (0.0, 1.0):
        p = at[(4, share)]
        assert p["low"] <= p["mean"] <= p["high"]
        assert abs(p["mean"] - expit(ALPHA + BETA_SHARE * share)) < 0.1
    # the raw means are published beside it, and the hand-picked curve
    assert sum(e["calls"] for e in c["empirical"]) == 400
    assert {h["gain"] for h in out["hand_picked"]} == {0.6, 0.2}


def test_reader_curve_file_errors_name_the_file_and_field(tmp_path, known_curve) -> None:
    out, path = known_curve
    assert ReaderCurve.read(path).point()["beta_share"] == out["curve"]["coefficients"]["beta_share"]["mean"]
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  not json")
    with pytest.raises(ConfigError, match=r"bad.json: line 2"):
        ReaderCurve.read(bad)
    broken = json.loads(path.read_text())
    broken["curve"]["coefficients"]["alpha"]["mean"] = "x"
    bad.write_text(json.dumps(broken))
    with pytest.raises(ConfigError, match=r"bad.json: field coefficients.alpha.mean"):
        ReaderCurve.read(bad)
    with pytest.raises(ConfigError, match="no such reader curve"):
        ReaderCurve.read(tmp_path / "none.json")


def test_measured_reader_probability_by_hand() -> None:
    params = {"alpha": -1.0, "beta_share": 2.0, "beta_slots": -0.1, "beta_position": -1.0, "sigma_q": 0.5,
              "ref_slots": 4.0}
    r = MeasuredReader(params, slots=6)
    base = np.array([0.0, 0.3, 0.0])
    share = np.array([0.0, 0.5, 1.0])
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    want = expit(-1.0 + base + 2.0 * share - 0.2)
    np.testing.assert_allclose(r.probability(base, share), want)
    # the evidence in the last slot costs beta_position * 0.5; no evidence, no position term
    pos = np.array([np.nan, 1.0, 0.0])
    np.testing.assert_allclose(r.probability(base, share, position=pos),
                               expit(-1.0 + base + 2.0 * share - 0.2 + np.array([0.0, -0.5, 0.5])))
    rng = np.random.default_rng(0)
    z = r.base_rates(20000, rng)
    assert abs(z.std() - 0.5) < 0.02
    y = r.outcomes(np.zeros(20000), np.ones(20000), rng)
    assert abs(y.mean() - expit(-1.0 + 2.0 - 0.2)) < 0.01  # 4 binomial sds


def test_experiment_uses_the_measured_reader(hotpot20, known_curve) -> None:
    from cmp_bayes.replicate.layout import build_log
    from cmp_bayes.retrieval.bm25 import BM25Retriever

    _, path = known_curve
    curve = ReaderCurve.read(path)
    cfg = ExperimentConfig(slots=4, exposure_slots=1, fit=False, n_boot=20, n_perturbations=2,
                           measured_reader=curve.point() | {"source": curve.describe()})
    assert isinstance(cfg.reader, MeasuredReader)
    assert ExperimentConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    log, _ = build_log(hotpot20, BM25Retriever(), cfg)
    base, _ = build_log(hotpot20, BM25Retriever(), ExperimentConfig(slots=4, exposure_slots=1, fit=False))
    assert log.contexts.equals(base.contexts)  # same layout, outcomes from the measured curve
    assert log.attrs["label"] == "semi-synthetic" and "measured" in log.attrs["reader"]
    # success rates by evidence share follow the measured curve's expit(alpha + beta_share * share)
    ctx = log.contexts.merge(log.steps[["step", "query_id"]], on="step")
    ev = hotpot20.evidence().assign(ev=True)[["query_id", "memory_id", "ev"]]
    seen = ctx.merge(ev, on=["query_id", "memory_id"], how="left").fillna({"ev": False}).groupby("step")["ev"].sum()
    y = log.steps.set_index("step")["outcome"]
    p = curve.point()
    for e in (1, 2):
        sub = y[seen.reindex(y.index).to_numpy() == e]
        want = 1 / (1 + np.exp(-(p["alpha"] + p["beta_share"] * e / 2)))
        assert len(sub) > 50
        assert abs(sub.mean() - want) < 4 * np.sqrt(want * (1 - want) / len(sub)) + 0.05  # + question effects
    with pytest.raises(ConfigError, match="measured_reader needs numbers"):
        ExperimentConfig(measured_reader={"alpha": 1.0})


def test_cli_reader_curve_options(capsys, tmp_path, known_curve) -> None:
    _, path = known_curve
    args = ["replicate", "experiment", "--dataset", "hotpotqa", "--data", str(need(HOTPOTQA)), "--limit", "3",
            "--slots", "4", "--exposure-slots", "1", "--no-fit"]
    assert main([*args, "--reader", "measured"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--reader-curve" in err[0]
    assert main([*args, "--reader-curve", str(path)]) == 2
    assert "--reader measured only" in capsys.readouterr().err
    assert main([*args, "--reader", "measured", "--reader-curve", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["label"] == "semi-synthetic" and out["reader"].startswith("semi-synthetic measured reader")
    assert out["config"]["measured_reader"]["beta_share"] == ReaderCurve.read(path).point()["beta_share"]


def test_localization_check_by_hand() -> None:
    pm = pd.DataFrame({
        "memory_id": list("abcdef"),
        "retrieved": [1, 1, 1, 1, 0, 2],
        "exposed": [2, 2, 2, 2, 3, 0],
        "required": [True, True, False, False, True, False],
        "logged-success": [0.9, 0.2, 0.5, 0.1, np.nan, 0.0],
        "hajek": [0.8, 0.7, 0.1, 0.2, 0.9, 0.0],
    })
    out = localization_check(pm, n_boot=50)
    # a-d are both retrieved and exposed; logged: pairs (a>c, a>d, b<c, b>d) -> 3/4; hajek: all 4
    assert out["memories"] == 4 and out["required"] == 2
    assert out["auc"] == {"logged-success": 0.75, "hajek": 1.0}
    assert out["auc_difference"][0]["diff"] == pytest.approx(0.25)
    assert localization_check(pm.assign(required=True))["auc"] == {}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["calibrate-reader", "--dataset", "hotpotqa", "--calls", "5"], "--calls must be at least 10"),
        (["calibrate-reader", "--dataset", "hotpotqa", "--slots", "0", "4"], "--slots positive"),
        (["experiment", "--dataset", "hotpotqa", "--categories", "4"], "--categories applies to locomo only"),
    ],
)
def test_cli_calibration_and_category_errors_are_one_line(capsys, args, says) -> None:
    rc = main(["replicate", *args, "--data", str(need(HOTPOTQA)), "--limit", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0]


def test_cli_locomo_categories_keep_only_those_questions(capsys) -> None:
    from _replication_fixtures import LOCOMO

    rc = main(["replicate", "positivity", "--dataset", "locomo", "--conversations", "conv-30", "--categories", "4",
               "--slots", "6", "--json", "--data", str(need(LOCOMO))])
    out = json.loads(capsys.readouterr().out)
    # conv-30 has 44 single-hop (category 4) questions; only their group is left
    assert rc == 0 and out["summary"]["queries"] == 44
    assert {g["group"] for g in out["by_group"]} == {"single-hop"}
    assert main(["replicate", "positivity", "--dataset", "locomo", "--categories", "9", "--data", str(need(LOCOMO))]) == 2
    assert "categories are 1-5" in capsys.readouterr().err


def test_deterministic_reader_repeats_the_outcome_of_a_repeated_context(hotpot20) -> None:
    from dataclasses import replace

    from cmp_bayes.replicate.layout import build_log
    from cmp_bayes.retrieval.bm25 import BM25Retriever

    cfg = ExperimentConfig(slots=4, exposure_slots=1, fit=False)
    free, _ = build_log(hotpot20, BM25Retriever(), cfg)
    fixed, _ = build_log(hotpot20, BM25Retriever(), replace(cfg, deterministic_reader=True))
    ctx = fixed.contexts.sort_values(["step", "slot"]).groupby("step")["memory_id"].agg(tuple)
    key = (fixed.steps["query_id"].astype(str) + "|" + ctx.reindex(fixed.steps["step"]).astype(str).to_numpy()).to_numpy()
    # 20 stores x (3 fixed retrieved slots + 1 of 7 pool memories): 140 distinct contexts over 840 steps
    assert len(set(key)) == 140 and len(key) == 840
    assert fixed.steps.groupby(key)["outcome"].nunique().max() == 1  # one outcome per context
    assert free.steps.groupby(key)["outcome"].nunique().max() == 2  # the default draws each step anew
    first = ~pd.Series(key).duplicated().to_numpy()
    np.testing.assert_array_equal(fixed.steps["outcome"][first], free.steps["outcome"][first])  # same draws, copied


def test_cli_deterministic_reader_is_for_semi_synthetic_readers(capsys) -> None:
    rc = main(["replicate", "experiment", "--dataset", "hotpotqa", "--data", str(need(HOTPOTQA)), "--limit", "2",
               "--no-fit", "--reader", "llm", "--deterministic-reader"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "semi-synthetic readers" in err[0]


def test_question_slopes_fit_and_draw() -> None:
    """Calls simulated with a known per-question share slope (sigma_share = 1.5): the fit's posterior holds
    the known coefficients within 3 posterior sds (the tolerance of the known-curve test, same reasoning),
    and the reader it defines draws one intercept and one slope per question."""
    from cmp_bayes.replicate.measured_reader import fit_reader_curve

    rng = np.random.default_rng(7)
    n_q, per_q = 40, 8
    truth = {"alpha": -1.0, "beta_share": 2.0, "sigma_q": 0.5, "sigma_share": 1.5}
    z, w = rng.standard_normal(n_q), rng.standard_normal(n_q)
    q = np.repeat(np.arange(n_q), per_q)
    share = rng.integers(0, 3, q.size) / 2
    eta = truth["alpha"] + truth["sigma_q"] * z[q] + (truth["beta_share"] + truth["sigma_share"] * w[q]) * share
    calls = pd.DataFrame({"query_id": q.astype(str), "slots": 4, "evidence_in_context": (share * 2).astype(int),
                          "share": share, "position": np.where(share > 0, 0.5, np.nan),
                          "score": (rng.random(q.size) < 1 / (1 + np.exp(-eta))).astype(float)})
    curve = fit_reader_curve(calls, "sim", "sim", draws=300, tune=300, question_slopes=True)
    for name, value in truth.items():
        v = curve.coefficients[name]
        assert abs(v["mean"] - value) < 3 * (v["high"] - v["low"]) / 3.29, (name, v)
    assert "sigma_share" in curve.point() and "w_q" in curve.describe()
    reader = MeasuredReader(curve.point(), slots=4)
    base = reader.base_rates(5000, np.random.default_rng(0))
    assert base.shape == (5000, 2)
    np.testing.assert_allclose(base.std(axis=0), [curve.point()["sigma_q"], curve.point()["sigma_share"]], rtol=0.05)
    p = reader.probability(base, np.ones(5000))
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    np.testing.assert_allclose(p, expit(curve.point()["alpha"] + base[:, 0] + curve.point()["beta_share"] + base[:, 1]))
    # a curve without slopes reads as before: one effect per question
    flat = {k: v for k, v in curve.point().items() if k != "sigma_share"}
    assert MeasuredReader(flat, slots=4).base_rates(3, np.random.default_rng(0)).shape == (3,)
