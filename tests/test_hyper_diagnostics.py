"""The fit's own hyperparameter R-hat, kept where it stores fewer draws than it judged.

A gated fit on a shared store thins its stored draws (PAIR_DRAW_CELLS); R-hat on
the few draws left is noise, so the fit records its R-hat on every draw it judged
(``hyper_diagnostics``) and the one sampler-health verdict (fit, report, decide)
reads it, as long as the stored draws are still the fit's.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from test_gated_model import _write_log

from cmp_bayes.log.read import read_log
from cmp_bayes.model import gated_fit
from cmp_bayes.model.config import ModelConfig
from cmp_bayes.posterior.contract import fit_attempts
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.hyper_diagnostics import GROUP, hyper_diagnostics, stored_hyper_rhat
from cmp_bayes.posterior.io import load_posterior, save_posterior
from cmp_bayes.posterior.sampling_checks import element_labels, flatten, rhat


def _hyper(seed: int, chains: int = 2, draws: int = 1000) -> xr.Dataset:
    """Well-mixed hyperparameters (independent normal draws): one scalar, one vector."""
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "tau_null_sd": (("chain", "draw"), 0.02 + 0.002 * rng.standard_normal((chains, draws))),
            "gate_coef": (("chain", "draw", "gate_covariate"), rng.standard_normal((chains, draws, 2))),
        },
        coords={"gate_covariate": ["log_rank", "never_ranked"]},
    )


def _tree(hyper: xr.Dataset, group: xr.Dataset | None) -> xr.DataTree:
    rng = np.random.default_rng(0)
    c, d = hyper.sizes["chain"], hyper.sizes["draw"]
    post = hyper.assign(tau=(("chain", "draw", "memory"), 0.01 * rng.standard_normal((c, d, 3))))
    post = post.assign_coords(memory=["m0", "m1", "m2"])
    diverging = xr.DataArray(np.zeros((c, d), dtype=bool), dims=("chain", "draw"))
    groups = {"posterior": post, "sample_stats": xr.Dataset({"diverging": diverging})}
    if group is not None:
        groups[GROUP] = group
    return xr.DataTree.from_dict(groups)


def _stored_and_noisy(judged: xr.Dataset) -> xr.Dataset:
    """Every 100th draw (10 per chain), shifted in chain 1 so that R-hat on them alone fails."""
    stored = judged.isel(draw=slice(None, None, 100)).copy(deep=True)
    stored["tau_null_sd"][1] += 0.003  # about 1.5 sd: on 10 draws per chain R-hat goes far above 1.01
    return stored


def test_the_verdict_reads_the_fits_rhat_while_the_stored_draws_are_the_fits() -> None:
    judged = _hyper(1)
    stored = _stored_and_noisy(judged)
    group = hyper_diagnostics(judged, stored)
    assert group is not None
    assert list(group["element"].values) == element_labels(stored)
    np.testing.assert_allclose(group["rhat"].values, flatten(rhat(judged)), rtol=0, atol=0)
    assert group.attrs["fit_draws"] == 1000 and group.attrs["draws"] == 10
    own = float(flatten(rhat(stored)).max())
    assert own > 1.01  # what the stored draws alone say: fail
    health = sampler_health(_tree(stored, group))
    assert health.max_rhat == pytest.approx(float(group["rhat"].max()), rel=0, abs=0)
    assert health.max_rhat < 1.01 and health.ok
    # without the group: the stored draws' own R-hat, and the verdict fails
    bare = sampler_health(_tree(stored, None))
    assert bare.max_rhat == pytest.approx(own) and not bare.ok


def test_draws_that_are_no_longer_the_fits_are_judged_on_themselves() -> None:
    judged = _hyper(2)
    stored = _stored_and_noisy(judged)
    group = hyper_diagnostics(judged, stored)
    assert group is not None
    tree = _tree(stored, group)
    assert stored_hyper_rhat(tree, stored) is not None
    # one draw edited
    edited = stored.copy(deep=True)
    edited["gate_coef"][0, 3, 1] += 1e-6
    assert stored_hyper_rhat(tree, edited) is None
    # thinned again (other sizes), and a hyperparameter the group does not know
    assert stored_hyper_rhat(tree, stored.isel(draw=slice(None, None, 2))) is None
    assert stored_hyper_rhat(tree, stored.assign(gate_intercept=stored["tau_null_sd"] * 2)) is None
    health = sampler_health(_tree(edited, group))
    assert health.max_rhat == pytest.approx(float(flatten(rhat(edited)).max()))


def test_one_chain_or_too_few_draws_record_nothing() -> None:
    judged = _hyper(3)
    assert hyper_diagnostics(judged.isel(chain=[0]), judged.isel(chain=[0], draw=slice(0, 10))) is None
    assert hyper_diagnostics(judged, judged.isel(draw=slice(0, 3))) is None


@pytest.fixture(scope="module")
def thinned_fit(tmp_path_factory: pytest.TempPathFactory) -> xr.DataTree:
    """A real gated fit whose stored draws are thinned for memory (a low PAIR_DRAW_CELLS)."""
    from cmp_bayes.model.fit import fit

    path = tmp_path_factory.mktemp("gated_thin_log")
    _write_log(path)
    log = read_log(path)
    with pytest.MonkeyPatch.context() as mp:
        # 32 pairs: at most 320 stored values per pair variable, i.e. 10 draws of 400
        mp.setattr(gated_fit, "PAIR_DRAW_CELLS", 320)
        return fit(log, by="query", model=ModelConfig(pair_model="gated", prior_draws=20),
                   draws=200, tune=200, chains=2, seed=4, progressbar=False, max_attempts=1)


def test_a_thinned_gated_fit_records_and_the_checks_use_it(thinned_fit: xr.DataTree, tmp_path) -> None:
    tree = thinned_fit
    assert tree["posterior"].sizes["draw"] == 5  # 10 draws over 2 chains
    assert GROUP in tree.children
    group = tree[GROUP].to_dataset()
    assert group.attrs["fit_draws"] == 200 and group.attrs["draws"] == 5
    health = sampler_health(tree)
    assert health.max_rhat == pytest.approx(float(np.nanmax(group["rhat"].values)), rel=0, abs=0)
    # fit's line counts divergences over every sampled draw (sample_stats), not the 10 stored
    assert tree["sample_stats"].sizes["draw"] == 200 and health.sampled_draws == 400
    assert health.line().endswith("divergences in 400 draws")
    # the verdict decide and the report read is the one the fit's attempt was judged by
    (kept,) = [a for a in fit_attempts(tree.attrs) if a["kept"]]
    assert health.max_rhat == pytest.approx(kept["max_rhat"], rel=1e-12)
    # save and load keep it (and the verdict); a thinned save leaves it out
    back = load_posterior(save_posterior(tree, tmp_path / "p.nc"))
    assert GROUP in back.children and sampler_health(back).max_rhat == health.max_rhat
    thin = load_posterior(save_posterior(tree, tmp_path / "t.nc", thin=2))
    assert GROUP not in thin.children


def test_a_thinned_gated_fit_judges_each_memory_on_every_draw(thinned_fit: xr.DataTree, tmp_path) -> None:
    # 5 stored draws per chain give each memory an R-hat that is noise; the fit records the
    # R-hat of each memory's conditional mean given the hyperparameters over all 200 draws
    from cmp_bayes import Costs, decide
    from cmp_bayes.posterior.memory_diagnostics import GROUP as MEMORY
    from cmp_bayes.posterior.memory_diagnostics import StoredRhat, stored_tau_rhat

    tree = thinned_fit
    group = tree[MEMORY].to_dataset()
    assert (group.attrs["fit_draws"], group.attrs["draws"], group.attrs["statistic"]) == (200, 5, "conditional_mean")
    post = tree["posterior"].to_dataset()
    for estimand, name in (("tau", "tau_memory"), ("utility", "utility_memory"), ("tau_relevant", "tau_relevant")):
        stored = StoredRhat.read(tree, name, post[name])
        assert stored is not None and stored.usable().all(), name  # the stored draws are the fit's
        np.testing.assert_array_equal(stored.values, group[f"rhat_{estimand}"].values)
        # the hyperparameters passed at 200 draws per chain (max R-hat in the group beside);
        # a function of them mixes with them: rank R-hat - 1 over 4 split chains of 100 draws
        # is about (chi2_3 / 3 - 1) / (2 ESS), below 0.05 at the 99.9% point for ESS >= 45
        assert float(tree[GROUP]["rhat"].max()) <= 1.02
        assert float(group[f"rhat_{estimand}"].max()) < 1.05, name
    np.testing.assert_array_equal(stored_tau_rhat(tree), group["rhat_tau"].values)
    # decide reads it (the rows it checked), and a saved file keeps it; a thinned save drops it
    out = decide(tree, Costs(threshold=0.05, estimand="tau", store_average="allow"))
    checked = out.table["rhat"].notna().to_numpy()
    assert checked.any()
    np.testing.assert_array_equal(out.table["rhat"].to_numpy()[checked], group["rhat_tau"].values[checked])
    back = load_posterior(save_posterior(tree, tmp_path / "p.nc"))
    assert back[MEMORY].attrs["fit_draws"] == 200
    assert MEMORY not in load_posterior(save_posterior(tree, tmp_path / "t.nc", thin=2)).children



def test_the_report_shows_the_fits_rhat_and_says_so(
    thinned_fit: xr.DataTree, tmp_path, no_trace_figures: None
) -> None:
    import warnings

    from cmp_bayes.reporting.html import report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report(thinned_fit, tmp_path / "r")
    md = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    section = md.split('<a id="hyperparameters"></a>', 1)[1].split("<a id=", 1)[0]
    assert "R-hat: the fit's, on its 200 draws per chain (the posterior stores 5 per chain" in section
    group = thinned_fit[GROUP].to_dataset()
    worst = f"{float(group['rhat'].max()):.3f}"
    assert worst in section
