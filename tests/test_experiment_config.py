"""ExperimentConfig holds a ModelConfig and a SamplerConfig (cmp_bayes.replicate.config)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.replicate.config import EXPERIMENT_SAMPLER, ExperimentConfig

RESULTS = Path(__file__).resolve().parents[1] / "reports" / "replication" / "results"


def test_the_experiment_keeps_its_sampler_defaults() -> None:
    cfg = ExperimentConfig()
    s = cfg.sampler
    assert (s.draws, s.tune, s.chains, s.progressbar, s.seed) == (500, 500, 2, False, 0)
    assert cfg.model == ModelConfig() and cfg.model.rank_summary == "median"
    # the rest of the sampler is the package's
    assert replace(s, draws=1000, tune=1000, progressbar=True) == SamplerConfig()


def test_one_seed_drives_the_sampler_too() -> None:
    cfg = ExperimentConfig(seed=7, sampler=SamplerConfig(draws=50))
    assert cfg.sampler.seed == 7 and cfg.sampler.draws == 50
    assert replace(cfg, seed=3).sampler.seed == 3


def test_to_dict_is_json_and_round_trips() -> None:
    cfg = ExperimentConfig(slots=6, model=ModelConfig(rank_summary="best"),
                           sampler=replace(EXPERIMENT_SAMPLER, draws=300, tune=300), seed=2)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["slots"] == 6 and d["model"]["rank_summary"] == "best" and d["sampler"]["draws"] == 300
    assert ExperimentConfig.from_dict(d) == cfg


def test_results_written_before_the_nested_configs_still_read() -> None:
    flat = {"slots": 4, "exposure_slots": 1, "exposures_per_memory": 6.0, "reader_gain": 0.6,
            "reader_noise": 0.05, "seed": 0, "fit": True, "draws": 300, "tune": 300, "chains": 2,
            "n_boot": 200, "delete_fraction": 0.1, "evict_fraction": 0.1, "n_perturbations": 20,
            "rank_summary": "best"}
    cfg = ExperimentConfig.from_dict(flat)
    assert (cfg.sampler.draws, cfg.sampler.tune, cfg.sampler.chains) == (300, 300, 2)
    assert cfg.sampler.progressbar is False and cfg.model.rank_summary == "best"
    for path in sorted(RESULTS.glob("exp_*.json"))[:3]:
        ExperimentConfig.from_dict(json.loads(path.read_text())["config"])
    with pytest.raises(ConfigError, match="unknown key"):
        ExperimentConfig.from_dict({**flat, "draw": 3})


def test_configs_are_checked() -> None:
    with pytest.raises(ConfigError, match="model must be a ModelConfig"):
        ExperimentConfig(model={"rank_summary": "best"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sampler must be a SamplerConfig"):
        ExperimentConfig(sampler="nutpie")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="pair_model must be"):
        ExperimentConfig(per_query_fit=True, pair_model="sparse")
    with pytest.raises(ConfigError, match="needs per_query_fit"):
        ExperimentConfig(pair_model="gated")
    gated = ExperimentConfig(per_query_fit=True, pair_model="gated")
    assert ExperimentConfig.from_dict(json.loads(json.dumps(gated.to_dict()))) == gated
