"""The budget-curve benchmark's core (benchmarks/budget_curves.py) on a tiny configuration."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "budget_curves.py"


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location("budget_curves", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["budget_curves"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table(bc) -> pd.DataFrame:
    designs = (bc.Design("uniform"), bc.Design("window W=10 j=1", 10, 1), bc.Design("window W=10 j=0", 10, 0))
    return bc.budget_curves(base="tiny", size={"repeats": 5}, ladder=(1, 2), designs=designs, seeds=(0, 1))


def test_table_shape(bc, table: pd.DataFrame) -> None:
    assert list(table.columns) == list(bc.COLUMNS)
    assert len(table) == 3 * 2 * 2
    assert sorted(table["steps_per_question"].unique()) == [5, 10]
    assert table.groupby(["design", "multiple"]).size().eq(2).all()
    # uniform logs have no window arm; window designs take some pairs from it
    assert (table.loc[table["design"] == "uniform", "pairs_window"] == 0).all()
    assert table.loc[table["design"] == "uniform", "auc_pair_window_only"].isna().all()
    assert (table.loc[table["design"] != "uniform", "pairs_window"] > 0).all()
    # one world per seed: the useless set does not move with the design
    assert table.groupby(["seed", "multiple"])["useless"].nunique().eq(1).all()


def test_values_in_range(table: pd.DataFrame) -> None:
    aucs = [c for c in table.columns if c.startswith("auc_")]
    shares = ["forgettable_share", "required_forgotten_share", "pairs_scored", "required_pairs_scored",
              "pairs_window"]
    for col in aucs + shares:
        v = table[col].to_numpy(dtype=float)
        fin = v[np.isfinite(v)]
        assert ((fin >= 0) & (fin <= 1)).all(), col
    # the uniform design always scores some pairs and memories
    uni = table[table["design"] == "uniform"]
    assert np.isfinite(uni[["auc_pair", "auc_memory_hajek", "auc_best_rank"]].to_numpy(float)).all()
    assert np.isfinite(table["forgettable_share"].to_numpy(float)).all()
    # without pool slots a window design has no memory-level randomized exposure: nothing is forgettable
    assert (table.loc[table["design"] == "window W=10 j=0", "forgettable_share"] == 0).all()


def test_pair_table_prefers_finite_window_rows(bc) -> None:
    t = pd.DataFrame({
        "memory_id": ["a", "a", "b", "b", "c"], "query_id": ["q", "q", "q", "q", "q"],
        "arm": ["pool", "window", "pool", "window", "pool"], "status": ["identified"] * 5,
        "estimate": [0.1, 0.4, 0.2, np.nan, 0.3],
    })
    out = bc.pair_table(t).set_index("memory_id")
    assert out.loc["a", "arm"] == "window" and out.loc["a", "estimate"] == 0.4
    assert out.loc["b", "arm"] == "pool" and out.loc["b", "estimate"] == 0.2
    assert out.loc["c", "arm"] == "pool"
