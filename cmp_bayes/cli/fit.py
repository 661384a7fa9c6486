"""``cmp-bayes fit LOG``: fit the hierarchical rho x tau model, save the posterior."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="exposure log (directory, steps.jsonl, or Parquet directory)")
    parser.add_argument("-o", "--output", default=None, help="posterior file (default models/<log name>.nc)")
    parser.add_argument("--sampler", choices=("nutpie", "pymc", "numpyro", "advi"), default=None)
    parser.add_argument("--draws", type=int, default=None, help="draws per chain (default 1000)")
    parser.add_argument("--tune", type=int, default=None, help="tuning steps per chain (default 1000)")
    parser.add_argument("--chains", type=int, default=None, help="chains (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    parser.add_argument("--by", choices=("query",), default=None, help="per-query variant")
    parser.add_argument("--config", default=None, help="TOML file with [model] and [sampler] tables")
    parser.add_argument("--thin", type=int, default=1, help="keep every N-th draw in the saved file")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--engine", choices=("pandas", "dask"), default="pandas",
        help="how to aggregate the log: in memory (pandas) or as a Dask map-reduce over a "
        "partitioned Parquet log (needs the 'scale' extra)",
    )
    parser.add_argument(
        "--scheduler", default=None,
        help="with --engine dask: threads (default), synchronous, processes, or a "
        "dask.distributed address such as tcp://host:8786",
    )


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from cmp_bayes.errors import ConfigError
    from cmp_bayes.log.read import read_log
    from cmp_bayes.model.config import FitConfig, load_config
    from cmp_bayes.model.fit import default_output, fit
    from cmp_bayes.posterior.io import save_posterior

    cfg = load_config(args.config) if args.config else FitConfig()
    overrides = {
        k: v
        for k, v in {
            "sampler": args.sampler, "draws": args.draws, "tune": args.tune,
            "chains": args.chains, "seed": args.seed,
        }.items()
        if v is not None
    }
    if args.no_progress:
        overrides["progressbar"] = False
    scfg = type(cfg.sampler).from_dict({**dataclasses.asdict(cfg.sampler), **overrides}, source="options")
    if args.engine == "dask":
        if args.by is not None:
            raise ConfigError("--by query needs the whole log in memory: use --engine pandas")
        from cmp_bayes.scale.dask_stats import fit_statistics

        data = fit_statistics(args.log, scheduler=args.scheduler)
    else:
        if args.scheduler is not None:
            raise ConfigError("--scheduler only applies with --engine dask")
        data = read_log(args.log)
    tree = fit(data, config=cfg.model, by=args.by, sampler_config=scfg)
    out = save_posterior(tree, args.output or default_output(args.log), thin=args.thin)
    print(f"wrote {out}")
    print(health_line(tree))
    return 0


def health_line(tree: xr.DataTree) -> str:
    """One line after a fit: the verdict decide and the report give, R-hat, divergences."""
    from cmp_bayes.posterior.health import sampler_health

    return sampler_health(tree, advisory=False).line()
