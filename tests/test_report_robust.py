"""The report renders every valid posterior: odd shapes, missing optional groups, thinning.

Each case builds a posterior that follows the contract (cmp_bayes.testing.synthetic_posterior,
then one change), passes it through a real save/load, and renders the whole report. Every
section id must be in both files; a section that cannot say something says why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import cmp_bayes
from cmp_bayes.constants import IDENTIFIED, UNIDENTIFIED
from cmp_bayes.posterior.io import load_posterior, save_posterior
from cmp_bayes.reporting import plots
from cmp_bayes.reporting.blocks import SECTION_IDS
from cmp_bayes.testing import synthetic_posterior

SMALL = {"n_memories": 12, "draws": 60, "seed": 3}


def _divergent_thinned() -> xr.DataTree:
    """Divergent draws, then thinned on save: sample_stats keeps twice the posterior's draws."""
    return synthetic_posterior(divergences=5, **SMALL)


def _one_divergence() -> xr.DataTree:
    # also the case without a rank covariate: the synthetic model's weights are intercepts only
    dt = synthetic_posterior(divergences=1, **SMALL)
    assert "weight_coef" not in dt["posterior"].data_vars
    return dt


def _thinned_by_fit() -> xr.DataTree:
    """As fit writes it with keep_draws < chains * draws: every 3rd draw kept (coordinates
    0, 3, 6, ...), sample_stats whole, the divergences between kept draws."""
    dt = synthetic_posterior(**SMALL)
    stats = dt["sample_stats"].to_dataset()
    stats["diverging"][1, [4, 5, 59]] = True
    dt["sample_stats"] = xr.DataTree(stats)
    dt["posterior"] = xr.DataTree(dt["posterior"].to_dataset().isel(draw=slice(None, None, 3)))
    dt.attrs["thin_step"] = 3
    return dt


def _one_chain() -> xr.DataTree:
    return synthetic_posterior(chains=1, **SMALL)


def _rank_covariate() -> xr.DataTree:
    """A rank covariate adds weight_coef over (effect_kind, covariate): two-dim panels."""
    dt = synthetic_posterior(**SMALL)
    post = dt["posterior"].to_dataset()
    rng = np.random.default_rng(0)
    shape = (post.sizes["chain"], post.sizes["draw"], 2, 1)
    post["weight_coef"] = xr.DataArray(
        rng.normal(0.0, 0.1, shape),
        dims=("chain", "draw", "effect_kind", "covariate"),
        coords={"covariate": ["rank_median"]},
    )
    dt["posterior"] = xr.DataTree(post)
    return dt


def _per_query() -> xr.DataTree:
    return synthetic_posterior(per_query=True, **SMALL)


def _fractional() -> xr.DataTree:
    dt = synthetic_posterior(**SMALL)
    dt.attrs["outcome_kind"] = "fractional"
    for group in ("observed_data", "posterior_predictive", "prior_predictive"):
        ds = dt[group].to_dataset()
        for name in ds.data_vars:
            if name.endswith("outcome_sum"):
                ds[name] = ds[name].astype(float) * 0.7
        dt[group] = xr.DataTree(ds)
    return dt


def _no_sample_stats_no_prior() -> xr.DataTree:
    # both optional kinds of group missing at once (each section says what it lacks)
    dt = synthetic_posterior(**SMALL)
    for group in ("sample_stats", "prior", "prior_predictive"):
        del dt[group]
    return dt


def _table(status: str, n: int) -> pd.DataFrame:
    identified = status == IDENTIFIED
    return pd.DataFrame(
        {
            "memory_id": [f"m{i:03d}" for i in range(n)],
            "status": [status] * n,
            "exposed": [4 if identified else 0] * n,
            "retrieved": [2 if identified else 0] * n,
            "in_store": [300] * n,
            "p_useful": [0.2 if identified else np.nan] * n,
            "rho_mean": [0.1 if identified else 0.001] * n,
        }
    )


def _single_memory() -> xr.DataTree:
    return synthetic_posterior(_table(IDENTIFIED, 1), draws=60, seed=3)


def _all_unidentified() -> xr.DataTree:
    return synthetic_posterior(_table(UNIDENTIFIED, 8), draws=60, seed=3)


#: case -> (builder, thin on save, texts the report must contain); each case is a whole report
#: render (seconds), so a case that can check two things does
CASES: dict[str, tuple[Callable[[], xr.DataTree], int, tuple[str, ...]]] = {
    "divergences-thinned": (_divergent_thinned, 2, ("5 of 120",)),
    "one-divergence-no-rank-covariate": (_one_divergence, 1, ("1 of 120", "weight_intercept")),
    "thinned-by-fit": (_thinned_by_fit, 1, ("3 of 120",)),
    "one-chain": (_one_chain, 1, ("Not computed: rank plot",)),
    "rank-covariate": (_rank_covariate, 1, ("weight_coef",)),
    "per-query": (_per_query, 1, ("tau_memory",)),
    "fractional": (_fractional, 1, ("fractional",)),
    "no-sample-stats-no-prior": (_no_sample_stats_no_prior, 1, ("not recorded", "Hyperparameters")),
    "single-memory": (_single_memory, 1, ("m000",)),
    "all-unidentified": (_all_unidentified, 1, ("Not computed: no memory has exposed-arm outcomes",)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str]:
    name = request.param
    build, thin, _ = CASES[name]
    root = tmp_path_factory.mktemp(name)
    path = save_posterior(build(), root / f"{name}.nc", thin=thin)
    index = cmp_bayes.report(load_posterior(path), root / "report")
    summary = index.parent / "summary.md"
    return name, index.read_text(encoding="utf-8"), summary.read_text(encoding="utf-8")


def test_every_section_in_both_files(rendered: tuple[str, str, str]) -> None:
    name, page, summary = rendered
    for sid in SECTION_IDS:
        assert f'id="{sid}"' in page, (name, sid)
        assert f'<a id="{sid}"></a>' in summary, (name, sid)
    assert "Traceback" not in page


def test_each_case_says_what_is_special(rendered: tuple[str, str, str]) -> None:
    name, page, summary = rendered
    for expected in CASES[name][2]:
        assert expected in summary or expected in page, (name, expected)


def test_thinned_divergences_are_kept_and_placed_on_the_posterior_draws() -> None:
    dt = synthetic_posterior(divergences=5, **SMALL)
    thinned = dt.copy()
    thinned["posterior"] = xr.DataTree(dt["posterior"].to_dataset().isel(draw=slice(None, None, 2)))
    marked = plots.divergences_on_draws(thinned)
    assert marked is not None
    assert marked.shape == (2, 30)
    # draws 0-4 of chain 0 diverged: kept draws 0, 2 and 4 stand for them
    np.testing.assert_array_equal(np.flatnonzero(marked.to_numpy()[0]), [0, 1, 2])
    assert not marked.to_numpy()[1].any()


def test_divergences_on_draws_by_position_without_matching_coordinates() -> None:
    dt = synthetic_posterior(divergences=3, **SMALL)
    post = dt["posterior"].to_dataset().isel(draw=slice(None, None, 3))
    dt["posterior"] = xr.DataTree(post.assign_coords(draw=np.arange(post.sizes["draw"]) + 1000))
    marked = plots.divergences_on_draws(dt)
    assert marked is not None and marked.shape == (2, 20)
    np.testing.assert_array_equal(np.flatnonzero(marked.to_numpy()[0]), [0])


def test_unmatched_divergence_record_is_left_out_and_said(tmp_path: Path) -> None:
    dt = synthetic_posterior(divergences=2, **SMALL)
    post = dt["posterior"].to_dataset().isel(draw=slice(0, 58))
    dt["posterior"] = xr.DataTree(post.assign_coords(draw=np.arange(58) + 1000))
    assert plots.divergences_on_draws(dt) is None
    from cmp_bayes.reporting.sections import trace_rank_section

    sec = trace_rank_section(dt, ["tau_helps_mean"])
    assert "Divergences not marked" in sec.markdown and len(sec.images) == 2


def test_save_keeps_every_sampler_draw_when_thinning(tmp_path: Path) -> None:
    dt = synthetic_posterior(divergences=5, **SMALL)
    back = load_posterior(save_posterior(dt, tmp_path / "p.nc", thin=2))
    assert int(back["sample_stats"]["diverging"].sum()) == 5
    assert back["posterior"].sizes["draw"] == 30


def test_thinned_by_fit_marks_the_kept_draws_that_stand_for_divergences() -> None:
    marked = plots.divergences_on_draws(_thinned_by_fit())
    assert marked is not None and marked.shape == (2, 20)
    # sampler draws 4 and 5 fall to kept draw 3 (index 1), draw 59 to kept draw 57 (index 19)
    np.testing.assert_array_equal(np.flatnonzero(marked.to_numpy()[1]), [1, 19])


def test_cli_report_on_a_thinned_divergent_posterior_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import warnings

    from cmp_bayes.cli.main import main

    path = save_posterior(_divergent_thinned(), tmp_path / "div.nc", thin=2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["report", str(path), "-o", str(tmp_path / "r")]) == 0
    # the refused forgets are said in the report, not as a warning with a source line
    assert not [w for w in seen if "forgotten" in str(w.message)]
    assert capsys.readouterr().err == ""
    assert "refit before forgetting" in (tmp_path / "r" / "summary.md").read_text()
    assert (tmp_path / "r" / "index.html").exists()
