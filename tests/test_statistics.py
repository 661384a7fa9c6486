"""exposure_stats against a naive per-step loop, and identification_status."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _scale_fixtures import split_parquet
from _stats_fixtures import random_log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.diagnostics.positivity import identification_status
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.statistics import COUNT_VARS, SUM_VARS, exposure_stats


def naive_stats(log: ExposureLog, by: str | None) -> dict[tuple[str, str], dict[str, float]]:
    """Per (memory, cell) statistics by walking the steps one at a time."""
    mem = list(log.memory_ids())
    life = {}
    if log.memories is not None:
        for r in log.memories.itertuples():
            life[r.memory_id] = (
                r.created_step,
                None if pd.isna(r.deleted_step) else r.deleted_step,
            )
    ctx = {s: g for s, g in log.contexts.groupby("step")}
    rk = (
        {}
        if log.rankings is None
        else {s: list(g["memory_id"]) for s, g in log.rankings.groupby("step")}
    )
    out: dict[tuple[str, str], dict[str, float]] = {}
    ranks: dict[tuple[str, str], list[int]] = {}
    for st_ in log.steps.itertuples():
        if by is None:
            cell = ""
        elif by == "query":
            cell = st_.query_id
        else:
            cell = "" if pd.isna(st_.group) else st_.group
        c = ctx.get(st_.step)
        sources = {} if c is None else dict(zip(c["memory_id"], c["source"], strict=True))
        y = st_.outcome
        for m in mem:
            d = out.setdefault((m, cell), dict.fromkeys(COUNT_VARS + SUM_VARS, 0.0))
            cr, de = life.get(m, (None, None))
            in_store = (cr is None or cr <= st_.step) and (de is None or st_.step < de)
            src = sources.get(m)
            if in_store:
                d["in_store"] += 1
                if src is None:
                    d["control"] += 1
                    d["control_outcome_sum"] += y
                    d["control_outcome_sumsq"] += y * y
            if src == "retriever":
                d["retrieved"] += 1
                d["retrieved_outcome_sum"] += y
                d["retrieved_outcome_sumsq"] += y * y
            elif src == "exposure":
                d["exposed"] += 1
                d["exposed_outcome_sum"] += y
                d["exposed_outcome_sumsq"] += y * y
            ranking = rk.get(st_.step, [])
            if m in ranking:
                d["ranked"] += 1
                ranks.setdefault((m, cell), []).append(ranking.index(m))
    for key, d in out.items():
        d["rank_median"] = float(np.median(ranks[key])) if key in ranks else np.nan
        d["rank_best"] = float(min(ranks[key])) if key in ranks else np.nan
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    n_steps=st.integers(1, 14),
    n_memories=st.integers(1, 6),
    n_queries=st.integers(1, 4),
    lifetimes=st.booleans(),
    rankings=st.booleans(),
    groups=st.booleans(),
    binary=st.booleans(),
)
def test_matches_naive_loop(
    seed, n_steps, n_memories, n_queries, lifetimes, rankings, groups, binary
):
    log = random_log(seed, n_steps, n_memories, n_queries, lifetimes, rankings, groups, binary)
    for by in (None, "query", "group"):
        ds = exposure_stats(log, by=by)
        ref = naive_stats(log, by)
        assert list(ds["memory"].values) == list(log.memory_ids())
        for (m, cell), d in ref.items():
            sel = {"memory": m} if by is None else {"memory": m, by: cell}
            for var, want in d.items():
                got = float(ds[var].sel(sel))
                if np.isnan(want):
                    assert np.isnan(got), (by, m, cell, var)
                else:
                    assert got == pytest.approx(want, abs=1e-9), (by, m, cell, var, got, want)
        # the cells cover exactly the cells the loop visited
        n_cells = 1 if by is None else ds.sizes[by]
        assert len(ref) == ds.sizes["memory"] * n_cells
        for var in COUNT_VARS:
            assert ds[var].dtype == np.int64
        assert ds.attrs["outcome_kind"] == ("binary" if binary else ds.attrs["outcome_kind"])
        if not binary:
            y = log.steps["outcome"].to_numpy()
            want_kind = "binary" if np.all((y == 0) | (y == 1)) else "fractional"
            assert ds.attrs["outcome_kind"] == want_kind
        assert ds.attrs["n_steps"] == n_steps
        pool = (log.design or {}).get("pool", {})
        for m in ds["memory"].values:
            assert bool(ds["in_pool"].sel(memory=m)) == (m in pool)
            p = float(ds["propensity"].sel(memory=m))
            assert (p == pool[m]) if m in pool else np.isnan(p)


def test_query_coords_and_group_sums():
    log = random_log(3, 30, 5, 4, lifetimes=True, rankings=True, groups=True, binary=False)
    dq = exposure_stats(log, by="query")
    steps = log.steps
    for q in dq["query"].values:
        rows = steps[steps["query_id"] == q]
        assert int(dq["query_steps"].sel(query=q)) == len(rows)
        g = rows["group"].iloc[0]
        assert dq["query_group"].sel(query=q).item() == ("" if pd.isna(g) else g)
    # summing the per-group (and per-query) counts and sums gives the memory-level ones
    d0 = exposure_stats(log)
    for dim, ds in (("query", dq), ("group", exposure_stats(log, by="group"))):
        for var in ("in_store", "retrieved", "exposed", "control", "ranked", *SUM_VARS):
            np.testing.assert_allclose(ds[var].sum(dim).values, d0[var].values, atol=1e-9)


def test_identification_status_rules():
    log = random_log(11, 40, 6, 3, lifetimes=False, rankings=False, groups=False, binary=True)
    for by in (None, "query"):
        ds = exposure_stats(log, by=by)
        status = identification_status(ds)
        assert status.dims == ds["exposed"].dims
        e, r, s = ds["exposed"].values, ds["retrieved"].values, status.values
        assert np.all((s == IDENTIFIED) == (e >= 1))
        assert np.all((s == RETRIEVED_ONLY) == ((e == 0) & (r >= 1)))
        assert np.all((s == UNIDENTIFIED) == ((e == 0) & (r == 0)))


def test_bad_by_is_config_error():
    from cmp_bayes.errors import ConfigError

    log = random_log(0, 3, 2, 1, False, False, False, True)
    with pytest.raises(ConfigError):
        exposure_stats(log, by="memory")


def _without_checksum(ds):
    return ds.assign_attrs(log_checksum="")


@pytest.mark.parametrize(("seed", "rankings"), [(1, True), (2, False), (3, True)])
def test_read_parquet_parts_gives_the_same_statistics(tmp_path, seed, rankings):
    # the reader's dictionary codes (one dictionary per part file, merged) must give
    # exactly the statistics of the same log held in memory (codes from the strings);
    # lifetimes are covered by the scale tests (random_log's contexts ignore them)
    import xarray as xr

    from cmp_bayes.log.export import write_log
    from cmp_bayes.log.read import read_log

    log = random_log(seed, 30, 6, 3, False, rankings, True, False)
    pool = (log.design or {}).get("pool", {})
    log.design = {"slots": 6, "exposure_slots": 6, "assignment": "balanced", "steps": 30, "pool": pool}
    single = write_log(log, tmp_path / "single", format="parquet")
    back = read_log(split_parquet(single, tmp_path / "parts", 2, aligned=False))
    for by in (None, "query", "group"):
        xr.testing.assert_identical(_without_checksum(exposure_stats(back, by=by)), exposure_stats(log, by=by))


def test_edited_log_is_recounted():
    # ids are hashed once per column and remembered; editing the column must not reuse them
    log = random_log(7, 20, 5, 3, lifetimes=False, rankings=False, groups=False, binary=True)
    before = exposure_stats(log)
    ctx = log.contexts
    retr = np.flatnonzero((ctx["source"] == "retriever").to_numpy())
    ctx.loc[int(retr[0]), "memory_id"] = "m-new"  # a memory no other row names
    after = exposure_stats(log)
    assert "m-new" in list(after["memory"].values) and "m-new" not in list(before["memory"].values)
    assert int(after["retrieved"].sel(memory="m-new")) == 1
    ref = naive_stats(log, None)
    for (m, _), d in ref.items():
        assert int(after["retrieved"].sel(memory=m)) == d["retrieved"], m


def test_statistics_do_not_start_dask(tmp_path) -> None:
    # xarray imports dask (a second per process) on its first duck-array check where dask
    # is installed; the pandas engine builds its Dataset without that check. The log is
    # built here and pickled, so the fresh interpreter needs nothing from tests/.
    import pickle
    import subprocess
    import sys

    path = tmp_path / "log.pkl"
    path.write_bytes(pickle.dumps(random_log(1, 8, 4, 2, True, True, True, False)))
    code = (
        "import pickle, sys;"
        f"log = pickle.loads(open({str(path)!r}, 'rb').read());"
        "from cmp_bayes.statistics import exposure_stats;"
        "[exposure_stats(log, by=b) for b in (None, 'query', 'group')];"
        "print('dask' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- a memory's main group


def _by_group(in_store: list[list[int]], groups: list[str]):
    import xarray as xr

    memory = [f"m{i}" for i in range(len(in_store))]
    return xr.Dataset(
        {"in_store": (("memory", "group"), np.asarray(in_store, dtype=np.int64))},
        coords={"memory": memory, "group": groups},
    )


def test_main_group_is_the_group_most_in_store():
    from cmp_bayes.statistics.groups import main_group

    got = main_group(_by_group([[1, 5, 2], [4, 4, 0], [9, 0, 1]], ["", "a", "b"]))
    # ties go to the first group in sorted order; the ungrouped steps ("") can win
    np.testing.assert_array_equal(got, np.array(["a", "", ""]))
    assert got.dtype.kind == "U"


@pytest.mark.parametrize("groups", [["", "a"], ["a"], [""]])
def test_main_group_needs_two_named_groups(groups):
    from cmp_bayes.statistics.groups import is_grouped, main_group

    assert not is_grouped(groups)
    assert main_group(_by_group([[1] * len(groups)], groups)) is None
    assert is_grouped(["", "a", "b"]) and is_grouped(["a", "b"])


def test_memory_inputs_main_group_is_main_group_of_the_stats():
    from _scale_fixtures import simulated_log

    from cmp_bayes.model.fit import memory_inputs
    from cmp_bayes.statistics.groups import main_group

    log = simulated_log(3)  # three groups and one ungrouped step
    _, group, _ = memory_inputs(log)
    by_group = exposure_stats(log, by="group")
    np.testing.assert_array_equal(group, main_group(by_group))
    want = by_group["group"].values[by_group["in_store"].values.argmax(axis=1)]
    np.testing.assert_array_equal(group, want.astype(str))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1), n=st.integers(0, 300), n_major=st.integers(1, 40),
    low=st.integers(-5, 5), span=st.integers(1, 50),
)
def test_sorted_pairs_is_the_lexsort_of_both_keys(seed, n, n_major, low, span):
    from cmp_bayes.statistics.kernels import grouped_median_min, sorted_pairs

    rng = np.random.default_rng(seed)
    major = rng.integers(0, n_major, n)
    minor = rng.integers(low, low + span, n)
    order = np.lexsort((minor, major))
    got = sorted_pairs(major, minor, n_major)
    assert got is not None
    np.testing.assert_array_equal(got[0], major[order])
    np.testing.assert_array_equal(got[1], minor[order])
    # past an int64 the packed key does not fit: None, and grouped_median_min lexsorts
    assert n == 0 or sorted_pairs(major, minor, 2**62) is None
    assert sorted_pairs(major, minor.astype(np.float64), n_major) is None
    med, best = grouped_median_min(major, minor, n_major)
    for k in range(n_major):
        vals = minor[major == k]
        if vals.size:
            assert med[k] == np.median(vals) and best[k] == vals.min()
        else:
            assert np.isnan(med[k]) and np.isnan(best[k])
