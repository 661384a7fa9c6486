"""fit(log, model=ModelConfig(), sampler=SamplerConfig()): one configuration surface."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest

from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import SAMPLERS, ModelConfig, SamplerConfig
from cmp_bayes.model.fit import fit, sampler_config
from cmp_bayes.testing import synthetic_stats


def test_an_override_that_contradicts_the_sampler_config_raises_naming_the_field() -> None:
    stats, _ = synthetic_stats(20, seed=0)
    with pytest.raises(ConfigError, match=r"draws=200 contradicts .*draws=100"):
        fit(stats, sampler=SamplerConfig(draws=100), draws=200)
    with pytest.raises(ConfigError, match="seed"):
        sampler_config(SamplerConfig(seed=1), chains=2, seed=2)
    # the same value twice is no contradiction
    cfg = SamplerConfig(draws=100, chains=1)
    assert sampler_config(cfg, draws=100, chains=1) is cfg


def test_overrides_without_a_config_build_one() -> None:
    assert sampler_config() == SamplerConfig()
    built = sampler_config(draws=7, tune=3, progressbar=False)
    assert built == SamplerConfig(draws=7, tune=3, progressbar=False)
    assert sampler_config("advi", seed=4) == SamplerConfig(sampler="advi", seed=4)
    with pytest.raises(ConfigError, match="sampler must be one of"):
        sampler_config("gibbs")
    with pytest.raises(ConfigError, match="draws"):
        sampler_config(draws=0)


def test_unknown_keywords_and_wrong_types_are_type_errors() -> None:
    stats, _ = synthetic_stats(20, seed=0)
    with pytest.raises(TypeError, match=r"config.*model=ModelConfig"):
        fit(stats, config=ModelConfig())
    with pytest.raises(TypeError, match="draw"):
        fit(stats, draw=10)
    with pytest.raises(TypeError, match="model must be a ModelConfig"):
        fit(stats, SamplerConfig())
    with pytest.raises(TypeError, match="sampler must be"):
        fit(stats, None, 3)


def test_a_sampler_name_string_fits_with_that_sampler(monkeypatch) -> None:
    # the plumbing, not the sampling: pm.sample (the "pymc" sampler's path) is mocked
    import pymc as pm
    from pymc.testing import mock_sample

    monkeypatch.setattr(
        pm, "sample",
        partial(mock_sample, sample_stats={"diverging": lambda size: np.zeros(size, dtype=bool)}),
    )
    stats, _ = synthetic_stats(30, seed=1)
    tree = fit(stats, ModelConfig(grid_size=61), "pymc", draws=20, chains=1, progressbar=False)
    saved = json.loads(tree.attrs["sampler_config"])
    assert saved["sampler"] == "pymc" and saved["draws"] == 20 and saved["chains"] == 1
    assert json.loads(tree.attrs["model_config"])["grid_size"] == 61
    assert tree["posterior"].sizes["draw"] == 20


def test_cli_fit_sampler_flags_come_from_sampler_config() -> None:
    import argparse

    from cmp_bayes.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices["fit"]
    by_flag = {s: a for a in p._actions for s in a.option_strings}
    for flag in ("--sampler", "--draws", "--tune", "--chains", "--seed", "--keep-draws",
                 "--target-accept", "--no-progress"):
        assert flag in by_flag
    assert tuple(by_flag["--sampler"].choices) == SAMPLERS
    args = p.parse_args(["log", "--draws", "30", "--seed", "5", "--sampler", "advi"])
    from cmp_bayes.cli.fit import _SAMPLER_FLAGS

    assert _SAMPLER_FLAGS.overrides(args) == {"sampler": "advi", "draws": 30, "seed": 5}


def test_the_readme_call_form_works_from_the_top_level() -> None:
    import cmp_bayes as cb

    assert cb.SamplerConfig is SamplerConfig and cb.ModelConfig is ModelConfig
    stats, _ = synthetic_stats(20, seed=0)
    with pytest.raises(ConfigError, match="seed"):
        cb.fit(stats, model=cb.ModelConfig(), sampler=cb.SamplerConfig(draws=10, seed=1), seed=2)
