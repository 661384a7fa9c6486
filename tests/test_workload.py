"""The workload value E_q[rho(m, q) tau(m, q)] over a query mix (decision/workload.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from cmp_bayes.cli.main import main
from cmp_bayes.constants import IDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.rule import decide
from cmp_bayes.decision.workload import log_mix, read_mix, workload_draws
from cmp_bayes.errors import ConfigError, PosteriorError
from cmp_bayes.testing import synthetic_posterior

STEPS = {"q0": 10, "q1": 20, "q2": 30, "q3": 40}


def _memories() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "memory_id": ["a", "b", "c"],
            "status": [IDENTIFIED] * 3,
            "exposed": [6, 6, 6],
            "retrieved": [2, 2, 2],
            "in_store": [100, 100, 100],
            "p_useful": [0.9, 0.5, 0.05],
            "rho_mean": [0.3, 0.2, 0.1],
        }
    )


def _pairs(with_rho: bool) -> pd.DataFrame:
    pairs = pd.DataFrame(
        {
            "memory_id": ["a", "a", "b", "c", "c", "c"],
            "query_id": ["q0", "q3", "q1", "q0", "q1", "q2"],
            "relevance": [0.9, 0.6, 0.5, 0.3, 0.7, 0.2],
            "rho_mean": [0.5, 0.4, 0.3, 0.2, 0.1, 0.6],
        }
    )
    return pairs if with_rho else pairs.drop(columns="rho_mean")


def _gated(with_rho: bool = True) -> xr.DataTree:
    return synthetic_posterior(_memories(), pair_model="gated", pairs=_pairs(with_rho),
                               query_steps=STEPS, draws=100, seed=5)


def _by_hand(dt: xr.DataTree, weights: dict[str, float], pair_rho: bool) -> np.ndarray:
    """A plain loop over draws, memories and queries: sum_q w_q rho(m, q) tau(m, q)."""
    post = dt["posterior"]
    tau = post["tau"].values
    mids = list(post["tau"]["memory_id"].values)
    qids = list(post["tau"]["query_id"].values)
    memories = list(post["memory"].values)
    total = sum(weights.values())
    c, d, _ = tau.shape
    out = np.zeros((c, d, len(memories)))
    for i in range(c):
        for j in range(d):
            for k, m in enumerate(memories):
                for q, w in weights.items():
                    for p in range(len(mids)):
                        if mids[p] == m and qids[p] == q:
                            rho = post["rho"].values[i, j, p] if pair_rho else post["rho_memory"].values[i, j, k]
                            out[i, j, k] += w / total * rho * tau[i, j, p]
    return out


def test_the_log_mix_weights_queries_by_their_steps() -> None:
    mix = log_mix(_gated())
    assert mix.to_dict() == pytest.approx({"q0": 0.1, "q1": 0.2, "q2": 0.3, "q3": 0.4})


def test_workload_equals_a_hand_computation_on_3_memories_and_4_queries() -> None:
    dt = _gated(with_rho=True)
    value = workload_draws(dt)
    assert value.dims == ("chain", "draw", "memory") and list(value["memory"].values) == ["a", "b", "c"]
    np.testing.assert_allclose(value.values, _by_hand(dt, STEPS, pair_rho=True), rtol=0, atol=1e-12)
    # and it is not the memory-level utility (a mean over the log's queries of tau times rho_memory)
    assert not np.allclose(value.values, dt["posterior"]["utility_memory"].values)
    # decide reads the same draws: P(V > threshold) and E[V] per memory
    threshold = 0.01
    table = decide(dt, Costs(estimand="workload", threshold=threshold)).table.set_index("memory_id")
    hand = _by_hand(dt, STEPS, pair_rho=True)
    np.testing.assert_allclose(table["p_useful"].to_numpy(), (hand > threshold).mean(axis=(0, 1)))
    np.testing.assert_allclose(table["expected_value"].to_numpy(), hand.mean(axis=(0, 1)), atol=1e-12)


def test_a_user_mix_replaces_the_logs_and_unknown_queries_count_zero() -> None:
    dt = _gated(with_rho=True)
    user = {"q3": 1.0, "q1": 3.0, "q9": 4.0}  # q9: no posterior pair, contributes 0 but weighs
    np.testing.assert_allclose(workload_draws(dt, read_mix(user)).values,
                               _by_hand(dt, user, pair_rho=True), atol=1e-12)
    # memory c has no pair under q3 or q9: only its q1 pair counts, at weight 3/8
    value = workload_draws(dt, read_mix({"q3": 1.0}))
    assert np.all(value.sel(memory="b").values == 0) and np.all(value.sel(memory="c").values == 0)
    table = decide(dt, Costs(estimand="workload", threshold=0.01), workload=user).table
    assert list(table["memory_id"]) == ["a", "b", "c"]


def test_without_pair_rho_the_memory_rho_is_used() -> None:
    dt = _gated(with_rho=False)
    assert "rho" not in dt["posterior"]
    np.testing.assert_allclose(workload_draws(dt).values, _by_hand(dt, STEPS, pair_rho=False), atol=1e-12)


def test_per_query_posterior_by_hand() -> None:
    dt = synthetic_posterior(n_memories=3, per_query=True, n_queries=4, draws=20, seed=2)
    weights = {"q0": 1.0, "q1": 0.0, "q2": 2.0, "q3": 1.0, "zz": 4.0}
    post = dt["posterior"]
    rho, tau = post["rho"].values, post["tau"].values  # (chain, draw, memory, query)
    w = np.array([1.0, 0.0, 2.0, 1.0]) / 8.0
    hand = (rho * tau * w).sum(axis=-1)
    np.testing.assert_allclose(workload_draws(dt, read_mix(weights)).values, hand, atol=1e-12)
    # the log's mix: in_store per query (the synthetic arms split evenly over queries)
    assert log_mix(dt).sum() == pytest.approx(1.0)


def test_errors() -> None:
    with pytest.raises(PosteriorError, match="memory-level posterior.*utility"):
        decide(synthetic_posterior(n_memories=3), Costs(estimand="workload"))
    with pytest.raises(ConfigError, match="for estimand 'workload' only"):
        decide(_gated(), Costs(estimand="tau"), workload={"q0": 1.0})
    with pytest.raises(ConfigError, match="finite number >= 0"):
        read_mix({"q0": -1.0})
    with pytest.raises(ConfigError, match="sum to 0"):
        read_mix({"q0": 0.0})
    gated = _gated()
    obs = gated["observed_data"].to_dataset().drop_vars("query_steps").drop_dims("query")
    gated["observed_data"] = xr.DataTree(obs)
    with pytest.raises(PosteriorError, match="pass the query mix"):
        workload_draws(gated)


def test_workload_csv(tmp_path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("query_id,weight\nq0,1\nq2,3\n", encoding="utf-8")
    assert read_mix(path).to_dict() == {"q0": 0.25, "q2": 0.75}
    bad = tmp_path / "bad.csv"
    bad.write_text("query,weight\nq0,1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="lacks column"):
        read_mix(bad)
    dup = tmp_path / "dup.csv"
    dup.write_text("query_id,weight\nq0,1\nq0,2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="more than once"):
        read_mix(dup)
    nan = tmp_path / "nan.csv"
    nan.write_text("query_id,weight\nq0,x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="q0"):
        read_mix(nan)


def test_cli_workload(tmp_path, capsys) -> None:
    dt = synthetic_posterior(n_memories=4, per_query=True, n_queries=3, seed=1)
    path = tmp_path / "pq.nc"
    dt.to_netcdf(path, engine="h5netcdf")
    mix = tmp_path / "mix.csv"
    mix.write_text("query_id,weight\nq0,1\nq2,1\n", encoding="utf-8")
    out = tmp_path / "d.csv"
    args = ["decide", str(path), "--estimand", "workload", "--threshold", "0.001", "--workload", str(mix)]
    assert main([*args, "-o", str(out)]) == 0
    table = pd.read_csv(out)
    expected = decide(dt, Costs(estimand="workload", threshold=0.001), workload=mix).table
    np.testing.assert_allclose(table["p_useful"], expected["p_useful"])
    capsys.readouterr()
    assert main(["decide", str(path), "--workload", str(mix)]) == 2
    assert "workload" in capsys.readouterr().err


def test_a_bad_weight_in_a_csv_names_its_line(tmp_path) -> None:
    import pytest

    from cmp_bayes.decision.workload import read_mix
    from cmp_bayes.errors import ConfigError

    f = tmp_path / "mix.csv"
    f.write_text("query_id,weight\nq0,1\nq1,abc\n")
    with pytest.raises(ConfigError, match=r"mix\.csv, line 3: weight of query 'q1'"):
        read_mix(f)
