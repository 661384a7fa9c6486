"""``cmp-bayes report POSTERIOR [-o reports/NAME]``: the HTML + Markdown report of a posterior."""

from __future__ import annotations

import argparse
from pathlib import Path

from cmp_bayes.constants import REPORTS_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the verb's arguments."""
    parser.add_argument("posterior", type=Path, help="posterior NetCDF written by `cmp-bayes fit`")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help=f"report folder (default: {REPORTS_DIR}/<posterior file stem>)",
    )
    parser.add_argument(
        "--costs", type=Path, default=None, help="costs TOML for the decision table (default costs)"
    )


def run(args: argparse.Namespace) -> int:
    """Write index.html and summary.md; print where they went."""
    import warnings

    from cmp_bayes.decision.rule import DecisionWarning
    from cmp_bayes.reporting.html import SUMMARY_MD, report

    if not args.posterior.exists():
        raise FileNotFoundError(f"no such posterior file: {args.posterior}")
    costs = None
    if args.costs is not None:
        from cmp_bayes.decision.costs import Costs

        costs = Costs.from_toml(args.costs)
    out = args.out or Path(REPORTS_DIR) / args.posterior.stem
    with warnings.catch_warnings():
        # the report's overview and decisions section say why forgets were refused
        warnings.simplefilter("ignore", DecisionWarning)
        index = report(args.posterior, out, costs=costs)
    print(f"report:  {index}")
    print(f"summary: {index.parent / SUMMARY_MD}")
    return 0
