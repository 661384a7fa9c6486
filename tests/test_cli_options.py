"""CLI flags generated from config dataclasses (cmp_bayes.cli.options)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields

import pytest

from cmp_bayes.cli.main import build_parser, main
from cmp_bayes.cli.options import DataclassFlags, field_docs
from cmp_bayes.decision.costs import Costs
from cmp_bayes.model.config import SAMPLERS, ModelConfig, SamplerConfig
from cmp_bayes.simulation.simulator import SimulationConfig


def _parser(flags: DataclassFlags) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    flags.add_to(p)
    return p


def test_sampler_config_round_trips_through_the_flags() -> None:
    flags = DataclassFlags(SamplerConfig, choices={"sampler": SAMPLERS})
    assert set(flags.fields) == {f.name for f in fields(SamplerConfig)}
    cfg = SamplerConfig(sampler="pymc", draws=123, tune=45, chains=3, seed=7, progressbar=False,
                        keep_draws=99, advi_iterations=500, target_accept=0.9, adaptation="diag")
    args = _parser(flags).parse_args(flags.argv(cfg))
    assert SamplerConfig(**flags.overrides(args)) == cfg
    # and the defaults: nothing given, nothing overridden
    assert flags.overrides(_parser(flags).parse_args([])) == {}


def test_model_config_round_trips_including_pairs_and_bools() -> None:
    flags = DataclassFlags(ModelConfig)
    cfg = ModelConfig(grid_size=61, use_rank=False, null_sd=(0.02, 0.4), rank_summary="best")
    back = ModelConfig(**flags.overrides(_parser(flags).parse_args(flags.argv(cfg))))
    assert back == cfg and back.null_sd == (0.02, 0.4)


def test_flag_types_choices_and_help_come_from_the_dataclass() -> None:
    flags = DataclassFlags(SamplerConfig, choices={"sampler": SAMPLERS})
    p = _parser(flags)
    with pytest.raises(SystemExit):
        p.parse_args(["--sampler", "metropolis"])  # not in SAMPLERS
    with pytest.raises(SystemExit):
        p.parse_args(["--adaptation", "dense"])  # the docstring's {"low_rank", "diag"}
    with pytest.raises(SystemExit):
        p.parse_args(["--draws", "1.5"])  # int field
    assert flags.overrides(p.parse_args(["--target-accept", "0.9"])) == {"target_accept": 0.9}
    text = p.format_help()
    assert "Posterior draws per chain. (default 1000)" in text
    assert "Number of chains. (default 2)" in text


def test_field_docs_reads_shared_entries_and_sections() -> None:
    @dataclass
    class Demo:
        """A demo.

        Parameters
        ----------
        a, b : int
            Shared text. Second sentence.
        c : {"x", "y"}
        share : float
            A share in percent (95% = 0.95).

        Notes
        -----
        d : not a field
        """

        a: int = 1
        b: int = 2
        c: str = "x"
        share: float = 0.5

    docs = field_docs(Demo)
    assert set(docs) == {"a", "b", "c", "share"}
    assert docs["a"].text == docs["b"].text == "Shared text. Second sentence."
    flags = DataclassFlags(Demo, rename={"a": "--alpha"}, exclude=("b",))
    p = _parser(flags)
    assert flags.flags == {"a": "--alpha", "c": "--c", "share": "--share"}
    assert flags.overrides(p.parse_args(["--alpha", "3", "--c", "y"])) == {"a": 3, "c": "y"}
    with pytest.raises(SystemExit):
        p.parse_args(["--c", "z"])
    assert "Shared text. (default 1)" in p.format_help()
    assert "95% = 0.95" in p.format_help()  # a percent sign does not break argparse
    with pytest.raises(ValueError, match="no field"):
        DataclassFlags(Demo, only=("nope",))


def test_cost_flags_are_every_costs_field() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    decide = sub.choices["decide"]
    opts = {s for a in decide._actions for s in a.option_strings}
    for f in fields(Costs):
        assert "--" + f.name.replace("_", "-") in opts
    args = decide.parse_args(["post.nc", "--forget-cost", "5", "--estimand", "utility", "--capacity", "3"])
    from cmp_bayes.cli.decide import costs_from_args

    c = costs_from_args(args)
    assert (c.forget_cost, c.estimand, c.capacity, c.retain_cost) == (5.0, "utility", 3, 1.0)


def test_simulate_flags_include_concentration_and_base_rate(tmp_path, capsys) -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    sim = sub.choices["simulate"]
    opts = {s for a in sim._actions for s in a.option_strings}
    for f in fields(SimulationConfig):
        assert "--" + f.name.replace("_", "-") in opts
    out = tmp_path / "log"
    rc = main(["simulate", str(out), "--preset", "fractional", "--concentration", "7.5",
               "--base-rate", "0.45", "--memories", "12", "--queries", "3", "--repeats", "4"])
    assert rc == 0
    cfg = json.loads((out / "simulation.json").read_text())["config"]
    assert cfg["concentration"] == 7.5 and cfg["base_rate"] == 0.45
    assert (cfg["memories"], cfg["queries"], cfg["repeats"]) == (12, 3, 4)
    assert cfg["outcomes"] == "fractional"  # the preset's value where no flag was given
