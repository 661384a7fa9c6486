"""``cmp-bayes recommend POSTERIOR --budget N``: the next exposure pool.

Ranks memories by the value of information of exposing them next (deferred
memories first), prints the top of the ranking and writes the pool as JSON
(``{"pool": [ids...], ...}``, what ``ExposureScheduler(pool=...)`` takes),
atomically, to ``-o`` (default ``pool.json`` in the current directory, a name
scripts rely on), and prints the path it wrote.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cmp_bayes.cli.decide import add_cost_arguments, costs_from_args

#: The pool file's default name (in the current directory).
POOL_FILE: str = "pool.json"

#: What ``--help`` says after the options: what the file is and what reads it.
EPILOG: str = (
    "The pool file is JSON: 'pool' lists the selected memory ids, best first; "
    "'value_of_information' gives each one's VOI (cost units); 'budget', "
    "'exposures_per_memory', 'costs', 'posterior', 'log_checksum' and 'log_id' "
    "say how it was chosen and from which log. The next exposure design takes "
    "the list as its pool: ExposureScheduler(slots, exposure_slots, "
    "pool=json.load(open('pool.json'))['pool'], steps=T) (see the README, "
    "'The exposure design')."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cmp-bayes recommend``."""
    parser.epilog = EPILOG
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
        default=Path(POOL_FILE),
        metavar="FILE.json",
        help=f"where to write the pool file (default: {POOL_FILE} in the current directory)",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows to print (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    """Rank, write the pool, print."""
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
    # the pool before the listing: a reader that closes the pipe early (``| head``) ends this
    # process at its next print
    out = write_pool(table, args.output, source=str(args.posterior))
    print(
        f"{len(chosen)} of {len(table)} memories selected for {args.exposures} more exposures each; "
        f"total value of information {chosen['voi'].sum():.3f} (cost units)"
    )
    has_text = "text" in chosen
    for row in chosen.head(args.top).itertuples(index=False):
        text = f'  "{row.text}"' if has_text and isinstance(row.text, str) else ""
        print(
            f"  {row.rank:>5}  {row.memory_id:<14} {row.action:<7} {row.status:<15} "
            f"P(useful)={row.p_useful:.3f}  VOI {row.voi:.3f}{text}"
        )
    # the default lands in the current directory: say where, and what reads it
    print(f"wrote {out.resolve()} (the pool: {len(chosen)} memory ids, best first)")
    print(
        "  the next design takes it as its pool: "
        f"ExposureScheduler(..., pool=json.load(open({str(out)!r}))['pool'], ...)"
    )
    return 0
