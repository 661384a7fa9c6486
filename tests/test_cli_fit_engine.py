"""The fit verb's --engine / --scheduler options (the Dask path's statistics are tested in test_scale)."""

from __future__ import annotations

import pytest

from cmp_bayes.cli.main import main
from cmp_bayes.simulation.simulator import simulate


@pytest.fixture(scope="module")
def parquet_log(tmp_path_factory):
    out = tmp_path_factory.mktemp("engine") / "log"
    simulate("tiny", out=out, seed=5, format="parquet")
    return out


def test_scheduler_without_dask_engine_is_a_one_line_error(parquet_log, capsys):
    assert main(["fit", str(parquet_log), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--scheduler only applies with --engine dask" in err[0]


def test_per_query_with_dask_engine_is_refused(parquet_log, capsys):
    assert main(["fit", str(parquet_log), "--engine", "dask", "--by", "query"]) == 2
    assert "--by query needs the whole log" in capsys.readouterr().err


@pytest.mark.slow
def test_dask_engine_fits_a_parquet_log(parquet_log, tmp_path, capsys):
    pytest.importorskip("dask")
    from cmp_bayes.posterior.io import load_posterior

    out = tmp_path / "post.nc"
    status = main(["fit", str(parquet_log), "--engine", "dask", "--scheduler", "synchronous",
                   "--draws", "100", "--tune", "100", "--no-progress", "-o", str(out)])
    assert status == 0
    tree = load_posterior(out)
    assert tree["posterior"].sizes["memory"] == 40
