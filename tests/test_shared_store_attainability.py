"""The attainability benchmark's no-fit part (benchmarks/shared_store_attainability.py, ``reach``).

Its ceiling is the claim issue 16's simulator bullet is judged against, so the
randomized reach is recomputed here from the log's context rows (exposure slots
with a propensity below 1, under a question the memory is required for), and
the ceiling from its closed form, 0.5 + 0.5 x reached / required.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cmp_bayes.simulation.simulator import SimulationConfig, simulate

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "shared_store_attainability.py"


@pytest.fixture(scope="module")
def mod():
    spec = importlib.util.spec_from_file_location("shared_store_attainability", _PATH)
    m = importlib.util.module_from_spec(spec)
    sys.modules["shared_store_attainability"] = m
    spec.loader.exec_module(m)
    return m


@pytest.mark.parametrize("seed", [0, 1])
def test_reach_and_ceiling_equal_an_independent_count(mod, seed) -> None:
    log = simulate(SimulationConfig.preset("locomo-nearmiss", memories=120, queries=30, repeats=10), seed=seed)
    got = mod.reach(log)
    ctx = log.contexts.merge(log.steps[["step", "query_id"]], on="step")
    prop = ctx["propensity"].astype(float)
    rnd = ctx[(ctx["source"] == "exposure") & (prop < 1.0)]
    exposed = set(zip(rnd["memory_id"].astype(str), rnd["query_id"].astype(str), strict=True))
    req = log.labels[log.labels["required"].astype(bool)]
    pairs = list(zip(req["memory_id"].astype(str), req["query_id"].astype(str), strict=True))
    reached = {m for m, q in pairs if (m, q) in exposed}
    required = set(req["memory_id"].astype(str))
    assert got["reached"] == len(reached) > 0
    assert got["reached_pairs"] == sum((m, q) in exposed for m, q in pairs)
    assert got["required"] == len(required)
    np.testing.assert_allclose(got["ceiling"], 0.5 + 0.5 * len(reached) / len(required), rtol=1e-12)
    # the oracle ordering may only add to the ceiling, and the target is the best pair's + 0.05
    assert got["oracle"] >= got["ceiling"] - 1e-12
    np.testing.assert_allclose(got["needed"], got["best_pair"] + 0.05)
