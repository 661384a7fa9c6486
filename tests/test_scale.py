"""The Dask engine of exposure_stats, the scheduler choice and the streaming generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xarray as xr
from _scale_fixtures import partitioned_log, rewrite_cell, split_parquet

from cmp_bayes.errors import ConfigError, LogError
from cmp_bayes.log.export import write_log
from cmp_bayes.log.read import log_checksum, read_log
from cmp_bayes.scale import contexts_map
from cmp_bayes.scale.cluster import dask_scheduler
from cmp_bayes.scale.generate import generate
from cmp_bayes.statistics import exposure_stats

pytest.importorskip("dask")


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[bool, float], Path]:
    """Partitioned logs: (contexts aligned with steps parts?, churn) -> directory."""
    tmp = tmp_path_factory.mktemp("scale")
    return {
        (aligned, churn): partitioned_log(tmp, seed=1, n_parts=4, aligned=aligned, churn=churn)
        for aligned in (True, False)
        for churn in (0.0, 0.3)
    }


@pytest.mark.parametrize("by", [None, "query", "group"])
@pytest.mark.parametrize("key", [(True, 0.0), (True, 0.3), (False, 0.0), (False, 0.3)])
def test_dask_identical_to_pandas(logs, key, by):
    # outcomes are multiples of 1/64 (see simulated_log), so every sum is exact in
    # any order and the two engines must agree bit for bit
    path = logs[key]
    want = exposure_stats(read_log(path), by=by)
    got = exposure_stats(path, by=by, engine="dask")
    xr.testing.assert_identical(got, want)
    assert got.attrs["log_checksum"] == log_checksum(path)
    if key[1] > 0:  # the fixture really has lifetimes and rankings
        assert (want["in_store"] < want.attrs["n_steps"]).any()
    assert (want["ranked"] > 0).any()


def test_fractional_sums_agree_to_rounding(tmp_path):
    # arbitrary floats: only the order of addition differs between the engines.
    # Each sum of n terms in [0, 1] carries a rounding error below n * eps * (sum of
    # |terms|) <= n^2 eps in either order (Higham, eq. 4.4 bound), here n <= 72 steps:
    # 72^2 * 2.2e-16 ~ 1.2e-12 absolute; 1e-11 leaves a factor ~8 for the control
    # arm, a difference of two such sums.
    from _scale_fixtures import simulated_log

    log = simulated_log(2, churn=0.3)
    log.steps["outcome"] = np.random.default_rng(0).random(len(log.steps))
    single = write_log(log, tmp_path / "single", format="parquet")
    path = split_parquet(single, tmp_path / "parts", 3)
    want = exposure_stats(read_log(path))
    got = exposure_stats(path, engine="dask")
    for var in want.data_vars:
        np.testing.assert_allclose(got[var].values, want[var].values, rtol=0, atol=1e-11, err_msg=var)
    assert got.attrs == want.attrs


def test_aligned_parts_read_one_steps_part(logs, monkeypatch):
    # the memory bound: a contexts part of a step-range partitioned log joins with
    # the steps parts that overlap it, not with the whole steps table
    reads: list[str] = []
    real = contexts_map.read_part

    def spy(file, columns=None, filters=None):
        if filters is not None:
            reads.append(Path(file).name)
        return real(file, columns, filters)

    monkeypatch.setattr(contexts_map, "read_part", spy)
    exposure_stats(logs[(True, 0.0)], engine="dask", scheduler="synchronous")
    assert sorted(reads) == [f"part-{i:03d}.parquet" for i in range(4)]


def test_local_cluster_by_address(logs):
    distributed = pytest.importorskip("distributed")
    path = logs[(True, 0.3)]
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://")
        before = cluster.scheduler.transition_counter
        got = exposure_stats(path, by="query", engine="dask", scheduler=address)
        # the map and reduce tasks went through that scheduler: at least one
        # transition per task (4 steps + 4 contexts parts + 2 reduces + inputs)
        assert cluster.scheduler.transition_counter - before >= 10
    xr.testing.assert_identical(got, exposure_stats(read_log(path), by="query"))


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    ("table", "column", "row", "value", "field", "words"),
    [
        ("steps", "outcome", 3, 1.5, "outcome", "in [0, 1]"),
        ("contexts", "source", 2, "oracle", "source", "unknown source"),
        ("contexts", "propensity", None, 0.123, "propensity", "disagrees"),
        ("contexts", "memory_id", 0, "m-unknown", "memory_id", "not in memories"),  # a retriever slot
    ],
)
def test_errors_name_part_and_row(logs, tmp_path, table, column, row, value, field, words):
    path = _copy(logs[(True, 0.3)], tmp_path / "log")
    file = path / table / "part-002.parquet"
    if row is None:  # the first exposure slot of the part
        src = pq.read_table(file)["source"].to_pylist()
        row = src.index("exposure")
    rewrite_cell(file, column, row, value)
    with pytest.raises(LogError) as err:
        exposure_stats(path, engine="dask")
    e = err.value
    assert Path(e.file).name == "part-002.parquet" and Path(e.file).parent.name == table
    assert e.row == row
    assert field in (e.field or "")
    assert words in e.message


def test_duplicate_in_step_and_steps_order(logs, tmp_path):
    path = _copy(logs[(True, 0.0)], tmp_path / "dup")
    file = path / "contexts" / "part-001.parquet"
    t = pq.read_table(file)
    mids = t["memory_id"].to_pylist()
    mids[1] = mids[0]  # rows 0 and 1 are slots of the same step
    pq.write_table(t.set_column(1, "memory_id", pa.array(mids, pa.string())), file)
    with pytest.raises(LogError, match="appears twice") as err:
        exposure_stats(path, engine="dask")
    assert err.value.row == 1 and Path(err.value.file).name == "part-001.parquet"

    path = _copy(logs[(True, 0.0)], tmp_path / "order")
    # swap two steps parts: the second file now starts before the first ends
    a, b = path / "steps" / "part-000.parquet", path / "steps" / "part-001.parquet"
    tmp = a.with_suffix(".x")
    a.rename(tmp), b.rename(a), tmp.rename(b)
    with pytest.raises(LogError, match="backwards") as err:
        exposure_stats(path, engine="dask")
    assert Path(err.value.file).name == "part-001.parquet"


def test_config_errors(logs, tmp_path):
    log = read_log(logs[(True, 0.0)])
    with pytest.raises(ConfigError, match="path"):
        exposure_stats(log, engine="dask")
    with pytest.raises(ConfigError, match="engine"):
        exposure_stats(log, engine="spark")
    with pytest.raises(ConfigError, match="scheduler"):
        exposure_stats(log, scheduler="threads")
    with pytest.raises(ConfigError, match="scheduler"):
        exposure_stats(logs[(True, 0.0)], engine="dask", scheduler="not-a-scheduler")
    jsonl = write_log(log, tmp_path / "jsonl")
    with pytest.raises(ConfigError, match="JSONL"):
        exposure_stats(jsonl, engine="dask")
    with pytest.raises(ConfigError, match="cannot connect"), dask_scheduler("tcp://127.0.0.1:9", timeout=1):
        pass


def test_generate_streams_a_valid_balanced_log(tmp_path):
    kw = dict(memories=300, steps=1001, slots=6, exposure_slots=2, rows_per_part=1200, seed=5, ranking_depth=8)
    path = generate(tmp_path / "g", **kw)
    # 1200 rows per part = 200 steps per part: ceil(1001 / 200) = 6 parts of each table
    assert len(list((path / "steps").glob("*.parquet"))) == 6
    assert len(list((path / "contexts").glob("*.parquet"))) == 6
    log = read_log(path)  # the full reader's validation accepts it
    assert len(log.steps) == 1001 and len(log.contexts) == 1001 * 6
    ds = exposure_stats(path, engine="dask")
    xr.testing.assert_identical(ds, exposure_stats(log))
    pool = ds["in_pool"].values
    n = ds["exposed"].values[pool]
    expected = 1001 * 2 / pool.sum()  # balanced: floor or ceil of T k / |pool| each
    assert n.min() >= np.floor(expected) and n.max() <= np.ceil(expected)
    assert int(n.sum()) == 1001 * 2  # every exposure slot went to a design pool memory
    np.testing.assert_array_equal(ds["propensity"].values[pool] * 1001, n)
    assert (ds["retrieved"].values[pool] == 0).all()  # exposures never collide with retrieval
    # same seed, same bytes; another seed, another log
    again = generate(tmp_path / "g2", **kw)
    assert log_checksum(again) == log_checksum(path)
    other = generate(tmp_path / "g3", **{**kw, "seed": 6})
    assert log_checksum(other) != log_checksum(path)


def test_fit_statistics_match_memory_inputs(logs):
    from cmp_bayes.model.fit import memory_inputs
    from cmp_bayes.scale.dask_stats import fit_statistics

    path = logs[(True, 0.3)]
    stats, group, _ = memory_inputs(read_log(path))
    got = fit_statistics(path)
    assert group is not None  # the fixture has 3 groups
    np.testing.assert_array_equal(got["memory_group"].values, group)
    xr.testing.assert_identical(got.drop_vars("memory_group").assign_attrs(log_path=""),
                                stats.assign_attrs(log_path=""))


def test_one_named_group_gives_no_main_group_with_either_engine(tmp_path):
    # one named group and some ungrouped steps: nothing to pool by, whichever engine
    # computed the statistics (the Dask path used to count "" as a second group)
    from _scale_fixtures import simulated_log

    from cmp_bayes.model.fit import memory_inputs
    from cmp_bayes.scale.dask_stats import fit_statistics

    log = simulated_log(4)
    log.steps["group"] = pd.Series(["g"] * len(log.steps), dtype="string")
    log.steps.loc[[0, 5, 9], "group"] = None
    single = write_log(log, tmp_path / "single", format="parquet")
    path = split_parquet(single, tmp_path / "parts", 3)
    stats, group, _ = memory_inputs(read_log(path))
    got = fit_statistics(path)
    assert group is None
    assert "memory_group" not in got
    assert exposure_stats(path, by="group", engine="dask").sizes["group"] == 2  # "" and "g"
    xr.testing.assert_identical(got.assign_attrs(log_path=""), stats.assign_attrs(log_path=""))


def test_first_part_error_whatever_runs_first(logs, tmp_path):
    # two broken contexts parts: the error reported is the first part file's, with any
    # scheduler (the map tasks return their errors; the reduce keeps the first)
    path = _copy(logs[(True, 0.0)], tmp_path / "two")
    rewrite_cell(path / "contexts" / "part-003.parquet", "source", 0, "oracle")
    rewrite_cell(path / "contexts" / "part-001.parquet", "rank", 0, -5)
    for scheduler in ("synchronous", "threads", "synchronous"):
        with pytest.raises(LogError) as err:
            exposure_stats(path, engine="dask", scheduler=scheduler)
        assert Path(err.value.file).name == "part-001.parquet" and err.value.row == 0
        assert "rank" in err.value.field
    # a broken steps part wins over broken contexts parts, as in the pandas reader
    rewrite_cell(path / "steps" / "part-002.parquet", "outcome", 1, -1.0)
    with pytest.raises(LogError) as err:
        exposure_stats(path, engine="dask")
    assert Path(err.value.file).parent.name == "steps" and err.value.row == 1


def test_contexts_out_of_step_order(logs, tmp_path):
    # a part whose slots are not in step order: the per-step rules and the join still hold
    # (rows keep their order within a step, so slot numbers are unchanged)
    path = _copy(logs[(True, 0.3)], tmp_path / "shuffled")
    file = path / "contexts" / "part-002.parquet"
    t = pq.read_table(file)
    step = t["step"].to_numpy()
    order = np.lexsort((np.arange(len(step)), -step))  # steps descending, slots in order
    pq.write_table(t.take(pa.array(order)), file)
    want = exposure_stats(logs[(True, 0.3)], by="query")
    xr.testing.assert_identical(exposure_stats(path, by="query", engine="dask"), want.assign_attrs(
        log_checksum=log_checksum(path)))
    xr.testing.assert_identical(exposure_stats(read_log(path), by="query"), want.assign_attrs(
        log_checksum=log_checksum(path)))
