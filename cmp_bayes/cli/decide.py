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

if TYPE_CHECKING:
    from cmp_bayes.decision.costs import Costs
    from cmp_bayes.decision.decisions import Decisions

#: flag -> Costs field, for the flags every decision verb shares.
_COST_FLAGS: dict[str, str] = {
    "forget_cost": "forget_cost",
    "retain_cost": "retain_cost",
    "threshold": "threshold",
    "estimand": "estimand",
    "capacity": "capacity",
    "min_exposures": "min_exposures",
    "min_mean_shift": "min_mean_shift",
    "max_rhat": "max_rhat",
    "max_divergence_share": "max_divergence_share",
}


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--costs`` file and the per-field overrides (shared with ``recommend``)."""
    g = parser.add_argument_group("costs (flags override --costs)")
    g.add_argument("--costs", type=Path, metavar="FILE.toml", help="costs as TOML")
    g.add_argument(
        "--forget-cost",
        type=float,
        metavar="X",
        help="cost of forgetting a useful memory (default 20)",
    )
    g.add_argument(
        "--retain-cost",
        type=float,
        metavar="Y",
        help="cost of retaining a useless memory (default 1)",
    )
    g.add_argument(
        "--threshold",
        type=float,
        metavar="U",
        help="utility above which a memory is useful (default 0.05)",
    )
    g.add_argument(
        "--estimand", choices=("tau", "utility"), help="what the threshold applies to (default tau)"
    )
    g.add_argument("--capacity", type=int, metavar="K", help="keep at most K memories")
    g.add_argument(
        "--min-exposures",
        type=int,
        metavar="N",
        help="exposures needed before a forget (default 1)",
    )
    g.add_argument(
        "--min-mean-shift",
        type=float,
        metavar="S",
        help="evidence floor in prior sds (default 0: off)",
    )
    g.add_argument(
        "--max-rhat",
        type=float,
        metavar="R",
        help="largest R-hat allowed for a forget (default 1.01)",
    )
    g.add_argument(
        "--max-divergence-share",
        type=float,
        metavar="F",
        help="largest share of divergent draws (default 0)",
    )


def costs_from_args(args: argparse.Namespace) -> Costs:
    """A :class:`Costs` from ``--costs`` (if any) with the flags given on top."""
    from cmp_bayes.decision.costs import Costs

    base = Costs.from_toml(args.costs).to_dict() if args.costs is not None else {}
    for flag, name in _COST_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            base[name] = value
    return Costs.from_dict(base, where="options")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cmp-bayes decide``."""
    parser.add_argument(
        "posterior", type=Path, metavar="POSTERIOR", help="posterior NetCDF (from `cmp-bayes fit`)"
    )
    add_cost_arguments(parser)
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE.csv", help="write the decisions as CSV"
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows to print per section (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    """Decide, print the summary, write the CSV when asked."""
    import warnings

    from cmp_bayes.decision.rule import DecisionWarning, decide

    costs = costs_from_args(args)
    with warnings.catch_warnings():
        # the summary below says the same in context
        warnings.simplefilter("ignore", DecisionWarning)
        decisions = decide(args.posterior, costs)
    print(summary(decisions, top=args.top))
    if args.output is not None:
        decisions.to_csv(args.output)
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
                for row in rows.head(top).itertuples(index=False):
                    lines.append(f"  {row.memory_id:<14} {row.action:<7} {row.reason}")
    return "\n".join(lines)
