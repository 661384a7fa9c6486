"""``cmp-bayes estimate LOG [--by query|group] [--method ...] -o FILE.csv``.

The CSV has one row per memory (or memory x query / group cell) and, when the
log's memories.jsonl has texts, a ``text`` column with each memory's full text.
"""

from __future__ import annotations

import argparse
import sys

_METHODS = ("hajek", "ipw", "logged-success", "logged-diff")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``estimate`` verb."""
    parser.add_argument("log", metavar="LOG", help="log directory (JSONL or Parquet) or a steps.jsonl")
    parser.add_argument(
        "--by", choices=("query", "group"), default=None, help="estimate per memory x query / group"
    )
    parser.add_argument(
        "--method",
        choices=_METHODS,
        default="hajek",
        help="hajek (default; exposed minus control mean), ipw (Horvitz-Thompson), "
        "logged-success (success rate while retrieved), logged-diff (retrieved minus control)",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE.csv", help="where to write the CSV (atomic)"
    )


def run(args: argparse.Namespace) -> int:
    """Estimate and write the CSV; print one line saying what was written."""
    from cmp_bayes.atomic import write_with
    from cmp_bayes.estimators import estimate
    from cmp_bayes.log.read import read_log
    from cmp_bayes.text import add_text, texts_from_memories

    log = read_log(args.log)
    # the CSV carries each memory's whole text (the table's own column is its start)
    table = add_text(
        estimate(log, by=args.by, method=args.method), texts_from_memories(log.memories), full=True
    )
    out = write_with(args.output, lambda tmp: table.to_csv(tmp, index=False, float_format="%.10g"))
    n_def = int(table["estimate"].notna().sum())
    sys.stdout.write(
        f"wrote {out}: {len(table)} rows ({args.method}; {n_def} with an estimate, "
        f"{len(table) - n_def} undefined)\n"
    )
    return 0
