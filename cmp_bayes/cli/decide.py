"""``cmp-bayes decide POSTERIOR``: retain / forget / defer every memory.

Prints counts per action, the sampler-health line and the most consequential
rows (the decisions carrying the largest expected loss); ``-o`` writes the
whole table as CSV (atomically). Costs come from ``--costs FILE.toml``, and
any of the cost flags overrides the file's value.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cmp_bayes.cli.options import DataclassFlags

if TYPE_CHECKING:
    import pandas as pd

    from cmp_bayes.decision.costs import Costs
    from cmp_bayes.decision.decisions import Decisions

def _cost_flags() -> DataclassFlags:
    """One flag per Costs field (``--forget-cost`` ...), shared by decide and recommend."""
    from cmp_bayes.decision.costs import ESTIMANDS, PRIOR_DRIVEN, STORE_AVERAGE, Costs

    return DataclassFlags(
        Costs, choices={"estimand": ESTIMANDS, "prior_driven": PRIOR_DRIVEN, "store_average": STORE_AVERAGE}
    )


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--costs`` file and the per-field overrides (shared with ``recommend``)."""
    g = parser.add_argument_group("costs (flags override --costs)")
    g.add_argument("--costs", type=Path, metavar="FILE.toml", help="costs as TOML")
    _cost_flags().add_to(g)


def costs_from_args(args: argparse.Namespace) -> Costs:
    """A :class:`Costs` from ``--costs`` (if any) with the flags given on top."""
    from cmp_bayes.decision.costs import Costs

    base = Costs.from_toml(args.costs).to_dict() if args.costs is not None else {}
    return Costs.from_dict({**base, **_cost_flags().overrides(args)}, where="options")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cmp-bayes decide``."""
    parser.add_argument(
        "posterior", type=Path, metavar="POSTERIOR", help="posterior NetCDF (from `cmp-bayes fit`)"
    )
    add_cost_arguments(parser)
    parser.add_argument(
        "--workload", type=Path, metavar="FILE.csv",
        help="query mix for --estimand workload (columns query_id, weight; default: the log's "
        "queries weighted by their steps)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE.csv", help="write the decisions as CSV"
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows to print per section (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    """Decide, write the CSV when asked, print the summary."""
    import warnings

    from cmp_bayes.decision.rule import DecisionWarning, decide

    costs = costs_from_args(args)
    with warnings.catch_warnings():
        # the summary below says the same in context
        warnings.simplefilter("ignore", DecisionWarning)
        decisions = decide(args.posterior, costs, workload=args.workload)
    # the file before the summary: a reader that closes the pipe early (``| head``) ends
    # this process at its next print, and the decisions must not be lost with it
    if args.output is not None:
        decisions.to_csv(args.output)
    print(summary(decisions, top=args.top))
    if args.output is not None:
        print(f"wrote {args.output} ({len(decisions)} rows)")
    return 0


def summary(decisions: Decisions, top: int = 10) -> str:
    """Counts per action, health, capacity, then up to ``top`` rows of each kind
    a person acts on: the riskiest forgets, useful memories the retriever never
    surfaces, and deferred memories."""
    table = decisions.table
    counts = decisions.counts()
    lines = [
        f"{len(table)} memories: "
        + ", ".join(f"{counts.get(a, 0)} {a}" for a in ("retain", "forget", "defer")),
        f"rule: {decisions.rule.describe()}",
        decisions.health.summary(),
    ]
    if decisions.out_of_reach is not None:
        from cmp_bayes.decision.decisions import out_of_reach_text

        lines.append("threshold out of reach: " + out_of_reach_text(
            decisions.rule.variable, decisions.costs.threshold, decisions.out_of_reach))
    if decisions.store_average is not None:
        lines.append("shared-store average: " + decisions.store_average_sentence())
    if decisions.capacity_shortfall:
        lines.append(
            f"capacity {decisions.costs.capacity} NOT met: {decisions.capacity_shortfall} more "
            "would have to go, but none of the rest may be forgotten"
        )
    if top > 0 and len(table):
        action, p = table["action"], table["p_useful"]
        sections = [
            (
                "riskiest forgets (irreversible; largest expected loss f * P(useful))",
                table[action == "forget"].sort_values(
                    ["expected_loss_forget", "memory_id"], ascending=[False, True]
                ),
            ),
            (
                "useful when read but never retrieved (fix retrieval)",
                table[(action == "retain") & (table["retrieved"] == 0) & (p >= 0.5)].sort_values(
                    ["p_useful", "memory_id"], ascending=[False, True]
                ),
            ),
            (
                "deferred (the rule would forget; the guards refuse)",
                table[action == "defer"].sort_values(["p_useful", "memory_id"]),
            ),
        ]
        for title, rows in sections:
            if len(rows):
                lines.append(f"{title}: {len(rows)}, showing {min(top, len(rows))}")
                lines += _rows(rows.head(top))
    return "\n".join(lines)


def _rows(rows: pd.DataFrame) -> list[str]:
    """One line per memory (id, action, reason); with texts, the text's start on the line
    and the reason on the next, so the id is still the first thing read."""
    from pandas import isna

    out = []
    has_text = "text" in rows
    for row in rows.itertuples(index=False):
        if not has_text:
            out.append(f"  {row.memory_id:<14} {row.action:<7} {row.reason}")
            continue
        text = "" if isna(row.text) else f'"{row.text}"'
        out.append(f"  {row.memory_id:<14} {row.action:<7} {text}".rstrip())
        out.append(f"  {'':<14} {'':<7} {row.reason}")
    return out
