"""``cmp-bayes fit LOG``: fit the hierarchical rho x tau model, save the posterior."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

    from cmp_bayes.log.schema import ExposureLog

from cmp_bayes.cli.options import DataclassFlags
from cmp_bayes.model.config import SAMPLERS, ModelConfig, SamplerConfig

#: --sampler, --draws, --tune, --chains, --seed, ... from SamplerConfig; the progress bar
#: keeps its older spelling --no-progress
_SAMPLER_FLAGS = DataclassFlags(SamplerConfig, exclude=("progressbar",), choices={"sampler": SAMPLERS})
#: --pair-model from ModelConfig (the other model settings live in --config's [model])
_MODEL_FLAGS = DataclassFlags(ModelConfig, only=("pair_model",), choices={"pair_model": ("normal", "gated")})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="exposure log (directory, steps.jsonl, or Parquet directory)")
    parser.add_argument("-o", "--output", default=None, help="posterior file (default models/<log name>.nc)")
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
    _SAMPLER_FLAGS.add_to(parser.add_argument_group("sampler (flags override --config's [sampler])"))
    _MODEL_FLAGS.add_to(parser.add_argument_group("model (flags override --config's [model])"))


def run(args: argparse.Namespace) -> int:

    from cmp_bayes.errors import ConfigError
    from cmp_bayes.log.read import read_log
    from cmp_bayes.model.config import FitConfig, load_config
    from cmp_bayes.model.fit import default_output, fit
    from cmp_bayes.posterior.io import save_posterior

    cfg = load_config(args.config) if args.config else FitConfig()
    overrides = _SAMPLER_FLAGS.overrides(args)
    if args.no_progress:
        overrides["progressbar"] = False
    scfg = SamplerConfig.from_dict({**cfg.sampler.to_dict(), **overrides}, source="options")
    data: xr.Dataset | ExposureLog  # Dask: the statistics; pandas: the log itself
    if args.engine == "dask":
        if args.by is not None:
            raise ConfigError("--by query needs the whole log in memory: use --engine pandas")
        from cmp_bayes.progress import Progress
        from cmp_bayes.scale.dask_stats import fit_statistics

        # a bar over the Dask tasks on a terminal; none under --quiet (the verb's setting)
        data = fit_statistics(args.log, scheduler=args.scheduler, progress=Progress())
    else:
        if args.scheduler is not None:
            raise ConfigError("--scheduler only applies with --engine dask")
        data = read_log(args.log)
    model = ModelConfig.from_dict({**cfg.model.to_dict(), **_MODEL_FLAGS.overrides(args)}, source="options")
    tree = fit(data, model=model, sampler=scfg, by=args.by)
    out = save_posterior(tree, args.output or default_output(args.log), thin=args.thin)
    for line in retry_lines(tree):
        print(line)
    print(f"wrote {out}")
    print(health_line(tree))
    return 0


def retry_lines(tree: xr.DataTree) -> list[str]:
    """One line per retry fit made (none when the first attempt was healthy)."""
    from cmp_bayes.posterior.contract import fit_attempts

    attempts = fit_attempts(tree.attrs)
    lines = []
    for before, a in zip(attempts, attempts[1:], strict=False):
        outcome = "healthy" if a["ok"] else f"still failing: {a['problems']}"
        lines.append(
            f"fit attempt {before['attempt']} failed ({before['problems']}); retried as attempt "
            f"{a['attempt']} of {len(attempts)} with target_accept {a['target_accept']}, "
            f"tune {a['tune']}, seed {a['seed']}: {outcome} ({a['seconds']:.1f} s)"
        )
    if len(attempts) > 1:
        kept = next(a for a in attempts if a["kept"])
        which = "the first healthy one" if kept["ok"] else "the last; none was healthy"
        lines.append(f"kept attempt {kept['attempt']} ({which})")
    return lines


def health_line(tree: xr.DataTree) -> str:
    """One line after a fit: the verdict decide and the report give, R-hat, divergences."""
    from cmp_bayes.posterior.health import sampler_health

    return sampler_health(tree, advisory=False).line()
