"""Sparse pair statistics: ``exposure_stats(log, by="pair")`` (issue 16, sparse pair statistics)."""

from __future__ import annotations

import json
import tracemalloc
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from _pair_fixtures import scheduler_log
from _window_fixtures import rounds_steps, window_steps, write_jsonl, write_parquet

from cmp_bayes import ConfigError, read_log
from cmp_bayes.log.design import check_design
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.statistics import exposure_stats
from cmp_bayes.statistics.dataset import COUNT_VARS, SUM_VARS, WINDOW_COUNT_VARS, WINDOW_SUM_VARS


def _shared(pairs: xr.Dataset, dense: xr.Dataset) -> xr.Dataset:
    """The dense by="query" cells of the sparse Dataset's pairs, along ``pair``."""
    return dense.sel(memory=xr.DataArray(pairs["memory_id"].to_numpy(), dims="pair"),
                     query=xr.DataArray(pairs["query_id"].to_numpy(), dims="pair"))


def _assert_same_numbers(pairs: xr.Dataset, dense: xr.Dataset) -> None:
    cells = _shared(pairs, dense)
    for name in dense.data_vars:
        a, b = pairs[name].to_numpy(), cells[name].to_numpy()
        assert a.dtype == b.dtype, name
        # bit for bit: the same sums in the same order
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    np.testing.assert_array_equal(pairs["query_group"].to_numpy(), cells["query_group"].to_numpy())
    np.testing.assert_array_equal(pairs["query_steps"].to_numpy(), cells["query_steps"].to_numpy())
    assert pairs.attrs == dense.attrs


def _spec_pairs(root) -> dict[tuple[str, str], dict[str, int]]:
    """Every (memory, query) pair the spec's rules make eligible or put in a context, with the
    window arm's counts: a plain loop over the JSONL log."""
    design = json.loads((root / "design.json").read_text())
    steps = [json.loads(line) for line in (root / "steps.jsonl").read_text().splitlines()]
    life = {}
    if (root / "memories.jsonl").exists():
        for line in (root / "memories.jsonl").read_text().splitlines():
            m = json.loads(line)
            life[m["memory_id"]] = (m["created_step"], m["deleted_step"])

    def alive(m: str, t: int) -> bool:
        if not life:
            return True
        c, d = life[m]
        return c <= t and (d is None or t < d)

    B, k, j = design["slots"], design["exposure_slots"], design.get("pool_slots", 0)
    rounds = design.get("rounds") or [{"start": 0, "steps": 10**9, "pool": design.get("pool", {})}]
    out: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in steps:
        t, q = s["step"], s["query_id"]
        for c in s["context"]:
            out[(c["memory_id"], q)]["context"] += 1
        rnd = next(r for r in rounds if r["start"] <= t < r["start"] + r["steps"])
        for m in rnd["pool"]:
            if alive(m, t):
                out[(m, q)]["pool"] += 1
        if design["assignment"] != "window":
            continue
        before = {c["memory_id"] for c in s["context"] if c.get("arm") != "window"}
        lo = B - k
        window = [m for m in s["ranking"][lo : lo + design["window"]] if alive(m, t) and m not in before]
        shown = {c["memory_id"] for c in s["context"] if c.get("arm") == "window"}
        for m in window:
            cell = out[(m, q)]
            cell["window_eligible"] += 1
            cell["window_exposed"] += m in shown
            cell["window_certain"] += len(window) <= k - j
    return out


@pytest.mark.parametrize("memories_file", [True, False])
def test_pairs_match_the_dense_statistics_on_a_window_log(tmp_path, memories_file) -> None:
    design, steps, memories = window_steps(seed=1)
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories if memories_file else None))
    pairs = exposure_stats(log, by="pair")
    assert set(pairs.dims) == {"pair"}
    _assert_same_numbers(pairs, exposure_stats(log, by="query"))


def test_pairs_match_the_dense_statistics_on_rounds_and_scheduler_logs(tmp_path) -> None:
    design, steps, memories = rounds_steps(seed=2)
    log = read_log(write_jsonl(tmp_path / "rounds", design, steps, memories))
    pairs = exposure_stats(log, by="pair")
    _assert_same_numbers(pairs, exposure_stats(log, by="query"))
    # outside window designs the window arm is empty
    for name in WINDOW_COUNT_VARS + WINDOW_SUM_VARS:
        assert not pairs[name].any(), name
    root, _ = scheduler_log(tmp_path / "sched", seed=4)
    log = read_log(root)
    _assert_same_numbers(exposure_stats(log, by="pair"), exposure_stats(log, by="query"))


@pytest.mark.parametrize("which", ["window", "rounds", "scheduler"])
def test_pair_set_and_window_counts_follow_the_spec(tmp_path, which) -> None:
    if which == "window":
        root = write_jsonl(tmp_path / "log", *window_steps(seed=5))
    elif which == "rounds":
        root = write_jsonl(tmp_path / "log", *rounds_steps(seed=5))
    else:
        root, _ = scheduler_log(tmp_path / "log", seed=5)
    want = _spec_pairs(root)
    got = exposure_stats(read_log(root), by="pair")
    keys = list(zip(got["memory_id"].to_numpy(), got["query_id"].to_numpy(), strict=True))
    assert keys == sorted(want), "one pair per eligible or in-context (memory, query), sorted"
    for name in ("window_eligible", "window_exposed", "window_certain"):
        np.testing.assert_array_equal(got[name].to_numpy(), [want[key][name] for key in keys], err_msg=name)
    np.testing.assert_array_equal(got["window_control"], got["window_eligible"] - got["window_exposed"])
    if which == "scheduler":
        assert got["window_certain"].sum() > 0 and got["window_control"].sum() > 0


def _large_store_log(n_memories: int = 2000, n_queries: int = 500, seed: int = 0) -> ExposureLog:
    """A window design (B=4, k=1, j=0, W=5) over a store of 2000 memories, 500 queries of 2 steps each."""
    rng = np.random.default_rng(seed)
    mems = np.array([f"m{i:04d}" for i in range(n_memories)], dtype=object)
    B, k, W = 4, 1, 5
    T = 2 * n_queries
    query = np.repeat([f"q{i:03d}" for i in range(n_queries)], 2)
    ranking = np.array([rng.choice(n_memories, B - k + W, replace=False) for _ in range(T)])
    pick = ranking[np.arange(T), B - k + rng.integers(0, W, T)]
    ctx = pd.DataFrame({
        "step": np.repeat(np.arange(T), B),
        "slot": np.tile(np.arange(B), T),
        "memory_id": mems[np.column_stack([ranking[:, : B - k], pick])].ravel(),
        "source": np.tile(["retriever"] * (B - k) + ["exposure"], T),
        "rank": pd.array([r for _ in range(T) for r in (0, 1, 2, None)],
                         dtype="Int64"),
        "propensity": pd.array([p for _ in range(T) for p in (None, None, None, 1 / W)], dtype="Float64"),
        "arm": pd.array([a for _ in range(T) for a in (None, None, None, "window")], dtype="string"),
    })
    rk = pd.DataFrame({"step": np.repeat(np.arange(T), B - k + W), "rank": np.tile(np.arange(B - k + W), T),
                       "memory_id": mems[ranking].ravel()})
    design = check_design({"slots": B, "exposure_slots": k, "assignment": "window", "window": W, "pool_slots": 0,
                           "steps": T}, "design.json")
    steps = pd.DataFrame({"step": np.arange(T), "query_id": query, "outcome": rng.integers(0, 2, T).astype(float)})
    store = pd.DataFrame({"memory_id": mems, "created_step": 0, "deleted_step": pd.array([None] * n_memories,
                                                                                          dtype="Int64")})
    return ExposureLog(steps=coerce(steps, STEP_COLUMNS), contexts=coerce(ctx, CONTEXT_COLUMNS),
                       rankings=coerce(rk, RANKING_COLUMNS), memories=coerce(store, MEMORY_COLUMNS), design=design)


def test_pairs_stay_sparse_on_a_large_store() -> None:
    log = _large_store_log()
    n_mem, n_q = len(log.memory_ids()), len(log.query_ids())
    assert (n_mem, n_q) == (2000, 500)
    # the pairs the spec names: in a context, or in W_t (ranks 3..7, none of them in the context)
    q_of = log.steps.set_index("step")["query_id"]
    rk = log.rankings[log.rankings["rank"] >= 3]
    want = set(zip(log.contexts["memory_id"], q_of[log.contexts["step"]].to_numpy(), strict=True))
    want |= set(zip(rk["memory_id"], q_of[rk["step"]].to_numpy(), strict=True))
    tracemalloc.start()
    try:
        pairs = exposure_stats(log, by="pair")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dict(pairs.sizes) == {"pair": len(want)}
    assert set(zip(pairs["memory_id"].to_numpy(), pairs["query_id"].to_numpy(), strict=True)) == want
    # one dense memory x query array of int64 would be 8 MB; the whole computation stays below it
    dense_bytes = n_mem * n_q * 8
    assert peak < dense_bytes, (peak, dense_bytes)
    assert int(pairs["window_eligible"].sum()) == 5 * len(log.steps)
    assert int(pairs["window_exposed"].sum()) == len(log.steps)


def test_pool_eligibility_without_lifetimes_covers_every_query_of_a_pool_memory(tmp_path) -> None:
    design, steps, _ = window_steps(seed=6)
    log = read_log(write_jsonl(tmp_path / "log", design, steps, None))
    pairs = exposure_stats(log, by="pair").to_dataframe()
    for m in design["pool"]:
        assert set(pairs.loc[pairs["memory_id"] == m, "query_id"]) == {"q0", "q1", "q2", "q3"}


def test_dask_engine_gives_the_pandas_pairs(tmp_path) -> None:
    pytest.importorskip("dask")
    root = write_parquet(tmp_path / "log", *window_steps(seed=1))
    got = exposure_stats(root, by="pair")
    # the Dask engine (tests/test_pair_stats_dask.py: bit for bit on straddled parts)
    xr.testing.assert_identical(exposure_stats(root, by="pair", engine="dask", scheduler="synchronous"), got)
    with pytest.raises(ConfigError, match="by must be"):
        exposure_stats(read_log(root), by="pairs")
    # the pandas engine reads the same Parquet log to the same pairs as its JSONL twin
    jsonl = read_log(write_jsonl(tmp_path / "jsonl", *window_steps(seed=1)))
    want = exposure_stats(jsonl, by="pair")
    got.attrs.pop("log_checksum"), want.attrs.pop("log_checksum")
    xr.testing.assert_identical(got, want)


def test_variables_of_the_pair_dataset() -> None:
    log = _large_store_log(n_memories=50, n_queries=10)
    pairs = exposure_stats(log, by="pair")
    want = set(COUNT_VARS + SUM_VARS + WINDOW_COUNT_VARS + WINDOW_SUM_VARS) | {
        "rank_median", "rank_best", "propensity", "in_pool"}
    assert set(pairs.data_vars) == want
    assert set(pairs.coords) == {"memory_id", "query_id", "query_group", "query_steps"}
    for name in COUNT_VARS + WINDOW_COUNT_VARS:
        assert pairs[name].dtype == np.int64, name
