"""``cmp-bayes diagnose LOG [--json] [-o FILE.csv]``: retrieval positivity of an exposure log."""

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
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE.csv",
        help="also write the per-memory table as CSV (atomic; with each memory's full text "
        "when memories.jsonl has texts)",
    )


def run(args: argparse.Namespace) -> int:
    """Read the log, diagnose it, print the table or the JSON summary; write the CSV when asked."""
    from cmp_bayes.diagnostics.positivity import diagnose
    from cmp_bayes.log.read import read_log

    log = read_log(args.log)
    report = diagnose(log)
    sys.stdout.write(report.to_json() + "\n" if args.json else report.to_text(args.max_rows))
    if args.output is not None:
        from cmp_bayes.atomic import write_with
        from cmp_bayes.text import add_text, texts_from_memories

        table = add_text(report.memories, texts_from_memories(log.memories), full=True)
        out = write_with(args.output, lambda tmp: table.to_csv(tmp, index=False, float_format="%.10g"))
        line = f"wrote {out} ({len(table)} memories)"
        if not args.json:
            print(line)
        elif not getattr(args, "quiet", False):
            # informational, so on stderr with --json (stdout stays one JSON object), and not under --quiet
            print(line, file=sys.stderr)
    return 0
