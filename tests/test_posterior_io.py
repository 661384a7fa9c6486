"""save_posterior / load_posterior: identical round trip, thinning, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from _model_fixtures import simulated_fit

from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.io import load_posterior, save_posterior


@pytest.fixture(scope="session")
def tree():
    return simulated_fit()[1]


def test_round_trip_is_identical(tree, tmp_path) -> None:
    path = save_posterior(tree, tmp_path / "models" / "p.nc")
    back = load_posterior(path)
    assert set(back.children) == set(tree.children)
    for name in tree.children:
        xr.testing.assert_identical(back[name].to_dataset(), tree[name].to_dataset())
    assert dict(back.attrs) == dict(tree.attrs)
    # the load is eager: the file can be overwritten at once
    save_posterior(back, path)
    assert load_posterior(path)["posterior"].sizes == tree["posterior"].sizes


def test_thin_and_drop_groups(tree, tmp_path) -> None:
    path = save_posterior(tree, tmp_path / "small.nc", thin=5, drop_groups=("prior_predictive",))
    back = load_posterior(path)
    assert "prior_predictive" not in back.children
    assert back["posterior"].sizes["draw"] == len(range(0, tree["posterior"].sizes["draw"], 5))
    np.testing.assert_array_equal(
        back["posterior"]["tau"].values, tree["posterior"]["tau"].values[:, ::5]
    )
    # sample_stats stays whole so no divergence is lost
    assert back["sample_stats"].sizes == tree["sample_stats"].sizes
    assert back.attrs["saved_thin"] == 5
    full = tmp_path / "full.nc"
    save_posterior(tree, full)
    assert path.stat().st_size < full.stat().st_size
    with pytest.raises(PosteriorError, match="cannot drop"):
        save_posterior(tree, tmp_path / "x.nc", drop_groups=("posterior",))


def test_refuses_foreign_files(tree, tmp_path) -> None:
    text = tmp_path / "notes.nc"
    text.write_text("not netcdf")
    with pytest.raises(PosteriorError, match="notes.nc"):
        load_posterior(text)
    plain = tmp_path / "plain.nc"
    xr.Dataset({"a": ("x", np.arange(3))}).to_netcdf(plain, engine="h5netcdf")
    with pytest.raises(PosteriorError, match=r"plain\.nc.*missing group"):
        load_posterior(plain)
    no_attr = tree.copy()
    del no_attr.attrs["log_checksum"]
    with pytest.raises(PosteriorError, match="log_checksum"):
        save_posterior(no_attr, tmp_path / "y.nc")
    no_var = tree.copy()
    no_var["posterior"] = tree["posterior"].to_dataset().drop_vars("utility")
    with pytest.raises(PosteriorError, match="utility"):
        save_posterior(no_var, tmp_path / "z.nc")
    assert not (tmp_path / "z.nc").exists()
    with pytest.raises(FileNotFoundError):
        load_posterior(tmp_path / "missing.nc")
