"""``cmp-bayes diagnose LOG [--json]``: retrieval positivity of an exposure log."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``diagnose`` verb."""
    parser.add_argument("log", metavar="LOG", help="log directory (JSONL or Parquet) or a steps.jsonl")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        default=15,
        metavar="N",
        help="list at most N memories that are not identified (table output; default 15)",
    )


def run(args: argparse.Namespace) -> int:
    """Read the log, diagnose it, print the table or the JSON summary."""
    from cmp_bayes.diagnostics.positivity import diagnose
    from cmp_bayes.log.read import read_log

    report = diagnose(read_log(args.log))
    sys.stdout.write(report.to_json() + "\n" if args.json else report.to_text(args.max_rows))
    return 0
