"""``cmp-bayes recommend POSTERIOR --budget N``: the next exposure pool.

Ranks memories by the value of information of exposing them next (deferred
memories first), prints the top of the ranking and writes the pool as JSON
(``{"pool": [ids...], ...}``, what ``ExposureScheduler(pool=...)`` takes),
atomically, to ``-o`` (default ``pool.json``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cmp_bayes.cli.decide import add_cost_arguments, costs_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cmp-bayes recommend``."""
    parser.add_argument(
        "posterior", type=Path, metavar="POSTERIOR", help="posterior NetCDF (from `cmp-bayes fit`)"
    )
    parser.add_argument(
        "--budget", type=int, required=True, metavar="N", help="memories in the next exposure pool"
    )
    parser.add_argument(
        "--exposures",
        type=int,
        default=6,
        metavar="E",
        help="planned exposures per pool memory (default 6)",
    )
    parser.add_argument(
        "--draws",
        type=int,
        default=200,
        metavar="D",
        help="draws per memory for the VOI (default 200)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the preposterior simulation")
    add_cost_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("pool.json"),
        metavar="FILE.json",
        help="pool file",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows to print (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    """Rank, print, write the pool."""
    from cmp_bayes.decision.recommend import recommend_exposures, write_pool

    costs = costs_from_args(args)
    table = recommend_exposures(
        args.posterior,
        args.budget,
        costs,
        exposures=args.exposures,
        draws=args.draws,
        seed=args.seed,
    )
    chosen = table[table["selected"]]
    print(
        f"{len(chosen)} of {len(table)} memories selected for {args.exposures} more exposures each; "
        f"total value of information {chosen['voi'].sum():.3f} (cost units)"
    )
    for row in chosen.head(args.top).itertuples(index=False):
        print(
            f"  {row.rank:>5}  {row.memory_id:<14} {row.action:<7} {row.status:<15} "
            f"P(useful)={row.p_useful:.3f}  VOI {row.voi:.3f}"
        )
    write_pool(table, args.output, source=str(args.posterior))
    print(f"wrote {args.output}")
    return 0
