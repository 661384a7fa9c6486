"""``cmp-bayes simulate OUT``: write a simulated CMP exposure log directory."""

from __future__ import annotations

import argparse

from cmp_bayes.cli.options import DataclassFlags


def _knobs() -> DataclassFlags:
    """One flag per SimulationConfig field; the preset supplies every value not given."""
    from cmp_bayes.simulation.simulator import SimulationConfig

    return DataclassFlags(SimulationConfig, show_defaults=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="log directory to write (replaced atomically)")
    from cmp_bayes.simulation.presets import PRESETS

    parser.add_argument("--preset", default="tiny",
                        help=f"{' | '.join(PRESETS)} (default tiny)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    _knobs().add_to(parser.add_argument_group("simulation settings (override the preset's)"))


def run(args: argparse.Namespace) -> int:
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate

    cfg = SimulationConfig.preset(args.preset, **_knobs().overrides(args))
    log = simulate(cfg, out=args.out, seed=args.seed, format=args.format)
    n_exp = int((log.contexts["source"] == "exposure").sum())
    print(f"wrote {args.out}: {log.n_steps} steps, {len(log.memory_ids())} memories, "
          f"{n_exp} exposures ({args.preset}, seed {args.seed})")
    return 0
