"""``cmp-bayes demo [LOG]``: the whole pipeline on the bundled example (or on LOG).

Diagnoses the log (prints the positivity table), fits the model, writes the
posterior to ``models/<name>.nc``, decides, writes the report and
``decisions.csv`` to ``reports/<name>/``, and prints where everything went.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cmp_bayes.constants import MODELS_DIR, REPORTS_DIR

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts without the decision stack
    from cmp_bayes.decision.decisions import Decisions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the verb's arguments."""
    parser.add_argument(
        "log",
        nargs="?",
        type=Path,
        default=None,
        help="exposure log directory or steps.jsonl (default: the bundled example)",
    )
    parser.add_argument(
        "--out-models", type=Path, default=Path(MODELS_DIR), help="posterior folder"
    )
    parser.add_argument("--out-reports", type=Path, default=Path(REPORTS_DIR), help="report folder")
    parser.add_argument(
        "--name", default=None, help="name of the outputs (default: the log's name)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer draws: a smoke run")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--costs", type=Path, default=None, help="costs TOML (default costs)")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the sampler's progress bar"
    )


def run(args: argparse.Namespace) -> int:
    """Run the pipeline and print its summary."""
    from cmp_bayes.data import EXAMPLE_NAME, example_log_path
    from cmp_bayes.reporting.pipeline import run_pipeline

    log = args.log
    name = args.name
    if log is None:
        log = example_log_path()
        name = name or EXAMPLE_NAME
        print(f"cmp-bayes demo: the bundled example log ({log})")
    elif not log.exists():
        raise FileNotFoundError(f"no such log: {log}")
    costs = None
    if args.costs is not None:
        from cmp_bayes.decision.costs import Costs

        costs = Costs.from_toml(args.costs)
    result = run_pipeline(
        log,
        models_dir=args.out_models,
        reports_dir=args.out_reports,
        name=name,
        quick=args.quick,
        seed=args.seed,
        costs=costs,
        progressbar=not args.no_progress,
    )
    print()
    print(result.summary())
    print()
    print(_decision_summary(result.decisions))
    print(f"\nopen {result.report_path} in a browser to read the report.")
    return 0


def _decision_summary(decisions: Decisions) -> str:
    from cmp_bayes.cli.decide import summary

    return summary(decisions)
