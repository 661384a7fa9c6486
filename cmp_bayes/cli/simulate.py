"""``cmp-bayes simulate OUT``: write a simulated CMP exposure log directory."""

from __future__ import annotations

import argparse

#: CLI flag -> SimulationConfig field
_KNOBS: dict[str, tuple[str, type]] = {
    "--memories": ("memories", int),
    "--queries": ("queries", int),
    "--repeats": ("repeats", int),
    "--slots": ("slots", int),
    "--exposure-slots": ("exposure_slots", int),
    "--assignment": ("assignment", str),
    "--pool-share": ("pool_share", float),
    "--lexical-gap": ("lexical_gap", float),
    "--required-per-query": ("required_per_query", int),
    "--effect-size": ("effect_size", float),
    "--harmful-share": ("harmful_share", float),
    "--null-sd": ("null_sd", float),
    "--noise": ("noise", float),
    "--outcomes": ("outcomes", str),
    "--store": ("store", str),
    "--churn": ("churn", float),
    "--ranking-depth": ("ranking_depth", int),
    "--groups": ("groups", int),
}
_CHOICES = {
    "--assignment": ["balanced", "bernoulli"],
    "--outcomes": ["binary", "fractional"],
    "--store": ["shared", "per-query"],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="log directory to write (replaced atomically)")
    parser.add_argument("--preset", default="tiny",
                        help="tiny | locomo-like | longmemeval-like | churn | fractional (default tiny)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    for flag, (field, typ) in _KNOBS.items():
        parser.add_argument(flag, dest=field, type=typ, default=None, choices=_CHOICES.get(flag),
                            help=f"override the preset's {field}")


def run(args: argparse.Namespace) -> int:
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate

    overrides = {f: getattr(args, f) for f, _ in _KNOBS.values() if getattr(args, f) is not None}
    cfg = SimulationConfig.preset(args.preset, **overrides)
    log = simulate(cfg, out=args.out, seed=args.seed, format=args.format)
    n_exp = int((log.contexts["source"] == "exposure").sum())
    print(f"wrote {args.out}: {log.n_steps} steps, {len(log.memory_ids())} memories, "
          f"{n_exp} exposures ({args.preset}, seed {args.seed})")
    return 0
