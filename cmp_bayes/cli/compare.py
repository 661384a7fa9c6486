"""``cmp-bayes compare A.nc B.nc [...] [-o FILE.csv]``: rank fits of one log by PSIS-LOO."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``compare`` verb."""
    parser.add_argument(
        "posteriors", type=Path, nargs="+", metavar="POSTERIOR",
        help="two or more posteriors (NetCDF from `cmp-bayes fit`) of the same log, e.g. model variants",
    )
    parser.add_argument(
        "--name", action="append", default=None, metavar="NAME",
        help="a name per posterior, in order (default: the file stems)",
    )
    parser.add_argument("-o", "--output", default=None, metavar="FILE.csv", help="also write the table as CSV (atomic)")


def names_for(paths: list[Path], names: list[str] | None) -> list[str]:
    """One distinct name per posterior: ``names`` as given, else file stems (paths when stems repeat)."""
    from cmp_bayes.errors import ConfigError

    if names is not None:
        if len(names) != len(paths):
            raise ConfigError(f"--name given {len(names)} times for {len(paths)} posteriors")
        out = [str(n) for n in names]
    else:
        stems = [p.stem for p in paths]
        out = stems if len(set(stems)) == len(stems) else [str(p) for p in paths]
    if len(set(out)) != len(out):
        raise ConfigError(f"the posteriors' names must differ, got {out}")
    return out


def run(args: argparse.Namespace) -> int:
    """Compare, write the CSV when asked, and print the table (best first)."""
    import pandas as pd

    from cmp_bayes.reporting.checks import compare_posteriors

    for p in args.posteriors:
        if not p.exists():
            raise FileNotFoundError(f"no such posterior file: {p}")
    names = names_for(list(args.posteriors), args.name)
    table = compare_posteriors(dict(zip(names, args.posteriors, strict=True)))
    out = None
    if args.output:
        from cmp_bayes.atomic import write_with

        # the file first: a reader that closes the pipe early ends this process at a print
        out = write_with(args.output, lambda tmp: table.to_csv(tmp, index=False, float_format="%.10g"))
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        sys.stdout.write(table.to_string(index=False) + "\n")
    if out is not None:
        sys.stdout.write(f"wrote {out}\n")
    return 0
