"""``cmp-bayes evaluate LOG RESULT [--json]``: AUC of required vs non-required memories."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``evaluate`` verb."""
    parser.add_argument("log", metavar="LOG", help="log directory with labels.jsonl")
    parser.add_argument(
        "result", metavar="RESULT", help="estimates CSV (cmp-bayes estimate) or posterior NetCDF"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--level",
        choices=("memory", "pair", "both"),
        default="both",
        help="memory level, (memory, query) pair level, or both (default)",
    )
    parser.add_argument("--n-boot", type=int, default=1000, metavar="N", help="bootstrap draws (1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    parser.add_argument(
        "--nan",
        choices=("last", "exclude"),
        default="last",
        help="units without an estimate: rank them last, tied (default), or leave them out",
    )


def run(args: argparse.Namespace) -> int:
    """Evaluate at the requested levels and print a table or one JSON object."""
    from cmp_bayes.constants import CI_PROB
    from cmp_bayes.evaluation import Level, evaluate, load_result
    from cmp_bayes.log.read import read_log

    log = read_log(args.log)
    result = load_result(args.result)
    levels: tuple[Level, ...] = ("memory", "pair") if args.level == "both" else (args.level,)
    out = {
        lv: evaluate(log, result, level=lv, n_boot=args.n_boot, seed=args.seed, nan=args.nan)
        for lv in levels
    }
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    pct = f"{round(100 * CI_PROB)}%"
    lines = [f"{'level':<8}{'AUC':>7}{pct + ' interval':>20}{'units':>8}{'required':>10}{'no estimate':>13}"]
    for lv, r in out.items():
        ci = "-" if r["ci_low"] is None else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        a = "-" if r["auc"] is None else f"{r['auc']:.3f}"
        lines.append(f"{lv:<8}{a:>7}{ci:>20}{r['n']:>8}{r['n_required']:>10}{r['n_nan']:>13}")
    first = next(iter(out.values()))
    lines.append(f"method: {first['method'] or '?'}; units without an estimate: {args.nan}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
