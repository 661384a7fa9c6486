"""``exposure_stats(path, by="pair", engine="dask")``: the pandas engine's pairs, bit for bit (issue 16, item 3).

Every log is written as partitioned Parquet whose contexts part files are cut
inside a step (that step's slots straddle two files) and do not line up with
the steps part files, so each steps part's map must gather its steps' rows
from several contexts parts. Outcomes include arbitrary fractions (the
``fractional`` preset, a window design with fractional outcomes): there
per-part partial sums added together differ from the pandas engine in the
last bits, so only the ordered fold is identical.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import xarray as xr
from _scale_fixtures import rewrite_cell
from _window_fixtures import rounds_steps, window_steps, write_parquet

from cmp_bayes.errors import ConfigError, LogError
from cmp_bayes.log.export import write_log
from cmp_bayes.log.read import read_log
from cmp_bayes.simulation.simulator import SimulationConfig, simulate
from cmp_bayes.statistics import exposure_stats

pytest.importorskip("dask")

#: simulated logs: name -> (preset, overrides); small, so the whole file stays a few seconds
LOGS: dict[str, tuple[str, dict]] = {
    "shared-balanced": ("locomo-like", {"memories": 60, "queries": 12, "repeats": 4}),
    "window": ("locomo-window", {"memories": 60, "queries": 12, "repeats": 4}),
    "window-fractional": ("locomo-window", {"memories": 40, "queries": 6, "repeats": 6, "outcomes": "fractional"}),
    "churn": ("churn", {"memories": 40, "queries": 8, "repeats": 6}),
    "fractional": ("fractional", {}),
}


def straddled_parts(src: Path, dst: Path, step_parts: int = 3, ctx_parts: int = 4, memories: bool = True) -> Path:
    """Rewrite a single-file Parquet log as ``steps/`` and ``contexts/`` part folders.

    The contexts are cut one row after each of ``ctx_parts - 1`` even cuts, so
    each cut falls inside a step (its slots straddle two part files), and their
    number differs from the steps parts'. ``memories=False`` leaves the
    memories file out (no lifetimes: the in-store sums are whole-query sums).
    """
    dst.mkdir(parents=True)
    shutil.copy(src / "design.json", dst / "design.json")
    if memories and (src / "memories.parquet").exists():
        shutil.copy(src / "memories.parquet", dst / "memories.parquet")
    steps, ctx = pq.read_table(src / "steps.parquet"), pq.read_table(src / "contexts.parquet")
    (dst / "steps").mkdir()
    (dst / "contexts").mkdir()
    cut = np.linspace(0, steps.num_rows, step_parts + 1).astype(int)
    for i in range(step_parts):
        pq.write_table(steps.slice(cut[i], cut[i + 1] - cut[i]), dst / "steps" / f"part-{i:03d}.parquet",
                       row_group_size=5)
    cstep = ctx["step"].to_numpy()
    inner = np.linspace(0, ctx.num_rows, ctx_parts + 1).astype(int)[1:-1] + 1
    assert (cstep[inner - 1] == cstep[inner]).all(), "every contexts cut falls inside a step"
    ccut = np.r_[0, inner, ctx.num_rows]
    for i in range(ctx_parts):
        pq.write_table(ctx.slice(ccut[i], ccut[i + 1] - ccut[i]), dst / "contexts" / f"part-{i:03d}.parquet")
    return dst


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each of LOGS simulated, written in Parquet form and cut into straddled parts; plus the
    fractional log without its memories file."""
    tmp = tmp_path_factory.mktemp("pairs-dask")
    out = {}
    for name, (preset, kw) in LOGS.items():
        log = simulate(SimulationConfig.preset(preset, **kw), seed=3)
        single = write_log(log, tmp / f"single-{name}", format="parquet")
        out[name] = straddled_parts(single, tmp / name)
        if name == "fractional":
            out["fractional-no-memories"] = straddled_parts(single, tmp / "no-memories", memories=False)
    return out


def assert_bit_identical(got: xr.Dataset, want: xr.Dataset) -> None:
    """xarray's identical, then every variable and coordinate byte for byte (dtype included)."""
    xr.testing.assert_identical(got, want)
    assert list(got.data_vars) == list(want.data_vars)
    assert dict(got.sizes) == dict(want.sizes)
    for name in [*want.data_vars, *want.coords]:
        a, b = got[name].to_numpy(), want[name].to_numpy()
        assert a.dtype == b.dtype, name
        if a.dtype.kind == "O":
            assert a.tolist() == b.tolist(), name
        else:
            # bytes: the same bits, not merely equal numbers (NaN, -0.0)
            assert a.tobytes() == b.tobytes(), name
    assert got.attrs == want.attrs


@pytest.mark.parametrize("name", [*LOGS, "fractional-no-memories"])
def test_dask_pairs_identical_to_pandas(logs, name) -> None:
    path = logs[name]
    want = exposure_stats(read_log(path), by="pair")
    got = exposure_stats(path, by="pair", engine="dask", scheduler="synchronous")
    assert_bit_identical(got, want)
    # the logs exercise what their names say
    assert want.sizes["pair"] > 100
    assert (want["ranked"] > 0).any() and (want["exposed"] > 0).any()
    if name.startswith("window"):
        assert want["window_eligible"].sum() > 0 and want["window_exposed"].sum() > 0
    if "fractional" in name:
        assert want.attrs["outcome_kind"] == "fractional"
        y = pq.read_table(path / "steps").column("outcome").to_numpy()
        assert (np.round(y * 2**20) != y * 2**20).any(), "outcomes that are not short binary fractions"
    if name == "churn":
        assert (want["in_store"] < want["query_steps"]).any()


def test_threaded_scheduler_gives_the_same_pairs(logs) -> None:
    # maps in parallel, the fold still a chain in part order
    path = logs["window-fractional"]
    assert_bit_identical(exposure_stats(path, by="pair", engine="dask"),
                         exposure_stats(path, by="pair", engine="dask", scheduler="synchronous"))


@pytest.mark.parametrize("which", ["window", "window-no-memories", "rounds"])
def test_dask_pairs_on_hand_written_logs(tmp_path, which) -> None:
    # written straight from the spec (_window_fixtures): pool and window slots in one design,
    # no memories file, a design in rounds with 1/64 outcomes
    design, steps, memories = rounds_steps(seed=2) if which == "rounds" else window_steps(seed=1)
    root = write_parquet(tmp_path / "log", design, steps, None if which == "window-no-memories" else memories,
                         parts=3)
    assert_bit_identical(exposure_stats(root, by="pair", engine="dask", scheduler="synchronous"),
                         exposure_stats(read_log(root), by="pair"))


def test_dask_pairs_check_the_log_first(logs, tmp_path) -> None:
    path = Path(shutil.copytree(logs["churn"], tmp_path / "log"))
    rewrite_cell(path / "steps" / "part-001.parquet", "outcome", 2, 1.5)
    with pytest.raises(LogError) as err:
        exposure_stats(path, by="pair", engine="dask", scheduler="synchronous")
    assert Path(err.value.file).name == "part-001.parquet" and err.value.row == 2
    with pytest.raises(ConfigError, match="by must be"):
        exposure_stats(path, by="pairs", engine="dask")


def test_a_log_without_context_rows(tmp_path) -> None:
    # pool eligibility alone makes the pairs; every outcome sum is float64 (numpy's bincount
    # gives int64 for empty weights) in both engines, dense statistics included
    log = simulate(SimulationConfig.preset("fractional", memories=12, queries=3, repeats=4), seed=0)
    log.contexts = log.contexts.iloc[:0]
    root = straddled_parts(write_log(log, tmp_path / "single", format="parquet"), tmp_path / "log", ctx_parts=1)
    want = exposure_stats(read_log(root), by="pair")
    assert want.sizes["pair"] > 0 and not want["retrieved"].any()
    assert_bit_identical(exposure_stats(root, by="pair", engine="dask", scheduler="synchronous"), want)
    for engine in ("pandas", "dask"):
        dense = exposure_stats(root if engine == "dask" else read_log(root), engine=engine)
        assert dense["retrieved_outcome_sum"].dtype == np.float64, engine
