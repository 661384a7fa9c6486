"""The robustness study's independent log generator (benchmarks/robustness_dgp.py).

It is written from the spec alone, so these checks hold it to the spec: the
package's reader accepts its logs, balanced dealing gives every pool memory
floor or ceil of its share with propensity n_m / T_m, memories outside the pool
stay unexposed, and its truth file is what the outcomes estimate.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import cmp_bayes
from cmp_bayes.statistics import exposure_stats

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "robustness_dgp.py"


@pytest.fixture(scope="module")
def dgp_module():
    spec = importlib.util.spec_from_file_location("robustness_dgp", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["robustness_dgp"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def small_log(dgp_module, tmp_path_factory):
    # large effects and many exposures so that one memory's Hajek estimate is clear;
    # 3 stores keep it fast
    dgp = dgp_module.DGP(
        "test", stores=3, per_store=60, exposures=40, useful_share=0.1, harmful_share=0.1,
        useful_low=0.5, useful_high=0.5, outside_pool_share=0.05,
    )
    out = tmp_path_factory.mktemp("rob") / "log"
    summary = dgp_module.generate(dgp, 3, out)
    return dgp, out, summary


def test_read_log_accepts_it(small_log) -> None:
    dgp, out, summary = small_log
    log = cmp_bayes.read_log(out)
    assert len(log.steps) == summary["steps"] == dgp.stores * dgp.steps_per_store
    src = log.contexts["source"].astype(str)
    per_step = log.contexts[src == "exposure"].groupby("step").size()
    assert per_step.max() <= dgp.exposure_slots


def test_balanced_exposures_and_propensities(small_log) -> None:
    dgp, out, _ = small_log
    design = json.loads((out / "design.json").read_text())
    stats = exposure_stats(cmp_bayes.read_log(out))
    exposed = stats["exposed"].to_series()
    exposed.index = exposed.index.astype(str)
    pool = design["pool"]
    t_m = dgp.steps_per_store
    for s in range(dgp.stores):
        members = [m for m in pool if m.startswith(f"s{s:02d}")]
        share = t_m * dgp.exposure_slots / len(members)
        counts = exposed.loc[members].to_numpy()
        assert set(counts) <= {math.floor(share), math.ceil(share)}
        assert counts.sum() == t_m * dgp.exposure_slots
        for m in members:
            assert pool[m] == pytest.approx(exposed[m] / t_m, rel=1e-12)
    outside = [m for m in exposed.index if m not in pool]
    assert outside, "the generator should keep some memories out of the pool"
    assert (exposed.loc[outside] == 0).all()
    # no memory is retrieved and exposed at the same step
    ctx = cmp_bayes.read_log(out).contexts
    assert not ctx.duplicated(["step", "memory_id"]).any()


def test_truth_matches_outcomes(dgp_module, small_log) -> None:
    _, out, _ = small_log
    truth = dgp_module.read_truth(out).set_index("memory_id")
    assert set(truth["kind"]) == {"null", "useful", "harmful"}
    est = cmp_bayes.estimate(cmp_bayes.read_log(out), method="hajek").set_index("memory_id")
    est.index = est.index.astype(str)
    both = truth.join(est["estimate"], how="inner").dropna(subset=["estimate"])
    useful = both[both["kind"] == "useful"]
    # tau 0.5 (minus the displaced exposure's mean effect) with 40 exposures: clear
    assert (useful["tau_true"] > 0.35).all()
    assert useful["estimate"].mean() > 0.3
    assert (useful["estimate"] > 0.1).mean() > 0.9
    # the truth is what the contrast targets: unbiased over memories
    diff = both["estimate"] - both["tau_true"]
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff))
    assert np.corrcoef(both["estimate"], both["tau_true"])[0, 1] > 0.8
