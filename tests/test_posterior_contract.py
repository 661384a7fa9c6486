"""The posterior contract as one executable thing: check_posterior, the shipped synthetic
posterior, the version a posterior was written by, and the configs it carries."""

from __future__ import annotations

from pathlib import Path

import pytest
import xarray as xr

import cmp_bayes
from cmp_bayes.cli.main import main
from cmp_bayes.errors import ConfigError, PosteriorError
from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.posterior.contract import (
    GROUPS,
    REQUIRED_ATTRS,
    REQUIRED_GROUPS,
    compatible,
    memory_level_vars,
)
from cmp_bayes.posterior.io import check_posterior, load_posterior, save_posterior
from cmp_bayes.testing import synthetic_posterior


@pytest.fixture(scope="module", params=[False, True], ids=["memory", "query"])
def tree(request: pytest.FixtureRequest) -> xr.DataTree:
    return synthetic_posterior(n_memories=6, draws=20, per_query=request.param, log_likelihood=True,
                               hyper_diagnostics=True)


def test_the_synthetic_posterior_follows_the_contract(tree: xr.DataTree) -> None:
    check_posterior(tree, "synthetic")
    assert {g.name for g in GROUPS} == set(tree.children)
    assert set(REQUIRED_ATTRS) <= set(tree.attrs)
    by = tree.attrs["by"]
    for v in memory_level_vars(by):
        assert tree["posterior"][v].dims == ("chain", "draw", "memory")
    if by == "query":
        assert tree["posterior"]["tau"].dims == ("chain", "draw", "memory", "query")
        assert tree["observed_data"]["exposed"].dims == ("memory", "query")
        pp = tree["posterior_predictive"]["exposed_outcome_sum"]
        assert pp.dims == tree["posterior"]["tau"].dims


def test_every_variable_of_the_contract_is_checked(tree: xr.DataTree) -> None:
    for group in GROUPS:
        for var in group.variables:
            broken = tree.copy()
            broken[group.name] = xr.DataTree(tree[group.name].to_dataset().drop_vars(var))
            with pytest.raises(PosteriorError, match=rf"^here\.nc: .*{group.name}.*'{var}'"):
                check_posterior(broken, "here.nc")


def test_every_required_group_and_attribute_is_checked(tree: xr.DataTree) -> None:
    for name in REQUIRED_GROUPS:
        broken = tree.copy()
        del broken[name]
        with pytest.raises(PosteriorError, match=rf"here\.nc: not a cmp_bayes posterior.*{name}"):
            check_posterior(broken, "here.nc")
    for attr in REQUIRED_ATTRS:
        broken = tree.copy()
        del broken.attrs[attr]
        with pytest.raises(PosteriorError, match=rf"here\.nc: .*{attr}"):
            check_posterior(broken, "here.nc")
    # an optional group may be left out, as save_posterior(drop_groups=...) does
    fewer = tree.copy()
    del fewer["prior_predictive"]
    check_posterior(fewer, "here.nc")


def test_dims_are_checked(tree: xr.DataTree) -> None:
    broken = tree.copy()
    post = tree["posterior"].to_dataset()
    broken["posterior"] = xr.DataTree(post.assign(tau=post["tau"].isel(chain=0)))
    with pytest.raises(PosteriorError, match=r"posterior variable 'tau' has dims"):
        check_posterior(broken, "here.nc")


@pytest.mark.parametrize(
    ("written", "running", "ok"),
    [
        ("0.1.0", "0.1.3", True),
        ("0.1.0", "0.2.0", False),
        ("1.2.0", "1.9.1", True),
        ("1.2.0", "2.0.0", False),
        ("99.0.0", "0.1.0", False),
        ("unknown", "0.1.0", False),
    ],
)
def test_version_compatibility(written: str, running: str, ok: bool) -> None:
    assert compatible(written, running) is ok


def _foreign_version(tmp_path: Path) -> Path:
    path = save_posterior(synthetic_posterior(n_memories=6, draws=20), tmp_path / "old.nc")
    # rewrite the attribute in the file as another version would have written it
    tree = xr.load_datatree(path, engine="h5netcdf")
    tree.attrs["cmp_bayes_version"] = "99.0.0"
    tree.to_netcdf(path, engine="h5netcdf")
    return path


def test_load_refuses_an_incompatible_version(tmp_path: Path) -> None:
    path = _foreign_version(tmp_path)
    with pytest.raises(PosteriorError) as info:
        load_posterior(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert str(path) in msg and "99.0.0" in msg and cmp_bayes.__version__ in msg and "refit" in msg


def test_cli_decide_on_an_incompatible_version_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _foreign_version(tmp_path)
    assert main(["decide", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "old.nc" in err and "99.0.0" in err


def test_a_posterior_without_a_version_is_not_a_cmp_bayes_posterior(tmp_path: Path) -> None:
    tree = synthetic_posterior(n_memories=6, draws=20)
    del tree.attrs["cmp_bayes_version"]
    path = tmp_path / "bare.nc"
    tree.to_netcdf(path, engine="h5netcdf")
    with pytest.raises(PosteriorError, match=r"bare\.nc: not a cmp_bayes posterior.*cmp_bayes_version"):
        load_posterior(path)


def test_configs_round_trip_through_a_saved_posterior(tmp_path: Path) -> None:
    model = ModelConfig(grid_size=61, use_rank=False, null_sd=(0.02, 0.4), query_sd=0.1)
    sampler = SamplerConfig(sampler="pymc", draws=50, chains=3, seed=7, target_accept=0.9)
    tree = synthetic_posterior(n_memories=6, draws=20)
    tree.attrs.update(model_config=model.to_json(), sampler_config=sampler.to_json())
    back = load_posterior(save_posterior(tree, tmp_path / "p.nc"))
    assert ModelConfig.from_posterior(back) == model
    assert SamplerConfig.from_posterior(back) == sampler


def test_config_from_a_posterior_with_a_bad_attribute() -> None:
    tree = synthetic_posterior(n_memories=6, draws=20)
    tree.attrs["model_config"] = "not json"
    with pytest.raises(PosteriorError, match="model_config"):
        ModelConfig.from_posterior(tree)
    tree.attrs["model_config"] = '{"grid_sizes": 61}'
    with pytest.raises(ConfigError, match="grid_sizes"):
        ModelConfig.from_posterior(tree)
    del tree.attrs["sampler_config"]
    with pytest.raises(PosteriorError, match="sampler_config"):
        SamplerConfig.from_posterior(tree)
