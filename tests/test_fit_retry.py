"""fit retries an unhealthy NUTS fit on a stated schedule and records every attempt.

The sampler is replaced (``sampling.sample_hyper``) by prior draws whose health
each test controls: attempt 1 diverges or has a stuck chain, later attempts are
clean or not. No real sampling.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr

from cmp_bayes.cli.fit import retry_lines
from cmp_bayes.errors import ConfigError, PosteriorError
from cmp_bayes.model import sampling
from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.model.fit import fit
from cmp_bayes.posterior.contract import FIT_ATTEMPT_KEYS, OPTIONAL_ATTRS, fit_attempts
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.io import check_posterior
from cmp_bayes.reporting import sections
from cmp_bayes.testing import synthetic_posterior, synthetic_stats

SMALL = ModelConfig(grid_size=61)


def fake_sampler(monkeypatch: pytest.MonkeyPatch, bad_attempts: set[int], kind: str = "divergence"):
    """Replace sample_hyper by prior draws; attempts in ``bad_attempts`` get ``kind`` of trouble.

    Returns the list of SamplerConfigs the sampler was called with (one per attempt).
    """
    import pymc as pm
    from pymc.testing import mock_sample

    calls: list[SamplerConfig] = []

    def sample_hyper(model: pm.Model, cfg: SamplerConfig):  # noqa: ANN202 - as sampling's
        calls.append(cfg)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The effect of Potentials")
            tree = mock_sample(
                model=model, draws=cfg.draws, chains=cfg.chains, random_seed=cfg.seed,
                sample_stats={"diverging": lambda size: np.zeros(size, dtype=bool)},
            )
        post, stats = sampling._groups(tree)
        if len(calls) in bad_attempts:
            if kind == "divergence":
                div = stats["diverging"].values.copy()
                div[0, 3] = True
                stats = stats.assign(diverging=(stats["diverging"].dims, div))
            else:  # a stuck chain: chain 0 far from chain 1
                shifted = post["tau_null_sd"].copy()
                shifted[0] = shifted[0] + 5.0
                post = post.assign(tau_null_sd=shifted)
        return post, stats

    monkeypatch.setattr(sampling, "sample_hyper", sample_hyper)
    # the prior draws' own R-hat is a coin flip at this size; only the planted trouble may fail
    from cmp_bayes.posterior import sampling_checks

    real = sampling_checks.rhat

    def rhat(ds: xr.Dataset) -> xr.Dataset:
        out = real(ds)
        return out.map(lambda da: da.clip(max=1.0) if da.name != "tau_null_sd" else da)

    monkeypatch.setattr(sampling_checks, "rhat", rhat)
    return calls


def small_fit(**kw) -> xr.DataTree:
    stats, _ = synthetic_stats(30, seed=1)
    return fit(stats, SMALL, draws=200, tune=100, chains=2, seed=4, progressbar=False, **kw)


# ----------------------------------------------------------------- the schedule


def test_schedule_raises_acceptance_doubles_tuning_then_changes_seed() -> None:
    cfg = SamplerConfig(seed=7)
    assert cfg.max_attempts == 3
    assert cfg.attempt(1) is cfg
    two, three, four = cfg.attempt(2), cfg.attempt(3), cfg.attempt(4)
    assert (two.target_accept, two.tune, two.seed) == (0.98, 2000, 7)
    assert (three.target_accept, three.tune, three.seed) == (0.99, 4000, 10)
    assert (four.target_accept, four.tune, four.seed) == (0.99, 8000, 11)
    assert two.draws == cfg.draws and two.chains == cfg.chains and two.sampler == cfg.sampler
    # never lowers a user's higher acceptance; tune=0 still grows
    assert SamplerConfig(target_accept=0.995).attempt(2).target_accept == 0.995
    assert SamplerConfig(tune=0).attempt(2).tune == 400
    with pytest.raises(ConfigError, match="numbered from 1"):
        cfg.attempt(0)
    with pytest.raises(ConfigError, match="max_attempts must be >= 1"):
        SamplerConfig(max_attempts=0)
    # the docstring states the schedule (and so does --max-attempts' help)
    assert "seed + k" in (SamplerConfig.__doc__ or "")


def test_cli_has_max_attempts() -> None:
    import argparse

    from cmp_bayes.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    args = sub.choices["fit"].parse_args(["log", "--max-attempts", "1"])
    assert args.max_attempts == 1


# ----------------------------------------------------------------- retries


@pytest.mark.parametrize("kind", ["divergence", "stuck"])
def test_attempt_one_unhealthy_attempt_two_kept(monkeypatch, kind: str) -> None:
    calls = fake_sampler(monkeypatch, bad_attempts={1}, kind=kind)
    tree = small_fit()
    assert [(c.target_accept, c.tune, c.seed) for c in calls] == [(0.95, 100, 4), (0.98, 400, 4)]
    attempts = fit_attempts(tree.attrs)
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert set(FIT_ATTEMPT_KEYS) <= set(attempts[0])
    first, second = attempts
    assert not first["ok"] and not first["kept"] and second["ok"] and second["kept"]
    assert tree.attrs["fit_attempt_kept"] == 2
    if kind == "divergence":
        assert first["divergences"] == 1 and "1 divergent draws" in first["problems"]
    else:
        assert first["worst_variable"] == "tau_null_sd" and first["max_rhat"] > 1.01
    # the posterior holds attempt 2's draws: healthy by the same verdict decide uses
    assert int(tree["sample_stats"]["diverging"].sum()) == 0
    assert sampler_health(tree).ok
    check_posterior(tree, "retried")
    assert second["tune"] == 400 and second["target_accept"] == 0.98 and second["seconds"] >= 0
    lines = retry_lines(tree)
    assert len(lines) == 2
    assert lines[0].startswith("fit attempt 1 failed (") and "attempt 2 of 2" in lines[0]
    assert "target_accept 0.98, tune 400, seed 4: healthy" in lines[0]
    assert lines[1] == "kept attempt 2 (the first healthy one)"


def test_max_attempts_one_fits_once_and_keeps_the_divergence(monkeypatch) -> None:
    calls = fake_sampler(monkeypatch, bad_attempts={1})
    tree = small_fit(max_attempts=1)
    assert len(calls) == 1
    (only,) = fit_attempts(tree.attrs)
    assert only["kept"] and not only["ok"] and only["divergences"] == 1
    assert int(tree["sample_stats"]["diverging"].sum()) == 1
    assert not sampler_health(tree).ok
    assert retry_lines(tree) == []


def test_no_healthy_attempt_keeps_the_last(monkeypatch) -> None:
    calls = fake_sampler(monkeypatch, bad_attempts={1, 2, 3})
    tree = small_fit()
    assert [(c.target_accept, c.tune, c.seed) for c in calls] == [
        (0.95, 100, 4), (0.98, 400, 4), (0.99, 800, 7),
    ]
    attempts = fit_attempts(tree.attrs)
    assert [a["kept"] for a in attempts] == [False, False, True]
    assert not any(a["ok"] for a in attempts)
    assert tree.attrs["fit_attempt_kept"] == 3
    assert retry_lines(tree)[-1] == "kept attempt 3 (the last; none was healthy)"
    # the report's health section says the same
    section = sections.sampler_health_section(sampler_health(tree), attempts)
    assert "fit ran 3 attempts and none passed the sampler checks" in section.markdown
    assert "attempt 3." in section.markdown


def test_unfixable_failures_and_advi_are_not_retried(monkeypatch) -> None:
    # one chain: R-hat cannot be made, and no rerun changes that
    calls = fake_sampler(monkeypatch, bad_attempts=set())
    stats, _ = synthetic_stats(30, seed=1)
    tree = fit(stats, SMALL, draws=100, chains=1, seed=2, progressbar=False)
    assert len(calls) == 1 and not fit_attempts(tree.attrs)[0]["ok"]
    # ADVI has no divergences or R-hat to cure
    calls = fake_sampler(monkeypatch, bad_attempts={1, 2, 3})
    tree = fit(stats, SMALL, sampler="advi", draws=100, chains=2, seed=2, progressbar=False)
    assert len(calls) == 1 and len(fit_attempts(tree.attrs)) == 1


def test_healthy_first_attempt_is_the_single_attempt_fit(monkeypatch) -> None:
    # with a healthy attempt 1, max_attempts changes nothing in the posterior
    fake_sampler(monkeypatch, bad_attempts=set())
    once, thrice = small_fit(max_attempts=1), small_fit()
    for group in ("posterior", "sample_stats", "posterior_predictive", "identification"):
        xr.testing.assert_equal(once[group].to_dataset(), thrice[group].to_dataset())
    assert len(fit_attempts(thrice.attrs)) == 1


# ----------------------------------------------------------------- the contract and report


def test_fit_attempts_is_an_optional_contract_attribute() -> None:
    post = synthetic_posterior(n_memories=5, draws=20)
    assert "fit_attempts" in OPTIONAL_ATTRS and "fit_attempts" not in post.attrs
    assert fit_attempts(post.attrs) == []
    check_posterior(post, "synthetic")
    post.attrs["fit_attempts"] = "not json"
    with pytest.raises(PosteriorError, match="'fit_attempts' is not JSON"):
        check_posterior(post, "here.nc")
    post.attrs["fit_attempts"] = json.dumps([{"attempt": 1}])
    with pytest.raises(PosteriorError, match="entry lacks"):
        check_posterior(post, "here.nc")


def test_report_section_shows_the_attempts_table(monkeypatch) -> None:
    fake_sampler(monkeypatch, bad_attempts={1})
    tree = small_fit()
    section = sections.sampler_health_section(sampler_health(tree), fit_attempts(tree.attrs))
    assert "fit ran 2 attempts; the posterior holds attempt 2, the first that passed" in (
        section.markdown
    )
    assert "| attempt |" in section.markdown and "target_accept" in section.html
    # without attempts (older posteriors) the section is as before
    bare = sections.sampler_health_section(sampler_health(tree))
    assert "fit ran" not in bare.markdown
